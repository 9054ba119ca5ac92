"""The run directory of one training run, as the trainers see it.

``RunLog.open`` refuses to overwrite an existing run (use ``--resume``); a run
holds the directory's lock (:mod:`rlid.runs.lock`) from ``start`` (new run) or
``open`` (resume) until ``finish``, so a second writer fails at once naming the
holder. ``start`` writes the resolved config, its fingerprint and the pin of the
starting model first. On resume everything is checked before anything is written:
config.json against its own fingerprint, every piece of the checkpoint present and
readable (never a silent restart from iteration 1), the starting model unchanged;
then model, value head, optimizer, budget counters and RNG state are restored from
the last checkpoint and metrics rows of later iterations are dropped (those
iterations are replayed exactly). A non-finite loss, gradient norm or parameter
stops the run before it is logged or checkpointed, keeping the last good checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from rlid.config import TrainConfig
from rlid.config.budget import Budget
from rlid.runs import dir as rundir
from rlid.runs import history
from rlid.runs.files import refuse_link
from rlid.runs.lock import LOCK_NAME, RunLock, is_empty_dir
from rlid.runs.outdir import claim_output_dir
from rlid.runs.pin import check_pin
from rlid.runs.software import software_record
from rlid.runs.state import LEGACY_NAME, legacy_message
from rlid.runs.summary import write_curves, write_summary
from rlid.runs.trackers import RunTrackers

RUN_ID = "run_id"
"""The key of a run's identity in its config.json and in each checkpoint's state.json."""


_NEW_RUNS: dict[int, tuple[RunLog, bool]] = {}
"""New runs of this process that have written no iteration yet, with whether their
directory existed before (:func:`discard_failed_setups`)."""


def discard_failed_setups() -> list[Path]:
    """Remove what new runs of this process wrote when they fail before their first
    iteration (an env option refused when the first game is made, a held-out game that
    does not exist): the corrected command then starts, instead of finding a directory
    that "already holds files". The CLI calls it when a command ends in a user error;
    the lock is held while the files go. Returns the directories cleared."""
    cleared = []
    for log, existed in list(_NEW_RUNS.values()):
        lock = log._lock
        if lock is None or not lock.held:
            continue
        lock.remove_directory()
        if existed:  # an empty directory the user made: kept, empty as it was
            log.path.mkdir(exist_ok=True)
        log.trackers.close()
        cleared.append(log.path)
    _NEW_RUNS.clear()
    return cleared


class NonFiniteError(ValueError):
    """Training produced a NaN / infinity; the run stops, its last checkpoint kept."""


def config_fingerprint(config: TrainConfig) -> str:
    return _fingerprint_of(config.to_dict())


def _fingerprint_of(config_dict: dict[str, Any]) -> str:
    text = json.dumps(rundir._jsonable(config_dict), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _written_fingerprints(config: TrainConfig, raw: dict[str, Any]) -> set[str]:
    """Fingerprints a run's files may carry for ``config``: today's canonical one, and
    that of config.json's ``config`` as it was written (a run written while a field
    that is now left out at its default was still recorded keeps its own)."""
    known = {config_fingerprint(config)}
    if isinstance(raw.get("config"), dict):
        known.add(_fingerprint_of(raw["config"]))
    return known


def read_run_config(path: Path) -> tuple[TrainConfig, dict[str, Any]]:
    """``(config, raw config.json)`` of a run directory, checked against its fingerprint."""
    path = Path(path)
    cfg_path = path / "config.json"
    refuse_link(cfg_path)
    if not cfg_path.is_file():
        raise FileNotFoundError(
            f"{path} is not a run directory (no config.json); "
            "give the --out directory of an `rlid train` run"
        )
    raw = rundir.read_json(cfg_path, sealed=True)
    try:
        config = TrainConfig.from_record(raw["config"])
    except (KeyError, ValueError, TypeError) as err:
        raise ValueError(f"{cfg_path} is not a valid run config: {err}") from None
    if raw.get("fingerprint") not in (None, *_written_fingerprints(config, raw)):
        raise ValueError(
            f"{cfg_path} holds a different config than the one this run was written with "
            "(its fingerprint does not match: edited by hand, or copied from another run); "
            "restore it, or start a new run"
        )
    return config, raw


def _is_finite(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return bool(torch.isfinite(value).all())
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return True  # not a number: nothing to check


class _Bar:
    """Progress in the run's budget currency (tqdm, or nothing when disabled)."""

    def __init__(self, total: float, initial: float, unit: str, enabled: bool) -> None:
        self._done = initial
        self._tqdm = None
        if enabled:
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
        self,
        path: Path,
        config: TrainConfig,
        resuming: bool,
        lock: RunLock | None = None,
        writer: bool = True,
        pins: Callable[[str], dict[str, Any]] | None = None,
    ) -> None:
        self.path = path
        # what a model name resolves to now (rlid.lm.starts.model_pin): recorded at start
        self._pins = pins
        self.config = config
        self.resuming = resuming
        # Several processes (torchrun): rank 0 alone writes; the others only read.
        self.writer = writer
        self.metrics: list[dict[str, Any]] = []
        self.checkpoint_wall = 0.0  # the budget's wall time at the last checkpoint
        self._lock = lock
        # the run's identity (config.json "run_id"), written into each of its checkpoints
        # so that a checkpoint copied in from another run is refused (check_checkpoint)
        self.run_id: str | None = None
        # eval.json as this process last wrote it (the writer): results are kept in
        # memory and written, never read back from the run directory mid-run (a link or
        # another file swapped in there meanwhile would be taken for the run's own)
        self._evals: dict[str, Any] | None = None
        self.trackers = RunTrackers(  # rank 0 alone reports to trackers
            path, config.report_to if writer else (), currency=config.budget_currency,
            config=config.to_dict(), resuming=resuming,
        )  # fmt: skip

    # ------------------------------------------------------------------ opening
    # A new run only checks in ``open`` (it writes nothing until ``start``), so a run
    # that fails during setup -- bad model path, bad env option -- leaves nothing behind.
    @classmethod
    def open(
        cls,
        path: Path,
        config: TrainConfig | None,
        *,
        resume: bool,
        writer: bool = True,
        pins: Callable[[str], dict[str, Any]] | None = None,
    ) -> RunLog:
        """A new run directory (checked, written by :meth:`start`), or the run in ``path``
        to resume (locked, its config). ``pins``: what a model name resolves to now
        (:func:`rlid.lm.starts.model_pin`), recorded at the start and checked on resume."""
        path = Path(path)
        if resume:
            saved, _ = read_run_config(path)  # a clear error before locking a non-run dir
            if not writer:  # several processes: rank 0 holds the lock and writes
                resuming = (path / rundir.CHECKPOINT / "state.json").exists()
                log = cls(path, saved, resuming=resuming, writer=False, pins=pins)
                return log  # its rows are read by restore
            lock = RunLock(path, "rlid train --resume").acquire()
            try:
                return cls._open_resume(path, lock, pins)
            except BaseException:
                lock.release()
                raise
        if config is None:
            raise ValueError("a config is required to start a new run")
        if not writer:  # rank 0 checks and creates the directory
            return cls(path, config, resuming=False, writer=False, pins=pins)
        check_writable_dir(path)
        return cls(path, config, resuming=False, pins=pins)

    @classmethod
    def _open_resume(
        cls, path: Path, lock: RunLock, pins: Callable[[str], dict[str, Any]] | None
    ) -> RunLog:
        rundir.refuse_run_links(path)  # before anything in it is read or written
        saved, raw = read_run_config(path)  # again, now that no one else can write
        ckpt = rundir.recover_checkpoint_dir(path, tidy=True)  # the lock is held
        if ckpt is None:
            _refuse_restart_without_checkpoint(path, saved)
        else:
            check_checkpoint(ckpt, saved)
        needs_start_model = (
            saved.lora_rank > 0 or saved.kl_coef > 0 or getattr(saved, "beta", 0.0) > 0
        )  # LoRA base, KL reference (decision / scoring: kl_coef; token: beta)
        recorded = raw.get("start_model")
        if ckpt is not None and needs_start_model and recorded and pins is not None:
            check_pin(recorded, pins(str(recorded["model"])), path)
        log = cls(path, saved, resuming=ckpt is not None, lock=lock, pins=pins)  # rows: restore
        log.run_id = run_id_of(raw)
        return log

    def start(self) -> None:
        """Take the lock (new run) and write config.json (call once setup has succeeded)."""
        if not self.writer:  # several processes: rank 0 alone writes the run directory
            return
        self.trackers.check()  # a missing tracker package: fail before writing anything
        if self._lock is None:
            existed = self.path.exists()
            self.path.mkdir(parents=True, exist_ok=True)
            self._lock = RunLock(self.path, "rlid train").acquire()
            _NEW_RUNS[id(self)] = (self, existed)  # until its first row or checkpoint
            if not is_empty_dir(self.path):  # another run got here first
                self.close()
                raise ValueError(_occupied(self.path))
            self.run_id = uuid.uuid4().hex
            self._evals = {}
            rundir.write_json(
                self.path / "config.json",
                sealed=True,
                data={
                    RUN_ID: self.run_id,
                    "config": self.config.to_dict(),
                    "fingerprint": config_fingerprint(self.config),
                    "start_model": self._pin(),
                    "software": software_record(),
                    "history": [],
                },
            )
        elif not self.resuming:
            # resumed before any checkpoint: iteration 1 again, so its rows go too, and
            # the starting model is pinned as it is loaded now (and the code that runs)
            self._lock.check()
            rundir.write_metrics(self.path, [])
            raw = rundir.read_json(self.path / "config.json", sealed=True)
            earlier = (raw.get("start_model"), raw.get("software"))
            raw["start_model"] = self._pin()
            raw["software"] = software_record()
            self._keep_before_eval(earlier, (raw["start_model"], raw["software"]))
            rundir.write_json(self.path / "config.json", raw, sealed=True)

    def _keep_before_eval(self, earlier: tuple[Any, Any], now: tuple[Any, Any]) -> None:
        """A run restarted before its first checkpoint keeps the held-out evaluation of
        its starting model when that ran on the same weights (the same pin, with their
        sha256, or the fresh random model of the same config) with the same code
        (commit, no uncommitted changes), libraries and CPU kernels: it would compute
        the same numbers again. ``earlier`` / ``now``: (start_model, software) as
        recorded then and now. Anything else in eval.json goes."""
        path = self.path / "eval.json"
        self._evals = {}
        if not path.exists() and not path.is_symlink():
            return
        before = rundir.read_json(path, sealed=True).get("before")
        pin, software = now
        known = isinstance(pin, dict) and (pin.get("sha256") or pin.get("origin") == "fresh")
        clean = ((software or {}).get("git") or {}).get("uncommitted_changes") is False
        if before is not None and earlier == now and known and clean:
            self._evals = {"before": before}
            rundir.write_json(path, self._evals, sealed=True)
        else:
            path.unlink()

    def _pin(self) -> dict[str, Any]:
        model = str(self.config.model)
        return self._pins(model) if self._pins is not None else {"model": model}

    def _record_resuming_software(self, raw: dict[str, Any], iteration: int) -> None:
        """Append to config.json's ``resumed_with`` when other code resumes the run."""
        now = software_record()
        resumes = raw.get("resumed_with") or []
        last = resumes[-1]["software"] if resumes else raw.get("software")
        if last == now:
            return
        raw["resumed_with"] = [*resumes, {"after_iteration": iteration, "software": now}]
        rundir.write_json(self.path / "config.json", raw, sealed=True)

    def close(self) -> None:
        """Release the directory's lock (``finish`` does this; also safe to call twice)."""
        self.trackers.close()
        if self._lock is not None:
            self._lock.release()

    def _check_writer(self) -> None:
        if self._lock is None:
            raise RuntimeError("RunLog.start() must be called before writing the run")
        self._lock.check()

    def checkpoint_model_dir(self) -> Path:
        return self.path / rundir.CHECKPOINT / "model"

    # --------------------------------------------------------------- checkpoints
    def checkpoint_due(self, iteration: int, budget: Budget) -> bool:
        """Whether the iteration just ended writes a checkpoint: every ``checkpoint_every``
        iterations, at the end of the budget, and once ``checkpoint_minutes`` of the run's
        wall time have passed since the last one (the global budget's wall time: every
        rank decides the same)."""
        config = self.config
        if iteration % config.checkpoint_every == 0:
            return True
        if budget.get(config.budget_currency) >= config.steps:
            return True
        minutes = config.checkpoint_minutes
        return minutes > 0 and budget.wall_time - self.checkpoint_wall >= 60.0 * minutes

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
        model_state: dict[str, torch.Tensor] | None = None,
        optimizer_state: dict[str, Any] | None = None,
    ) -> None:
        """Write the checkpoint (writer only); ``rng_states``: every rank's, in rank order.

        ``model_state`` / ``optimizer_state``: full state dicts gathered from a sharded
        model (``rlid.lm.distributed.Parallel.full_state``) instead of the modules' own.
        """
        self.checkpoint_wall = budget.wall_time  # on every rank: the next one is due alike
        if not self.writer:
            return
        self._check_writer()
        modules = {"model": model, **({"value head": value_head} if value_head else {})}
        for what, module in modules.items():
            for name, param in module.named_parameters():
                if not _is_finite(param.detach()):
                    self._stop_non_finite(iteration, f"{what} parameter {name}", "NaN/inf")
        extra = {"value_head": value_head} if value_head is not None else {}
        # the history up to this iteration, from which a resume can rebuild it
        records = {history.METRICS: history.rows_text(self.metrics)}
        if self._evals:  # eval.json as written (never read back from the directory)
            records[history.EVALS] = rundir.json_text(self._evals, sealed=True)
        state = {
            "iteration": iteration,
            "budget": budget.to_dict(),
            "fingerprint": config_fingerprint(self.config),
            "world_size": len(rng_states) if rng_states else 1,
            **({RUN_ID: self.run_id} if self.run_id is not None else {}),
        }
        _NEW_RUNS.pop(id(self), None)  # a checkpoint to resume: kept whatever happens
        rundir.save_checkpoint(
            self.path, model=model, tokenizer=tokenizer, extra_modules=extra,
            optimizer=optimizer, state=state, keep=getattr(self.config, "keep_checkpoints", 1),
            rng_states=rng_states, model_state=model_state, optimizer_state=optimizer_state,
            records=records,
        )  # fmt: skip

    def _stop_non_finite(self, iteration: Any, what: str, value: Any) -> None:
        state_path = self.path / rundir.CHECKPOINT / "state.json"
        kept = (
            f"the last good checkpoint (iteration {rundir.read_json(state_path)['iteration']}) "
            f"is kept in {state_path.parent}"
            if state_path.exists()
            else "no checkpoint had been written yet"
        )
        raise NonFiniteError(
            f"iteration {iteration}: {what} is {value}, not finite; training stopped and "
            f"{kept}. Start a new run with a smaller --lr (or --max-grad-norm), and check "
            "the loss coefficients"
        )

    def restore(
        self,
        *,
        value_head: torch.nn.Module | None,
        optimizer: torch.optim.Optimizer,
        budget: Budget,
        world: Any = None,
        load_optimizer: Callable[[dict[str, Any]], None] | None = None,
    ) -> int:
        """Load optimizer/value head/budget/RNG; return the checkpoint's iteration.

        ``load_optimizer(state)`` replaces ``optimizer.load_state_dict`` (a sharded
        model's optimizer: ``rlid.lm.distributed.Parallel.load_optimizer``).

        The model itself is loaded from :meth:`checkpoint_model_dir` by the caller.
        ``world`` (rlid.lm.distributed.World) picks this rank's RNG state; a checkpoint of
        another number of processes is refused (exact replay needs the same number).
        """
        if self.writer:
            self._check_writer()
        rank, size = (world.rank, world.size) if world is not None else (0, 1)
        ckpt = self.path / rundir.CHECKPOINT
        state = rundir.read_json(ckpt / "state.json")
        raw = rundir.read_json(self.path / "config.json", sealed=True)
        known = _written_fingerprints(self.config, raw)
        known |= {h.get("fingerprint") for h in raw.get("history", [])}
        if state.get("fingerprint") not in known:
            raise ValueError(
                f"checkpoint in {ckpt} was written by a different config than "
                f"{self.path}/config.json"
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
        # a sharded model's optimizer reads its state one tensor at a time
        trainer_state = rundir.load_trainer_state(ckpt, lazy_optimizer=load_optimizer is not None)
        try:
            (load_optimizer or optimizer.load_state_dict)(trainer_state["optimizer"])
            if value_head is not None:
                value_head.load_state_dict(rundir.load_module_state(ckpt, "value_head"))
        except (ValueError, RuntimeError, KeyError) as err:
            raise ValueError(f"checkpoint in {ckpt} does not fit this model: {err}") from None
        rundir.set_rng_state(trainer_state.get("rng_ranks", [trainer_state["rng"]])[rank])
        restored = Budget.from_dict(state["budget"])
        for name in budget.__dataclass_fields__:
            setattr(budget, name, getattr(restored, name))
        self.checkpoint_wall = budget.wall_time
        iteration = int(state["iteration"])
        # rows 1..iteration, rebuilt from the checkpoint's copy if the file lost any
        self.metrics = history.resumed_metrics(self.path, ckpt, iteration, writer=self.writer)
        if self.writer:
            history.resume_evals(self.path, ckpt)
            evals = self.path / history.EVALS
            self._evals = rundir.read_json(evals, sealed=True) if evals.is_file() else {}
            rundir.write_metrics(self.path, self.metrics)
            self._record_resuming_software(raw, iteration)
        return iteration

    # ------------------------------------------------------------------ logging
    def append_metrics(self, row: dict[str, Any]) -> None:
        for key, value in row.items():  # on every rank: reduced values, the same stop
            if ("loss" in key or key == "grad_norm") and not _is_finite(value):
                self._stop_non_finite(row.get("iteration", "?"), f"the {key}", float(value))
        row = rundir._jsonable(row)
        self.metrics.append(row)
        if not self.writer:
            return
        self._check_writer()
        _NEW_RUNS.pop(id(self), None)  # an iteration done: the run has begun
        rundir.append_metrics_row(self.path, row)
        self.trackers.log_row(row)

    def write_origin(self, origin: str, *, template: str | None = None) -> None:
        """The starting model's origin and the prompt template the run resolved."""
        entries: dict[str, Any] = {"model_origin": origin}
        if template is not None:
            entries["prompt_template"] = template  # "plain" or "chat" (auto resolved)
        self._update_eval(entries)

    def write_eval(self, key: str, stats: dict[str, float]) -> None:
        self._update_eval({key: stats})
        self.trackers.log_eval(stats, self.metrics[-1]["budget"] if self.metrics else None)

    def reuse_eval(self, key: str) -> None:
        """Report ``eval.json[key]``, kept from an earlier start, as if just evaluated."""
        stats = self._recorded_evals()[key]
        print(
            f"note: {self.path}: the held-out evaluation {key} training is kept from the "
            "start before the restart (the same weights and code)",
            file=sys.stderr,
        )
        self.trackers.log_eval(stats, self.metrics[-1]["budget"] if self.metrics else None)

    def has_eval(self, key: str) -> bool:
        return key in self._recorded_evals()

    def _recorded_evals(self) -> dict[str, Any]:
        """eval.json's entries: the writer's in memory; another process (a rank that
        does not write) reads the file."""
        if self._evals is not None:
            return self._evals
        path = self.path / "eval.json"
        exists = path.exists() or path.is_symlink()
        data = rundir.read_json(path, sealed=True) if exists else {}
        return data if isinstance(data, dict) else {}

    def _update_eval(self, entries: dict[str, Any]) -> None:
        if not self.writer:
            return
        self._check_writer()
        data = {**self._recorded_evals(), **entries}
        rundir.write_json(self.path / "eval.json", data, sealed=True)
        self._evals = data

    def progress_bar(self, config: TrainConfig, budget: Budget, *, enabled: bool) -> _Bar:
        currency = config.budget_currency
        return _Bar(config.steps, budget.get(currency), currency, enabled)

    def finish(self) -> None:
        if not self.writer:
            return

        self._check_writer()
        try:
            write_curves(self.path, self.metrics)
            write_summary(self.path, self.config, self.metrics)
        finally:
            self.close()


# ------------------------------------------------------------------------- resume checks
def _occupied(path: Path) -> str:
    """Why a new run refuses ``path``: a run to resume, or someone else's files."""
    if (path / "config.json").is_file():
        return (
            f"{path} already holds files; resume it with `rlid train --resume {path}` or "
            "choose another --out"
        )
    names = sorted(p.name for p in path.iterdir() if p.name != LOCK_NAME)
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    return (
        f"{path} already holds files ({shown}) and is not a run directory (no config.json); "
        "choose another --out, or empty it"
    )


def check_writable_dir(path: Path) -> None:
    """Fail early (before any model loads) when ``path`` cannot become a new run
    directory: the rule every writing command follows (:mod:`rlid.runs.outdir`)."""
    claim_output_dir(
        Path(path), flag="--out", is_own=lambda _: False, occupied=lambda p, _: _occupied(p)
    )


def check_checkpoint(ckpt: Path, config: TrainConfig, *, action: str = "resume") -> None:
    """Every piece of a checkpoint is there, as it was written (sha256); ``action``: what
    the checkpoint is read for, as messages say it (resume, evaluate, export)."""

    ckpt = Path(ckpt)
    rundir.refuse_run_links(ckpt.parent)  # nothing read through a link (eval, export too)
    if (ckpt / LEGACY_NAME).exists() and not (ckpt / f"{rundir.TRAINER_STATE}.json").exists():
        raise ValueError(legacy_message(ckpt))
    model_dir = ckpt / "model"
    marker = "adapter_config.json" if config.lora_rank > 0 else "config.json"
    needed = [model_dir / marker, ckpt / "state.json"]
    needed += [ckpt / f"{rundir.TRAINER_STATE}.json", ckpt / f"{rundir.TRAINER_STATE}.safetensors"]
    if config.advantage == "gae":
        needed.append(ckpt / "value_head.safetensors")
    if model_dir.is_dir() and not any(
        p.suffix == ".safetensors" for p in model_dir.iterdir()
    ):  # fmt: skip
        needed.append(model_dir / "*.safetensors")
    missing = [str(p.relative_to(ckpt)) for p in needed if not p.exists()]
    if missing:
        never = " A run is never silently restarted from iteration 1" if action == "resume" else ""
        raise ValueError(
            f"cannot {action}: the checkpoint in {ckpt} is incomplete (missing: "
            f"{', '.join(missing)}); restore those files, or start a new run.{never}"
        )
    state = rundir.verify_checkpoint(ckpt)  # every file as it was written (sha256), or one line
    check_run_identity(ckpt, state, action=action)


def check_resumable(path: Path, config: TrainConfig) -> None:
    """What a resume of the run in ``path`` checks before it writes anything, read-only:
    its checkpoint (or the proof that none was written yet) and that its history can be
    continued (metrics rows present or rebuildable, eval.json readable or rebuildable).
    A command that changes the run first (``--resume --steps N``) calls it, so that a
    resume refused afterwards has changed nothing."""
    path = Path(path)
    rundir.refuse_run_links(path)
    ckpt = path / rundir.CHECKPOINT
    if not (ckpt / "state.json").is_file():
        if not any(path.glob(".checkpoint.old.*")):  # else the resume recovers that one
            _refuse_restart_without_checkpoint(path, config)
        return
    check_checkpoint(ckpt, config)
    state = rundir.read_json(ckpt / "state.json", sealed=True)
    history.resumed_metrics(path, ckpt, int(state["iteration"]), writer=False)
    evals = path / history.EVALS
    if evals.is_file() and not (ckpt / history.EVALS).is_file():
        rundir.read_json(evals, sealed=True)  # damaged, with no copy to rebuild it from


def run_id_of(raw: dict[str, Any]) -> str | None:
    """The run id config.json records (None: a run of an earlier version)."""
    value = raw.get(RUN_ID)
    return value if isinstance(value, str) else None


def check_run_identity(ckpt: Path, state: dict[str, Any], *, action: str) -> None:
    """The checkpoint was written by the run whose directory holds it: its ``run_id``
    is the one in the run's config.json (a run of an earlier version records none)."""
    ckpt = Path(ckpt)
    raw = rundir.read_json(ckpt.parent / "config.json", sealed=True)
    ours = run_id_of(raw) if isinstance(raw, dict) else None
    if ours is None:
        return
    theirs = state.get(RUN_ID)
    if theirs != ours:
        whose = f"run {str(theirs)[:40]}" if theirs else "a run that records no id"
        raise ValueError(
            f"cannot {action}: the checkpoint in {ckpt} was written by another run ({whose}; "
            f"{ckpt.parent / 'config.json'} is run {ours}), copied in from elsewhere; restore "
            "this run's own checkpoint, or use the run it came from"
        )


def _refuse_restart_without_checkpoint(path: Path, config: TrainConfig) -> None:
    """No checkpoint: fine only if the run never got as far as writing one."""
    evidence = []
    if (path / rundir.CHECKPOINT).exists():
        evidence.append(f"{rundir.CHECKPOINT}/ has no state.json")
    rows = rundir.read_metrics(path)
    # a checkpoint is written at iteration checkpoint_every; a row past it means one existed
    if any(int(r.get("iteration", 0)) > config.checkpoint_every for r in rows):
        evidence.append(f"metrics.jsonl reaches iteration {max(r['iteration'] for r in rows)}")
    eval_path = path / "eval.json"
    if eval_path.exists() and "after" in rundir.read_json(eval_path):
        evidence.append("eval.json holds the final evaluation")
    if evidence:
        raise ValueError(
            f"cannot resume {path}: its checkpoint is missing ({'; '.join(evidence)}). "
            "Restore checkpoint/ (including checkpoint/state.json), or start a new run; "
            "a run is never silently restarted from iteration 1"
        )
