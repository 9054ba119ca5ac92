"""SIGTERM and Ctrl-C in every phase of a command, and errors: one line, exit 143 / 130
(or the error's), and the lock record cleared so the next run takes over nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlid.cli import main as cli_main
from rlid.core import loop
from rlid.core import train as trainer_mod
from rlid.runs.dir import read_metrics

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ["--model", "tiny-random", "--env", "keydoor", "-o", "size=2", "-o", "keys=0",
         "-o", "distractors=1", "--steps", "8", "--groups-per-iter", "2", "--group-size", "2",
         "--epochs", "1", "--threads", "1", "--eval-episodes", "1", "--memory", "none",
         "--quiet"]  # fmt: skip


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.delenv("RLID_DEBUG", raising=False)


def lines_of(err: str) -> list[str]:
    assert "Traceback" not in err, err
    return [ln for ln in err.strip().splitlines() if ln.strip() and not ln.startswith("note:")]


def lock_record(run: Path) -> str:
    return (run / ".rlid.lock").read_text()


def _stop_in_evaluation(monkeypatch, call: int, stop: BaseException | int) -> None:
    """The ``call``-th held-out evaluation from now on is stopped: by raising ``stop``,
    or by sending this process the signal ``stop``."""
    real, calls = loop.evaluate, []

    def stopped(*args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            if isinstance(stop, int):
                signal.raise_signal(stop)
            else:
                raise stop
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "evaluate", stopped)


def test_sigterm_during_the_evaluation_before_training_is_one_line_and_exit_143(tmp_path):
    out = tmp_path / "run"
    flags = [*TRAIN, "--eval-episodes", "100000"]  # an evaluation long enough to be in it
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlid", "train", *flags, "--out", str(out)],
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if (out / "config.json").is_file():  # written just before the evaluation starts
            break
        time.sleep(0.05)
    time.sleep(1.0)
    assert not read_metrics(out), "training started before the signal"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    (line,) = lines_of(err)
    assert line == (
        f"rlid train: stopped by SIGTERM; what its last checkpoint holds is kept: "
        f"`rlid train --resume {out}` continues (a run stopped before its first checkpoint "
        "starts again)"
    )
    assert lock_record(out) == ""  # released, record cleared


@pytest.mark.parametrize(
    ("stop", "code", "name"),
    [(KeyboardInterrupt(), 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")],
    ids=["ctrl-c", "sigterm"],
)
def test_a_stop_during_the_evaluation_after_training_is_one_line_and_resumes(
    tmp_path, capsys, monkeypatch, stop, code, name
):
    out = tmp_path / "run"
    _stop_in_evaluation(monkeypatch, 2, stop)  # 1: before training, 2: after it
    assert cli_main(["train", *TRAIN, "--out", str(out)]) == code
    (line,) = lines_of(capsys.readouterr().err)
    assert line.startswith(f"rlid train: stopped by {name}; ") and "--resume" in line, line
    assert lock_record(out) == ""
    assert "after" not in json.loads((out / "eval.json").read_text())
    monkeypatch.undo()
    assert cli_main(["train", "--resume", str(out), "--quiet"]) == 0
    assert "taking over the lock" not in capsys.readouterr().err
    assert "after" in json.loads((out / "eval.json").read_text())


def test_an_error_exit_clears_the_lock_record(tmp_path, capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug in the update")

    monkeypatch.setattr(trainer_mod, "ppo_update", broken)
    out = tmp_path / "run"
    assert cli_main(["train", *TRAIN, "--out", str(out)]) == 1
    (line,) = lines_of(capsys.readouterr().err)
    assert "internal error: RuntimeError: a bug in the update" in line
    assert lock_record(out) == ""
    monkeypatch.undo()
    assert cli_main(["train", "--resume", str(out), "--quiet"]) == 0
    assert "taking over the lock" not in capsys.readouterr().err


def test_sigterm_while_loading_the_model_is_one_line(tmp_path, capsys, monkeypatch):
    def signalled(*args, **kwargs):
        signal.raise_signal(signal.SIGTERM)

    monkeypatch.setattr(trainer_mod, "load_run_model", signalled)
    assert cli_main(["train", *TRAIN, "--out", str(tmp_path / "run")]) == 143
    (line,) = lines_of(capsys.readouterr().err)
    assert line == "rlid train: stopped by SIGTERM"  # nothing was written yet
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the handler is put back
