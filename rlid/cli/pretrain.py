"""``rlid pretrain``: warm-start the tiny model from the command line."""

from __future__ import annotations

import argparse
from pathlib import Path

from rlid import pretrain as _pretrain_mod
from rlid.pretrain import PretrainConfig, pretrain


def _cmd_pretrain(args: argparse.Namespace) -> int:
    from rlid.models import tiny_cache_dir

    target = Path(args.out) if args.out else tiny_cache_dir()
    if (target / "pretrain.json").exists() and not args.force and args.out is None:
        print(f"warm-started tiny model already cached at {target} (use --force to redo)")
        return 0
    config = PretrainConfig(
        envs=tuple(e.strip() for e in args.envs.split(",") if e.strip()),
        episodes_per_env=args.episodes,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
        threads=args.threads,
    )
    info = pretrain(config, out=target, progress=not args.quiet)
    print(
        f"pretrained on {info['sequences']} random-play sequences in {info['seconds']:.0f}s: "
        f"loss {info['first_loss']:.2f} -> {info['final_loss']:.2f}; saved to {info['path']}"
    )
    return 0


def add_pretrain_parser(sub: argparse._SubParsersAction) -> None:
    d = PretrainConfig()
    p = sub.add_parser(
        "pretrain",
        help="warm-start the tiny model on random-play transcripts (cached)",
        description=(_pretrain_mod.__doc__ or "").split("\n\n")[0],
    )
    p.add_argument("--envs", default=",".join(d.envs), help="comma-separated env ids to play")
    p.add_argument("--episodes", type=int, default=d.episodes_per_env, help="episodes per env")
    p.add_argument("--steps", type=int, default=d.steps, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="sequences per step")
    p.add_argument("--lr", type=float, default=d.lr, help="AdamW learning rate")
    p.add_argument("--seed", type=int, default=d.seed, help="seed (play and training)")
    p.add_argument("--threads", type=int, default=d.threads, help="torch CPU threads")
    p.add_argument("--out", help="write here instead of the warm-start cache")
    p.add_argument("--force", action="store_true", help="pretrain again even if cached")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_pretrain)
