"""Say when training goes wrong: warnings read off one iteration's metrics row.

:func:`check_row` is pure: an iteration's metrics row (with its ``budget``) and the
budget before it give that iteration's warnings, each with what to do about it. The
run loop (:mod:`rlid.core.loop`) prints a warning on stderr at the iteration it first
fires (again after an iteration without it; ``--quiet`` hides progress bars, not
warnings), and ``summary.md`` lists them all, read again from ``metrics.jsonl``
(:func:`summary_lines`), so a resumed run's summary holds every iteration's.

The lines go through the logger :data:`LOGGER` (``rlid.runs.health``): straight to
stderr while logging is not configured, to its handlers where it is, and nowhere once
silenced (``logging.getLogger("rlid.runs.health").setLevel(logging.ERROR)``); the
summary lists them either way.

The kinds (:data:`rlid.config.names.WARNING_KINDS`):

* ``label_mass``: the rollouts' label mass (decision plane: the probability the model
  puts on the menu's labels) fell below :data:`LABEL_MASS_FLOOR`;
* ``shortened_prompts``: prompts were shortened to fit the model's context (the
  budget's ``shortened_prompts`` grew in the iteration);
* ``zero_advantages``: every advantage was zero, so the update took no step
  (``skipped_update``);
* ``non_finite``: a loss or metric is NaN or infinite (a non-finite loss or gradient
  norm also ends the run with an error, :meth:`rlid.runs.log.RunLog.append_metrics`);
* ``clipped``: more than :data:`CLIP_FRAC_CEILING` of the update's samples hit the PPO
  clip.

``TrainConfig.stop_on`` names kinds that stop the run after the iteration that warns
of them: it is checkpointed, ``summary.md`` says why, and :class:`StoppedOnWarning`
(exit status :data:`STOP_EXIT_CODE` from ``rlid train``) is raised.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlid.runs.stop import RunStopped

LABEL_MASS_FLOOR = 0.5
"""Rollout label mass below this warns (``label_mass``): the shipped start begins at
0.63-0.79 on the suite's settings, and a policy that keeps under half its probability
on the labels is reading its menu less and less."""

CLIP_FRAC_CEILING = 0.5
"""A clip fraction above this warns (``clipped``): most samples' ratios left the PPO
clip range, so the update moved the policy further than the clip allows."""

STOP_EXIT_CODE = 4
"""``rlid train``'s exit status after a stop on a ``--stop-on`` warning."""

LOGGER = logging.getLogger(__name__)
"""Where a run's warnings go (the module docstring)."""

# keys of a metrics row that hold no training quantity
_NOT_CHECKED = ("iteration", "time")


@dataclass(frozen=True)
class TrainingWarning:
    """One warning of one iteration: its kind (``rlid.config.names.WarningKind``) and
    what happened, with what to do about it."""

    iteration: int
    kind: str
    message: str

    def line(self) -> str:
        """The line printed on stderr."""
        return f"rlid: warning: iteration {self.iteration}: {self.message} [{self.kind}]"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _non_finite(row: dict[str, Any], prefix: str = "") -> list[str]:
    """``key=value`` of every non-finite number of ``row`` (nested tables as ``a.b``)."""
    found = []
    for key, value in row.items():
        if not prefix and key in _NOT_CHECKED:
            continue
        if isinstance(value, dict):
            found += _non_finite(value, f"{prefix}{key}.")
            continue
        number = _number(value)
        if number is not None and not math.isfinite(number):
            found.append(f"{prefix}{key}={number}")
    return found


def check_row(
    row: dict[str, Any], previous_budget: dict[str, Any] | None = None
) -> list[TrainingWarning]:
    """The warnings of one iteration's metrics ``row`` (with its ``budget``);
    ``previous_budget``: the budget before the iteration (None: nothing spent)."""
    iteration = int(row.get("iteration", 0))
    found: list[TrainingWarning] = []

    def warn(kind: str, message: str) -> None:
        found.append(TrainingWarning(iteration, kind, message))

    mass = _number(row.get("rollout_label_mass"))
    if mass is not None and mass < LABEL_MASS_FLOOR:
        warn(
            "label_mass",
            f"rollout label mass {mass:.2f} is below {LABEL_MASS_FLOOR}: most of the "
            "model's probability is off the menu's labels; lower --lr or raise "
            "--label-mass-coef (e.g. 0.1)",
        )
    budget = row.get("budget") or {}
    shortened = int(budget.get("shortened_prompts", 0)) - int(
        (previous_budget or {}).get("shortened_prompts", 0)
    )
    if shortened > 0:
        warn(
            "shortened_prompts",
            f"{shortened} prompt(s) shortened to fit the model's context (memory, then "
            "observation, then afterstates left out; "
            f"{int(budget.get('shortened_prompts', 0))} in the run): lower --memory-size or "
            "--max-obs-chars, or use a model with a longer context",
        )
    if _number(row.get("skipped_update")):
        warn(
            "zero_advantages",
            "every advantage was zero (each group's episodes had equal returns), so no "
            "update was made; raise --group-size or --temperature, or add "
            "--step-group-coef (decision and scoring planes)",
        )
    bad = _non_finite(row)
    if bad:
        warn(
            "non_finite",
            f"not finite: {', '.join(bad[:4])}{' ...' if len(bad) > 4 else ''}; lower --lr "
            "(or --max-grad-norm) and check the loss coefficients",
        )
    clip = _number(row.get("clip_frac"))
    if clip is not None and clip > CLIP_FRAC_CEILING:
        warn(
            "clipped",
            f"clip fraction {clip:.2f} is above {CLIP_FRAC_CEILING}: most samples hit the "
            "PPO clip, each update moves the policy too far; lower --lr or --epochs, or "
            "set --target-kl (e.g. 0.02)",
        )
    return found


