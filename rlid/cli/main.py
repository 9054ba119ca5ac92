"""The ``rlid`` command line.

Every subcommand has its own ``--help``. Heavy imports (torch, transformers,
textworld) happen inside the subcommand that needs them, so ``rlid --help`` and
``rlid envs`` stay fast.

    rlid envs                          # env ids and their options
    rlid play keydoor --game-seed 3    # play in the terminal, seeing what an agent sees
    rlid pretrain                      # warm-start the tiny default model (cached)
    rlid train --plane decision --env keydoor --steps 2000 --out runs/kd
    rlid eval --run runs/kd --env keydoor --split heldout --episodes 32
    rlid audit                         # the marginalization variance identity, exact
    rlid demo                          # the main job (what `make demo` runs)
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence


class UserError(Exception):
    """A mistake in the user's input: printed as one clear line, exit status 2."""


def _cmd_envs(args: argparse.Namespace) -> int:
    import envs

    spec_ids = envs.list_envs()
    if args.env_id:
        spec_ids = [envs.get_spec(args.env_id).env_id]
    for env_id in spec_ids:
        spec = envs.get_spec(env_id)
        print(f"{env_id}: {spec.doc}")
        if args.env_id or args.verbose:
            for name, opt in spec.all_options().items():
                print(f"    {name:<20} default={opt.default!r:<12} {opt.describe():<28} {opt.doc}")
    if not args.env_id and not args.verbose:
        print("\n(`rlid envs ENV_ID` or `rlid envs -v` lists the options)")
    return 0


def _add_envs(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("envs", help="list env ids and their options", description=_cmd_envs.__doc__)
    p.add_argument("env_id", nargs="?", help="show the options of this env id only")
    p.add_argument("-v", "--verbose", action="store_true", help="show the options of every env")
    p.set_defaults(func=_cmd_envs)


def _cmd_play(args: argparse.Namespace) -> int:
    from rlid.cli.play import play

    return play(args)


def _add_play(sub: argparse._SubParsersAction) -> None:
    from rlid.config import add_env_option_argument

    p = sub.add_parser(
        "play",
        help="play an env in the terminal, seeing the menu with afterstates an agent sees",
    )
    p.add_argument("env_id", help="env id (see `rlid envs`)")
    p.add_argument("--game-seed", type=int, default=None, help="game index within the split")
    p.add_argument("--split", default="train", choices=["train", "heldout"], help="game split")
    add_env_option_argument(p)
    p.add_argument("--seed", type=int, default=0, help="reset seed")
    p.add_argument(
        "--no-afterstates", action="store_true", help="hide predicted afterstates from the menu"
    )
    p.set_defaults(func=_cmd_play)


# Subcommands that live in their own modules register through these hooks.
_EXTERNAL: list[tuple[str, str]] = [
    ("rlid.cli.pretrain", "add_pretrain_parser"),
    ("rlid.cli.train", "add_train_parsers"),
    ("rlid.audit.cli", "add_audit_parser"),
    ("rlid.compare.cli", "add_compare_parser"),
    ("rlid.cli.demo", "add_demo_parser"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlid",
        description=(
            "Reinforcement learning of language agents in the decision plane (menus of legal "
            "actions read out in one forward pass, decision-level PPO), with the token-plane "
            "GRPO family on the same text games."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run `rlid COMMAND --help` for the options of a command.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_envs(sub)
    _add_play(sub)
    import importlib

    for module_name, hook in _EXTERNAL:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name == module_name:
                continue  # optional subcommand not present in this build
            raise
        add: Callable[[argparse._SubParsersAction], None] = getattr(module, hook)
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except UserError as err:
        print(f"rlid {args.command}: error: {err}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, FileNotFoundError, KeyError) as err:
        # Library functions validate user input and raise these with a clear message;
        # RLID_DEBUG=1 shows the full traceback instead.
        if os.environ.get("RLID_DEBUG"):
            raise
        msg = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"rlid {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\nrlid {args.command}: interrupted", file=sys.stderr)
        return 130
    except RuntimeError as err:
        from rlid.distributed import PeerLost

        if not isinstance(err, PeerLost):
            raise
        # several processes (torchrun): another one died or stopped answering
        print(f"rlid {args.command}: error: {err}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
