"""Device, precision, gradient checkpointing, temperature and regulariser-only updates."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from rlid import envs
from rlid.config import TrainConfig
from rlid.config.planes import TokenConfig
from rlid.decision.policy import DecisionPolicy
from rlid.lm.hardware import (
    Precision,
    cuda_memory_row,
    enable_gradient_checkpointing,
    resolve_device,
    train_mode_without_dropout,
)
from rlid.lm.models import build_tiny_model
from rlid.lm.tokenizer import build_tiny_tokenizer

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _tiny(**overrides):
    from rlid.lm.models import build_model_from_config, model_config

    tokenizer = build_tiny_tokenizer()
    if not overrides:
        return build_tiny_model(tokenizer, seed=0), tokenizer
    config = model_config(tokenizer, "tiny")
    for k, v in overrides.items():
        setattr(config, k, v)
    return build_model_from_config(config, seed=0), tokenizer


def _observations(count: int, size: int = 2):
    env = envs.make("keydoor", size=size, game_seed=0)
    obs, infos = [], []
    for seed in range(count):
        o, i = env.reset(seed=seed)
        obs.append(o)
        infos.append(i)
    return obs, infos


# ------------------------------------------------------------------------ config / device
def test_device_flag_is_validated_with_a_clear_error():
    with pytest.raises(ValueError, match="device='gpu'"):
        TrainConfig(device="gpu")
    with pytest.raises(ValueError, match="dtype"):
        TrainConfig(dtype="int8")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mixed_precision"):
        TrainConfig(mixed_precision="fp8")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mixed-precision fp16"):
        TrainConfig(dtype="float16")
    with pytest.raises(ValueError, match="micro_batch_size"):
        TrainConfig(micro_batch_size=0)
    with pytest.raises(ValueError, match="env_workers"):
        TrainConfig(env_workers=-1)
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda_is_a_clear_error(tmp_path):
    from rlid.core.train import train

    with pytest.raises(ValueError, match="asks for CUDA but torch sees no CUDA"):
        resolve_device("cuda:0")
    config = TrainConfig(env="keydoor", env_options={"size": 2}, device="cuda", steps=8)
    with pytest.raises(ValueError, match="--device cpu"):
        train(config, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()  # nothing written


def test_hardware_fields_are_recorded_and_flags_derived():
    import argparse

    from rlid.config.run import add_config_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    args = parser.parse_args(
        ["--device", "cpu", "--dtype", "bfloat16", "--mixed-precision", "bf16",
         "--gradient-checkpointing", "--micro-batch-size", "4"]
    )  # fmt: skip
    config = config_from_args(args)
    assert config.gradient_checkpointing is True and config.micro_batch_size == 4
    recorded = config.to_dict()
    assert (recorded["device"], recorded["dtype"], recorded["mixed_precision"]) == (
        "cpu", "bfloat16", "bf16",
    )  # fmt: skip
    assert TrainConfig.from_record(json.loads(json.dumps(recorded))).to_dict() == recorded
    assert TrainConfig().threads is None  # torch's own default (OMP_NUM_THREADS)


# ---------------------------------------------------------------- device consistency
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("plane", ["decision", "token"])
def test_training_runs_with_every_tensor_on_the_device(tmp_path, device, plane):
    from rlid.core.loop import run_training

    extra = {"max_new_tokens": 3, "algo": "dapo"} if plane == "token" else {"kl_coef": 0.1}
    config = TrainConfig.from_dict(dict(
        plane=plane, env="keydoor", env_options={"size": 2}, steps=24, groups_per_iter=2,
        group_size=2, eval_episodes=2, device=device, minibatch_size=8, micro_batch_size=3,
        **extra,
    ))  # fmt: skip
    run_training(config, tmp_path / "run", resume=False, progress=False)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows and all(np.isfinite(r["return"]) for r in rows)
    recorded = json.loads((tmp_path / "run" / "config.json").read_text())["config"]
    assert recorded["device"] == device
    assert "device" in (tmp_path / "run" / "summary.md").read_text()
    memory = [r.get("gpu_memory") for r in rows]
    if device == "cuda":
        assert all(m is not None and m["peak_allocated_gib"] > 0 for m in memory), memory
    else:
        assert memory == [None] * len(rows)


def test_cuda_memory_row_reads_then_resets_the_allocator_peaks(monkeypatch):
    assert cuda_memory_row(torch.device("cpu")) is None
    resets = []
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d=None: 3 * 2**29)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda d=None: 2**31)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda d=None: resets.append(d))
    row = cuda_memory_row(torch.device("cuda", 0))
    assert row == {"peak_allocated_gib": 1.5, "peak_reserved_gib": 2.0}
    assert resets == [torch.device("cuda", 0)]


@pytest.mark.parametrize("device", DEVICES)
def test_sampling_is_the_same_on_every_device(device):
    """Rows are drawn on the CPU from the run's generator: same seed, same rows."""
    model, tokenizer = _tiny()
    config = TrainConfig()
    obs, infos = _observations(16)
    chosen = {}
    for where in ["cpu", device]:
        policy = DecisionPolicy(model.to(where), tokenizer, config.interface)
        decisions = policy.act(
            obs, infos, [None] * 16, rng=np.random.default_rng(0),
            generator=torch.Generator().manual_seed(0),
        )  # fmt: skip
        chosen[where] = [d.chosen for d in decisions]
    assert chosen["cpu"] == chosen[device]


