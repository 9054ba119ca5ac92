"""``rlid demo`` (what ``make demo`` runs): the main job on the embedded default.

1. Start: the shipped warm start (``--model tiny``, :mod:`rlid.lm.starts`): loaded, not built.
2. Decision-level PPO on training games of one setting.
3. Held-out evaluation before and after, printed as a table; the run directory
   holds metrics, curves.png and summary.md.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from rlid import envs as envs_pkg
from rlid.config import TrainConfig
from rlid.config.flags import add_env_option_argument
from rlid.envs.registry import parse_option_strings
from rlid.lm.start_files import check_shipped, read_manifest
from rlid.menus import Interface
from rlid.runs.lock import is_empty_dir

# A setting that learns visibly in minutes on 2 CPU cores (see README "Demo").
DEMO_ENV = "tw-coin_collector"
DEMO_ENV_OPTIONS = {"level": 2, "max_episode_steps": 8, "num_games": 32}
DEMO_STEPS = 3000


def demo_config(env: str, env_options: dict, steps: int, seed: int, threads: int) -> TrainConfig:
    return TrainConfig(
        plane="decision",
        env=env,
        env_options=env_options,
        steps=steps,
        seed=seed,
        threads=threads,
        groups_per_iter=4,
        group_size=4,
        lr=1e-4,
        epochs=2,
        minibatch_size=32,
        ent_coef=0.01,
        eval_episodes=32,
        interface=Interface(),
    )


def _cmd_demo(args: argparse.Namespace) -> int:
    # lazy: the shipped start and the trainer import torch; `rlid demo --help` must not
    from rlid.core.train import train

    t0 = time.perf_counter()
    # Everything the user gave is checked before any model loads.
    options: dict[str, Any] = dict(DEMO_ENV_OPTIONS) if args.env == DEMO_ENV else {}
    options.update(parse_option_strings(args.env_option))
    envs_pkg.get_spec(args.env).resolve(options)
    config = demo_config(args.env, options, args.steps, args.seed, args.threads)
    out = Path(args.out or f"runs/demo-{time.strftime('%Y%m%d-%H%M%S')}")
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; give a directory")
    if not is_empty_dir(out):
        raise ValueError(f"--out {out} already holds files; choose another --out")
    manifest = read_manifest(check_shipped())
    print(
        f"[1/3] start: the shipped warm start 'tiny' ({manifest['sequences']} sequences of "
        f"{manifest['recipe'].get('play', 'random')} play on training games; weights sha256 "
        f"{manifest['weights']['sha256'][:12]}...)"
    )
    print(f"[2/3] decision-level PPO on {args.env} {options} for {args.steps} env steps -> {out}")
    log = train(config, out, progress=not args.quiet)
    evals = __import__("json").loads((Path(log.path) / "eval.json").read_text())
    print(f"[3/3] held-out evaluation ({config.eval_episodes} games, greedy):\n")
    print(f"{'':>8} {'success':>8} {'return':>8} {'score':>8} {'length':>8}")
    for when in ("before", "after"):
        s = evals[when]
        print(
            f"{when:>8} {s['success']:8.3f} {s['return']:8.3f} "
            f"{s['normalized_score']:8.3f} {s['episode_length']:8.2f}"
        )
    print(f"\nreport: {Path(log.path) / 'summary.md'}   curves: {Path(log.path) / 'curves.png'}")
    print(f"total time {time.perf_counter() - t0:.0f}s")
    return 0


def add_demo_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="the main job: the shipped start, decision PPO, held-out table")
    p.add_argument("--env", default=DEMO_ENV, help="env id")
    add_env_option_argument(p)
    p.add_argument("--steps", type=int, default=DEMO_STEPS, help="env-step budget")
    p.add_argument("--seed", type=int, default=0, help="seed")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--out", help="run directory (default: runs/demo-TIMESTAMP)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=_cmd_demo)
