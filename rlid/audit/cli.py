"""``rlid audit``: the command line of the audit."""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import sys
from pathlib import Path

from rlid.audit.config import AuditConfig
from rlid.audit.report import format_report, write_plot
from rlid.config.flags import add_dataclass_arguments, given_values
from rlid.config.limits import PER_CORE, one_line, usable_cores


def _module_doc(name: str) -> str:
    """A module's docstring, read from its source without importing it (``rlid.audit.run``
    imports torch; ``rlid audit --help`` should not)."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        return ""
    return ast.get_docstring(ast.parse(Path(spec.origin).read_text()), clean=False) or ""


def check_threads(threads: int) -> None:
    """``--threads`` from 1 to what this machine can use (:mod:`rlid.config.limits`)."""
    most = PER_CORE * usable_cores()
    if not 1 <= threads <= most:
        raise ValueError(f"--threads {threads} is not between 1 and {most} ({PER_CORE} x cores)")


# ------------------------------------------------------------------------- CLI
def add_audit_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``rlid audit``; every :class:`AuditConfig` field becomes a flag."""
    parser = subparsers.add_parser(
        "audit",
        help="check the marginalization variance identity exactly, with negative controls",
        description=_module_doc("rlid.audit.run").split("\n\n    >>>")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_dataclass_arguments(parser, AuditConfig)
    parser.add_argument("--json", action="store_true", help="print one JSON object, no table")
    parser.add_argument(
        "--plot", metavar="PATH", default=None, help="write a bar chart of the variance terms (PNG)"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads (the audit is small; default 1)"
    )
    parser.set_defaults(func=run_audit)


def run_audit(args: argparse.Namespace) -> int:
    """``rlid audit``: load, audit, print (table or ``--json``), optionally plot."""
    # lazy: the audit imports torch; `rlid audit --help` must not
    from rlid.audit.run import audit_model, load_wordings, resolve_problem

    try:
        check_threads(args.threads)
        config = AuditConfig(**given_values(args, AuditConfig))
        wordings = load_wordings(config.wordings) if config.wordings else None
        resolve_problem(config, wordings)  # input errors before the model loads
        report = audit_model(config, wordings, threads=args.threads)
    except (ValueError, FileNotFoundError, KeyError) as err:
        msg = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"rlid audit: error: {one_line(str(msg))}", file=sys.stderr)
        return 2
    # The result first: a plot path that cannot be written must not lose the audit
    # (the write error then reaches the CLI's one-line error handler).
    print(json.dumps(report, indent=2) if args.json else format_report(report), flush=True)
    if args.plot:
        write_plot(report, Path(args.plot))
    return 0
