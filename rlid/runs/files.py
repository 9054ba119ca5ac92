"""Atomic writes: a temp file (or directory) in the same directory, then ``os.replace``.

A reader (or a run killed mid-write) sees either the old file or the new one,
never half of either. Files and directories get the permissions the umask gives
(``tempfile.mkstemp`` / ``mkdtemp`` alone would leave them private: 0600 / 0700),
so a run directory shared with other people stays readable by them.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def umask() -> int:
    """The process umask (from /proc where it can be read without setting it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def make_temp_dir(parent: Path, prefix: str) -> Path:
    """A fresh directory in ``parent`` with umask permissions (not mkdtemp's 0700)."""
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=prefix))
    os.chmod(tmp, 0o777 & ~umask())
    return tmp


def apply_umask(root: Path) -> None:
    """Give ``root`` and everything under it umask permissions (safetensors writes 0600)."""
    mask = umask()
    for path in [root, *root.rglob("*")]:
        os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)


def resolve_link(path: str | os.PathLike[str]) -> Path:
    """``path``, or where it points if it is a symbolic link (also a dangling one).

    A directory published "at" a link is written where the link points and the link
    kept: a directory cannot be renamed over a link.
    """
    path = Path(path)
    return Path(os.path.realpath(path)) if path.is_symlink() else path


@contextmanager
def staged_dir(
    final: Path, *, prefix: str | None = None, aside: Path | None = None
) -> Iterator[Path]:
    """A new directory to fill, which then takes ``final``'s place by renames.

    The directory is made next to ``final`` (its parent made if need be; same file system, so each rename is
    atomic), named ``prefix`` + random (default ``.NAME.tmp-``), with the umask's
    permissions, as everything in it gets (some writers, safetensors among them, make
    private 0600 files). When the block ends, an existing ``final`` is renamed to ``aside``
    (an older directory there is removed first) and the new one to ``final``; without
    ``aside`` the old directory goes to a hidden sibling and is removed, with ``aside``
    the caller decides what becomes of it. Between the two renames ``final`` does not
    exist: a reader that must always find one falls back to ``aside``. If the block
    or a rename fails, the new directory is removed.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = make_temp_dir(final.parent, prefix or f".{final.name}.tmp-")
    try:
        yield tmp
        apply_umask(tmp)
        old = aside
        if final.exists():
            if old is None:
                old = final.parent / f".{final.name}.old-{uuid.uuid4().hex}"
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
        os.replace(tmp, final)
        if aside is None and old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def append_line(path: Path, line: str) -> None:
    """Append one line and fsync it: O(line) per call, unlike rewriting the file.

    A kill mid-append can leave a torn last line; readers skip a last line that does
    not end in a newline, and a resume rewrites the file up to its checkpoint.
    """
    if "\n" in line:
        raise ValueError("append_line writes exactly one line")
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def save_figure(fig: Any, path: Path, *, dpi: int) -> Path:
    """Render a matplotlib figure to PNG and write it atomically; returns ``path``."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    atomic_write_bytes(Path(path), buf.getvalue())
    return Path(path)
