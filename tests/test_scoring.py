"""Action-scoring (TWOSOME-style) policy: π(a|s) against a hand reference, and PPO on it."""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import pytest
import torch

from rlid import envs
from rlid.baselines.scoring import ScoringPolicy
from rlid.config.budget import Budget
from rlid.config.planes import ScoringConfig
from rlid.core.records import ValueHead
from rlid.core.train import train
from rlid.lm.starts import load_policy_model
from rlid.menus import Interface, command_completion, render_token_prompt

INTERFACE = Interface(memory="none")


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    return load_policy_model("tiny-random")


def _states():
    """Two different states with menus of different sizes (padding is exercised)."""
    obs_a, info_a = envs.make("keydoor", size=3, keys=1, distractors=2).reset(seed=0)
    obs_b, info_b = envs.make("keydoor", size=2, keys=0, distractors=0).reset(seed=0)
    assert len(info_a["legal_actions"]) != len(info_b["legal_actions"])
    return [obs_a, obs_b], [info_a, info_b]


def _reference_logp(model, tokenizer, obs, info, norm):
    """Each action scored alone: one un-batched, unpadded forward per action."""
    prompt = tokenizer.encode(
        render_token_prompt(obs, info, INTERFACE, tokenizer), add_special_tokens=False
    )
    scores = []
    for action in info["legal_actions"]:
        completion = tokenizer.encode(command_completion(action), add_special_tokens=False)
        ids = torch.tensor([prompt + completion])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0].double()
        logp = torch.log_softmax(logits, -1)
        total = sum(
            float(logp[len(prompt) + j - 1, tok]) for j, tok in enumerate(completion)
        )  # log π(y_j | prompt, y_<j)
        divisor = {"sum": 1, "token": len(completion), "word": len(action.split())}[norm]
        scores.append(total / divisor)
    return torch.log_softmax(torch.tensor(scores), 0).numpy()


