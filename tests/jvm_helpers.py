"""Helpers for the Java-backed env tests: find JVMs by process tree, play a run, kill it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# A run that plays random legal actions forever: in-process (workers=0) or in env workers.
RUN_SCRIPT = """
import json, sys
import numpy as np
env_id, options, workers = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
if workers:
    from rlid.core.env_workers import WorkerEnvs
    envs_ = WorkerEnvs(env_id, options, count=workers, workers=workers)
else:
    from rlid import envs
    from rlid.core.env_workers import InProcessEnvs
    envs_ = InProcessEnvs([envs.make(env_id, **options)])
n = len(envs_)
infos = [info for _, info in envs_.reset_many(list(range(n)), list(range(n)))]
print("ready", flush=True)
rng = np.random.default_rng(0)
while True:
    actions = [i["legal_actions"][int(rng.integers(len(i["legal_actions"])))] for i in infos]
    results = envs_.step_many(list(range(n)), actions)
    infos = [r[4] for r in results]
    for k, r in enumerate(results):
        if r[2] or r[3]:
            infos[k] = envs_.reset_many([k], [k])[0][1]
"""


def process_tree() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command name) for every process now."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        out[int(entry.name)] = (ppid, name)
    return out


def java_descendants(pid: int) -> list[int]:
    """The java processes below ``pid`` (children, grandchildren, ...)."""
    tree = process_tree()
    below, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, (ppid, _) in tree.items() if ppid in frontier} - below
        below |= frontier
    return sorted(p for p in below if tree[p][1] == "java")


def alive(pid: int) -> bool:
    """Running (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pids: list[int], timeout: float = 20.0) -> list[int]:
    """Wait until none of ``pids`` runs; return those still running after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.2)
    return [p for p in pids if alive(p)]


def _sigint_default() -> None:
    """A shell runs a background job (``make test &``, nohup) with SIGINT ignored, and a
    child inherits that: its Ctrl-C would do nothing. A terminal's foreground run has the
    default, which Python turns into KeyboardInterrupt; restore it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_run(env_id: str, options: dict, workers: int) -> subprocess.Popen:
    """A run in its own session (a terminal's Ctrl-C is then ``killpg(SIGINT)``), ready."""
    run = subprocess.Popen(
        [sys.executable, "-c", RUN_SCRIPT, env_id, json.dumps(options), str(workers)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=_sigint_default,
    )  # fmt: skip
    assert run.stdout is not None
    line = run.stdout.readline().strip()
    if line != "ready":
        run.kill()
        raise AssertionError(f"the run did not start: {line!r} {run.stderr.read()[-2000:]}")  # type: ignore[union-attr]
    return run


def kill_run_and_check(run: subprocess.Popen, how: str, expected_jvms: int) -> None:
    """Stop ``run`` as ``how`` says (``ctrl-c``: SIGINT to its process group, as a
    terminal does; ``sigterm`` / ``sigkill``: to the run's process only) and check that
    every JVM it had is gone."""
    time.sleep(0.5)  # let it play a few steps
    jvms = java_descendants(run.pid)
    assert len(jvms) == expected_jvms, (jvms, process_tree().get(run.pid))
    if how == "ctrl-c":
        os.killpg(run.pid, signal.SIGINT)
    elif how == "sigterm":
        run.send_signal(signal.SIGTERM)
    else:
        run.kill()
    try:  # generous: a loaded 2-core machine is slow to clean up
        run.wait(timeout=90)
    except subprocess.TimeoutExpired as late:
        os.killpg(run.pid, signal.SIGKILL)  # the run and its JVMs: nothing left behind
        raise AssertionError(f"the run did not exit within 90 s of a {how}") from late
    assert wait_gone(jvms) == [], f"Java processes survived a {how} of the run: {jvms}"
