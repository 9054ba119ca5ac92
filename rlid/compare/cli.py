"""``rlid compare``: the command line of the comparison harness."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rlid.compare.parse import load_compare_config
from rlid.compare.text import references_table


# ----------------------------------------------------------------------------- CLI
def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one name")
    return names


def _seeds(text: str) -> list[int]:
    try:
        return [int(n) for n in _names(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds are integers, got {text!r}") from None


def _cmd_compare(args: argparse.Namespace) -> int:
    # lazy: the runner imports torch; `rlid compare --help` must not
    from rlid.compare.run import run_comparison, run_references

    compare = load_compare_config(args.config)  # every check before any run starts
    if args.arms is not None or args.envs is not None or args.seeds is not None:
        compare = compare.select(arms=args.arms, envs=args.envs, seeds=args.seeds)
    if args.check:
        print(json.dumps(compare.to_dict(), indent=2))
        return 0
    if args.out is None:
        raise ValueError("--out DIR is required (where the runs and the report go)")
    if args.status:
        # lazy: the status reads runs with torch; `rlid compare --help` must not
        from rlid.compare.status import comparison_status, format_status

        if not (Path(args.out) / "comparison.json").is_file():
            raise FileNotFoundError(f"--out {args.out} is not the output of `rlid compare` (yet)")
        print(format_status(comparison_status(compare, args.out), compare.currency))
        return 0
    say = (lambda _msg: None) if args.quiet else print
    if args.references:
        refs = run_references(compare, args.out, say=say)
        if refs is None:
            return 1
        print(references_table(compare, refs))
        return 0
    results = run_comparison(compare, args.out, progress=not args.quiet, say=say)
    if results is not None and not args.quiet:
        print((Path(args.out) / "report.md").read_text())
    return 0


def add_compare_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare",
        help="compare arms (planes x algorithms) over seeds under one shared budget",
        description=(
            "Train every arm x env x seed of a comparison config under the same budget in "
            "one currency, evaluate on held-out games, and write OUT/report.md (intervals "
            "across seeds, learning curves against every budget currency, cost tables), "
            "OUT/results.json and PNG plots. Rerunning with the same --out reuses finished "
            "runs and resumes a stopped one. Several `rlid compare` processes with the same "
            "--out (in other shells, or on machines sharing the filesystem) share its runs: "
            "each run is trained by one of them, and the one that finishes the last run "
            "writes the report."
        ),
    )
    p.add_argument(
        "--config", type=Path, required=True, metavar="TOML",
        help="comparison config (see examples/compare_small.toml and docs/compare.md)",
    )  # fmt: skip
    p.add_argument(
        "--out", type=Path, metavar="DIR",
        help="output directory (required unless --check): runs/ARM-seedN run directories, "
        "report.md, results.json, plots",
    )  # fmt: skip
    p.add_argument(
        "--arms", type=_names, metavar="A,B",
        help="train and report only these arms (comma-separated names from the config); "
        "run names stay those of the whole comparison, so a later call continues",
    )  # fmt: skip
    p.add_argument(
        "--envs", type=_names, metavar="X,Y",
        help="train and report only these envs (comma-separated names from the config)",
    )  # fmt: skip
    p.add_argument(
        "--seeds", type=_seeds, metavar="0,2",
        help="train and report only these seeds (comma-separated, from the config's `seeds`)",
    )  # fmt: skip
    p.add_argument(
        "--quiet", action="store_true", help="no progress bars, no per-run lines, no report echo"
    )
    p.add_argument(
        "--check", action="store_true",
        help="only validate the config and print it resolved as JSON (trains nothing)",
    )  # fmt: skip
    p.add_argument(
        "--references", action="store_true",
        help="only evaluate the config's reference arms (random floor, walkthrough "
        "ceiling, afterstate marks: no model, no training; minutes) into --out and print "
        "their held-out success and return per env; a later full run reuses them",
    )  # fmt: skip
    p.add_argument(
        "--status", action="store_true",
        help="only show where every run of --out stands (finished, training and by whom, "
        "stopped, not started, and which cannot start for a missing model; budget spent, "
        "held-out success); reads, never writes, so it "
        "is safe while other `rlid compare` processes train there",
    )  # fmt: skip
    p.set_defaults(func=_cmd_compare)
