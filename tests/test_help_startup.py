"""Every ``--help`` starts at once: no torch or transformers import on the way
(benchmarks/cli_startup.py measures the seconds: about 0.12-0.15 s of CPU each)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENTRIES = {  # the `rlid` console script, and `python -m rlid` (as torchrun runs it)
    "rlid": "from rlid.cli.main import main\nmain(sys.argv[1:])",
    "python -m rlid": "sys.argv = ['rlid', *sys.argv[1:]]\nrunpy.run_module('rlid', run_name='__main__')",
}
COMMANDS = ["envs", "play", "train", "eval", "audit", "compare", "demo", "export"]


def heavy_imports_and_cpu(entry: str, argv: list[str]) -> tuple[str, float]:
    probe = (
        "import sys, runpy\ntry:\n    "
        + ENTRIES[entry].replace("\n", "\n    ")
        + "\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('torch', 'transformers', 'textworld') if m in sys.modules]\n"
        "sys.stderr.write('HEAVY=' + ','.join(heavy) + '\\n')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [sys.executable, "-c", probe, *argv], env=env, capture_output=True, text=True
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert "usage: rlid" in proc.stdout, proc.stderr
    heavy = next(line[6:] for line in proc.stderr.splitlines() if line.startswith("HEAVY="))
    return heavy, cpu


@pytest.mark.parametrize("entry", list(ENTRIES))
@pytest.mark.parametrize("command", [*COMMANDS, "pretrain"])
def test_help_of_every_command_imports_no_torch(entry, command):
    # (how long each --help takes: benchmarks/cli_startup.py; importing torch alone takes
    # over a second, so no torch means a quick --help)
    heavy, _ = heavy_imports_and_cpu(entry, [command, "--help"])
    assert heavy == "", heavy


@pytest.mark.parametrize("entry", list(ENTRIES))
def test_the_top_level_help_imports_no_torch(entry):
    heavy, _ = heavy_imports_and_cpu(entry, ["--help"])
    assert heavy == "", heavy