# ------------------------------------------------------------------- mixed precision
def test_bf16_weights_with_bf16_autocast_train_finite_and_close_to_float32(tmp_path):
    from rlid.core.train import train

    common = dict(env="keydoor", env_options={"size": 2}, steps=80, groups_per_iter=2,
                  group_size=2, eval_episodes=0, seed=3, minibatch_size=8)  # fmt: skip
    f32 = train(TrainConfig(**common), tmp_path / "f32", progress=False)
    bf16 = train(
        TrainConfig(**common, dtype="bfloat16", mixed_precision="bf16"),
        tmp_path / "bf16", progress=False,
    )  # fmt: skip
    assert len(bf16.metrics) == len(f32.metrics) >= 2
    for row in bf16.metrics:
        for key in ("loss", "entropy", "grad_norm", "rollout_entropy"):
            if key in row:
                assert np.isfinite(row[key]), (key, row)
    # same seed, same games: the first rollout's policy differs only by bf16 rounding
    first_f32, first_bf16 = f32.metrics[0], bf16.metrics[0]
    assert first_bf16["rollout_entropy"] == pytest.approx(first_f32["rollout_entropy"], abs=0.05)
    assert first_bf16["rollout_label_mass"] == pytest.approx(
        first_f32["rollout_label_mass"], rel=0.1
    )


def test_mixed_precision_keeps_float32_master_weights_and_float32_losses():
    model, tokenizer = _tiny()
    precision = Precision(weight_dtype=torch.bfloat16, autocast_dtype=torch.bfloat16)
    precision.place(model)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # trained: master weights
    frozen, _ = _tiny()
    precision.place(frozen.requires_grad_(False))
    assert all(p.dtype == torch.bfloat16 for p in frozen.parameters())  # frozen: weight dtype
    policy = DecisionPolicy(frozen, tokenizer, TrainConfig().interface, autocast=precision.autocast)
    obs, infos = _observations(2)
    decisions = policy.act(
        obs, infos, [None, None], rng=np.random.default_rng(0),
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    logp_all, label_mass, _ = policy.score(decisions)
    assert logp_all.dtype == torch.float32 and label_mass.dtype == torch.float32
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    policy = DecisionPolicy(model, tokenizer, TrainConfig().interface, autocast=precision.autocast)
    logp_all, _, _ = policy.score(decisions)
    logp_all[logp_all.isfinite()].sum().backward()
    optimizer.step()
    states = [s for state in optimizer.state.values() for s in state.values() if s.dim() > 0]
    assert states and all(s.dtype == torch.float32 for s in states)


# -------------------------------------------------------------- gradient checkpointing
def _saved_bytes(model, tokenizer, decisions) -> tuple[int, torch.Tensor]:
    policy = DecisionPolicy(model, tokenizer, TrainConfig().interface)
    total = 0

    def pack(tensor):
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor

    with (
        train_mode_without_dropout(model),
        torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t),
    ):
        logp_all, _, _ = policy.score(decisions)
    with train_mode_without_dropout(model):
        logp_all[logp_all.isfinite()].sum().backward()  # the recompute runs and works
    return total, logp_all.detach()


