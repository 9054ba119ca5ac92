"""The run directory of one training run, as the trainers see it.

``RunLog.open`` refuses to overwrite an existing run (use ``--resume``), writes the
resolved config first, and on resume restores model, value head, optimizer,
budget counters and RNG state from the last checkpoint, dropping metrics rows of
iterations after it (those iterations are replayed exactly).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import torch

from rlid.runs import dir as rundir
from rlid.budget import Budget
from rlid.config import TrainConfig


def config_fingerprint(config: TrainConfig) -> str:
    text = json.dumps(rundir._jsonable(config.to_dict()), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class _Bar:
    """Progress in the run's budget currency (tqdm, or nothing when disabled)."""

    def __init__(self, total: float, initial: float, unit: str, enabled: bool) -> None:
        self._done = initial
        self._tqdm = None
        if enabled:
            from tqdm import tqdm

            self._tqdm = tqdm(
                total=total, initial=initial, unit=unit, desc=unit.replace("_", " "),
                file=sys.stderr,
            )  # fmt: skip

    def advance_to(self, spent: float) -> None:
        if self._tqdm is not None:
            self._tqdm.update(spent - self._done)
        self._done = spent

    def set_postfix(self, **kw: Any) -> None:
        if self._tqdm is not None:
            self._tqdm.set_postfix(**kw)

    def close(self) -> None:
        if self._tqdm is not None:
            self._tqdm.close()


