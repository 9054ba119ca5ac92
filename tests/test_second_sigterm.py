"""A second SIGTERM inside one iteration stops at once, and still ends with one line,
exit 143 and the lock record cleared (it used to kill the process by the signal: no
final line, the lock record left behind)."""

from __future__ import annotations

import importlib
import os
import signal
import time

import pytest

from rlid.runs.lock import RunLock, recorded_holder
from rlid.runs.stop import StopSignals, Terminated

cli_mod = importlib.import_module("rlid.cli.main")


def test_a_second_signal_raises_terminated():
    with pytest.raises(Terminated), StopSignals(repeat_after=0.0, announce=False):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100):
            time.sleep(0.01)  # "an iteration that never ends"
    assert signal.getsignal(signal.SIGTERM) is not None


def test_two_sigterms_inside_one_iteration_end_with_one_line_and_no_lock_record(
    tmp_path, monkeypatch, capsys
):
    run = tmp_path / "run"

    def stuck(args):
        RunLock(run, "rlid train").acquire(create=True)
        with StopSignals(repeat_after=0.0):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGTERM)
            while True:  # an iteration that never ends
                time.sleep(0.01)

    monkeypatch.setattr(cli_mod, "_cmd_envs", stuck)
    assert cli_mod.main(["envs"]) == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == "rlid envs: stopped by SIGTERM", err
    assert recorded_holder(run) is None