def test_gradient_checkpointing_cuts_saved_activations():
    model, tokenizer = _tiny()
    obs, infos = _observations(16, size=3)
    policy = DecisionPolicy(model, tokenizer, TrainConfig().interface)
    with torch.no_grad():
        decisions = policy.act(
            obs, infos, [None] * 16, rng=np.random.default_rng(0),
            generator=torch.Generator().manual_seed(0),
        )  # fmt: skip
    plain, logp_plain = _saved_bytes(model, tokenizer, decisions)
    grads_plain = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    enable_gradient_checkpointing(model)
    checkpointed, logp_ckpt = _saved_bytes(model, tokenizer, decisions)
    assert checkpointed < 0.5 * plain, (checkpointed, plain)
    torch.testing.assert_close(logp_ckpt, logp_plain)  # the same function
    for p, g in zip(model.parameters(), grads_plain):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-6)
    assert not model.training  # train mode only inside the update


def test_train_mode_without_dropout_is_the_eval_function_and_restores_dropout():
    model, tokenizer = _tiny(attention_dropout=0.5)
    model.eval()
    ids = torch.tensor([tokenizer.encode("you are in the hall. Answer:")])
    with torch.no_grad():
        reference = model(input_ids=ids).logits
        with train_mode_without_dropout(model):
            assert model.training
            same = model(input_ids=ids).logits
        model.train()
        dropped = model(input_ids=ids).logits
        model.eval()
    torch.testing.assert_close(same, reference)
    assert not torch.allclose(dropped, reference)  # dropout really is on in plain train mode
    attention = model.model.layers[0].self_attn
    assert attention.attention_dropout == 0.5 and not model.training


# ------------------------------------------------------------------------ temperature
def _check_frequencies(samples: np.ndarray, probs: np.ndarray) -> None:
    n = len(samples)
    counts = np.bincount(samples, minlength=len(probs)) / n
    sigma = np.sqrt(probs * (1 - probs) / n) + 1e-9
    assert np.all(np.abs(counts - probs) <= 4.5 * sigma + 1e-3), (counts, probs)


def test_decision_plane_stores_and_rescores_the_behaviour_distribution():
    model, tokenizer = _tiny()
    policy = DecisionPolicy(model, tokenizer, TrainConfig().interface)
    obs, infos = _observations(1)
    n = 1500
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        decisions = policy.act(
            obs * n, infos * n, [None] * n, rng=np.random.default_rng(0), generator=gen,
            temperature=2.0,
        )  # fmt: skip
        logp_t2, _, _ = policy.score(decisions)  # re-scored at each decision's T
        logp_t1, _, _ = policy.score_ids([decisions[0].prompt_ids], [decisions[0].label_ids])
    stored = torch.tensor([d.logp for d in decisions])
    rescored = logp_t2.gather(1, torch.tensor([[d.chosen] for d in decisions])).squeeze(1)
    torch.testing.assert_close(stored, rescored)  # ratio 1 at the first PPO step
    # menus are shuffled per step: compare frequencies per action text
    actions = sorted({r.action for r in decisions[0].menu.rows})
    probs = np.zeros(len(actions))
    for row, lp in zip(decisions[0].menu.rows, logp_t2[0].exp().tolist()):
        probs[actions.index(row.action)] = lp
    samples = np.array([actions.index(d.action) for d in decisions])
    _check_frequencies(samples, probs)
    # temperature 2 really is another distribution than temperature 1
    assert not torch.allclose(logp_t2[0], logp_t1[0], atol=1e-3)
    torch.testing.assert_close(
        logp_t2[0], torch.log_softmax(logp_t1[0] / 2.0, -1), rtol=1e-5, atol=1e-5
    )


def test_scoring_plane_stores_and_rescores_the_behaviour_distribution():
    from rlid.baselines.scoring import ScoringPolicy

    model, tokenizer = _tiny()
    policy = ScoringPolicy(model, tokenizer, TrainConfig().interface, norm="sum")
    obs, infos = _observations(1)
    n = 600
    with torch.no_grad():
        decisions = policy.act(
            obs * n, infos * n, [None] * n, rng=np.random.default_rng(0),
            generator=torch.Generator().manual_seed(1), temperature=2.0,
        )  # fmt: skip
        logp_all, _, _ = policy.score(decisions[:1])
        logp_t1, _, _ = policy.score_ids(
            [decisions[0].prompt_ids], [decisions[0].extra["completion_ids"]],
            [decisions[0].extra["actions"]],
        )  # fmt: skip
    assert decisions[0].logp == pytest.approx(float(logp_all[0, decisions[0].chosen]), abs=1e-5)
    _check_frequencies(np.array([d.chosen for d in decisions]), logp_all[0].exp().numpy())
    torch.testing.assert_close(logp_all[0], torch.log_softmax(logp_t1[0] / 2.0, -1))


