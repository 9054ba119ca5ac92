"""Token plane acting: the parse rule, rollout engines, and TokenPolicy records."""

from __future__ import annotations

import string

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rlid import envs
from rlid.baselines.engine import (
    ENGINES,
    completion_logprobs,
    make_engine,
    stop_token_ids,
)
from rlid.baselines.token.parse import ARTICLES, normalise_command, parse_action
from rlid.baselines.token.policy import TokenPolicy
from rlid.config.budget import Budget
from rlid.lm.starts import load_policy_model
from rlid.menus import Interface, parse_command

# --------------------------------------------------------------------------- parse rule
WORDS = st.sampled_from(["go", "east", "take", "brass", "key", "open", "oak", "door", "look"])
ACTIONS = st.lists(WORDS, min_size=1, max_size=4).map(" ".join)


@given(st.text())
def test_normalise_is_idempotent(text):
    once = normalise_command(text)
    assert normalise_command(once) == once


@given(st.text())
def test_normal_form_shape(text):
    normal = normalise_command(text)
    assert normal == normal.strip()
    assert "  " not in normal and "\n" not in normal
    assert not normal or normal[-1] not in string.punctuation
    assert not set(normal.split()) & ARTICLES
    assert normal == normal.lower()


@st.composite
def wordings(draw):
    """An action and a sloppy wording of it: case, spaces, articles, trailing punctuation."""
    words = draw(st.lists(WORDS, min_size=1, max_size=4))
    out = []
    for word in words:
        if draw(st.booleans()):
            out.append(draw(st.sampled_from(sorted(ARTICLES))).upper())
        out.append(word.upper() if draw(st.booleans()) else word)
    space = draw(st.sampled_from([" ", "  ", "\t", " \u00a0"]))
    tail = draw(st.sampled_from(["", ".", "!", "?!", " ...", " the"]))
    return " ".join(words), draw(st.sampled_from(["", " "])) + space.join(out) + tail


@given(wordings(), st.lists(ACTIONS, max_size=5))
def test_sloppy_wording_parses_to_its_action(pair, others):
    action, wording = pair
    legal = [action] + [a for a in others if normalise_command(a) != normalise_command(action)]
    legal = list(dict.fromkeys(legal))
    assert parse_action(wording, legal) == action
    assert parse_action(wording + "\nignored second line", legal) == action


@given(st.text(), st.lists(ACTIONS, max_size=6, unique=True))
def test_parse_returns_a_legal_action_or_none(text, legal):
    result = parse_action(text, legal)
    assert result is None or result in legal
    if result is not None and parse_command(text) not in legal:
        target = normalise_command(parse_command(text))
        matches = [a for a in legal if normalise_command(a) == target]
        assert matches == [result]


@given(ACTIONS)
def test_ambiguity_is_invalid(action):
    legal = [action, "the " + action]  # both normalise to the same command
    assert parse_action(action.upper(), legal) is None
    assert parse_action(action, legal) == action  # an exact legal action still wins


def test_parse_examples():
    legal = ["go east", "take brass key", "look"]
    assert parse_action(" Take the Brass key.\n", legal) == "take brass key"
    assert parse_action("go  EAST!!", legal) == "go east"
    assert parse_action("go", legal) is None
    assert parse_action("", legal) is None
    assert parse_action("the.", legal) is None


# --------------------------------------------------------------------------- engines
@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    model, tokenizer = load_policy_model("tiny-random")
    return model, tokenizer


def _prompts(tokenizer):
    texts = [
        "Goal: Reach the parlor.\nNow: You are in the attic.\nCommand:",
        "Now: a hall\nCommand:",
    ]
    return [tokenizer.encode(t, add_special_tokens=False) for t in texts]


def _per_row(logp, mask):
    return [logp[b][mask[b]].tolist() for b in range(logp.shape[0])]


def test_trainer_engine_logp_equals_teacher_forced_forward(tiny):
    model, tokenizer = tiny
    engine = make_engine("trainer", model, tokenizer.pad_token_id)
    prompts = _prompts(tokenizer)
    gen = torch.Generator().manual_seed(0)
    completions, logp_rollout = engine.generate(prompts, 6, gen, stop_token_ids(tokenizer))
    assert [len(c) for c in completions] == [len(r) for r in logp_rollout]
    # teacher-forced, in another batch layout (reversed order: different padding)
    logp, mask, _ = completion_logprobs(
        model, prompts[::-1], completions[::-1], tokenizer.pad_token_id
    )
    forced = _per_row(logp, mask)[::-1]
    for rollout_row, forced_row in zip(logp_rollout, forced):
        np.testing.assert_allclose(rollout_row, forced_row, atol=1e-5)


