"""CLI start-up: CPU seconds of ``rlid --help``, ``rlid envs``, ``rlid envs -v`` and
every ``rlid COMMAND --help``.

Each command runs in a fresh interpreter ``--reps`` times; the CPU time (user +
system of the child, from ``resource.getrusage``) and wall time are reported as
minima, and whether torch / transformers were imported on the way. Goal: <= 0.5 s
of CPU and no torch import (building the parser used to import torch and
transformers through the audit, pretrain and compare modules: ~4 s).

    python benchmarks/cli_startup.py [--reps 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = (
    ["--help"], ["envs"], ["envs", "-v"],
    *([name, "--help"] for name in (
        "envs", "play", "pretrain", "train", "eval", "audit", "compare", "demo", "export",
    )),
)  # fmt: skip
PROBE = (
    "import sys, runpy; sys.argv = ['rlid', *sys.argv[1:]]\n"
    "try:\n    runpy.run_module('rlid', run_name='__main__')\n"
    "except SystemExit:\n    pass\n"
    "heavy = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
    "sys.stderr.write('HEAVY=' + ','.join(heavy) + '\\n')\n"
)


def measure(argv: list[str]) -> tuple[float, float, str]:
    """(cpu seconds, wall seconds, heavy modules imported) of one fresh run."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    heavy = next((line[6:] for line in proc.stderr.splitlines() if line.startswith("HEAVY=")), "?")
    return cpu, wall, heavy or "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5, help="fresh runs per command")
    args = parser.parse_args()
    print(f"{'command':<18} {'cpu s (min)':>12} {'wall s (min)':>13}  heavy imports")
    for argv in COMMANDS:
        runs = [measure(argv) for _ in range(args.reps)]
        cpu = min(r[0] for r in runs)
        wall = min(r[1] for r in runs)
        heavy = sorted({r[2] for r in runs})
        print(f"{'rlid ' + ' '.join(argv):<18} {cpu:>12.2f} {wall:>13.2f}  {', '.join(heavy)}")


if __name__ == "__main__":
    main()
