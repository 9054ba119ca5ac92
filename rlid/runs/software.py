"""Which code trained a run: rlid's version, its git commit, the library versions, and
the CPU's float path.

A run records this in config.json when it starts (``"software"``) and again whenever
it is resumed by different code (``"resumed_with"``), so a result can be traced to
the commit that produced it, and a comparison report says when its runs were
trained by different code. The git commit is read only from a source checkout
(``pip install -e .``); an installed wheel records its version alone. The CPU model
and torch's CPU kernel level (AVX2 / AVX512 ...) are recorded too: the same code and
seed on another CPU takes other float roundings, and a run's sampled actions can
part from there. Nothing here affects what a run computes: these fields are outside
the config's fingerprint.
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

import rlid

LIBRARIES = ("torch", "transformers", "textworld")


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args],
            capture_output=True, text=True, timeout=10,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},  # read-only: no index refresh
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def git_state(root: Path) -> dict[str, Any] | None:
    """``{"commit", "uncommitted_changes"}`` of the checkout at ``root``, or None."""
    if not (root / ".git").exists():
        return None
    commit = _git(root, "rev-parse", "HEAD")
    if not commit:
        return None
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    return {
        "commit": commit.strip(),
        "uncommitted_changes": None if status is None else bool(status.strip()),
    }


def cpu_name() -> str:
    """The CPU model (``/proc/cpuinfo`` on Linux), else what ``platform`` says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def software_record() -> dict[str, Any]:
    """What this process runs (read once: the code a process runs is what it loaded)."""
    record: dict[str, Any] = {"rlid": rlid.__version__}
    record["git"] = git_state(Path(rlid.__file__).resolve().parent.parent)
    record["python"] = platform.python_version()
    for name in LIBRARIES:
        record[name] = _version(name)

    record["cpu"] = cpu_name()
    record["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    return record


def describe_software(record: dict[str, Any] | None) -> str:
    """``rlid 0.3.0 (commit 9edd31b, uncommitted changes), torch 2.13.0, ...``."""
    if not record:
        return "not recorded"
    head = f"rlid {record.get('rlid', '?')}"
    git = record.get("git")
    if git:
        dirty = git.get("uncommitted_changes")
        extra = ", uncommitted changes" if dirty else ("" if dirty is False else ", status unknown")
        head += f" (commit {str(git.get('commit', '?'))[:7]}{extra})"
    parts = [head, f"python {record.get('python', '?')}"]
    parts += [f"{name} {record[name]}" for name in LIBRARIES if record.get(name)]
    if record.get("cpu"):
        parts.append(f"on {record['cpu']} ({record.get('cpu_capability', '?')} kernels)")
    return ", ".join(parts)