@pytest.mark.parametrize("norm", ["sum", "token", "word"])
def test_policy_matches_unbatched_reference(tiny, norm):
    model, tokenizer = tiny
    budget = Budget()
    policy = ScoringPolicy(model, tokenizer, INTERFACE, norm=norm, budget=budget)
    observations, infos = _states()
    decisions = policy.act(
        observations, infos, [None, None],
        rng=np.random.default_rng(0), generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    logp_all, label_mass, hidden = policy.score(decisions)
    for b, (obs, info) in enumerate(zip(observations, infos)):
        k = len(info["legal_actions"])
        reference = _reference_logp(model, tokenizer, obs, info, norm)
        np.testing.assert_allclose(logp_all[b, :k].detach().numpy(), reference, atol=1e-5)
        assert torch.isinf(logp_all[b, k:]).all()
        d = decisions[b]
        assert d.action == info["legal_actions"][d.chosen]
        assert d.num_rows == k
        assert d.logp == pytest.approx(reference[d.chosen], abs=1e-5)
    assert torch.equal(label_mass, torch.ones(2))
    assert hidden.shape == (2, model.config.hidden_size)
    # act + score, each a prompt forward and a completions forward on its cache
    assert budget.decisions == 2 and budget.forward_passes == 4
    # each prompt is run once, each action's completion once (act and score: twice)
    positions = sum(len(d.prompt_ids) + sum(map(len, d.extra["completion_ids"])) for d in decisions)
    assert budget.tokens_processed == 2 * positions


def test_a_shared_prompt_gives_the_numbers_and_gradients_of_one_sequence_per_action(tiny):
    """The prompt's KV cache shared by its K completions = K full sequences: the
    policy, the value head's state and every parameter's gradient, at T != 1 too."""
    model, tokenizer = tiny
    head = ValueHead(model.config.hidden_size)
    observations, infos = _states()
    results = {}
    for share in (True, False):
        budget = Budget()
        policy = ScoringPolicy(
            model, tokenizer, INTERFACE, value_head=head, share_prompt=share, budget=budget
        )
        decisions = policy.act(
            observations, infos, [None, None], temperature=1.7,
            rng=np.random.default_rng(0), generator=torch.Generator().manual_seed(0),
        )  # fmt: skip
        model.zero_grad(set_to_none=True)
        logp_all, _, hidden = policy.score(decisions)
        loss = logp_all[0, decisions[0].chosen] + 0.5 * logp_all[1, 1] + hidden.square().mean()
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results[share] = (decisions, logp_all.detach(), hidden.detach(), grads, budget)
    shared, full = results[True], results[False]
    assert [d.chosen for d in shared[0]] == [d.chosen for d in full[0]]
    for a, b in zip(shared[0], full[0]):
        assert a.logp == pytest.approx(b.logp, abs=1e-5)
    torch.testing.assert_close(shared[1], full[1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(shared[2], full[2], atol=1e-5, rtol=1e-5)
    assert shared[3].keys() == full[3].keys() and len(full[3]) == len(list(model.parameters()))
    for name, grad in full[3].items():
        torch.testing.assert_close(shared[3][name], grad, atol=1e-5, rtol=1e-4, msg=name)
    # the full path runs every prompt K times: what the budget counts
    rows = sum(len(i["legal_actions"]) for i in infos)
    assert full[4].tokens_processed > shared[4].tokens_processed + (rows - 2) * 10
    assert (shared[4].forward_passes, full[4].forward_passes) == (4, 2)  # model calls
    model.zero_grad(set_to_none=True)


def test_a_micro_batched_rollout_equals_one_forward(tiny):
    """micro_batch_size chunks the rollout's decisions: the same samples and log-probs."""
    model, tokenizer = tiny
    observations, infos = _states()
    observations, infos = observations * 2, infos * 2  # 4 decisions, menus of two sizes
    runs = {}
    for size in (None, 1, 3):
        budget = Budget()
        policy = ScoringPolicy(model, tokenizer, INTERFACE, micro_batch_size=size, budget=budget)
        decisions = policy.act(
            observations, infos, [None] * 4,
            rng=np.random.default_rng(0), generator=torch.Generator().manual_seed(0),
        )  # fmt: skip
        runs[size] = ([(d.chosen, d.logp) for d in decisions], budget.forward_passes)
    for size, forwards in ((None, 2), (1, 8), (3, 4)):  # two model calls per chunk
        assert runs[size][1] == forwards
        assert [c for c, _ in runs[size][0]] == [c for c, _ in runs[None][0]]
        np.testing.assert_allclose(
            [lp for _, lp in runs[size][0]], [lp for _, lp in runs[None][0]], atol=1e-5
        )


def test_without_a_cache_the_shared_prompt_falls_back_to_full_sequences(tiny):
    """Gradient checkpointing in train mode drops the KV cache: one sequence per action."""
    from rlid.baselines.engine import shared_prompt_logprobs
    from rlid.lm.hardware import enable_gradient_checkpointing

    _, tokenizer = tiny
    model, _ = load_policy_model("tiny-random")
    enable_gradient_checkpointing(model)
    model.train()
    assert shared_prompt_logprobs(model, [[5, 6, 7]], [[[8, 9]]], tokenizer.pad_token_id) is None
    observations, infos = _states()
    policy = ScoringPolicy(model, tokenizer, INTERFACE)
    decisions = policy.act(
        observations, infos, [None, None],
        rng=np.random.default_rng(0), generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    logp_all, _, _ = policy.score(decisions)  # the full path, with gradients
    logp_all[0, 0].backward()
    model.eval()
    for b, (obs, info) in enumerate(zip(observations, infos)):
        k = len(info["legal_actions"])
        reference = _reference_logp(model, tokenizer, obs, info, "token")
        np.testing.assert_allclose(logp_all[b, :k].detach().numpy(), reference, atol=1e-5)


def test_value_head_reads_the_last_prompt_token(tiny):
    model, tokenizer = tiny
    head = ValueHead(model.config.hidden_size)
    policy = ScoringPolicy(model, tokenizer, INTERFACE, value_head=head)
    observations, infos = _states()
    decisions = policy.act(
        observations, infos, [None, None],
        rng=np.random.default_rng(0), generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    _, _, hidden = policy.score(decisions)
    prompt = torch.tensor([decisions[1].prompt_ids])
    with torch.no_grad():
        alone = model(input_ids=prompt, output_hidden_states=True).hidden_states[-1][0, -1]
    torch.testing.assert_close(hidden[1].detach(), alone, atol=1e-5, rtol=1e-5)


def test_scores_carry_gradients_and_unknown_norm_fails(tiny):
    model, tokenizer = tiny
    policy = ScoringPolicy(model, tokenizer, INTERFACE, norm="word")
    observations, infos = _states()
    decisions = policy.act(
        observations, infos, [None, None],
        rng=np.random.default_rng(0), generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    logp_all, _, _ = policy.score(decisions)
    logp_all[0, decisions[0].chosen].backward()
    assert model.model.embed_tokens.weight.grad is not None
    model.zero_grad(set_to_none=True)
    with pytest.raises(ValueError, match="'sum', 'token', 'word'"):
        ScoringPolicy(model, tokenizer, INTERFACE, norm="mean")


def test_scoring_plane_trains_through_decision_ppo(tmp_path):
    config = ScoringConfig(
        plane="scoring", norm="token", env="keydoor",
        env_options={"size": 2, "keys": 0, "distractors": 0, "max_episode_steps": 3},
        steps=8, groups_per_iter=2, group_size=2, epochs=1, minibatch_size=8,
        eval_episodes=1, threads=1, interface=INTERFACE,
    )  # fmt: skip
    before, _ = load_policy_model("tiny")
    log = train(
        config, tmp_path / "run", make_policy=partial(ScoringPolicy, norm="token"), progress=False
    )
    after, _ = load_policy_model(str(log.checkpoint_model_dir()))
    changed = any(not torch.equal(p, q) for p, q in zip(before.parameters(), after.parameters()))
    assert changed
    rows = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    assert rows and all(np.isfinite(v) for v in rows[-1].values() if isinstance(v, float))
    updated = [row for row in rows if "skipped_update" not in row]  # equal returns: none
    assert updated and updated[-1]["label_mass"] == pytest.approx(1.0)


# ------------------------------------------------- large menus: completions packed per row
def test_packed_mask_by_hand():
    """Two completions side by side after a left-padded prompt, then one padding column."""
    from rlid.baselines.engine import packed_mask

    prompt_mask = torch.tensor([[0, 1, 1]])
    segments = torch.tensor([[0, 0, 1, -1]])
    got = packed_mask(prompt_mask, segments, additive=False)[0, 0].int().tolist()
    assert got == [
        # pad, prompt, prompt | own completion, causal | padding sees itself only
        [0, 1, 1, 1, 0, 0, 0],
        [0, 1, 1, 1, 1, 0, 0],
        [0, 1, 1, 0, 0, 1, 0],
        [0, 0, 0, 0, 0, 0, 1],
    ]
    additive = packed_mask(prompt_mask, segments, additive=True)[0, 0]
    assert additive.dtype == torch.float32
    assert torch.equal(additive == 0, torch.tensor(got, dtype=torch.bool))
    assert float(additive.min()) == torch.finfo(torch.float32).min


def test_token_logprobs_by_hand_in_blocks(monkeypatch):
    """log_softmax(logits / T)[target] and its gradient onehot - softmax, over 1/T."""
    from rlid.baselines import engine

    third = torch.tensor([[0.0, float(np.log(3.0))]], requires_grad=True)
    for temperature, p1 in ((1.0, 0.75), (0.5, 0.9)):  # softmax([0, 2 ln 3]) = [0.1, 0.9]
        logp = engine.token_logprobs(third, torch.tensor([1]), temperature=temperature)
        assert logp.dtype == torch.float32 and logp.shape == (1,)
        assert float(logp) == pytest.approx(np.log(p1), abs=1e-7)
        (grad,) = torch.autograd.grad(logp.sum(), third)
        want = [-(1 - p1) / temperature, (1 - p1) / temperature]
        assert grad[0].tolist() == pytest.approx(want, abs=1e-6)
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=g).to(torch.bfloat16).requires_grad_()
    targets = torch.randint(0, 11, (3, 5), generator=g)
    weights = torch.randn(3, 5, generator=g)
    ref = torch.log_softmax(logits.float() / 0.7, -1).gather(-1, targets[..., None]).squeeze(-1)
    (ref_grad,) = torch.autograd.grad((ref * weights).sum(), logits)
    for rows in (1, 4, 15, 1000):  # a block of 1 position, ragged blocks, one block
        monkeypatch.setattr(engine, "LOGPROB_BLOCK", rows * 11)
        logp = engine.token_logprobs(logits, targets, temperature=0.7)
        (grad,) = torch.autograd.grad((logp * weights).sum(), logits)
        assert torch.allclose(logp, ref, atol=1e-6) and grad.dtype == torch.bfloat16
        assert torch.allclose(grad.float(), ref_grad.float(), atol=1e-2)  # bfloat16 grads
    with pytest.raises(ValueError, match="do not match"):
        engine.token_logprobs(logits, targets[:, :4])


def test_pack_rows_by_hand():
    """The widest row of splitting each menu over ``copies`` rows sets the width; each
    menu then fills rows of it in order, so a small menu beside a large one takes few."""
    from rlid.baselines.engine import pack_rows

    # menu 0: 5 completions of 3 tokens, copies 2 -> rows of 3 and 2: width 9;
    # menu 1: 2 completions of 2 tokens fit one row of 9 (split evenly: two rows)
    owners, row_of, offset_of, spans = pack_rows([5, 2], [3, 3, 3, 3, 3, 2, 2], copies=2)
    assert owners == [0, 0, 1]
    assert row_of == [0, 0, 0, 1, 1, 2, 2]
    assert offset_of == [0, 3, 6, 0, 3, 0, 2]
    assert spans == [9, 6, 4]
    # a completion that would overflow its row starts the next; no row holds two menus
    owners, row_of, offset_of, spans = pack_rows([3, 3], [2, 1, 2, 2, 2, 1], copies=2)
    assert (owners, row_of, offset_of, spans) == ([0, 0, 1, 1], [0, 0, 1, 2, 2, 3],
                                                  [0, 2, 0, 0, 2, 0], [3, 2, 4, 1])  # fmt: skip
    # one-token completions take no column (nothing to predict after token 0)
    assert pack_rows([2], [0, 0], copies=64) == ([0], [0, 0], [0, 0], [1])
    # at most ``copies`` rows per menu (never more than splitting it evenly), any sizes
    g = np.random.default_rng(0)
    for _ in range(200):
        counts = g.integers(1, 40, size=g.integers(1, 4)).tolist()
        sizes = g.integers(0, 6, size=sum(counts)).tolist()
        copies = int(g.integers(1, 8))
        owners, row_of, offset_of, spans = pack_rows(counts, sizes, copies)
        assert max(owners.count(b) for b in range(len(counts))) <= copies
        menu_of = [b for b, k in enumerate(counts) for _ in range(k)]
        assert [owners[r] for r in row_of] == menu_of
        assert all(0 < s <= max(spans) for s in spans)
        ends = [o + s for o, s in zip(offset_of, sizes)]
        assert all(e <= spans[r] or s == 0 for e, s, r in zip(ends, sizes, row_of))


def _ragged_menus(vocab, counts=(9, 12, 5), prompt_lengths=(30, 23, 17)):
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in prompt_lengths]
    menus = [
        [torch.randint(3, vocab, (1 + k % 4,), generator=g).tolist() for k in range(count)]
        for count in counts
    ]  # completions of 1-4 tokens: a one-token completion has nothing to pack
    return prompts, menus


def _logp_and_grads(model, prompts, menus, pad, **kwargs):
    from rlid.baselines.engine import shared_prompt_logprobs

    model.zero_grad()
    logp, mask, hidden = shared_prompt_logprobs(model, prompts, menus, pad, **kwargs)
    (logp.sum() + hidden.sum()).backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return logp.detach(), mask, grads


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("copies", [1, 2, 5])
def test_packed_completions_equal_one_row_each_and_the_full_sequences(attention, copies):
    """Packing completions side by side (``pack_rows``) changes rounding only: the same
    log-probs as one row per completion and as each prompt + completion run alone,
    and the same gradients (prompt and completions, the value's hidden state too)."""
    from rlid.baselines.engine import completion_logprobs

    torch.manual_seed(0)
    model, tokenizer = load_policy_model("tiny-random")
    model.config._attn_implementation = attention
    pad = tokenizer.pad_token_id
    prompts, menus = _ragged_menus(model.config.vocab_size)
    kw = {"return_hidden": True}
    logp, mask, grads = _logp_and_grads(model, prompts, menus, pad, copies=copies, **kw)
    one_each, mask_each, grads_each = _logp_and_grads(
        model, prompts, menus, pad, copies=10**6, **kw
    )
    assert torch.equal(mask, mask_each)
    torch.testing.assert_close(logp, one_each, atol=2e-5, rtol=0)
    torch.testing.assert_close(grads, grads_each, atol=2e-4, rtol=1e-4)
    flat_prompts = [prompts[b] for b, menu in enumerate(menus) for _ in menu]
    flat = [c for menu in menus for c in menu]
    with torch.no_grad():
        alone, _, _ = completion_logprobs(model, flat_prompts, flat, pad)
    torch.testing.assert_close(logp.sum(-1), alone.sum(-1), atol=2e-5, rtol=0)


def test_menus_within_the_copies_keep_one_row_per_completion_bit_for_bit(tiny, monkeypatch):
    """Menus of up to SHARED_COPIES actions (every setting but ScienceWorld's) run the
    one-row-per-completion path, so earlier runs are unchanged; a model whose attention
    takes no 4D mask keeps that path at any size."""
    import rlid.baselines.engine as engine

    model, tokenizer = tiny
    pad = tokenizer.pad_token_id
    prompts, menus = _ragged_menus(
        model.config.vocab_size, counts=(engine.SHARED_COPIES, 3), prompt_lengths=(30, 23)
    )
    with torch.no_grad():
        default = engine.shared_prompt_logprobs(model, prompts, menus, pad)[0]
        one_each = engine.shared_prompt_logprobs(model, prompts, menus, pad, copies=10**6)[0]
        assert torch.equal(default, one_each)
        monkeypatch.setattr(engine, "_attention", lambda model: "flash_attention_2")
        assert torch.equal(
            engine.shared_prompt_logprobs(model, prompts, menus, pad, copies=2)[0], one_each
        )
    with pytest.raises(ValueError, match="copies must be at least 1"):
        engine.shared_prompt_logprobs(model, prompts, menus, pad, copies=0)


def test_update_tokens_counts_the_prompt_cache_copies_and_every_action(tiny):
    """micro_batch_tokens' cost of a scoring decision, by hand: a prompt of 10 tokens
    once per cache copy (one per action, at most ``copies``), then the actions' tokens."""
    from types import SimpleNamespace

    model, tokenizer = tiny
    large = SimpleNamespace(prompt_ids=[1] * 10, extra={"completion_ids": [[1, 2]] * 100})
    small = SimpleNamespace(prompt_ids=[1] * 10, extra={"completion_ids": [[1]] * 3})
    policy = partial(ScoringPolicy, model, tokenizer, INTERFACE)
    assert policy().update_tokens(large) == 64 * 10 + 200  # packed: 64 copies
    assert policy(copies=5).update_tokens(large) == 5 * 10 + 200
    assert policy(share_prompt=False).update_tokens(large) == 100 * 10 + 200  # full rows
    assert policy().update_tokens(small) == 3 * 10 + 3
