"""The vLLM engine against the torch trainer on the same weights (float32, CPU).

Runs where vLLM is installed (``make test-vllm`` builds ``.venv-vllm`` with the CPU
build); skipped elsewhere. One engine serves the whole module: it takes ~40 s to start
and ~20 s to warm up on a small CPU. The model is the tiny Llama (head size 32, which
vLLM's CPU attention accepts) with a wider initialisation (``initializer_range=0.1``),
so its menus get peaked distributions (mean entropy ~0.7 of uniform) rather than
near-uniform ones that would hide a mismatch.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from rlid import envs
from rlid.baselines.engine import completion_logprobs, shared_prompt_logprobs, stop_token_ids
from rlid.baselines.scoring import ScoringPolicy
from rlid.baselines.token.policy import TokenPolicy
from rlid.decision.policy import DecisionPolicy
from rlid.engines import StaleEngineError, VLLMEngine, VLLMOptions, decision_probe
from rlid.lm.models import build_tiny_model
from rlid.lm.tokenizer import build_tiny_tokenizer
from rlid.losses.decision import decision_ppo_loss
from rlid.menus import COMMAND_END, Interface, render_token_prompt

pytest.importorskip("vllm", reason="the vLLM engine tests need vllm: `make test-vllm`")

TOL = 1e-4
INTERFACE = Interface()
GAMES = [
    ("keydoor", {"size": 3}),
    ("keydoor", {"size": 5, "keys": 2, "distractors": 3}),
    ("crafting", {}),
]


def real_states(count: int) -> list[tuple[str, dict]]:
    """``count`` states of the built-in games, reached by random legal play."""
    states: list[tuple[str, dict]] = []
    rng = np.random.default_rng(0)
    seed = 0
    while len(states) < count:
        env_id, options = GAMES[seed % len(GAMES)]
        env = envs.make(env_id, **options)
        obs, info = env.reset(seed=seed)
        seed += 1
        for _ in range(8):
            states.append((obs, info))
            legal = info["legal_actions"]
            obs, _, terminated, truncated, info = env.step(legal[int(rng.integers(len(legal)))])
            if terminated or truncated or len(states) == count:
                break
    return states


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    tokenizer = build_tiny_tokenizer()
    return build_tiny_model(tokenizer, seed=1, initializer_range=0.1), tokenizer


@pytest.fixture(scope="module")
def engine(tiny):
    model, tokenizer = tiny
    options = VLLMOptions(max_model_len=512, kv_cache_gib=1)
    with VLLMEngine.from_model(model, tokenizer, options) as served:
        served.readout([[1, 2, 3]], [[4, 5]])  # the first request warms the engine up
        yield served


@pytest.fixture(scope="module")
def menus(tiny):
    """100 real decisions (menus of 3-12 rows) taken by the torch decision policy."""
    model, tokenizer = tiny
    states = real_states(100)
    policy = DecisionPolicy(model, tokenizer, INTERFACE)
    return policy.act(
        [obs for obs, _ in states], [info for _, info in states], [None] * len(states),
        rng=np.random.default_rng(1), generator=torch.Generator().manual_seed(0),
    )  # fmt: skip


def torch_readout(model, tokenizer, decisions, temperature=1.0):
    policy = DecisionPolicy(model, tokenizer, INTERFACE)
    with torch.no_grad():
        logp, mass, _ = policy.score_ids(
            [d.prompt_ids for d in decisions], [d.label_ids for d in decisions],
            temperature=temperature,
        )  # fmt: skip
    return logp, mass


def assert_same_readout(engine, model, tokenizer, decisions, temperature=1.0):
    ours = engine.readout(
        [d.prompt_ids for d in decisions], [d.label_ids for d in decisions],
        temperature=temperature,
    )  # fmt: skip
    logp, mass = torch_readout(model, tokenizer, decisions, temperature)
    valid = torch.isfinite(logp)
    assert torch.equal(valid, torch.isfinite(ours.logp))  # -inf exactly past each menu
    gap = (ours.logp[valid] - logp[valid]).abs().max().item()
    assert gap < TOL, f"label log-probs differ by {gap}"
    # label mass: the same relative accuracy (it is ~2e-3 for this model)
    assert torch.allclose(ours.label_mass, mass, rtol=TOL, atol=0)
    return gap


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_label_distribution_equals_the_torch_readout_on_100_real_menus(
    engine, tiny, menus, temperature
):
    model, tokenizer = tiny
    assert len(menus) == 100 and len({d.num_rows for d in menus}) > 3
    assert_same_readout(engine, model, tokenizer, menus, temperature)
    ours = engine.readout([d.prompt_ids for d in menus[:5]], [d.label_ids for d in menus[:5]])
    assert torch.allclose(ours.logp.exp().sum(-1), torch.ones(5), atol=1e-6)
    assert ours.num_tokens == sum(len(d.prompt_ids) for d in menus[:5])


def test_scoring_logprobs_match_torch_rescoring(engine, tiny):
    model, tokenizer = tiny
    states = real_states(12)
    policy = ScoringPolicy(model, tokenizer, INTERFACE)
    encoded = [
        policy.completion_ids(
            render_token_prompt(obs, info, INTERFACE, tokenizer), info["legal_actions"]
        )
        for obs, info in states
    ]
    prompts = [p for p, _ in encoded]
    completions = [c for _, c in encoded]
    logp, mask = engine.score(prompts, completions)
    with torch.no_grad():
        shared = shared_prompt_logprobs(model, prompts, completions, tokenizer.pad_token_id)
    assert shared is not None
    ref_logp, ref_mask = shared[0], shared[1]
    assert torch.equal(mask, ref_mask)
    gap = (logp[mask] - ref_logp[mask]).abs().max().item()
    assert gap < TOL, f"completion log-probs differ by {gap}"
    assert logp.shape[0] == sum(map(len, completions))


def test_a_cache_hit_past_the_prompt_is_scored_again_without_the_cache(engine, tiny, monkeypatch):
    """A completion that crosses a KV block boundary, scored twice: the second time
    its first block is cached past the prompt's end, so it is run again uncached."""
    model, tokenizer = tiny
    block = engine.block_size
    text = list(decision_probe(tokenizer).prompt_ids) * (block // 50 + 2)
    prompt, completion = text[: block - 4], text[block - 4 : block + 8]
    with torch.no_grad():
        expected, _, _ = completion_logprobs(model, [prompt], [completion], 0)
    uncached = []
    real = engine._score_sequences

    def spy(sequences, *, read_cache):
        uncached.extend(sequences if not read_cache else [])
        return real(sequences, read_cache=read_cache)

    monkeypatch.setattr(engine, "_score_sequences", spy)
    engine.reset_prefix_cache()
    for rerun in (0, 1):
        logp, _ = engine.score([prompt], [[completion]])
        assert (logp[0] - expected[0]).abs().max() < TOL
        assert len(uncached) == rerun


def test_generated_token_logprobs_match_torch_rescoring(engine, tiny):
    """The token policy with the engine as its sampler: log μ (engine) per token equals
    log π_old, which the policy re-scores with the trainer (engine.same_as_trainer is
    False), at the sampling temperature."""
    model, tokenizer = tiny
    states = real_states(48)
    policy = TokenPolicy(model, tokenizer, INTERFACE, max_new_tokens=6, engine=engine)
    observations, infos = [o for o, _ in states], [i for _, i in states]
    # more prompt tokens than one engine step takes (4096): a prompt split over two steps
    # killed the CPU build's engine when requests carry seeds (chunked prefill is off)
    assert sum(map(len, policy.prompt_ids(observations, infos, [None] * 48))) > 4096

    def play(seed):
        return policy.act(
            observations, infos, [None] * len(states), rng=np.random.default_rng(0),
            generator=torch.Generator().manual_seed(seed), temperature=0.8,
        )  # fmt: skip

    generations = play(0)
    mu = np.concatenate([g.logp_rollout for g in generations])
    old = np.concatenate([g.logp_old for g in generations])
    assert len(mu) >= len(states) and np.abs(mu - old).max() < TOL
    stops = set(stop_token_ids(tokenizer, COMMAND_END))
    for g in generations:
        assert 1 <= g.num_tokens <= 6
        # a completion ends with its first stop token, or runs to max_new_tokens
        assert all(t not in stops for t in g.completion_ids[:-1])
        assert g.stopped == (g.completion_ids[-1] in stops)
    again = play(0)
    assert [g.completion_ids for g in again] == [g.completion_ids for g in generations]
    other = play(1)
    assert [g.completion_ids for g in other] != [g.completion_ids for g in generations]


def test_greedy_generation_is_the_argmax_path(engine, tiny):
    model, tokenizer = tiny
    prompt = [list(decision_probe(tokenizer).prompt_ids)]
    ids, logps = engine.generate(prompt, 5, torch.Generator(), [], greedy=True)
    with torch.no_grad():
        logp, mask, _ = completion_logprobs(model, prompt, ids, tokenizer.pad_token_id)
        logits = model(input_ids=torch.tensor([prompt[0] + ids[0]])).logits[0]
    assert len(ids[0]) == 5  # no stop ids, EOS ignored: all new tokens
    argmax = logits[len(prompt[0]) - 1 : -1].argmax(-1).tolist()
    assert ids[0] == argmax
    assert np.abs(np.array(logps[0]) - logp[0][mask[0]].numpy()).max() < TOL
    with pytest.raises(ValueError, match="temperature=1.0"):
        engine.generate(prompt, 5, torch.Generator(), [], greedy=True, temperature=0.5)


def ppo_step(model, tokenizer, decisions) -> None:
    """One decision-PPO optimizer step (rlid.losses.decision.decision_ppo_loss) on ``decisions``."""
    policy = DecisionPolicy(model, tokenizer, INTERFACE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    logp_all, _, _ = policy.score(decisions)
    advantages = torch.from_numpy(np.random.default_rng(3).standard_normal(len(decisions)))
    loss, _ = decision_ppo_loss(
        logp_all,
        torch.tensor([d.chosen for d in decisions]),
        torch.tensor([d.logp for d in decisions]),
        advantages.float(),
    )
    loss.backward()
    optimizer.step()


def test_after_a_ppo_step_and_a_sync_the_engine_serves_the_updated_model(engine, tiny, menus):
    model, tokenizer = tiny
    updated = copy.deepcopy(model)
    ppo_step(updated, tokenizer, menus[:32])
    probe = decision_probe(tokenizer, INTERFACE)
    try:
        # the sync skipped on purpose: the probe check catches the stale engine
        with pytest.raises(StaleEngineError, match="does not serve the trainer's weights"):
            engine.check_probe(updated, probe)
        report = engine.sync_weights(updated, probe=probe)
        assert report.probe_gap is not None and report.probe_gap < TOL
        assert report.tensors == len(engine_tensor_names(updated))
        assert_same_readout(engine, updated, tokenizer, menus)
        # and no longer the old model: the update moved the distribution
        before, _ = torch_readout(model, tokenizer, menus)
        after, _ = torch_readout(updated, tokenizer, menus)
        assert (before - after).nan_to_num(0.0).abs().max() > 10 * TOL
    finally:
        engine.sync_weights(model)
    assert_same_readout(engine, model, tokenizer, menus[:20])


def engine_tensor_names(model) -> list[str]:
    from rlid.engines import engine_state_dict

    return list(engine_state_dict(model, torch.float32))


def test_merged_lora_weights_reach_the_engine(engine, tiny, menus):
    peft = pytest.importorskip("peft")
    model, tokenizer = tiny
    lora = peft.get_peft_model(
        copy.deepcopy(model),
        peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0),
    ).eval()
    with torch.no_grad():  # B starts at zero: give the adapters an effect
        for name, param in lora.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.05, generator=torch.Generator().manual_seed(len(name)))
    base_before = {
        n: p.clone() for n, p in lora.get_base_model().named_parameters() if "base_layer" in n
    }
    try:
        engine.sync_weights(lora, probe=decision_probe(tokenizer, INTERFACE))
        assert_same_readout(engine, lora, tokenizer, menus[:40])
        # the merge is out of place: the trainer's frozen base weights are untouched
        for name, param in lora.get_base_model().named_parameters():
            if name in base_before:
                assert torch.equal(param, base_before[name])
    finally:
        engine.sync_weights(model)


def test_bad_requests_fail_with_clear_errors(engine):
    with pytest.raises(ValueError, match="max_model_len=512"):
        engine.readout([[1] * 600], [[4, 5]])
    with pytest.raises(ValueError, match="repeat a token"):
        engine.readout([[1, 2]], [[4, 4]])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        engine.readout([[1, 2]], [[4, 10**7]])
    with pytest.raises(ValueError, match="at least one token"):
        engine.score([[1, 2]], [[[]]])
