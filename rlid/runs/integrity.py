"""Digests that let a run directory be checked before it is trusted.

* Every file of a checkpoint (weights, optimizer and RNG state, tokenizer, records) has
  its sha256 recorded in the checkpoint's ``state.json`` when it is written
  (:func:`file_digests`); resume, ``rlid eval`` and ``rlid export`` check them
  (:func:`verify_files`) and refuse a mismatch naming the file.
* The JSON records rlid reads back (``config.json``, ``eval.json``, a checkpoint's
  ``state.json``) carry a ``"sha256"`` of their own content (:func:`seal`), checked
  when they are read (:func:`unseal`): a flipped bit or a hand edit is refused, not
  taken at its word. A record without one (written by an earlier version) is read as before.

The digests catch damage (a flipped bit, a truncated copy, a file swapped for
another); they do not stop someone who rewrites a file and its digest together: a
run directory from someone else still loads no code (safetensors + JSON), but its
numbers are theirs.

>>> unseal(seal({"iteration": 3}), "state.json")
{'iteration': 3}
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

SEAL = "sha256"
"""The key of a record's own digest."""
FILES = "files"
"""The key of a checkpoint's ``state.json`` that maps its files to their sha256."""


class DamagedFileError(ValueError):
    """A file of a run directory does not match the digest recorded for it."""


def canonical(data: Any) -> bytes:
    """The bytes a record's digest is taken over: its JSON with sorted keys, after one
    round trip (so a tuple and the list it is read back as digest alike)."""
    plain = json.loads(json.dumps(data, sort_keys=True))
    return json.dumps(plain, sort_keys=True, separators=(",", ":")).encode()


def seal(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (JSON-ready) with ``"sha256"`` of the rest; an older seal is replaced."""
    rest = {k: v for k, v in data.items() if k != SEAL}
    return {**rest, SEAL: hashlib.sha256(canonical(rest)).hexdigest()}


def unseal(data: Any, path: Path | str) -> Any:
    """``data`` read from ``path`` without its seal, which must match; an unsealed
    record (older runs) is returned as it is."""
    if not isinstance(data, dict) or SEAL not in data:
        return data
    rest = {k: v for k, v in data.items() if k != SEAL}
    if data[SEAL] != hashlib.sha256(canonical(rest)).hexdigest():
        raise DamagedFileError(
            f"{path} was changed after rlid wrote it (its content no longer matches the "
            "sha256 recorded in it: damaged, or edited by hand); restore it from a copy, "
            "or start a new run"
        )
    return rest


def file_sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def file_digests(root: Path, *, skip: tuple[str, ...] = ("state.json",)) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``root`` but ``skip``."""
    root = Path(root)
    return {
        path.relative_to(root).as_posix(): file_sha256(path)
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.relative_to(root).as_posix() not in skip
    }


def verify_files(root: Path, digests: dict[str, str], *, record: Path) -> None:
    """Each file of ``digests`` is under ``root`` with that sha256, else one line naming
    it (``record``: where the digests were read, for the message)."""
    root = Path(root)
    for name, expected in sorted(digests.items()):
        path = root / name
        if not isinstance(expected, str) or ".." in Path(name).parts or Path(name).is_absolute():
            raise DamagedFileError(f"{record} lists a file {name!r} it cannot hold")
        if not path.is_file():
            raise DamagedFileError(
                f"{path} is missing (the checkpoint in {root} is incomplete): restore it "
                "from a copy, or start a new run"
            )
        if file_sha256(path) != expected:
            raise DamagedFileError(
                f"{path} does not match the sha256 recorded for it in {record} when it was "
                "written (damaged or replaced): restore the checkpoint from a copy, or "
                "start a new run"
            )


def check_state_record(state: Any, path: Path) -> dict[str, Any]:
    """A checkpoint's ``state.json`` holds what a resume reads: else one line saying
    which field is wrong (not "written by a different config")."""

    def bad(what: str) -> DamagedFileError:
        return DamagedFileError(f"{path} is not a valid checkpoint state ({what})")

    if not isinstance(state, dict):
        raise bad("a JSON object is expected")
    iteration = state.get("iteration")
    if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 0:
        raise bad(f"iteration must be a whole number >= 0, got {str(iteration)[:40]!r}")
    budget = state.get("budget")
    if not isinstance(budget, dict):
        raise bad("budget must be a table of counters")
    for name, value in budget.items():
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value < 0:
            raise bad(f"budget {str(name)[:40]} must be a number >= 0, got {str(value)[:40]!r}")
    size = state.get("world_size", 1)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise bad(f"world_size must be a whole number >= 1, got {str(size)[:40]!r}")
    if not isinstance(state.get(FILES, {}), dict):
        raise bad(f"{FILES} must be a table of sha256 digests")
    return state
