"""One-process hardware controls, side by side in one run (docs/design.md §10).

1. Env workers: median lockstep step time (and reset time) of N TextWorld envs
   stepped in this process (``env_workers=0``) vs in worker processes
   (``env_workers=W``), same games, same random actions.
2. Update: label readout + decision-PPO loss + backward + AdamW step on a random
   28.5M-parameter model (``rlid.lm.models`` "large" preset) or a local model directory
   (``--model PATH``, e.g. a random model of a real shape from
   ``benchmarks/random_model.py``), time and peak memory, in float32, bf16 autocast
   (float32 master weights), and bf16 autocast with gradient checkpointing. Peak
   memory is the CUDA allocator's peak on a GPU (weights, gradients and optimizer
   state included), and the peak of live CPU tensors (torch profiler) on the CPU.

    python benchmarks/hardware.py [--envs 16] [--workers 2] [--steps 20] [--batch 4]
        [--reps 2] [--device auto] [--model large|PATH] [--only env|update]
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlid import envs
from rlid.config import TrainConfig
from rlid.core.env_workers import InProcessEnvs, WorkerEnvs
from rlid.core.loop import RunContext
from rlid.core.train import DecisionBatch, ppo_update
from rlid.decision.policy import DecisionPolicy
from rlid.lm.hardware import (
    Precision,
    enable_gradient_checkpointing,
    resolve_device,
)
from rlid.lm.models import build_model_from_config, model_config
from rlid.lm.optim import Stepper
from rlid.lm.starts import load_policy_model
from rlid.lm.tokenizer import build_tiny_tokenizer


def _sibling(name: str) -> Any:
    """Another script of this folder, imported as a module (benchmarks is no package)."""
    key = f"_benchmarks_{name}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------ env workers
def lockstep_times(env_batch: Any, count: int, steps: int, seed: int) -> tuple[float, float]:
    """Median seconds per lockstep step of all envs, and per reset of all envs."""
    rng = np.random.default_rng(seed)
    seeds = [int(s) for s in rng.integers(0, 2**31 - 1, size=count)]
    resets, step_times = [], []
    indices = list(range(count))
    t0 = time.perf_counter()
    infos = [info for _, info in env_batch.reset_many(indices, seeds)]
    resets.append(time.perf_counter() - t0)
    for _ in range(steps):
        actions = [info["legal_actions"][int(rng.integers(len(info["legal_actions"])))]
                   for info in infos]  # fmt: skip
        t0 = time.perf_counter()
        results = env_batch.step_many(indices, actions)
        step_times.append(time.perf_counter() - t0)
        ended = [i for i, r in enumerate(results) if r[2] or r[3]]
        infos = [r[4] for r in results]
        if ended:  # keep every env playing: reset the finished ones (timed as resets)
            t0 = time.perf_counter()
            for i, (_, info) in zip(ended, env_batch.reset_many(ended, [seeds[i] for i in ended])):
                infos[i] = info
            resets.append((time.perf_counter() - t0) * count / len(ended))
    return statistics.median(step_times), statistics.median(resets)


def bench_envs(args: argparse.Namespace) -> list[str]:
    options = _sibling("env_throughput").options_for(args.env)
    options = {**options, "split": "train"}
    options.pop("game_seed", None)  # a different game per reset seed, as in training
    rows = []
    in_process = InProcessEnvs([envs.make(args.env, **options) for _ in range(args.envs)])
    lockstep_times(in_process, args.envs, 2, args.seed)  # compile / cache the games first
    step0, reset0 = lockstep_times(in_process, args.envs, args.steps, args.seed)
    rows.append((0, step0, reset0))
    with WorkerEnvs(args.env, options, args.envs, workers=args.workers) as pool:
        lockstep_times(pool, args.envs, 2, args.seed)
        step_w, reset_w = lockstep_times(pool, args.envs, args.steps, args.seed)
    rows.append((args.workers, step_w, reset_w))
    lines = [
        f"### env workers: {args.envs} x {args.env} {options}, {args.steps} lockstep steps",
        "",
        "| env_workers | lockstep step ms (median) | reset of all envs ms (median) | step speed-up |",
        "|---|---|---|---|",
    ]
    for workers, step, reset in rows:
        lines.append(f"| {workers} | {step * 1e3:.1f} | {reset * 1e3:.1f} | {step0 / step:.2f}x |")
    return lines


# ---------------------------------------------------------------------------- update
def _decisions(policy: DecisionPolicy, batch: int, seed: int) -> list[Any]:
    env = envs.make("keydoor", size=3, game_seed=0)
    obs, infos = [], []
    for s in range(batch):
        o, i = env.reset(seed=seed + s)
        obs.append(o)
        infos.append(i)
    with torch.no_grad():
        return policy.act(
            obs, infos, [None] * batch, rng=np.random.default_rng(seed),
            generator=torch.Generator().manual_seed(seed),
        )  # fmt: skip


def _bench_setting(
    name: str, changes: dict[str, Any], args: argparse.Namespace, device: torch.device,
    peak_tensor_bytes: Any,
) -> str:  # fmt: skip
    """One table row: time and peak memory of readout + update under ``changes``."""
    config = TrainConfig(
        device=str(device), epochs=1, minibatch_size=args.batch, max_grad_norm=1.0,
        **changes,  # type: ignore[arg-type]
    )  # fmt: skip
    precision = Precision.from_config(config)
    if args.model == "large":
        tokenizer = build_tiny_tokenizer()
        model = build_model_from_config(model_config(tokenizer, "large"), seed=args.seed)
    else:
        model, tokenizer = load_policy_model(args.model)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    precision.place(model)
    if config.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    policy = DecisionPolicy(model, tokenizer, config.interface, autocast=precision.autocast)
    decisions = _decisions(policy, args.batch, args.seed)
    advantages = torch.randn(args.batch, generator=torch.Generator().manual_seed(args.seed))
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(params, lr=1e-5)
    out: dict[str, float] = {}

    batch = DecisionBatch(decisions, advantages, torch.zeros(args.batch))
    stepper = Stepper(optimizer, params, config.max_grad_norm, precision.grad_scaler())

    def update() -> None:
        out.update(ppo_update(RunContext(config), policy, batch, stepper, np.random.default_rng(0)))

    update()  # warm-up (allocator, optimizer state)
    times = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        update()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    if device.type == "cuda":
        update()
        peak = torch.cuda.max_memory_allocated()  # weights, grads, optimizer state included
    else:
        peak = peak_tensor_bytes(update)
    best = min(times)
    return (
        f"| {name} | {best:.3f} | {args.batch / best:.1f} | {peak / 2**20:.0f} "
        f"| {out['loss']:.4f} |"
    )


SETTINGS: dict[str, tuple[str, dict[str, Any]]] = {
    "fp32": ("float32", dict()),
    "bf16": ("bf16 autocast", dict(mixed_precision="bf16")),
    "fp32-ckpt": ("float32 + gradient checkpointing", dict(gradient_checkpointing=True)),
    "bf16-ckpt": ("bf16 autocast + gradient checkpointing",
                  dict(mixed_precision="bf16", gradient_checkpointing=True)),
}  # fmt: skip


def bench_update(args: argparse.Namespace) -> list[str]:
    device = resolve_device(args.device)
    settings = [
        (name, changes) for key, (name, changes) in SETTINGS.items() if key in args.settings
    ]
    peak_tensor_bytes = _sibling("readout").peak_tensor_bytes
    what = "random 28.5M model ('large')" if args.model == "large" else args.model
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    memory = "CUDA allocator peak, all" if device.type == "cuda" else "peak live tensor"
    lines = [
        f"### update: {what}, {args.batch} decisions, device {device} ({where})",
        "",
        f"| setting | readout + update s (min) | decisions/s | {memory} MiB | loss |",
        "|---|---|---|---|---|",
    ]
    for name, changes in settings:
        lines.append(_bench_setting(name, changes, args, device, peak_tensor_bytes))
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="tw-coin_collector")
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--model", default="large", help="'large' (random 28.5M) or PATH")
    parser.add_argument(
        "--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS),
        help="update settings to measure",
    )  # fmt: skip
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", choices=["env", "update"], default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    if args.only in (None, "env"):
        print("\n".join(bench_envs(args)) + "\n", flush=True)
    if args.only in (None, "update"):
        print("\n".join(bench_update(args)), flush=True)


if __name__ == "__main__":
    main()
