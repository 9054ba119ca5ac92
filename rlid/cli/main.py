"""The ``rlid`` command line.

Every subcommand has its own ``--help``. Heavy imports (torch, transformers,
textworld) happen inside the subcommand that needs them, so ``rlid --help`` and
``rlid envs`` stay fast.

    rlid envs                          # env ids and their options
    rlid play keydoor --game-seed 3    # play in the terminal, seeing what an agent sees
    rlid pretrain                      # warm-start the tiny default model (cached)
    rlid train --plane decision --env keydoor --steps 2000 --out runs/kd
    rlid eval --run runs/kd --env keydoor --split heldout --episodes 32
    rlid export runs/kd agents/kd      # a Hugging Face model dir + interface.json + model card
    rlid audit                         # the marginalization variance identity, exact
    rlid demo                          # the main job (what `make demo` runs)
"""

from __future__ import annotations

import argparse
import errno
import faulthandler
import importlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

# standard library only: keeps `rlid --help` fast
from rlid import envs
from rlid.config.flags import add_env_option_argument
from rlid.config.limits import PrintableStream, check_flags, one_line
from rlid.runs.files import os_error_of
from rlid.runs.lock import RunLockedError
from rlid.runs.stop import (
    RunStopped,
    Terminated,
    restore_sigterm,
    signal_name,
    terminate_by_exception,
)


class UserError(Exception):
    """A mistake in the user's input: printed as one clear line, exit status 2."""


def _cmd_envs(args: argparse.Namespace) -> int:
    spec_ids = envs.list_envs()
    if args.env_id:
        spec_ids = [envs.get_spec(args.env_id).env_id]
    for env_id in spec_ids:
        spec = envs.get_spec(env_id)
        print(f"{env_id} ({envs.gym_id(env_id)}): {spec.doc}")
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
    # lazy: `rlid --help` must stay quick (playing imports the envs)
    from rlid.cli.play import play

    return play(args)


def _add_play(sub: argparse._SubParsersAction) -> None:

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


# Subcommands that live in their own modules register through these hooks. Only the
# module of the command being run is imported (they import torch / transformers);
# the others appear in ``rlid --help`` by name and help line alone, so ``rlid --help``
# and ``rlid envs`` start in a fraction of a second (benchmarks/cli_startup.py).
_EXTERNAL: list[tuple[str, str, dict[str, str]]] = [
    ("rlid.cli.pretrain", "add_pretrain_parser",
     {"pretrain": "build a warm start of the tiny model (default: the random-play start, cached)"}),
    ("rlid.cli.train", "add_train_parsers", {
        "train": "train an agent (decision-plane PPO, scoring-plane PPO, or token-plane "
                 "GRPO family)",
        "eval": "evaluate a trained run, or a model as it is, on held-out (or train) games",
    }),
    ("rlid.audit.cli", "add_audit_parser",
     {"audit": "check the marginalization variance identity exactly, with negative controls"}),
    ("rlid.compare.cli", "add_compare_parser",
     {"compare": "compare arms (planes x algorithms) over seeds under one shared budget"}),
    ("rlid.cli.demo", "add_demo_parser",
     {"demo": "the main job: the shipped start, decision PPO, held-out table"}),
    ("rlid.cli.export", "add_export_parser",
     {"export": "write a run's agent as a Hugging Face model dir with interface.json and a "
                "model card"}),
]  # fmt: skip

ALL = "*"


