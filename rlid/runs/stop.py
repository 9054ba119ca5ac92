"""Stop a training run cleanly on SIGTERM or Ctrl-C: finish the iteration, checkpoint, exit.

A cluster that preempts a job (SLURM, Kubernetes) sends SIGTERM and kills the process
a grace period later; a user presses Ctrl-C. Without a handler either loses every
iteration since the last checkpoint. Inside :class:`StopSignals` the first SIGTERM or
SIGINT only sets a flag; the trainer checks it at the end of each iteration (all ranks
together: :func:`rlid.lm.distributed.any_rank`), writes a checkpoint and raises
:class:`RunStopped`, so the same command resumes with nothing lost. A second signal
stops at once, as without the handler (Ctrl-C: ``KeyboardInterrupt``; SIGTERM:
:class:`Terminated`, so the command still ends with one line and its lock record
cleared), unless it comes within ``REPEAT_AFTER`` seconds of the
first: one stop is often delivered twice (Ctrl-C reaches every process of the
terminal's group, and torchrun, which also gets it, sends it on to its workers; a
cluster signals every process of the job, torchrun included), and the copy must not
cost the iteration.

Handlers can only be installed from the main thread; elsewhere (a run trained from a
worker thread) :class:`StopSignals` does nothing and ``requested`` stays False.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGINT)
REPEAT_AFTER = 2.0
"""Seconds after the first signal before another one counts as a second (stop at once)."""


class RunStopped(Exception):
    """A run stopped on a signal after checkpointing its last iteration."""

    def __init__(
        self,
        run_dir: Path,
        iteration: int,
        signum: int,
        *,
        unit: str = "iteration",
        resume_with: str | None = None,
        quiet: bool = False,
    ) -> None:
        super().__init__(run_dir, iteration, signum)
        self.run_dir, self.iteration, self.signum = Path(run_dir), iteration, signum
        self.unit = unit  # "iteration"; `rlid pretrain`: "step"
        # `rlid compare` and `rlid pretrain` say their own
        self.resume_with = resume_with or f"`rlid train --resume {run_dir}`"
        self.quiet = quiet  # a rank other than the writer: the writer says it once

    def __str__(self) -> str:
        if self.iteration == 0:  # stopped before its first checkpoint
            return (
                f"{self.run_dir}: stopped by {signal.Signals(self.signum).name} before its "
                f"first {self.unit} was checkpointed (nothing to keep): {self.resume_with} "
                "starts it again"
            )
        return (
            f"{self.run_dir}: stopped by {signal.Signals(self.signum).name} after {self.unit} "
            f"{self.iteration}, which is checkpointed (nothing lost): {self.resume_with} "
            "continues it"
        )

    @property
    def exit_code(self) -> int:
        """128 + the signal number, as a shell reports a process ended by that signal."""
        return 128 + self.signum


class Terminated(BaseException):
    """SIGTERM outside a block that defers it (:class:`StopSignals`): raised like
    ``KeyboardInterrupt`` for Ctrl-C, so ``finally`` blocks and the CLI's handler run
    (one line, exit 143, the lock record cleared) instead of the process vanishing."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signum)


def terminate_by_exception() -> Any:
    """Make SIGTERM raise :class:`Terminated` (main thread only); returns the handler it
    replaces (``None`` where none was installed), for :func:`restore_sigterm`."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _raise_terminated)


def restore_sigterm(previous: Any) -> None:
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


def signal_name(signum: int) -> str:
    """How a stop names its signal: ``Ctrl-C`` for SIGINT, else ``SIGTERM`` etc."""
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


class StopSignals:
    """Context manager: while open, the first SIGTERM / SIGINT sets ``signum`` instead
    of stopping the process; the previous handlers come back on exit. ``enabled=False``:
    a no-op (``requested`` stays False).

    ``on_first(signum)`` runs after the first signal (``rlid compare`` passes it on to
    its training processes there); ``on_again(signum)`` runs before a second one stops
    the process at once (there: kills them)."""

    def __init__(
        self,
        *,
        enabled: bool = True,
        repeat_after: float = REPEAT_AFTER,
        announce: bool = True,
        on_first: Callable[[int], None] | None = None,
        on_again: Callable[[int], None] | None = None,
    ) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}
        self._enabled = enabled  # False: nothing to checkpoint, so signals act as usual
        self._repeat_after = repeat_after
        self._first_at = 0.0
        self._announce = announce  # False: a rank other than the writer keeps quiet
        self._on_first, self._on_again = on_first, on_again

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def __enter__(self) -> StopSignals:
        if self._enabled and threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal_name(signum)
        if self.signum is not None:
            if time.monotonic() - self._first_at < self._repeat_after:
                return  # the same stop delivered twice (see the module docstring)
            # a second one: stop now, as without the handler
            if self._on_again is not None:
                self._on_again(signum)
            self._restore()
            print(f"\nrlid: {name} again: stopping at once", file=sys.stderr, flush=True)
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            # at once, as an exception (not the default action, which killed the process
            # by the signal: no final line, the lock record left behind): the CLI prints
            # one line and clears the lock record on the way out
            raise Terminated(signum)
        self.signum, self._first_at = signum, time.monotonic()
        if self._announce:
            print(
                f"\nrlid: {name}: stopping after this iteration, with a checkpoint "
                f"({name} again stops at once, losing the iteration)",
                file=sys.stderr, flush=True,
            )  # fmt: skip
        if self._on_first is not None:
            self._on_first(signum)