class RunLog:
    """Config, metrics, evaluations and checkpoints of one run directory."""

    def __init__(
        self, path: Path, config: TrainConfig, resuming: bool, writer: bool = True
    ) -> None:
        self.path = path
        self.config = config
        self.resuming = resuming
        # Several processes (torchrun): rank 0 alone writes; the others only read.
        self.writer = writer
        self.metrics: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ opening
    # ``open`` only checks (a new run writes nothing until ``start``), so a run that
    # fails during setup -- bad model path, bad env option -- leaves nothing behind.
    @classmethod
    def open(
        cls, path: Path, config: TrainConfig | None, *, resume: bool, writer: bool = True
    ) -> RunLog:
        path = Path(path)
        if resume:
            cfg_path = path / "config.json"
            if not cfg_path.exists():
                raise FileNotFoundError(
                    f"{path} is not a run directory (no config.json); "
                    "give the --out directory of an `rlid train` run"
                )
            try:
                saved = TrainConfig.from_dict(rundir.read_json(cfg_path)["config"])
            except (KeyError, ValueError, TypeError, json.JSONDecodeError) as err:
                raise ValueError(
                    f"cannot resume: {cfg_path} is not a valid run config: {err}"
                ) from None
            recovered = rundir.recover_checkpoint_dir(path) if writer else None
            resuming = recovered is not None or (path / rundir.CHECKPOINT / "state.json").exists()
            log = cls(path, saved, resuming=resuming, writer=writer)
            log.metrics = rundir.read_metrics(path)
            if not log.resuming:
                log.metrics = []
            return log
        if config is None:
            raise ValueError("a config is required to start a new run")
        if path.exists() and any(path.iterdir()):
            raise ValueError(
                f"{path} already holds files; resume it with `rlid train --resume {path}` "
                "or choose another --out"
            )
        return cls(path, config, resuming=False, writer=writer)

    def start(self) -> None:
        """Create the directory and write config.json (call once setup has succeeded)."""
        if not self.writer or (self.path / "config.json").exists():
            return
        self.path.mkdir(parents=True, exist_ok=True)
        rundir.write_json(
            self.path / "config.json",
            {"config": self.config.to_dict(), "fingerprint": config_fingerprint(self.config)},
        )

    def checkpoint_model_dir(self) -> Path:
        return self.path / rundir.CHECKPOINT / "model"

    # --------------------------------------------------------------- checkpoints
    def checkpoint(
        self,
        *,
        model: torch.nn.Module,
        tokenizer: Any,
        value_head: torch.nn.Module | None,
        optimizer: torch.optim.Optimizer,
        iteration: int,
        budget: Budget,
        rng_states: list[dict[str, Any]] | None = None,
    ) -> None:
        """Write the checkpoint (writer only); ``rng_states``: every rank's, in rank order."""
        if not self.writer:
            return
        extra = {"value_head": value_head} if value_head is not None else {}
        state = {
            "iteration": iteration,
            "budget": budget.to_dict(),
            "fingerprint": config_fingerprint(self.config),
            "world_size": len(rng_states) if rng_states else 1,
        }
        rundir.save_checkpoint(
            self.path, model=model, tokenizer=tokenizer, extra_modules=extra,
            optimizer=optimizer, state=state, keep=getattr(self.config, "keep_checkpoints", 1),
            rng_states=rng_states,
        )  # fmt: skip

    def restore(
        self,
        *,
        value_head: torch.nn.Module | None,
        optimizer: torch.optim.Optimizer,
        budget: Budget,
        world: Any = None,
    ) -> int:
        """Load optimizer/value head/budget/RNG; return the checkpoint's iteration.

        The model itself is loaded from :meth:`checkpoint_model_dir` by the caller.
        ``world`` (rlid.distributed.World) picks this rank's RNG state; a checkpoint of
        another number of processes is refused (exact replay needs the same number).
        """
        rank, size = (world.rank, world.size) if world is not None else (0, 1)
        ckpt = self.path / rundir.CHECKPOINT
        state = rundir.read_json(ckpt / "state.json")
        if state.get("fingerprint") != config_fingerprint(self.config):
            raise ValueError(
                f"checkpoint in {ckpt} was written by a different config than {self.path}/config.json"
            )
        saved_size = int(state.get("world_size", 1))
        if saved_size != size:
            raise ValueError(
                f"the checkpoint in {ckpt} was written by a run of {saved_size} process(es) and "
                f"this one has {size}: exact replay needs the same number. Resume with "
                + (
                    f"`torchrun --nproc-per-node {saved_size} -m rlid train --resume {self.path}`"
                    if saved_size > 1
                    else f"`rlid train --resume {self.path}` (no torchrun)"
                )
                + ", or start a new run from the checkpoint's model with "
                f"--model {ckpt / 'model'} (the optimizer state starts afresh)"
            )
        trainer_state = rundir.load_trainer_state(ckpt)
        try:
            optimizer.load_state_dict(trainer_state["optimizer"])
            if value_head is not None:
                value_head.load_state_dict(rundir.load_module_state(ckpt, "value_head"))
        except (ValueError, RuntimeError, KeyError) as err:
            raise ValueError(f"checkpoint in {ckpt} does not fit this model: {err}") from None
        rundir.set_rng_state(trainer_state.get("rng_ranks", [trainer_state["rng"]])[rank])
        restored = Budget.from_dict(state["budget"])
        for name in budget.__dataclass_fields__:
            setattr(budget, name, getattr(restored, name))
        iteration = int(state["iteration"])
        self.metrics = [m for m in self.metrics if m["iteration"] <= iteration]
        if self.writer:
            rundir.write_metrics(self.path, self.metrics)
        return iteration

    # ------------------------------------------------------------------ logging
    def append_metrics(self, row: dict[str, Any]) -> None:
        self.metrics.append(rundir._jsonable(row))
        if self.writer:
            rundir.write_metrics(self.path, self.metrics)

    def write_origin(self, origin: str) -> None:
        self._update_eval({"model_origin": origin})

    def write_eval(self, key: str, stats: dict[str, float]) -> None:
        self._update_eval({key: stats})

    def has_eval(self, key: str) -> bool:
        path = self.path / "eval.json"
        return path.exists() and key in rundir.read_json(path)

    def _update_eval(self, entries: dict[str, Any]) -> None:
        if not self.writer:
            return
        path = self.path / "eval.json"
        data = rundir.read_json(path) if path.exists() else {}
        data.update(entries)
        rundir.write_json(path, data)

    def progress_bar(self, config: TrainConfig, budget: Budget, *, enabled: bool) -> _Bar:
        currency = config.budget_currency
        return _Bar(config.steps, budget.get(currency), currency, enabled)

    def finish(self) -> None:
        if not self.writer:
            return
        from rlid.runs.summary import write_curves, write_summary

        write_curves(self.path, self.metrics)
        write_summary(self.path, self.config, self.metrics)
