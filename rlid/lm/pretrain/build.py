"""Building a warm start: a resumable, locked pretraining run published atomically."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from rlid.config.limits import BOUNDS, check_field
from rlid.lm.models import build_model_from_config, model_config, save_policy_model
from rlid.lm.pretrain.config import (
    CHECKPOINT_EVERY,
    DEFAULT_LABELS,
    DEFAULT_MEMORY,
    DEFAULT_SIZE,
    PretrainConfig,
)
from rlid.lm.pretrain.corpus import training_sequences
from rlid.lm.pretrain.lm import batch_backward
from rlid.lm.tokenizer import build_tiny_tokenizer
from rlid.menus.labels import parse_alphabet
from rlid.runs.files import (
    atomic_write_text,
    remove_leftovers,
    staged_dir,
    write_errors_as_os_errors,
)
from rlid.runs.integrity import file_digests
from rlid.runs.lock import LOCK_NAME, RunLock
from rlid.runs.outdir import check_work_dir, claim_output_dir
from rlid.runs.pin import weights_hash
from rlid.runs.software import software_record
from rlid.runs.state import load_state, save_state
from rlid.runs.stop import RunStopped, StopSignals

"""Default steps between two saves of an unfinished build (``checkpoint_every``)."""

_PROGRESS_DIRS = ("progress", ".progress.old")  # the checkpoint, and the one it replaces
# where a save of each is staged; what a killed save left under them is removed on resume
_PROGRESS_STAGING, _CORPUS_STAGING = ".progress.", ".corpus."


_WORK_ALLOWED = (LOCK_NAME, "progress", ".progress", "corpus", ".corpus")
"""What a build keeps in its build directory (and the staging names derived from them)."""
PRETRAIN_RECORD = "pretrain.json"


_MODEL_NAMES = (
    PRETRAIN_RECORD, "config.json", "generation_config.json", "model.safetensors",
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
)  # fmt: skip
"""What a build writes into its output (``save_policy_model`` and the record)."""


def is_pretrain_output(path: Path) -> bool:
    """``path`` holds nothing but what a build writes there (a finished build, or one
    whose record a crash cut off): a build may replace it."""
    return all(p.name in _MODEL_NAMES for p in Path(path).iterdir())


def claim_pretrain_dirs(out: Path, *, flag: str = "--out") -> tuple[Path, Path]:
    """``(target, build directory)`` of a build into ``out``, checked before any work by
    the rule every writing command follows (:mod:`rlid.runs.outdir`): a link named by
    the user is followed to its (existing) target; a directory holding files that are
    not a finished build's is refused; the build directory is never a link and holds
    only what a build writes there."""
    if Path(out).exists() and not Path(out).is_dir():
        raise ValueError(f"{out} is a file, not a model directory: choose another output")
    target = claim_output_dir(Path(out), flag=flag, is_own=is_pretrain_output)
    work = work_dir(target)
    check_work_dir(work, allowed=_WORK_ALLOWED, what=f"the build directory of {target}")
    return target, work


def check_pretrain_bounds(config: PretrainConfig, *, checkpoint_every: int = 0) -> None:
    """Every count, size and scale of a build within :data:`rlid.config.limits.BOUNDS`,
    before any work (``--batch-size 1e9`` allocated for a minute before failing)."""
    for name in BOUNDS["pretrain"]:
        value = checkpoint_every if name == "checkpoint_every" else getattr(config, name, None)
        check_field(
            "pretrain", name, value, shown="--episodes" if name == "episodes_per_env" else None
        )


def work_dir(out: Path) -> Path:
    """Where an unfinished build into ``out`` keeps its checkpoint: ``.<name>.pretraining``
    beside it (removed when the build finishes)."""
    out = Path(out)
    return out.parent / f".{out.name}.pretraining"


def _same_build(config: PretrainConfig) -> dict[str, Any]:
    """The settings a resumed build must share (threads only change the speed)."""
    settings = asdict(config)
    settings.pop("threads")
    settings.pop("max_batch_tokens")  # the same loss and gradient, up to rounding
    settings["envs"] = list(settings["envs"])
    if settings["labels"] == DEFAULT_LABELS:  # as saved before the option existed
        settings.pop("labels")
    if not settings["spread_labels"]:  # likewise
        settings.pop("spread_labels")
    if settings["play"] == "random":  # likewise
        settings.pop("play")
    for name, default in (("memory", DEFAULT_MEMORY), ("size", DEFAULT_SIZE)):
        if settings[name] == default:  # likewise
            settings.pop(name)
    return settings


def _in_alphabet_order(answered: dict[str, int] | None, spec: str) -> dict[str, int] | None:
    if answered is None:
        return None
    order = {label: i for i, label in enumerate(parse_alphabet(spec))}
    return dict(sorted(answered.items(), key=lambda kv: order.get(kv[0], len(order))))


def _corpus_digest(seqs: list[tuple[list[int], list[float]]]) -> str:
    digest = hashlib.sha256()
    for ids, weights in seqs:
        digest.update(json.dumps([ids, weights]).encode())
    return digest.hexdigest()


def _publish_state(
    final: Path, prefix: str, stem: str, obj: Any, *, aside: Path | None = None
) -> None:
    """``obj`` saved (safetensors + JSON, the umask's permissions) as ``final/stem``, the
    directory renamed into place (see :func:`rlid.runs.files.staged_dir`)."""

    with write_errors_as_os_errors(final), staged_dir(final, prefix=prefix, aside=aside) as tmp:
        save_state(tmp / stem, obj)


def _save_progress(work: Path, state: dict[str, Any]) -> None:
    """Write ``work/progress`` atomically (a temp dir renamed over the old one)."""
    final, old = (work / name for name in _PROGRESS_DIRS)
    _publish_state(final, _PROGRESS_STAGING, "state", state, aside=old)
    shutil.rmtree(old, ignore_errors=True)


def _save_corpus(
    work: Path, config: PretrainConfig, seqs: list[tuple[list[int], list[float]]], extra: Any
) -> None:
    """Keep the corpus beside the checkpoints (``work/corpus``), so that a resumed build
    trains on it without playing it again. A sequence's weights are 1 up to ``start``
    and ``answer`` from there (:func:`training_sequences`), so two numbers store them."""
    starts, answers = [], []
    for ids, weights in seqs:
        start = next((i for i, w in enumerate(weights) if w != 1.0), len(ids))
        starts.append(start)
        answers.append(weights[start] if start < len(ids) else 1.0)
    corpus = {
        "settings": _same_build(config),
        "ids": torch.tensor([i for ids, _ in seqs for i in ids], dtype=torch.int32),
        "lengths": torch.tensor([len(ids) for ids, _ in seqs], dtype=torch.int64),
        "starts": starts,
        "answers": answers,
        "extra": extra,
    }
    _publish_state(work / "corpus", _CORPUS_STAGING, "corpus", corpus)  # replaces a discarded one


def _load_corpus(
    work: Path, config: PretrainConfig
) -> tuple[list[tuple[list[int], list[float]]], Any] | None:
    """The corpus :func:`_save_corpus` kept for this build, or None if there is none."""

    if not (work / "corpus" / "corpus.json").is_file():
        return None
    saved = load_state(work / "corpus" / "corpus")
    if not isinstance(saved, dict) or saved.get("settings") != _same_build(config):
        return None
    pieces = torch.split(saved["ids"], saved["lengths"].tolist())
    seqs = [
        (ids.tolist(), [1.0] * start + [float(answer)] * (len(ids) - start))
        for ids, start, answer in zip(pieces, saved["starts"], saved["answers"])
    ]
    return seqs, saved["extra"]


def _load_progress(work: Path) -> dict[str, Any] | None:
    """The saved state of an unfinished build, or None (also after a kill between the
    two renames of a save: the previous checkpoint is then the one left)."""

    for name in _PROGRESS_DIRS:
        if (work / name / "state.json").is_file():
            state = load_state(work / name / "state")
            if not isinstance(state, dict) or "step" not in state:
                raise ValueError(f"{work / name} is not a pretraining checkpoint")
            return dict(state)
    return None


def _progress_ids(work: Path) -> tuple[int | None, ...]:
    """Which checkpoint directories ``work`` holds now (each save renames in a new one)."""
    ids: list[int | None] = []
    for name in _PROGRESS_DIRS:
        try:
            ids.append(os.stat(work / name).st_ino)
        except FileNotFoundError:
            ids.append(None)
    return tuple(ids)


def _load_progress_unchanged(work: Path) -> dict[str, Any] | None:
    """:func:`_load_progress` by a reader without the build's lock: a running build may
    replace its checkpoint between the reads of its JSON and its tensors, so a read
    counts only if no checkpoint directory was replaced meanwhile (else it is retried)."""
    for _ in range(3):
        before = _progress_ids(work)
        try:
            saved = _load_progress(work)
        except (OSError, ValueError):
            if _progress_ids(work) == before:
                raise  # not a save under way: really missing or corrupt
            continue
        if _progress_ids(work) == before:
            return saved
    raise ValueError(f"{work}: the checkpoint kept changing while read; try again")


def _fresh_model(tokenizer: Any, size: str, *, seed: int) -> Any:

    return build_model_from_config(model_config(tokenizer, size), seed=seed)  # type: ignore[arg-type]


def load_unfinished(out: Path) -> tuple[Any, Any, dict[str, Any]]:
    """The model of an unfinished build into ``out`` as of its last checkpoint, to
    evaluate it mid-build: ``(model, tokenizer, info)``, ``info`` with the ``step``
    reached, the build's ``steps`` and the mean ``loss`` of its last 200 steps.
    Raises ``ValueError`` when there is no unfinished build there."""

    work = work_dir(Path(out))
    saved = _load_progress_unchanged(work)
    if saved is None:
        raise ValueError(f"no unfinished pretraining of {out} (no {work})")
    tokenizer = build_tiny_tokenizer()
    model = _fresh_model(tokenizer, saved.get("settings", {}).get("size", DEFAULT_SIZE), seed=0)
    model.load_state_dict(saved["model"])
    model.eval()
    losses = list(saved["losses"])[-200:]
    info = {
        "step": int(saved["step"]),
        "steps": saved.get("settings", {}).get("steps"),
        "loss": float(np.mean(losses)) if losses else None,
    }
    return model, tokenizer, info


def save_unfinished(out: Path, dest: Path) -> dict[str, Any]:
    """Save the model of the unfinished build into ``out``, as of its last checkpoint,
    as the model directory ``dest`` (for ``--model``), with ``snapshot.json`` naming the
    build, step and loss; returns :func:`load_unfinished`'s ``info``. The build may be
    running meanwhile. ``dest`` must be new or empty, and not ``out`` (where the build
    writes its model when it finishes)."""

    out, dest = Path(out), Path(dest)
    if dest.resolve() == out.resolve():
        raise ValueError(
            f"{dest} is where the build writes its finished model; save the snapshot elsewhere"
        )
    dest = claim_output_dir(
        dest, flag="--snapshot", is_own=lambda _: False, ignore=(),
        occupied=lambda p, _: f"{p} exists and is not empty; a snapshot goes to a new directory",
    )  # fmt: skip
    check_work_dir(work_dir(Path(out)), allowed=_WORK_ALLOWED, what=f"the build directory of {out}")
    model, tokenizer, info = load_unfinished(out)
    save_policy_model(model, tokenizer, dest)
    record = {"unfinished_build": str(out), **info}
    atomic_write_text(dest / "snapshot.json", json.dumps(record, indent=2) + "\n")
    return info


def _check_settings(saved: dict[str, Any], config: PretrainConfig, work: Path) -> None:
    theirs, ours = saved.get("settings", {}), _same_build(config)
    if theirs != ours:
        diff = ", ".join(
            f"{k}: {ours.get(k)!r} here, {theirs.get(k)!r} there"
            for k in sorted(set(ours) | set(theirs))
            if ours.get(k) != theirs.get(k)
        )
        raise ValueError(
            f"{work} holds an unfinished pretraining with other settings ({diff}); rerun "
            "with its settings to resume it, or pass --restart (restart=True) to discard it"
        )


def _check_corpus(saved: dict[str, Any], digest: str, work: Path) -> None:
    if saved.get("corpus") != digest:
        raise ValueError(
            f"{work} holds an unfinished pretraining over another corpus (same settings, "
            "different transcripts: the envs or the prompt changed since, or the corpus kept "
            "beside the checkpoint was altered); pass --restart "
            "(restart=True) to discard it"
        )


def pretrain(
    config: PretrainConfig,
    *,
    out: Path,
    progress: bool = True,
    checkpoint_every: int = CHECKPOINT_EVERY,
    restart: bool = False,
) -> dict[str, Any]:
    """Pretrain the fresh tiny model; save it atomically to the directory ``out``.

    Every ``checkpoint_every`` steps (0: never) the build's state is saved in
    :func:`work_dir`; a later call with the same settings resumes from it and ends
    bit-identical to an uninterrupted build (same threads). ``restart`` discards it.
    Settings that differ from the saved ones raise ``ValueError``; a second process
    building into the same ``out`` raises :class:`rlid.runs.lock.RunLockedError`.
    """
    if checkpoint_every < 0:
        raise ValueError(f"checkpoint_every must be >= 0, got {checkpoint_every}")
    check_pretrain_bounds(config, checkpoint_every=checkpoint_every)
    target, work = claim_pretrain_dirs(Path(out))  # refused now, not after the build
    lock = RunLock(work, "rlid pretrain").acquire(create=True)
    finished = False
    try:
        info = _pretrain_locked(
            config, target, work, progress=progress, every=checkpoint_every, restart=restart
        )
        finished = True
    finally:
        # finished: the checkpoint is spent; failed before one: nothing to resume.
        # Removed while the lock is held, so that a second builder cannot be between.
        if finished or not any((work / name).exists() for name in _PROGRESS_DIRS):
            lock.remove_directory()
        else:
            lock.release()
    return info


def _pretrain_locked(
    config: PretrainConfig, target: Path, work: Path, *, progress: bool, every: int, restart: bool
) -> dict[str, Any]:

    torch.set_num_threads(config.threads)
    t0 = time.perf_counter()
    if restart:
        for name in (*_PROGRESS_DIRS, "corpus"):
            shutil.rmtree(work / name, ignore_errors=True)
    remove_leftovers(work, _PROGRESS_STAGING, keep=(_PROGRESS_DIRS[1],))  # a build killed mid-save
    remove_leftovers(work, _CORPUS_STAGING)
    saved = _load_progress(work)
    if saved is not None:
        _check_settings(saved, config, work)  # fail before building the corpus
    tokenizer = build_tiny_tokenizer()
    dropped: dict[str, list[int]] = {}
    answered: dict[str, int] | None = {}
    kept = _load_corpus(work, config) if saved is not None else None
    if kept is not None:  # the corpus this build started on, as it was then
        seqs, extra = kept
        if isinstance(extra, dict) and set(extra) == {"dropped", "answered"}:
            dropped, answered = extra["dropped"], extra["answered"]
        else:  # kept before the answers were counted
            dropped, answered = extra, None
    else:
        seqs = training_sequences(
            config, tokenizer, progress=progress, dropped=dropped, answered=answered
        )
    if not seqs:
        raise ValueError("no transcript fits max_tokens; raise --max-tokens")
    for entry, (n, total) in dropped.items():
        if n:
            print(
                f"rlid pretrain: {n} of {total} sequences of {entry} are longer than "
                f"max_tokens {config.max_tokens} and were dropped",
                file=sys.stderr,
                flush=True,
            )
    digest = _corpus_digest(seqs)
    if every and kept is None:
        _save_corpus(work, config, seqs, {"dropped": dropped, "answered": answered})
    model = _fresh_model(tokenizer, config.size, seed=config.seed)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * min(step / config.steps, 1.0))),
    )
    gen = torch.Generator().manual_seed(config.seed)
    pad = tokenizer.pad_token_id
    losses: list[float] = []
    start, spent = 0, 0.0
    if saved is not None:
        _check_corpus(saved, digest, work)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        schedule.load_state_dict(saved["schedule"])
        gen.set_state(saved["generator"])
        torch.set_rng_state(saved["torch_rng"])
        start, losses, spent = int(saved["step"]), list(saved["losses"]), float(saved["seconds"])
        print(
            f"rlid pretrain: resuming at step {start} of {config.steps} from {work}",
            file=sys.stderr,
            flush=True,
        )
    bar = tqdm(
        range(start, config.steps),
        initial=start,
        total=config.steps,
        desc="pretrain",
        unit="step",
        disable=not progress,
    )
    # SIGTERM / Ctrl-C: save this step's state and stop (when there are checkpoints)
    with StopSignals(enabled=bool(every)) as stop:
        for step in bar:
            idx = torch.randint(len(seqs), (config.batch_size,), generator=gen).tolist()
            batch = [seqs[i] for i in idx]
            optimizer.zero_grad(set_to_none=True)
            loss = batch_backward(model, batch, pad, config.answer_weight, config.max_batch_tokens)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            losses.append(float(loss.detach()))
            bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
            done = step + 1
            if every and (done % every == 0 or stop.requested) and done < config.steps:
                _save_progress(
                    work,
                    {
                        "step": done,
                        "settings": _same_build(config),
                        "corpus": digest,
                        "model": model.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "schedule": schedule.state_dict(),
                        "generator": gen.get_state(),
                        "torch_rng": torch.get_rng_state(),
                        "losses": losses,
                        "seconds": spent + time.perf_counter() - t0,
                    },
                )
            if stop.requested and done < config.steps:
                bar.close()
                raise RunStopped(
                    target, done, stop.signum or signal.SIGTERM, unit="step",
                    resume_with="the same command (the build resumes)",
                )  # fmt: skip
    model.eval()
    claim_pretrain_dirs(target)  # again: nothing planted there meanwhile is replaced
    with write_errors_as_os_errors(target):  # a full disk names the output
        save_policy_model(model, tokenizer, target)
    info = {
        "config": asdict(config),
        "sequences": len(seqs),
        "dropped": {entry: {"dropped": n, "of": total} for entry, (n, total) in dropped.items()},
        # the labels the model was trained to answer with, in the alphabet's order: a run's
        # rows labelled otherwise are rarely picked (rlid.core.train warns)
        "answered_labels": _in_alphabet_order(answered, config.labels),
        "first_loss": float(np.mean(losses[:10])),
        "final_loss": float(np.mean(losses[-20:])),
        "seconds": spent + time.perf_counter() - t0,
        "resumed_at_step": start,
        "path": str(target),
        # what wrote these weights: the same recipe on another float path (CPU kernel
        # level, torch / transformers build) writes other weights
        "sha256": weights_hash(target),
        "software": software_record(),
        # a closed set: every file of the start with its sha256, and nothing else is
        # loaded from it (rlid.lm.model_folder.check_closed_set)
        "files": file_digests(target, skip=(PRETRAIN_RECORD,)),
    }
    atomic_write_text(target / PRETRAIN_RECORD, json.dumps(info, indent=2))
    return info
