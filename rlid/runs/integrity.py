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

import errno
import hashlib
import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from rlid.config.limits import BOUNDS, INT64
from rlid.runs.files import LinkRefusedError, link_message

SEAL = "sha256"
"""The key of a record's own digest."""
FILES = "files"
"""The key of a checkpoint's ``state.json`` that maps its files to their sha256."""


MAX_WORLD_SIZE = 1 << 20
"""Processes of one run at most, as a checkpoint records them."""


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


class UnlistedFileError(DamagedFileError):
    """A file in a closed set (a checkpoint, an exported agent, a start) that its record
    does not list: added after rlid wrote it."""


def file_sha256(path: Path) -> str:
    """The sha256 of the regular file ``path``, never read through a symbolic link."""
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, os.O_RDONLY | nofollow | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        if err.errno == errno.ELOOP or (nofollow == 0 and Path(path).is_symlink()):
            raise LinkRefusedError(link_message(Path(path))) from None
        raise
    with open(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise DamagedFileError(f"{path} is not a regular file")
        return hashlib.file_digest(fh, "sha256").hexdigest()


def closed_set_entries(root: Path) -> list[str]:
    """Every entry under ``root`` that is not a directory (files, links, FIFOs, ...), as
    relative POSIX paths, without following any link."""
    root = Path(root)
    found = []
    for path in sorted(root.rglob("*")):  # rglob lists links, never enters them
        if path.is_symlink() or not path.is_dir():
            found.append(path.relative_to(root).as_posix())
    return found


def refuse_unlisted(
    root: Path, listed: Any, *, record: Path | str, skip: tuple[str, ...] = (), what: str
) -> None:
    """A closed set: every file under ``root`` is one ``listed`` (or in ``skip``), else one
    line naming the first other one (``what``: the set, for the message). Nothing that is
    not listed is ever loaded: an adapter, a chat template or an extra config copied in
    would change what loads without touching a digest."""
    root = Path(root)
    for name in closed_set_entries(root):
        if name in listed or name in skip:
            continue
        path = root / name
        kind = "symbolic link" if path.is_symlink() else "file"
        raise UnlistedFileError(
            f"{path} is a {kind} that {record} does not list among the files of {what} "
            "(added after rlid wrote it; it would change what loads): remove it"
        )


def file_digests(root: Path, *, skip: tuple[str, ...] = ("state.json",)) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``root`` but ``skip``."""
    root = Path(root)
    return {
        name: file_sha256(root / name)  # a link or a FIFO is refused there, never read
        for name in closed_set_entries(root)
        if name not in skip
    }


def verify_files(
    root: Path,
    digests: dict[str, str],
    *,
    record: Path,
    closed: bool = False,
    skip: tuple[str, ...] = ("state.json",),
    what: str = "the checkpoint",
) -> None:
    """Each file of ``digests`` is under ``root`` with that sha256, else one line naming
    it (``record``: where the digests were read, for the message). ``closed``: and no
    other file is there but ``skip`` (:func:`refuse_unlisted`)."""
    root = Path(root)
    if not isinstance(digests, dict):
        raise DamagedFileError(f"{record}: {FILES} must be a table of sha256 digests")
    if closed:
        refuse_unlisted(root, digests, record=record, skip=skip, what=what)
    for name, expected in sorted(digests.items()):
        path = root / name
        if not isinstance(expected, str) or ".." in Path(name).parts or Path(name).is_absolute():
            raise DamagedFileError(f"{record} lists a file {name!r} it cannot hold")
        if path.is_symlink():
            raise DamagedFileError(
                f"{path} is a symbolic link; rlid reads no file of {what} through a link: "
                "put the file itself there"
            )
        if not path.is_file():
            raise DamagedFileError(
                f"{path} is missing ({what} in {root} is incomplete): restore it "
                "from a copy, or start a new run"
            )
        if file_sha256(path) != expected:
            raise DamagedFileError(
                f"{path} does not match the sha256 recorded for it in {record} when it was "
                f"written (damaged or replaced): restore {what} from a copy, or "
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
    most = BOUNDS["run"]["steps"][1]  # an iteration spends at least one step of the budget
    if isinstance(iteration, bool) or not isinstance(iteration, int) or not 0 <= iteration <= most:
        raise bad(f"iteration must be a whole number from 0 to {most}, got {str(iteration)[:40]!r}")
    budget = state.get("budget")
    if not isinstance(budget, dict):
        raise bad("budget must be a table of counters")
    for name, value in budget.items():
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or not 0 <= value < INT64:
            raise bad(
                f"budget {str(name)[:40]} must be a number from 0 to 2^63, got {str(value)[:40]!r}"
            )
    size = state.get("world_size", 1)
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_WORLD_SIZE:
        raise bad(
            f"world_size must be a whole number from 1 to {MAX_WORLD_SIZE}, got {str(size)[:40]!r}"
        )
    if not isinstance(state.get(FILES, {}), dict):
        raise bad(f"{FILES} must be a table of sha256 digests")
    return state
