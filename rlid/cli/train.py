"""``rlid train`` and ``rlid eval``: the CLI layer that sees both planes.

This module imports no torch, so ``rlid train --help`` is quick: each command imports
the training core (:mod:`rlid.core.loop`, :mod:`rlid.agents.agent`, ...) when it runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from rlid.compare.config import build_train_config
from rlid.compare.parse import load_compare_config
from rlid.config.benchmark_protocols import PROTOCOLS
from rlid.config.flags import add_env_option_argument
from rlid.config.limits import check_seed
from rlid.config.run import (
    TrainConfig,
    add_config_arguments,
    config_from_args,
    config_from_values,
    config_table,
    given_values,
    read_toml,
)
from rlid.envs.registry import parse_option_strings
from rlid.runs.trackers import check_installed


def _cmd_train(args: argparse.Namespace) -> int:
    # lazy: the training core imports torch; `rlid train --help` must not
    from rlid.core.loop import run_training

    if args.resume is not None:
        if args.out is not None and Path(args.out) != Path(args.resume):
            raise ValueError("--resume DIR continues DIR; do not also give a different --out")
        # values given with --resume: applied where safe (a larger --steps), else refused
        log = run_training(
            None, Path(args.resume), resume=True, progress=not args.quiet,
            changes=given_values(args),
        )  # fmt: skip
    else:
        if args.out is None:
            raise ValueError("--out DIR is required (where the run is written)")
        config = config_from_args(args)
        check_installed(config.report_to)  # before the model loads
        log = run_training(config, Path(args.out), resume=False, progress=not args.quiet)
    if log.writer:  # several processes: rank 0 reports
        print((Path(log.path) / "summary.md").read_text())
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    # lazy: evaluation imports torch; `rlid eval --help` must not
    from rlid.agents.agent import EvalRequest, evaluate_model, evaluate_run

    check_seed(args.seed, "--seed")
    if args.protocol is not None or args.reference:  # a published protocol's evaluation
        from rlid.cli.protocol_eval import cmd_protocol_eval

        if args.protocol is None:
            raise ValueError("--reference plays under a protocol: add --protocol NAME")
        return cmd_protocol_eval(args)
    if args.run is not None and args.model is not None:
        raise ValueError("give either --run DIR (a trained run) or --model M (a model as it is)")
    if args.run is None and args.model is None and args.setting is None:
        raise ValueError(
            "give --run DIR (a trained run), --model M (a model as it is), or a comparison's "
            "--config CMP.toml --setting NAME [--arm NAME] (its arm's own start)"
        )
    common = dict(split=args.split, greedy=not args.sample, seed=args.seed,
                  walkthrough=args.walkthrough, episodes_out=args.episodes_out,
                  progress=not args.quiet)  # fmt: skip
    if args.run is not None:
        extra = [flag for flag, value in (("--config", args.config), ("--plane", args.plane),
                 ("--setting", args.setting), ("--arm", args.arm)) if value is not None]  # fmt: skip
        if extra:
            raise ValueError(f"{', '.join(extra)} go with --model; a run has its own config")
        episodes = 32 if args.episodes is None else args.episodes
        request = EvalRequest(
            env=args.env, env_options=parse_option_strings(args.env_option), episodes=episodes,
            **common,
        )  # fmt: skip
        stats = evaluate_run(Path(args.run), request)
    else:
        config, episodes = model_eval_config(args)
        stats = evaluate_model(config, EvalRequest(episodes=episodes, **common))
    if args.episodes_out is not None and not args.walkthrough:  # stdout stays the stats
        print(f"episodes written to {args.episodes_out}", file=sys.stderr)
    if args.json:
        print(json.dumps(stats, indent=2, sort_keys=True))
    else:
        width = max(map(len, stats), default=0)  # keys right-aligned, values in one column
        for key, value in stats.items():
            shown = f"{value:.3f}" if isinstance(value, float) else value
            print(f"{key:>{width}}: {shown}")
    return 0


def model_eval_config(args: argparse.Namespace) -> tuple[Any, int]:
    """``rlid eval --model``: the TrainConfig whose plane, interface, env and hardware
    the model is played with, and the number of episodes: ``--config FILE.toml`` (as
    for ``rlid train``) < flags; or, with ``--setting``, a comparison's run config."""
    if args.setting is not None or args.arm is not None:
        return setting_eval_config(args)
    data: dict[str, Any] = {}
    if args.config is not None:
        data = read_toml(Path(args.config), "config file")
        if "arms" in data and "envs" in data:
            raise ValueError(
                f"{args.config} is a comparison config (rlid compare); name one of its "
                "settings with --setting NAME (and an arm with --arm NAME)"
            )
    options = config_table(data.pop("env_options", None), "env_options", "{size = 2}")
    if args.env is not None and args.env != data.get("env"):
        options = {}  # the file's options belong to the file's env
    flags = {key: getattr(args, key) for key in ("env", "plane") if getattr(args, key) is not None}
    options.update(parse_option_strings(args.env_option))
    config = config_from_values({**data, **flags, "env_options": options}, model=args.model)
    return config, 32 if args.episodes is None else args.episodes


