"""A run directory: resolved config, per-iteration metrics, checkpoints, curves, summary.

Layout::

    DIR/config.json          resolved TrainConfig (including the Interface)
    DIR/metrics.jsonl        one JSON object per iteration
    DIR/eval.json            held-out evaluation before / after training
    DIR/checkpoint/          latest checkpoint: model/ (safetensors + tokenizer),
                             trainer_state.safetensors + .json (optimizer, RNG),
                             state.json (iteration, budget, config fingerprint)
    DIR/curves.png           learning curves
    DIR/summary.md           a short human report
    DIR/.rlid.lock           the writer's lock (:mod:`rlid.runs.lock`)

Every file is written atomically (temp file or directory, then ``os.replace``), so a
run killed at any point leaves either the previous or the next version, never half;
``metrics.jsonl`` is appended one fsynced line per iteration. Nothing in a run
directory is a pickle: loading one never runs code (:mod:`rlid.runs.state`).
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from rlid.runs.files import (
    LinkRefusedError,
    append_line,
    atomic_write_text,
    link_message,
    read_own_text,
    remove_leftovers,
    staged_dir,
    write_errors_as_os_errors,
)
from rlid.runs.integrity import (
    FILES,
    check_state_record,
    file_digests,
    seal,
    unseal,
    verify_files,
)
from rlid.runs.lock import LOCK_NAME
from rlid.runs.state import load_state, materialize, save_state

CHECKPOINT = "checkpoint"
TRAINER_STATE = "trainer_state"  # .safetensors (tensors) + .json (the rest)
_STAGING = ".checkpoint."  # a save is staged under it; a resume removes what a killed one left


RUN_FILES = ("config.json", "metrics.jsonl", "eval.json", "summary.md", "curves.png", LOCK_NAME)
"""The files rlid reads or writes at the top of a run directory (besides checkpoints and
the trackers' directories, ``rlid.runs.trackers``)."""
_TRACKER_DIRS = ("tensorboard", "mlruns")  # written by those packages, followed by them


def refuse_run_links(run_dir: Path) -> None:
    """Refuse a symbolic link where rlid reads or writes in ``run_dir``: its files, the
    trackers' directories, and anything in a checkpoint (``checkpoint``, ``checkpoint-N``,
    a save's staging directories). ``run_dir`` itself may be a link.

    Raises :class:`rlid.runs.files.LinkRefusedError` naming the first link found.
    """
    run_dir = Path(run_dir)
    names = (*RUN_FILES, *_TRACKER_DIRS)
    for path in sorted(run_dir.iterdir()) if run_dir.is_dir() else []:
        checkpoint = path.name == CHECKPOINT or path.name.startswith((f"{CHECKPOINT}-", _STAGING))
        if path.is_symlink() and (path.name in names or checkpoint):
            raise LinkRefusedError(link_message(path))
        if checkpoint and path.is_dir():
            for inner in sorted(path.rglob("*")):  # rglob lists links, never enters them
                if inner.is_symlink():
                    raise LinkRefusedError(link_message(inner))


def _jsonable(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        value = value.detach().item() if value.numel() == 1 else value.tolist()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def write_json(path: Path, data: Any, *, sealed: bool = False) -> None:
    """Write ``data`` as JSON atomically; ``sealed``: with the sha256 of its content
    (:func:`rlid.runs.integrity.seal`), for a record rlid reads back."""
    atomic_write_text(path, json_text(data, sealed=sealed))


def json_text(data: Any, *, sealed: bool = False) -> str:
    """The text :func:`write_json` writes for ``data``."""
    data = _jsonable(data)
    if sealed:
        data = seal(data)
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def read_json(path: Path, *, sealed: bool = False) -> Any:
    """Parse a JSON file; a corrupt one is a ValueError naming the file. ``sealed``:
    check and drop the record's sha256 (:func:`rlid.runs.integrity.unseal`)."""
    path = Path(path)
    try:
        data = json.loads(read_own_text(path))  # never through a link (O_NOFOLLOW)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is corrupt (not valid JSON: {err})") from None
    return unseal(data, path) if sealed else data


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The rows of metrics.jsonl; a torn last line (a kill mid-append) is skipped."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists() and not path.is_symlink():
        return []
    text = read_own_text(path)
    lines = text.split("\n")
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:  # no newline after it: the append was cut short
                break
            raise ValueError(f"{path} line {i + 1} is corrupt (not valid JSON)") from None
    return rows


def write_metrics(run_dir: Path, rows: list[dict[str, Any]]) -> None:
    """Rewrite metrics.jsonl atomically with ``rows`` (on resume: up to the checkpoint)."""
    text = "".join(json.dumps(_jsonable(r), sort_keys=True) + "\n" for r in rows)
    atomic_write_text(Path(run_dir) / "metrics.jsonl", text)


def append_metrics_row(run_dir: Path, row: dict[str, Any]) -> None:
    """Append one row to metrics.jsonl (one fsynced line: O(row), not O(file))."""
    append_line(Path(run_dir) / "metrics.jsonl", json.dumps(_jsonable(row), sort_keys=True))


def rng_state() -> dict[str, Any]:
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    run_dir: Path,
    *,
    model: Any,
    tokenizer: Any,
    extra_modules: dict[str, torch.nn.Module],
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    keep: int = 1,
    rng_states: list[dict[str, Any]] | None = None,
    model_state: dict[str, torch.Tensor] | None = None,
    optimizer_state: dict[str, Any] | None = None,
    records: dict[str, str] | None = None,
) -> Path:
    """Write ``DIR/checkpoint`` atomically: a temp directory renamed over the old one.

    With ``keep > 1`` the replaced checkpoint is kept as ``DIR/checkpoint-<iteration>``
    (the newest ``keep - 1`` of those stay; resume always reads ``DIR/checkpoint``).
    ``rng_states``: every process's RNG state in rank order (default: this one's).
    ``model_state`` / ``optimizer_state``: full state dicts to write instead of the
    model's and optimizer's own (a sharded model gathers them first); the files are
    the same either way. ``records``: text files kept in the checkpoint by name (the
    run's history, :mod:`rlid.runs.history`).
    """
    run_dir = Path(run_dir)
    final = run_dir / CHECKPOINT
    old = run_dir / f"{_STAGING}old.{os.getpid()}"  # found by recover_checkpoint_dir
    with write_errors_as_os_errors(final), staged_dir(final, prefix=_STAGING, aside=old) as tmp:
        given = {"state_dict": model_state} if model_state is not None else {}
        model.save_pretrained(tmp / "model", safe_serialization=True, **given)
        tokenizer.save_pretrained(tmp / "model")

        for name, module in extra_modules.items():
            tensors = {k: v.detach().contiguous() for k, v in module.state_dict().items()}
            save_file(tensors, str(tmp / f"{name}.safetensors"))
        ranks = rng_states or [rng_state()]  # every rank's RNG state (one per process)
        optim = optimizer_state if optimizer_state is not None else optimizer.state_dict()
        save_state(
            tmp / TRAINER_STATE,
            {"optimizer": optim, "rng": ranks[0], "rng_ranks": ranks},
        )
        for name, text in (records or {}).items():
            (tmp / name).write_text(text)
        # the sha256 of every file, checked before the checkpoint is trusted again
        record = seal({**_jsonable(state), FILES: file_digests(tmp)})
        (tmp / "state.json").write_text(json.dumps(record, indent=2, sort_keys=True))
    if old.exists():
        _retire_checkpoint(run_dir, old, keep)
    return final


def _retire_checkpoint(run_dir: Path, old: Path, keep: int) -> None:
    """Delete a replaced checkpoint, or keep it as ``checkpoint-<iteration>`` (newest
    ``keep - 1`` kept)."""
    if keep <= 1:
        shutil.rmtree(old, ignore_errors=True)
        return
    iteration = int(json.loads((old / "state.json").read_text()).get("iteration", 0))
    target = run_dir / f"{CHECKPOINT}-{iteration}"
    shutil.rmtree(target, ignore_errors=True)  # a resumed run re-saving an iteration
    os.replace(old, target)
    kept = sorted(
        (p for p in run_dir.glob(f"{CHECKPOINT}-*") if p.name.rsplit("-", 1)[1].isdigit()),
        key=lambda p: int(p.name.rsplit("-", 1)[1]),
    )
    for stale in kept[: max(len(kept) - (keep - 1), 0)]:
        shutil.rmtree(stale, ignore_errors=True)


def recover_checkpoint_dir(run_dir: Path, *, tidy: bool = False) -> Path | None:
    """The checkpoint dir, recovering from a kill between the two renames of a save.

    ``tidy`` (only while holding the run's lock): then remove what a save killed
    mid-write left (``.checkpoint.*`` staging and replaced directories; a real model's
    are gigabytes each).
    """
    run_dir = Path(run_dir)
    final = run_dir / CHECKPOINT
    if not (final / "state.json").exists():
        for old in sorted(run_dir.glob(f"{_STAGING}old.*")):
            if (old / "state.json").exists():
                os.replace(old, final)
                break
    if tidy:
        remove_leftovers(run_dir, _STAGING)
    return final if (final / "state.json").exists() else None


def verify_checkpoint(ckpt: Path) -> dict[str, Any]:
    """The checkpoint's ``state.json``, checked: its own sha256, its fields, and the
    sha256 of every file it lists (:mod:`rlid.runs.integrity`; a checkpoint written by
    an earlier version lists none). Raises ``ValueError`` naming the file that does not match."""
    path = Path(ckpt) / "state.json"
    for attempt in range(3):
        text = path.read_bytes()
        state = check_state_record(read_json(path, sealed=True), path)
        try:
            # a closed set: a file it does not list (an adapter, a chat template) is
            # refused, not loaded; a checkpoint of an earlier version lists none
            verify_files(Path(ckpt), state.get(FILES, {}), record=path, closed=FILES in state)
        except ValueError:
            # a training run alongside (eval and export take no lock) may have swapped
            # in its next checkpoint meanwhile: then check that one instead
            if attempt == 2 or not path.is_file() or path.read_bytes() == text:
                raise
            continue
        return state
    raise AssertionError("unreachable")


def load_trainer_state(ckpt: Path, *, lazy_optimizer: bool = False) -> dict[str, Any]:
    """Optimizer and RNG state of a checkpoint (safetensors + JSON; never a pickle).

    ``lazy_optimizer``: the optimizer state's tensors stay on disk as
    :class:`rlid.runs.state.StoredTensor` until read (a sharded optimizer reads one at a
    time, ``rlid.lm.distributed.Parallel.load_optimizer``); everything else is read.
    """
    state = load_state(Path(ckpt) / TRAINER_STATE, lazy=lazy_optimizer)
    if not isinstance(state, dict) or not {"optimizer", "rng"} <= set(state):
        raise ValueError(f"{Path(ckpt) / TRAINER_STATE}.json lacks optimizer or RNG state")
    if lazy_optimizer:
        state = {k: v if k == "optimizer" else materialize(v) for k, v in state.items()}
    return state


def load_module_state(ckpt: Path, name: str) -> dict[str, torch.Tensor]:

    path = Path(ckpt) / f"{name}.safetensors"
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {ckpt} has no {name}.safetensors")
    return load_file(str(path))