@pytest.mark.parametrize("engine_name", ["trainer", "perturbed"])
def test_token_plane_stores_and_rescores_the_behaviour_distribution(engine_name):
    from rlid.baselines.engine import completion_logprobs, make_engine

    model, tokenizer = _tiny()
    prompt = tokenizer.encode("you are in the hall. >", add_special_tokens=False)
    engine = make_engine(engine_name, model, tokenizer.pad_token_id, noise=0.5, seed=0)
    n = 3000
    tokens, logps = engine.generate(
        [prompt] * n, 1, torch.Generator().manual_seed(0), [tokenizer.eos_token_id],
        temperature=2.0,
    )  # fmt: skip
    samples = np.array([t[0] for t in tokens])
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt])).logits[0, -1].float()
    if engine_name == "perturbed":  # μ is the engine's own distribution
        positions = torch.tensor([len(prompt)])
        logits = engine.adjust_logits(logits[None], positions, torch.tensor([prompt[-1]]))[0]
    probs = torch.softmax(logits / 2.0, -1)
    stored = torch.tensor([lp[0] for lp in logps])
    torch.testing.assert_close(stored, probs.log()[torch.from_numpy(samples)], rtol=1e-4, atol=1e-5)
    top = torch.topk(probs, 8).indices.numpy()
    remap = {int(t): i for i, t in enumerate(top)}
    sub = np.array([remap.get(int(s), len(top)) for s in samples])
    sub_probs = np.append(probs[top].numpy(), 1 - float(probs[top].sum()))
    _check_frequencies(sub, sub_probs)
    if engine_name == "trainer":  # the trainer re-scores the same event
        logp, mask, _ = completion_logprobs(
            model, [prompt] * 4, tokens[:4], tokenizer.pad_token_id, temperature=2.0
        )
        torch.testing.assert_close(logp[mask], stored[:4], rtol=1e-4, atol=1e-5)


# ------------------------------------------------- regularisers never act on their own
def test_all_zero_advantages_do_not_move_the_policy_toward_uniform():
    from rlid.core.loop import RunContext
    from rlid.core.train import DecisionBatch, ppo_update
    from rlid.lm.optim import Stepper

    model, tokenizer = _tiny()
    config = TrainConfig(ent_coef=0.01, kl_coef=0.1, label_mass_coef=0.1, minibatch_size=4)
    policy = DecisionPolicy(model, tokenizer, config.interface)
    obs, infos = _observations(8)
    with torch.no_grad():
        decisions = policy.act(
            obs, infos, [None] * 8, rng=np.random.default_rng(0),
            generator=torch.Generator().manual_seed(0),
        )  # fmt: skip
        logp_before, _, _ = policy.score(decisions)
    for d, row in zip(decisions, logp_before):
        d.extra["logp_ref_levels"] = [row[: d.num_rows].tolist()]
    params = list(model.parameters())
    before = [p.detach().clone() for p in params]
    optimizer = torch.optim.AdamW(params, lr=1e-2)
    ctx = RunContext(config)
    stepper = Stepper(optimizer, params, config.max_grad_norm)
    owner = np.arange(8)
    batch = DecisionBatch(decisions, torch.zeros(8), torch.zeros(8), owner)
    out = ppo_update(ctx, policy, batch, stepper, np.random.default_rng(0))
    assert out == {"skipped_update": 1.0} and ctx.budget.optimizer_steps == 0
    assert all(torch.equal(a, b) for a, b in zip(before, params))
    # minibatch level: the half with zero advantages is skipped, the other half steps
    perm = np.random.default_rng(0).permutation(8)  # the update's first minibatch order
    advantages = torch.zeros(8)
    advantages[perm[4:]] = torch.tensor([1.0, -1.0, 0.5, -0.5])  # second minibatch only
    ctx.config = config.replace(epochs=1)
    batch = DecisionBatch(decisions, advantages, torch.zeros(8), owner)
    out = ppo_update(ctx, policy, batch, stepper, np.random.default_rng(0))
    assert out["skipped_minibatches"] == 1.0 and ctx.budget.optimizer_steps == 1