def test_generation_stops_at_stop_token(tiny):
    model, tokenizer = tiny
    engine = make_engine("trainer", model, tokenizer.pad_token_id)
    prompts = _prompts(tokenizer)
    gen = torch.Generator().manual_seed(1)
    free, _ = engine.generate(prompts, 5, gen, stop_token_ids(tokenizer))
    first = free[0][0]
    gen = torch.Generator().manual_seed(1)
    stopped, _ = engine.generate(prompts, 5, gen, [first])
    assert stopped[0] == [first]  # the stop token is kept and ends the completion
    assert all(1 <= len(c) <= 5 for c in stopped)


def test_perturbed_engine_differs_and_is_deterministic(tiny):
    model, tokenizer = tiny
    prompts = _prompts(tokenizer)
    stops = stop_token_ids(tokenizer)

    def run(seed):
        engine = make_engine("perturbed", model, tokenizer.pad_token_id, noise=0.5, seed=seed)
        assert not engine.same_as_trainer
        return engine.generate(prompts, 6, torch.Generator().manual_seed(0), stops)

    completions, logp_rollout = run(3)
    assert run(3) == (completions, logp_rollout)
    assert run(4) != (completions, logp_rollout)
    logp, mask, _ = completion_logprobs(model, prompts, completions, tokenizer.pad_token_id)
    trainer = np.concatenate(_per_row(logp, mask))
    assert np.abs(np.concatenate(logp_rollout) - trainer).max() > 1e-2


def test_bf16_engine_is_close_but_not_equal(tiny):
    model, tokenizer = tiny
    engine = make_engine("bf16", model, tokenizer.pad_token_id)
    prompts = _prompts(tokenizer)
    completions, logp_rollout = engine.generate(
        prompts, 4, torch.Generator().manual_seed(0), stop_token_ids(tokenizer)
    )
    logp, mask, _ = completion_logprobs(model, prompts, completions, tokenizer.pad_token_id)
    gap = np.abs(np.concatenate(logp_rollout) - np.concatenate(_per_row(logp, mask)))
    assert 0 < gap.max() < 0.5


def test_unknown_engine_lists_valid_ones(tiny):
    model, tokenizer = tiny
    with pytest.raises(ValueError, match="trainer"):
        make_engine("vllm", model, tokenizer.pad_token_id)
    assert set(ENGINES) == {"trainer", "perturbed", "bf16"}


# --------------------------------------------------------------------------- policy
def _states(count):
    env = envs.make("keydoor", size=2, keys=0, distractors=0)
    obs, info = env.reset(seed=0)
    return [obs] * count, [info] * count, [None] * count


@pytest.mark.parametrize("engine_name", ["trainer", "perturbed"])
def test_token_policy_records_and_budget(tiny, engine_name):
    model, tokenizer = tiny
    budget = Budget()
    engine = make_engine(engine_name, model, tokenizer.pad_token_id, noise=0.3, seed=0)
    policy = TokenPolicy(
        model, tokenizer, Interface(memory="none"), max_new_tokens=4, engine=engine, budget=budget
    )
    observations, infos, memories = _states(3)
    records = policy.act(
        observations, infos, memories,
        rng=np.random.default_rng(0), generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    assert len(records) == 3
    logp, mask, _ = completion_logprobs(
        model, [r.prompt_ids for r in records], [r.completion_ids for r in records],
        tokenizer.pad_token_id,
    )  # fmt: skip
    for r, trainer_row in zip(records, _per_row(logp, mask)):
        assert 1 <= r.num_tokens <= 4
        assert len(r.logp_old) == len(r.logp_rollout) == r.num_tokens
        np.testing.assert_allclose(r.logp_old, trainer_row, atol=1e-5)  # π_old is the trainer's
        if r.valid:
            assert r.action in infos[0]["legal_actions"]
        else:
            assert r.action == r.text.strip()  # the raw command goes to the env
    if engine_name == "trainer":
        assert all(r.logp_old == r.logp_rollout for r in records)
    assert budget.generated_samples == 3 == budget.decisions
    assert budget.generated_tokens == sum(r.num_tokens for r in records)


def test_invalid_command_is_a_noop_step(tiny):
    env = envs.make("keydoor", size=2, keys=0, distractors=0)
    obs, info = env.reset(seed=0)
    _, reward, terminated, _, info2 = env.step("xyzzy plugh")
    assert info2["invalid_action"] and reward == 0 and not terminated


def test_greedy_generation_ignores_the_generator(tiny):
    model, tokenizer = tiny
    policy = TokenPolicy(model, tokenizer, Interface(memory="none"), max_new_tokens=3)
    observations, infos, memories = _states(2)
    a, b = (
        policy.act(
            observations,
            infos,
            memories,
            rng=np.random.default_rng(0),
            generator=torch.Generator().manual_seed(seed),
            greedy=True,
        )  # fmt: skip
        for seed in (0, 1)
    )
    assert [r.completion_ids for r in a] == [r.completion_ids for r in b]