def setting_eval_config(args: argparse.Namespace) -> tuple[Any, int]:
    """``rlid eval [--model M] --config CMP.toml --setting S [--arm A]``: the config the
    comparison trains arm ``A`` on setting ``S`` with (its interface, options, step
    limit and evaluation), with ``M`` as the model (default: the arm's own start): the
    "before" number that ``rlid compare`` would report for ``M`` there. ``A`` defaults to the file's first
    arm of ``--plane`` (default decision); episodes default to its held-out count."""
    if args.config is None or args.setting is None:
        raise ValueError("--setting and --arm name parts of a comparison: give --config CMP.toml")
    mixed = [flag for flag, given in (("--env", args.env), ("--env-option", args.env_option))
             if given]  # fmt: skip
    if mixed:
        raise ValueError(f"--setting fixes the env and its options; drop {', '.join(mixed)}")
    compare = load_compare_config(Path(args.config))
    plane = args.plane or "decision"
    if args.arm is None:
        arms = [a for a in compare.arms if a.plane == plane]
        if not arms:
            raise ValueError(f"{args.config} has no arm of the {plane} plane; name one with --arm")
        arm_name = arms[0].name
    else:
        arm_name = args.arm
    compare = compare.select(arms=[arm_name], envs=[args.setting])
    arm, env = compare.arms[0], compare.envs[0]
    if args.plane is not None and arm.plane != args.plane:
        raise ValueError(f"arm {arm.name} is of the {arm.plane} plane, not {args.plane}")
    if args.model is not None:
        # the arm's own start model is replaced: it need not exist to evaluate another one
        arm = replace(arm, options={**arm.options, "model": args.model})
    else:  # the arm's own start, as its runs begin: it must exist (else its build command)
        # lazy: the comparison's runner imports torch; `rlid eval --help` must not
        from rlid.compare.run import check_model_available

        check_model_available(compare.runs()[0], instead="evaluate another with --model M")
    # the setting's training options, as the trainer's own "before" evaluation uses
    config: TrainConfig = build_train_config(compare, arm, env, compare.seeds[0])
    episodes = compare.heldout_episodes if args.episodes is None else args.episodes
    return config, episodes


def add_train_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train an agent (decision-plane PPO, scoring-plane PPO, or token-plane GRPO family)",
        description=(
            "Train on a text-game env. Values come from --config FILE.toml and flags (flags "
            "win); everything is validated before any work starts. The run directory gets "
            "config.json, metrics.jsonl, eval.json, checkpoint/, curves.png and summary.md."
        ),
    )
    p.add_argument("--out", type=Path, help="run directory to create")
    p.add_argument("--resume", type=Path, metavar="DIR", help="continue the run in DIR")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_config_arguments(p)
    p.set_defaults(func=_cmd_train)

    e = sub.add_parser(
        "eval",
        help="evaluate a trained run, or a model as it is, on held-out (or train) games",
        description=(
            "Play N episodes with the last checkpoint of a run (--run DIR), or with a model "
            "before any training (--model tiny|tiny-random|DIR): the same evaluation as a "
            "run's before/after rows. With --model, the plane, interface and hardware come "
            "from --config FILE.toml (a `rlid train` config) and the flags; or from a "
            "comparison's file (`rlid compare --config`) with --setting NAME [--arm NAME], "
            "which plays that setting exactly as the comparison evaluates it. With "
            "--walkthrough, walk each game along its walkthrough instead and report how "
            "often the greedy row is the walkthrough's and the probability given to it, "
            "step by step (decision and scoring planes)."
        ),
    )
    what = e.add_mutually_exclusive_group()
    what.add_argument("--run", type=Path, help="run directory (from `rlid train`)")
    what.add_argument(
        "--model", help="'tiny', 'tiny-random' or a local Hugging Face model dir, untrained"
    )
    e.add_argument(
        "--config", type=Path, help="with --model: TOML file as for `rlid train` (flags win)"
    )
    e.add_argument(
        "--plane", default=None, help="with --model: decision, scoring or token (default: "
        "the config's, else decision)",
    )  # fmt: skip
    e.add_argument("--env", default=None, help="env id (default: the run's or config's env)")
    add_env_option_argument(e, help="env option (repeatable; default: the run's options)")
    e.add_argument("--split", default="heldout", choices=["train", "heldout"], help="game split")
    e.add_argument(
        "--setting", default=None, help="with a comparison --config (as for `rlid compare`): "
        "play that setting exactly as the comparison evaluates it, with --model or else the "
        "arm's own start",
    )  # fmt: skip
    e.add_argument(
        "--arm", default=None, help="with --setting: the arm whose plane, interface and "
        "options are used (default: the file's first arm of --plane)",
    )  # fmt: skip
    e.add_argument(
        "--episodes", type=int, default=None,
        help="episodes to play, or with --walkthrough games to walk (default 32; with "
        "--setting the comparison's held-out count)",
    )  # fmt: skip
    e.add_argument("--sample", action="store_true", help="sample actions instead of greedy")
    e.add_argument(
        "--walkthrough", action="store_true", help="follow each game's walkthrough (the "
        "same games as the episodes) and report, per state, whether the greedy row is the "
        "walkthrough's command and its probability: where and how a policy goes wrong",
    )  # fmt: skip
    e.add_argument("--seed", type=int, default=0, help="evaluation seed")
    e.add_argument(
        "--episodes-out", type=Path, default=None, metavar="FILE.jsonl",
        help="also write every episode played, one JSON line each: the game, won / lost, "
        "return, the first prompt as the policy read it, and per step the command, the "
        "reward and the chosen row's probability (a new file; nothing is overwritten)",
    )  # fmt: skip
    e.add_argument(
        "--protocol", default=None, choices=tuple(PROTOCOLS), help="play a published "
        "protocol's evaluation sets with its env options (docs/benchmark-envs.md): success, "
        "raw and clipped scores per set",
    )  # fmt: skip
    e.add_argument(
        "--reference", action="append", choices=("random", "walkthrough"), default=None,
        help="with --protocol: also (or only) play this reference, no model (repeatable)",
    )  # fmt: skip
    e.add_argument("--json", action="store_true", help="print one JSON object")
    e.add_argument("--quiet", action="store_true", help="no progress bar (on stderr)")
    e.set_defaults(func=_cmd_eval)
