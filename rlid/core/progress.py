"""The training progress bar: the budget spent, and the time left for the whole run.

tqdm's own estimate extrapolates the budget's rate alone, so it leaves out the held-out
evaluation after training (and jumps at each periodic one). :class:`RunClock` adds
them: training at its measured seconds per iteration (evaluations left out), plus each
evaluation still to come (every ``eval_every`` iterations, and the one after training)
at the measured duration of those already played (the one before training first).
Nothing here changes what a run computes.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from tqdm import tqdm

BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"


class RunClock:
    """Time left for the whole run, from this process's iterations and evaluations."""

    def __init__(self, config: Any, *, iteration: int, spent: float) -> None:
        self.config = config
        self.iteration = iteration
        self._spent = spent
        self._units = 0.0  # budget spent by the iterations timed here
        self._seconds = 0.0  # their wall time, evaluations left out
        self._iterations = 0

    def record(self, iteration: int, spent: float, seconds: float) -> None:
        """Iteration ``iteration`` ended with ``spent`` of the budget, after ``seconds`` of
        wall time (its held-out evaluation left out)."""
        self._units += spent - self._spent
        self._spent, self.iteration = spent, iteration
        self._seconds += seconds
        self._iterations += 1

    def left(self, eval_seconds: float | None) -> float | None:
        """Seconds until the run ends, or None before an iteration was timed.

        ``eval_seconds``: one held-out evaluation's duration (None: not measured yet,
        left out)."""
        if self._iterations == 0 or self._units <= 0:
            return None
        remaining = max(self.config.steps - self._spent, 0.0)
        iterations = math.ceil(remaining / (self._units / self._iterations))
        seconds = iterations * self._seconds / self._iterations
        if eval_seconds is not None:
            every = self.config.eval_every
            periodic = (
                (self.iteration + iterations) // every - self.iteration // every if every else 0
            )
            seconds += (periodic + 1) * eval_seconds  # + 1: the evaluation after training
        return seconds


def format_left(seconds: float | None, *, evaluations: bool = True) -> str:
    """``~12:34`` (``?`` before anything was timed); ``+ eval`` where evaluations are
    not counted yet."""
    if seconds is None:
        return "?"
    return "~" + tqdm.format_interval(seconds) + ("" if evaluations else " + eval")


class RunBar:
    """The budget spent (tqdm on stderr, or nothing when disabled), with the return and
    success of the last iteration and the time left for the whole run."""

    def __init__(self, total: float, initial: float, unit: str, enabled: bool) -> None:
        self._done = initial
        self._tqdm = None
        if enabled:
            self._tqdm = tqdm(
                total=total, initial=initial, unit=unit, desc=unit.replace("_", " "),
                file=sys.stderr, bar_format=BAR_FORMAT,
            )  # fmt: skip

    def advance_to(self, spent: float, *, ret: float, win: float, left: str) -> None:
        if self._tqdm is not None:
            self._tqdm.set_postfix_str(f"ret={ret:.2f}, win={win:.2f}, run left {left}", False)
            self._tqdm.update(spent - self._done)
        self._done = spent

    def close(self) -> None:
        if self._tqdm is not None:
            self._tqdm.close()
