"""Benchmark: the scoring plane's PPO update on large menus, one batch vs a token budget.

A minibatch of real ScienceWorld decisions (the recorded states of at least
``--min-actions`` legal actions, cycled to ``--batch`` decisions, every legal action
scored) goes through one :func:`rlid.core.train.ppo_update` step as a run takes it: all
at once (``micro_batch_tokens`` unset, the default) and cut by ``--tokens`` token
positions (the policy's ``update_tokens``: its prompt cache's copies and every
action's tokens). Each variant runs in a fresh process, so its peak resident memory
(``ru_maxrss``) is its own; the step's time and the largest parameter difference
between the variants (the same step up to float rounding) are printed beside it.

    python benchmarks/update_memory.py --model tiny --batch 32 --tokens 100000
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def run_variant(args: argparse.Namespace, tokens: int | None, out: Path) -> None:
    """One update step in this process; writes its numbers and parameters to ``out``."""
    from scoring_plane import file_states

    from rlid.baselines.scoring import ScoringPolicy
    from rlid.config.planes import ScoringConfig
    from rlid.core.loop import RunContext
    from rlid.core.menu_update import DecisionBatch, micro_parts, ppo_update
    from rlid.lm.optim import Stepper
    from rlid.lm.starts import load_policy_model

    torch.set_num_threads(args.threads)
    model, tokenizer = load_policy_model(args.model)
    observations, infos = file_states(args.states_file, args.min_actions)
    picks = [i % len(infos) for i in range(args.batch)]
    config = ScoringConfig(
        plane="scoring", norm="token", env="scienceworld", epochs=1,
        minibatch_size=args.batch, micro_batch_tokens=tokens, max_grad_norm=1e9,
    )  # fmt: skip
    policy = ScoringPolicy(model, tokenizer, config.interface, norm="token", micro_batch_size=1)
    with torch.no_grad():
        decisions = policy.act(
            [observations[i] for i in picks], [infos[i] for i in picks], [None] * len(picks),
            rng=np.random.default_rng(0), generator=torch.Generator().manual_seed(0),
        )  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    advantages = torch.randn(len(decisions), generator=torch.Generator().manual_seed(1))
    batch = DecisionBatch(decisions, advantages, advantages, np.arange(len(decisions)))
    params = list(model.parameters())
    stepper = Stepper(torch.optim.SGD(params, lr=0.5), params, config.max_grad_norm)
    parts = micro_parts(config, policy, decisions, np.arange(len(decisions)))
    start = time.perf_counter()
    ppo_update(RunContext(config), policy, batch, stepper, np.random.default_rng(0))
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    torch.save([p.detach() for p in params], out.with_suffix(".pt"))
    costs = [policy.update_tokens(d) for d in decisions]
    out.write_text(json.dumps({
        "seconds": seconds, "peak_mib": peak / 1024, "before_mib": before / 1024,
        "micro_batches": len(parts), "tokens": sum(costs), "most_tokens": max(costs),
        "actions": [len(d.extra["actions"]) for d in decisions[: len(infos)]],
    }))  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny", help="tiny | tiny-random | PATH")
    parser.add_argument("--states-file", default=str(ROOT / "tests/data/scienceworld_states.json"))
    parser.add_argument("--min-actions", type=int, default=100)
    parser.add_argument("--batch", type=int, default=32, help="decisions in the minibatch")
    parser.add_argument("--tokens", type=int, default=100_000, help="the token budget")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--variant", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.variant is not None:  # a child: one variant
        tokens = None if args.variant == "none" else int(args.variant)
        run_variant(args, tokens, Path(args.out))
        return

    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, variant in (("one batch", "none"), (f"{args.tokens:,} tokens", str(args.tokens))):
            out = Path(tmp) / f"{variant}.json"
            flags = ["--model", args.model, "--states-file", args.states_file,
                     "--min-actions", str(args.min_actions), "--batch", str(args.batch),
                     "--threads", str(args.threads), "--variant", variant, "--out", str(out)]  # fmt: skip
            done = subprocess.run(
                [sys.executable, __file__, *flags], capture_output=True, text=True
            )
            if done.returncode != 0:
                raise SystemExit(f"{name}: exit {done.returncode}\n{done.stderr[-3000:]}")
            rows[name] = json.loads(out.read_text())
            rows[name]["params"] = torch.load(out.with_suffix(".pt"))
    (a, one), (b, cut) = rows.items()
    diff = max(float((x - y).abs().max()) for x, y in zip(one["params"], cut["params"]))
    print(f"model={args.model} batch={args.batch} decisions over states of {one['actions']} "
          f"actions ({one['tokens']:,} token positions, at most {one['most_tokens']:,} in one "
          f"decision), threads={args.threads}")  # fmt: skip
    print("\n| update | micro-batches | seconds | peak MiB | peak above the rollout's MiB |")
    print("|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['micro_batches']} | {r['seconds']:.1f} | {r['peak_mib']:,.0f} | "
              f"{r['peak_mib'] - r['before_mib']:,.0f} |")  # fmt: skip
    print(
        f"\npeak one batch / cut: {one['peak_mib'] / cut['peak_mib']:.1f}x; "
        f"max |Δ parameter| after the step: {diff:.2e}"
    )


if __name__ == "__main__":
    main()
