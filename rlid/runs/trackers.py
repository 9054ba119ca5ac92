"""Experiment trackers: TensorBoard, Weights & Biases and MLflow, fed from one place.

``--report-to tensorboard,wandb`` (TRL's ``report_to``, CleanRL's ``--track``) makes
every metrics row the run writes to ``metrics.jsonl`` also go to those trackers. The
row is flattened into namespaced keys::

    {"return": 0.5, "time": {"forward": 1.2}, "budget": {"env_steps": 96}, "eval": {...}}
    -> train/return, time/forward, budget/env_steps, eval/success, ...

and the x-axis (``step``) is the run's budget currency (``budget/<budget_currency>``,
env steps by default), so curves of runs with different batch shapes line up.

Nothing here makes a network call unless the user configured one:

* ``tensorboard`` writes event files to ``RUN/tensorboard/`` (``pip install 'rlid[tensorboard]'``);
* ``wandb`` runs with ``WANDB_MODE=offline`` unless ``WANDB_MODE`` is already set
  (files under ``RUN/wandb/``; ``wandb sync`` uploads them later) (``rlid[wandb]``);
* ``mlflow`` logs to the file store ``RUN/mlruns`` unless ``MLFLOW_TRACKING_URI``
  is set (``rlid[mlflow]``).

Backends are imported when the first row is logged; whether they are installed is
checked before a run writes anything (``rlid train`` checks it before the model
loads), so a missing extra fails before any work starts. Exporting or evaluating a
finished run never needs its trackers.
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

# tracker name -> (module that must import, extra that installs it)
_REQUIREMENTS: dict[str, tuple[str, str]] = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
    "mlflow": ("mlflow", "mlflow"),
}


class Tracker(Protocol):
    """Receives flattened scalar metrics at a step of the budget currency."""

    def log(self, metrics: dict[str, float], step: float) -> None: ...

    def close(self) -> None: ...


def check_installed(names: Iterable[str]) -> None:
    """Fail with one line naming the extra to install when a tracker's package is missing."""
    for name in names:
        module, extra = _REQUIREMENTS[name]
        if importlib.util.find_spec(module) is None:
            raise ValueError(
                f"--report-to {name} needs the {module} package: pip install 'rlid[{extra}]'"
            )


def flatten_row(row: dict[str, Any]) -> dict[str, float]:
    """One metrics row -> ``{"train/return": .., "budget/env_steps": .., "time/forward": ..}``.

    Nested dicts keep their name as the namespace (``budget``, ``time``, ``eval``);
    top-level numbers go under ``train/``. Non-numbers and non-finite values are dropped.
    """
    flat: dict[str, float] = {}

    def put(key: str, value: Any) -> None:
        if isinstance(value, bool):
            value = float(value)
        if isinstance(value, int | float) and math.isfinite(value):
            flat[key] = float(value)

    for key, value in row.items():
        if isinstance(value, dict):
            for sub, inner in value.items():
                if isinstance(inner, dict):
                    for leaf, x in inner.items():
                        put(f"{key}/{sub}/{leaf}", x)
                else:
                    put(f"{key}/{sub}", inner)
        else:
            put(f"train/{key}", value)
    return flat


# ------------------------------------------------------------------------- backends
class TensorBoardTracker:
    """Event files in ``log_dir`` (torch's SummaryWriter); the step is rounded to an int."""

    def __init__(self, log_dir: Path, purge_step: int | None = None) -> None:
        # optional dependency: tensorboard (the tensorboard extra)
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)

    def log(self, metrics: dict[str, float], step: float) -> None:
        for key, value in metrics.items():
            self._writer.add_scalar(key, value, global_step=int(round(step)))
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandbTracker:
    """A W&B run, offline unless ``WANDB_MODE`` says otherwise; x-axis = the budget key."""

    def __init__(self, run_dir: Path, name: str, config: dict[str, Any], step_key: str) -> None:
        # optional dependency: wandb (the wandb extra)
        import wandb

        os.environ.setdefault("WANDB_MODE", "offline")
        os.environ.setdefault("WANDB_SILENT", "true")
        self._wandb = wandb
        self._run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "rlid"), name=name, dir=str(run_dir),
            config=config, reinit="create_new",
        )  # fmt: skip
        self._run.define_metric(step_key)
        self._run.define_metric("*", step_metric=step_key)

    def log(self, metrics: dict[str, float], step: float) -> None:
        self._run.log(metrics)

    def close(self) -> None:
        self._run.finish()