def test_zero_advantage_token_minibatches_are_skipped_even_with_a_kl_term():
    from test_microbatch import _generations

    from rlid.baselines.token.train import Rescoring, TokenBatch, token_update
    from rlid.core.loop import RunContext
    from rlid.lm.optim import Stepper

    model, tokenizer = _tiny()
    completions = _generations(model, tokenizer)
    for g in completions:
        g.extra["logp_ref"] = [x - 0.3 for x in g.logp_old]
    params = list(model.parameters())
    before = [p.detach().clone() for p in params]
    ctx = RunContext(TokenConfig(plane="token", beta=0.5))
    out = token_update(
        ctx, model, TokenBatch(completions, torch.zeros(len(completions)), np.arange(len(completions))),
        Stepper(torch.optim.AdamW(params), params, 1.0), np.random.default_rng(0),
        Rescoring(tokenizer.pad_token_id),
    )  # fmt: skip
    assert out == {"skipped_update": 1.0} and ctx.budget.optimizer_steps == 0
    assert all(torch.equal(a, b) for a, b in zip(before, params))


def test_token_trainer_merges_a_tiny_tail_minibatch():
    from test_microbatch import _generations

    from rlid.baselines.token.train import Rescoring, TokenBatch, token_update
    from rlid.core.loop import RunContext
    from rlid.lm.optim import Stepper

    model, tokenizer = _tiny()
    completions = _generations(model, tokenizer)[:17]  # minibatch 16: 16 + 1 -> one of 17
    ctx = RunContext(TokenConfig(plane="token", minibatch_size=16, epochs=2))
    params = list(model.parameters())
    advantages = torch.randn(17, generator=torch.Generator().manual_seed(0))
    token_update(
        ctx, model, TokenBatch(completions, advantages, np.arange(17)),
        Stepper(torch.optim.AdamW(params), params, 1.0), np.random.default_rng(0),
        Rescoring(tokenizer.pad_token_id),
    )  # fmt: skip
    assert ctx.budget.optimizer_steps == 2  # one per epoch, never a step on 1 completion


# ------------------------------------------------------------------ memory and files
def test_readout_never_asks_for_every_layers_hidden_states():
    model, tokenizer = _tiny()
    policy = DecisionPolicy(model, tokenizer, TrainConfig().interface)
    obs, infos = _observations(3)
    decisions = policy.act(
        obs, infos, [None] * 3, rng=np.random.default_rng(0),
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    seen = []
    original = model.forward

    def spy(*args, **kwargs):
        seen.append(kwargs.get("output_hidden_states"))
        return original(*args, **kwargs)

    model.forward = spy  # type: ignore[method-assign]
    _, _, hidden = policy.score(decisions)
    del model.forward
    assert seen and not any(seen)
    # the hook's hidden state is the last layer's (after the final norm) at the last position
    from rlid.lm.readout import left_pad_ids

    ids, mask = left_pad_ids([d.prompt_ids for d in decisions], tokenizer.pad_token_id)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    full = model(input_ids=ids, attention_mask=mask, position_ids=positions,
                 output_hidden_states=True).hidden_states[-1][:, -1]  # fmt: skip
    torch.testing.assert_close(hidden, full)


def test_reference_model_is_frozen_and_can_be_offloaded(tmp_path):
    from rlid.core.loop import RunContext, reference_model
    from rlid.lm.hardware import OffloadedModel
    from rlid.runs.log import RunLog

    model, _ = _tiny()
    for offload in (False, True):
        config = TrainConfig(kl_coef=0.1, ref_offload=offload)
        log = RunLog(tmp_path, config, resuming=False)
        ref = reference_model(RunContext(config, run_log=log), model)
        assert isinstance(ref, OffloadedModel) == offload
        assert not any(p.requires_grad for p in ref.parameters())
        assert all(p.device.type == "cpu" for p in ref.parameters())
        assert {id(p) for p in ref.parameters()}.isdisjoint(id(p) for p in model.parameters())


def test_keep_checkpoints_keeps_the_newest(tmp_path):
    from rlid.core.train import train

    config = TrainConfig(
        env="keydoor", env_options={"size": 2}, budget_currency="episodes", steps=6,
        groups_per_iter=1, group_size=2,
        eval_episodes=0, minibatch_size=8, checkpoint_every=1, keep_checkpoints=2, ref_offload=True,
        kl_coef=0.05,
    )  # fmt: skip
    log = train(config, tmp_path / "run", progress=False)
    last = log.metrics[-1]["iteration"]
    assert last >= 3
    kept = sorted(p.name for p in (tmp_path / "run").glob("checkpoint*"))
    assert kept == ["checkpoint", f"checkpoint-{last - 1}"]