def build_parser(command: str | None = ALL) -> argparse.ArgumentParser:
    """The ``rlid`` parser; ``command`` names the one subcommand built in full.

    ``ALL`` (the default) builds every subcommand in full; ``None`` builds only the
    light ones (``envs``, ``play``) in full and the others as name + help stubs.
    """
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
    parser.add_argument(
        "--debug", action="store_true",
        help="show the full traceback of an error (also: RLID_DEBUG=1)",
    )  # fmt: skip
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_envs(sub)
    _add_play(sub)
    for module_name, hook, commands in _EXTERNAL:
        if command != ALL and command not in commands:
            for name, help_line in commands.items():
                sub.add_parser(name, help=help_line, add_help=False)
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name == module_name:
                continue  # optional subcommand not present in this build
            raise
        add: Callable[[argparse._SubParsersAction], None] = getattr(module, hook)
        add(sub)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv`` (its first non-option word), if any."""
    return next((a for a in argv if not a.startswith("-")), None)


# --------------------------------------------------------------------- error handling
_OS_HINTS = {
    errno.EACCES: "check its permissions or choose another path",
    errno.EPERM: "check its permissions or choose another path",
    errno.EROFS: "the filesystem is read-only: choose a writable path",
    errno.ENOSPC: "the disk is full: free some space and run the command again",
    errno.EDQUOT: "the disk quota is exceeded: free some space",
    errno.ENOTDIR: "a part of the path is a file, not a directory: choose another path",
    errno.EISDIR: "it is a directory: give a file path",
    errno.ENAMETOOLONG: "the path is too long",
}


_RESUME_HINTS = {
    "train": "the disk is full: free some space and resume the run with --resume",
    "compare": "the disk is full: free some space and run the same command again (it continues)",
    "pretrain": "the disk is full: free some space and run the same command again (the build "
    "resumes)",
}
"""What a full disk means to each command that can continue where it stopped."""


def error_message(err: BaseException, command: str | None = None) -> str | None:
    """One line for an error caused by input or environment; None for a bug.
    ``command``: the subcommand that failed (what a full disk's hint advises)."""
    if isinstance(err, UserError | RunLockedError):
        return str(err)
    if isinstance(err, KeyError):
        return str(err.args[0] if err.args else err)
    if isinstance(err, OSError) and not isinstance(err, BrokenPipeError):
        if err.errno is None or err.strerror is None:  # raised with a message of its own
            return str(err)
        where = err.filename if err.filename is not None else ""
        hint = _OS_HINTS.get(err.errno, "")
        if err.errno == errno.ENOSPC and command in _RESUME_HINTS:
            hint = _RESUME_HINTS[command]
        if err.errno == errno.EEXIST and where and os.path.isfile(where):
            hint = "it is a file where a directory is needed: choose another path"
        line = f"{err.strerror}: {where}" if where else err.strerror
        return f"{line} ({hint})" if hint else line
    if isinstance(err, ValueError | TypeError | FileNotFoundError):
        return str(err)
    if type(err).__name__ == "SafetensorError":  # safetensors' own, not an OSError
        inner = os_error_of(err)
        if inner is not None:  # writing: a full disk, a read-only file system, ...
            return error_message(inner, command)
        return f"a .safetensors file is corrupt or truncated: {err}"
    if type(err).__name__ == "SecurityError":  # jinja2's sandbox held a chat template
        return (
            "a chat template tried to reach outside the template sandbox and was stopped "
            f"({err}); use a model whose chat_template is a plain template"
        )
    return None


def _silence_stdout() -> None:
    """After a closed pipe (``rlid envs -v | head``): no second error at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _print_native_crashes() -> None:
    """Make a native crash (segfault, abort) print the Python stack on stderr.

    Without it a rank of a torchrun job that dies in native code (a collective, a
    kernel) leaves no trace but its exit status. Skipped when stderr is no real file.
    """
    try:
        if not faulthandler.is_enabled():
            faulthandler.enable()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        pass


def main(argv: Sequence[str] | None = None) -> int:
    # one rule for every string printed back (errors, notes, summaries, argparse's own
    # messages): nothing a file or option name holds can drive the terminal
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = PrintableStream(streams[0]), PrintableStream(streams[1])
    try:
        return _main(argv)
    finally:
        sys.stdout, sys.stderr = streams


def _main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_command_of(argv))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    debug = args.debug or bool(os.environ.get("RLID_DEBUG"))
    _print_native_crashes()
    previous = terminate_by_exception()  # SIGTERM in any phase: a line, not a vanishing
    try:
        check_flags(args.command, vars(args))  # counts and sizes, before any work
        code = int(args.func(args) or 0)
        sys.stdout.flush()
        return code
    except (KeyboardInterrupt, Terminated) as stop:
        signum = stop.signum if isinstance(stop, Terminated) else signal.SIGINT
        print(f"\nrlid {args.command}: stopped by {signal_name(signum)}{_after_stop(args)}",
              file=sys.stderr)  # fmt: skip
        return 128 + signum
    except RunStopped as stopped:  # SIGTERM / Ctrl-C, after a checkpoint (rlid.runs.stop)
        if not stopped.quiet:  # one line per run, not one per rank
            print(f"rlid {args.command}: {stopped}", file=sys.stderr)
        return stopped.exit_code
    except BrokenPipeError:
        _silence_stdout()
        return 141  # as if killed by SIGPIPE, like other command-line tools
    except Exception as err:
        if debug:
            raise
        if type(err).__name__ == "PeerLost":
            # several processes (torchrun): another one died or stopped answering
            print(f"rlid {args.command}: error: {err}", file=sys.stderr)
            return 3
        message = error_message(err, args.command)
        if message is None:
            print(
                f"rlid {args.command}: internal error: {type(err).__name__}: "
                f"{one_line(str(err))} (run `rlid --debug ...` for the traceback, and please "
                "report it)",
                file=sys.stderr,
            )
            return 1
        runs = sys.modules.get("rlid.runs.log")
        if runs is not None:  # a new run refused before its first iteration leaves nothing
            runs.discard_failed_setups()
        print(f"rlid {args.command}: error: {one_line(message)}", file=sys.stderr)
        return 2
    finally:
        restore_sigterm(previous)
        lock = sys.modules.get("rlid.runs.lock")
        if lock is not None:  # every exit: no lock record left for the next run to take over
            lock.release_all()


def _after_stop(args: argparse.Namespace) -> str:
    """What a stop by a signal leaves, said after "stopped by SIGTERM" (a run that can
    be resumed: how; else nothing)."""
    run = getattr(args, "resume", None) or getattr(args, "out", None)
    if args.command == "train" and run is not None and (Path(run) / "config.json").is_file():
        return (
            f"; what its last checkpoint holds is kept: `rlid train --resume {run}` "
            "continues (a run stopped before its first checkpoint starts again)"
        )
    if args.command == "compare":
        return "; finished runs are kept: the same command continues"
    return ""


if __name__ == "__main__":
    sys.exit(main())