def watch(
    rows: Sequence[dict[str, Any]], row: dict[str, Any]
) -> tuple[list[TrainingWarning], list[TrainingWarning]]:
    """``(found, new)`` for ``row``, the iteration after the logged ``rows``: its
    warnings, and those of them whose kind the iteration before did not warn of (what
    is printed; a condition that lasts is said once)."""
    previous = rows[-1] if rows else None
    found = check_row(row, previous["budget"] if previous else None)
    if previous is None:
        return found, found
    before = check_row(previous, rows[-2]["budget"] if len(rows) > 1 else None)
    kinds = {w.kind for w in before}
    return found, [w for w in found if w.kind not in kinds]


def say(found: Sequence[TrainingWarning], write: Callable[[str], None]) -> None:
    """Each warning's line through :data:`LOGGER`: ``write(line)`` while no handler is
    configured for it (or above it), nothing when it is silenced."""
    if not LOGGER.isEnabledFor(logging.WARNING):
        return
    for warning in found:
        if LOGGER.hasHandlers():
            LOGGER.warning(warning.line())
        else:
            write(warning.line())


def run_warnings(rows: Sequence[dict[str, Any]]) -> list[TrainingWarning]:
    """Every warning of a run's metrics rows, in order."""
    found: list[TrainingWarning] = []
    previous: dict[str, Any] | None = None
    for row in rows:
        found += check_row(row, previous)
        previous = row.get("budget")
    return found


def stop_reasons(found: Sequence[TrainingWarning], stop_on: Sequence[str]) -> list[TrainingWarning]:
    """The warnings of ``found`` whose kind ``stop_on`` names."""
    return [w for w in found if w.kind in stop_on]


def summary_lines(config: Any, rows: Sequence[dict[str, Any]], run_dir: Path) -> list[str]:
    """``summary.md``'s Warnings section: each warning once per stretch of consecutive
    iterations it fired in, and why the run stopped, if a ``--stop-on`` warning did."""
    found = run_warnings(rows)
    lines = ["## Warnings", ""]
    if not found:
        return lines + ["None."]
    stretches: list[tuple[TrainingWarning, int]] = []  # (first warning, last iteration)
    open_: dict[str, int] = {}  # kind -> its stretch's index
    for w in found:
        at = open_.get(w.kind)
        if at is not None and stretches[at][1] == w.iteration - 1:
            stretches[at] = (stretches[at][0], w.iteration)
        else:
            open_[w.kind] = len(stretches)
            stretches.append((w, w.iteration))
    for first, last in stretches:
        when = f"iteration {first.iteration}"
        if last > first.iteration:
            when = f"iterations {first.iteration}-{last}"
        lines.append(f"- {when}: {first.message} [{first.kind}]")
    stopped = stopped_on(config, rows)
    if stopped:
        lines += ["", stop_text(stopped, Path(run_dir))]
    return lines


def stopped_on(config: Any, rows: Sequence[dict[str, Any]]) -> list[TrainingWarning]:
    """The ``--stop-on`` warnings that stopped the run after its last row (empty: it was
    not stopped by one: none fired there, or its budget was spent anyway)."""
    if not rows or not getattr(config, "stop_on", ()):
        return []
    last = rows[-1]
    spent = float((last.get("budget") or {}).get(config.budget_currency, 0))
    if spent >= config.steps:
        return []
    previous = rows[-2].get("budget") if len(rows) > 1 else None
    return stop_reasons(check_row(last, previous), config.stop_on)


def stop_text(stopped: Sequence[TrainingWarning], run_dir: Path) -> str:
    """Why a run stopped before its budget was spent, and how to go on."""
    kinds = ",".join(dict.fromkeys(w.kind for w in stopped))
    return (
        f"**Stopped after iteration {stopped[0].iteration}** on `--stop-on {kinds}`, before "
        "its budget was spent: that iteration is checkpointed; no held-out evaluation "
        f"after training was run (`rlid eval --run {run_dir}` evaluates the checkpoint). "
        f"`rlid train --resume {run_dir} --stop-on none` continues the run."
    )


class StoppedOnWarning(RunStopped):
    """A run stopped after an iteration that warned of a ``--stop-on`` kind: the
    iteration is checkpointed and ``summary.md`` written (no held-out evaluation after
    training); ``rlid train`` exits with :data:`STOP_EXIT_CODE`."""

    def __init__(
        self, run_dir: Path, warnings: Sequence[TrainingWarning], *, quiet: bool = False
    ) -> None:
        super().__init__(run_dir, warnings[0].iteration, 0, quiet=quiet)
        self.warnings = list(warnings)

    def __str__(self) -> str:
        kinds = ",".join(dict.fromkeys(w.kind for w in self.warnings))
        return (
            f"{self.run_dir}: stopped after iteration {self.iteration} on --stop-on {kinds} "
            f"({self.warnings[0].message}); the iteration is checkpointed and "
            f"{self.run_dir / 'summary.md'} says why. `rlid train --resume {self.run_dir} "
            "--stop-on none` continues the run"
        )

    @property
    def exit_code(self) -> int:
        return STOP_EXIT_CODE
