"""``rlid pretrain``: build a warm start of the tiny model from the command line.

Without ``--out`` it builds the random-play start of ``--model tiny-play`` into its cache;
the shipped start's manifest (``rlid/data/start/manifest.json``) holds the command that
rebuilds the default start. This module imports no torch (``rlid pretrain --help``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlid.config.flags import add_dataclass_arguments, given_values
from rlid.config.limits import PER_CORE, check_seed, usable_cores
from rlid.lm.pretrain.config import CHECKPOINT_EVERY, PretrainConfig
from rlid.lm.start_files import play_cache_dir

DESCRIPTION = (
    "Build a warm start: language-model pretraining of the tiny model on transcripts of "
    "play on training games (random, or --play afterstate: the rows the menus' marks "
    "choose; --walkthrough-episodes adds the games' own solutions). Resumable: the same "
    "command continues an interrupted build. Without --out: the random-play start of "
    "--model tiny-play, in its cache."
)


def _cmd_pretrain(args: argparse.Namespace) -> int:
    # lazy: pretraining imports torch; `rlid pretrain --help` must not
    from rlid.lm.pretrain.build import pretrain, save_unfinished

    target = Path(args.out) if args.out else play_cache_dir()
    if args.snapshot:
        info = save_unfinished(target, Path(args.snapshot))
        loss = f"{info['loss']:.3f}" if info["loss"] is not None else "n/a"
        print(
            f"unfinished build of {target} at step {info['step']} of {info['steps']} "
            f"(mean loss of its last 200 steps {loss}): saved to {args.snapshot}"
        )
        return 0
    if (target / "pretrain.json").exists() and not args.force and args.out is None:
        print(f"the random-play start is already cached at {target} (use --force to redo)")
        return 0
    config = PretrainConfig(**given_values(args, PretrainConfig))
    _check_limits(config)
    info = pretrain(
        config,
        out=target,
        progress=not args.quiet,
        checkpoint_every=args.checkpoint_every,
        restart=args.restart,
    )
    play = "random-play" if config.play == "random" else "afterstate-guided play"
    source = f"{play} and walkthrough" if config.walkthrough_episodes else play
    answered = list(info.get("answered_labels") or {})
    shown = answered if len(answered) <= 16 else [*answered[:8], "...", *answered[-4:]]
    labels = f" ({' '.join(shown)})" if answered else ""
    print(
        f"pretrained on {info['sequences']} {source} sequences in {info['seconds']:.0f}s: "
        f"loss {info['first_loss']:.2f} -> {info['final_loss']:.2f}, answering with "
        f"{len(answered)} labels{labels}; saved to {info['path']}"
    )
    return 0


def _check_limits(config: PretrainConfig) -> None:
    """The seed and thread limits of ``rlid train`` (:mod:`rlid.config.limits`), before any work."""
    check_seed(config.seed, "--seed")
    most = PER_CORE * usable_cores()
    if config.threads > most:
        raise ValueError(
            f"--threads {config.threads} is more than this machine can use: at most "
            f"{PER_CORE} x its {usable_cores()} usable CPU core(s) = {most}"
        )


def add_pretrain_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pretrain",
        help="build a warm start of the tiny model (default: the random-play start, cached)",
        description=DESCRIPTION,
    )
    add_dataclass_arguments(p, PretrainConfig)
    p.add_argument("--out", help="write here instead of the random-play start's cache")
    p.add_argument("--force", action="store_true", help="pretrain again even if cached")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=CHECKPOINT_EVERY,
        metavar="N",
        help="save the unfinished build every N steps beside the output, so that the same "
        "command resumes it after a crash or Ctrl-C (0: never; default %(default)s)",
    )
    p.add_argument(
        "--restart",
        action="store_true",
        help="discard an unfinished build of this output and start from step 0",
    )
    p.add_argument(
        "--snapshot",
        metavar="DIR",
        help="save the model of the unfinished build of this output, as of its last "
        "checkpoint, to the new directory DIR (a model for --model, e.g. rlid eval) and "
        "exit; the build may be running meanwhile",
    )
    p.set_defaults(func=_cmd_pretrain)
