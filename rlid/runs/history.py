"""A resumed run's history: its metrics rows and evaluations, never lost silently.

Every checkpoint keeps a copy of ``metrics.jsonl`` (the rows up to its iteration) and of
``eval.json`` as they were when it was written, under the checkpoint's sha256 digests
(:mod:`rlid.runs.integrity`). On resume the run's own files are checked against them:
``metrics.jsonl`` emptied, removed, cut short or changed, or ``eval.json`` removed or
damaged, is rebuilt from the checkpoint's copy with a note saying so (the final
evaluation, if the damaged file held one, is run again). A checkpoint of an earlier
version keeps no copy: then rows missing before its iteration refuse the resume,
naming what is missing.

>>> rows_text([{"iteration": 1}])
'{"iteration": 1}\\n'
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rlid.runs.dir import read_json, read_metrics, write_json
from rlid.runs.files import read_own_text

METRICS = "metrics.jsonl"
EVALS = "eval.json"


def rows_text(rows: list[dict[str, Any]]) -> str:
    """``metrics.jsonl`` holding ``rows`` (JSON-ready), one line each."""
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)


def _note(text: str) -> None:
    print(f"note: {text}", file=sys.stderr, flush=True)


def _rows_on_disk(run_dir: Path) -> tuple[list[dict[str, Any]] | None, str]:
    """The run's rows, or None with what is wrong with its metrics.jsonl."""

    if not (run_dir / METRICS).is_file():
        return None, "is missing"
    try:
        rows = read_metrics(run_dir)
    except (ValueError, UnicodeDecodeError):
        return None, "is damaged (not JSON lines)"
    if not all(isinstance(r, dict) and isinstance(r.get("iteration"), int) for r in rows):
        return None, "is damaged (rows without an iteration)"
    return rows, ""


def resumed_metrics(
    run_dir: Path, ckpt: Path, iteration: int, *, writer: bool = True
) -> list[dict[str, Any]]:
    """The rows of iterations 1..``iteration`` a resume continues from (see the module
    docstring); ``writer``: the process that reports (one note per run)."""
    run_dir, ckpt = Path(run_dir), Path(ckpt)
    rows, problem = _rows_on_disk(run_dir)
    kept = None if rows is None else [r for r in rows if r["iteration"] <= iteration]
    if (ckpt / METRICS).is_file():  # checked against the checkpoint's sha256 already
        saved = [json.loads(line) for line in read_own_text(ckpt / METRICS).splitlines() if line]
        if kept != saved:
            if kept is not None:
                done = len(kept)
                problem = (
                    f"holds {done} of the {iteration} checkpointed iterations' rows"
                    if done < len(saved)
                    else "differs from the checkpoint's copy"
                )
            if writer:
                span = "iteration 1" if iteration == 1 else f"iterations 1-{iteration}"
                _note(f"{run_dir / METRICS} {problem}: rebuilt {span} from {ckpt / METRICS}")
        return saved
    numbers = None if kept is None else [r["iteration"] for r in kept]
    if numbers != list(range(1, iteration + 1)):
        if kept is not None:
            problem = f"holds the rows of {len(kept)} of the {iteration} checkpointed iterations"
        raise ValueError(
            f"cannot resume {run_dir}: its {METRICS} {problem}, and its checkpoint (written "
            "by an earlier version) keeps no copy to rebuild it from; restore the file, or "
            "start a new run"
        )
    return kept or []


def checkpointed_rows(run_dir: Path, ckpt: Path) -> list[dict[str, Any]]:
    """The rows up to the checkpoint, from its copy (a checkpoint of an earlier rlid has
    none: the run's metrics.jsonl), for readers that must not write (``rlid export``)."""

    path = Path(ckpt) / METRICS
    if path.is_file():
        return [json.loads(line) for line in read_own_text(path).splitlines() if line]
    return read_metrics(Path(run_dir))


def resume_evals(run_dir: Path, ckpt: Path) -> None:
    """Rebuild ``eval.json`` from the checkpoint's copy when it is missing, damaged or
    lost entries the copy holds (writer only; see the module docstring)."""

    run_dir, ckpt = Path(run_dir), Path(ckpt)
    path = run_dir / EVALS
    current, problem = None, "is missing"
    if path.is_file():
        try:
            current, problem = read_json(path, sealed=True), ""
        except ValueError:
            problem = "is damaged"
    if not (ckpt / EVALS).is_file():
        if path.is_file() and current is None:  # no copy to rebuild it from
            read_json(path, sealed=True)  # raises, naming the file
        return
    saved = read_json(ckpt / EVALS, sealed=True)
    if isinstance(current, dict) and all(current.get(k) == v for k, v in saved.items()):
        return
    if current is not None:
        problem = "lost entries the checkpoint's copy holds"
    write_json(path, saved, sealed=True)
    _note(
        f"{path} {problem}: rebuilt from {ckpt / EVALS}"
        + ("" if "after" in saved else "; the evaluation after training runs again")
    )
