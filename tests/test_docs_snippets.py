"""Every Python block of the README and docs/ runs, as a user would paste it.

Each ```python block runs in a fresh interpreter in a scratch folder. A block that
reads a run or an exported agent (``runs/kd``, ``runs/kd-agent``, as the pages'
commands make them) gets a small one made first; one that needs vLLM is skipped where it is
missing (``make test-vllm`` runs it). So an API that does not exist cannot be shown again.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
SMALL_RUN = ["--env", "keydoor", "-o", "size=3", "--steps", "40", "--groups-per-iter", "2",
             "--group-size", "2", "--eval-episodes", "2", "--threads", "1", "--quiet"]  # fmt: skip


def blocks() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for i, match in enumerate(BLOCK.finditer(page.read_text())):
            found.append((f"{page.relative_to(ROOT)}#{i + 1}", match.group(1)))
    return found


def test_the_pages_have_python_blocks():
    names = [name for name, _ in blocks()]
    assert any(name.startswith("README.md") for name in names), names


def _rlid(*args: str, cwd: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rlid", *args], cwd=cwd, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "code"), blocks(), ids=[name for name, _ in blocks()])
def test_block_runs(name, code, tmp_path):
    if "vllm" in code.lower() and importlib.util.find_spec("vllm") is None:
        pytest.skip("needs vllm (make test-vllm)")
    agents = sorted(set(re.findall(r"(?:runs/[\w-]+-agent|agents/[\w-]+)", code)))
    if "runs/kd" in code or agents:
        _rlid("train", *SMALL_RUN, "--out", "runs/kd", cwd=tmp_path)
        for agent in agents:  # what the page's `rlid export runs/kd ...` writes
            _rlid("export", "runs/kd", agent, cwd=tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, f"{name}:\n{code}\n{done.stderr[-3000:]}"