class MlflowTracker:
    """An MLflow run in ``RUN/mlruns`` (a local file store) unless ``MLFLOW_TRACKING_URI`` is set."""

    def __init__(self, run_dir: Path, name: str, params: dict[str, Any]) -> None:
        # optional dependency: mlflow (the mlflow extra)
        import mlflow

        self._mlflow = mlflow
        if not os.environ.get("MLFLOW_TRACKING_URI"):
            # A plain local file store (MLflow 3 keeps it, in maintenance mode, behind this
            # switch); a database or server is the user's choice via MLFLOW_TRACKING_URI.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            mlflow.set_tracking_uri((run_dir / "mlruns").resolve().as_uri())
        self._run = mlflow.start_run(run_name=name)
        flat = {k: str(v)[:500] for k, v in params.items()}
        mlflow.log_params(flat)

    def log(self, metrics: dict[str, float], step: float) -> None:
        self._mlflow.log_metrics(metrics, step=int(round(step)))

    def close(self) -> None:
        self._mlflow.end_run()


# ---------------------------------------------------------------------- the run's set
class RunTrackers:
    """The trackers of one run directory: opened on the first row, closed by :meth:`close`.

    Args:
        run_dir: the run directory (trackers write below it by default).
        names: tracker names (:func:`parse_report_to`); :meth:`check` fails when one is
            not installed (``RunLog.start`` calls it; reading a finished run never does).
        currency: the budget counter used as the x-axis.
        config: the resolved config (logged as hyper-parameters where the tracker has them).
        resuming: on resume, TensorBoard drops events at or after the first replayed step.
    """

    def __init__(
        self,
        run_dir: Path,
        names: Iterable[str],
        *,
        currency: str,
        config: dict[str, Any] | None = None,
        resuming: bool = False,
    ) -> None:
        self.names = tuple(names)
        self.run_dir = Path(run_dir)
        self.currency = currency
        self.config = config or {}
        self.resuming = resuming
        self._open: list[Tracker] | None = None

    def check(self) -> None:
        check_installed(self.names)

    @property
    def step_key(self) -> str:
        return f"budget/{self.currency}"

    def _start(self, first_step: float) -> list[Tracker]:
        makers: dict[str, Callable[[], Tracker]] = {
            "tensorboard": lambda: TensorBoardTracker(
                self.run_dir / "tensorboard",
                purge_step=int(round(first_step)) if self.resuming else None,
            ),
            "wandb": lambda: WandbTracker(
                self.run_dir, self.run_dir.name, self.config, self.step_key
            ),
            "mlflow": lambda: MlflowTracker(self.run_dir, self.run_dir.name, self.config),
        }
        return [makers[name]() for name in self.names]

    def log_row(self, row: dict[str, Any]) -> None:
        """Flatten one metrics row and send it to every tracker at its budget step."""
        if not self.names:
            return
        metrics = flatten_row(row)
        step = metrics.get(self.step_key, float(row.get("iteration", 0)))
        if self._open is None:
            self._open = self._start(step)
        for tracker in self._open:
            tracker.log(metrics, step)

    def log_eval(self, stats: dict[str, Any], budget: dict[str, Any] | None) -> None:
        """A held-out evaluation (before / after training) as ``eval/*`` at the budget spent."""
        self.log_row({"eval": stats, "budget": budget or {self.currency: 0}})

    def close(self) -> None:
        for tracker in self._open or []:
            tracker.close()
        self._open = None
