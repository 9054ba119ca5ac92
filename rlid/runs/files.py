"""Atomic writes: a temp file (or directory) in the same directory, then ``os.replace``.

A reader (or a run killed mid-write) sees either the old file or the new one,
never half of either. Files and directories get the permissions the umask gives
(``tempfile.mkstemp`` / ``mkdtemp`` alone would leave them private: 0600 / 0700),
so a run directory shared with other people stays readable by them.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import io
import os
import re
import shutil
import stat
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class LinkRefusedError(ValueError):
    """A path inside a run or output directory is a symbolic link (or a file with other
    names): rlid neither follows nor writes through one there, which would read or write
    outside the directory."""


def link_message(path: Path) -> str:
    """One line saying that ``path`` is a link rlid will not follow, and what to do."""
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return (
        f"{path} is a symbolic link{target}; rlid does not follow links inside a run or "
        "output directory (they would make it read or write outside it): remove the link, "
        "or put the file itself there"
    )


def refuse_link(path: Path) -> None:
    """Raise :class:`LinkRefusedError` when ``path`` is a symbolic link (dangling or not)."""
    if Path(path).is_symlink():
        raise LinkRefusedError(link_message(Path(path)))


def refuse_links_below(root: Path, path: Path) -> None:
    """Refuse a symbolic link in ``path`` below ``root`` (``root`` itself may be one: a
    directory the user named as a link keeps working).

    >>> refuse_links_below(Path("/tmp"), Path("/tmp"))  # nothing below the root
    """
    root, path = Path(root), Path(path)
    for part in path.relative_to(root).parts:
        root = root / part
        refuse_link(root)


def open_own_file(path: Path, flags: int, mode: int = 0o666) -> int:
    """``os.open`` for a file that rlid writes in place (a lock, an appended log).

    Never through a symbolic link (``O_NOFOLLOW``), and only a regular file with no
    other name (a hard link would carry the write to a file outside the directory):
    else :class:`LinkRefusedError`. Returns the descriptor.
    """
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags | nofollow | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as err:
        if err.errno == errno.ELOOP or (nofollow == 0 and Path(path).is_symlink()):
            raise LinkRefusedError(link_message(Path(path))) from None
        raise
    info = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        problem = "is not a regular file"
    elif info.st_nlink > 1:
        problem = f"has {info.st_nlink - 1} other name(s) (a hard link)"
    if problem is not None:
        os.close(fd)
        raise LinkRefusedError(
            f"{path} {problem}; rlid writes only files of its own inside a run or output "
            "directory (else it would write outside it): remove it"
        )
    return fd


def read_own_bytes(path: Path) -> bytes:
    """The bytes of a regular file rlid reads back from a run or output directory, never
    through a symbolic link (``O_NOFOLLOW``, checked at open: a link swapped in after a
    check cannot redirect the read) and never from a FIFO or device (which could block
    or never end): else :class:`LinkRefusedError` / ``ValueError`` naming it."""
    path = Path(path)
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    flags = os.O_RDONLY | nofollow | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        if err.errno == errno.ELOOP or (nofollow == 0 and path.is_symlink()):
            raise LinkRefusedError(link_message(path)) from None
        raise
    with open(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise ValueError(f"{path} is not a regular file; rlid reads only files it wrote there")
        return fh.read()


def read_own_text(path: Path) -> str:
    """:func:`read_own_bytes` decoded as UTF-8."""
    return read_own_bytes(path).decode("utf-8")


def os_error_of(err: BaseException, path: Path | str | None = None) -> OSError | None:
    """The operating-system error inside a library's own error type, as an ``OSError``
    naming ``path``; None if there is none. safetensors reports a full disk as
    ``SafetensorError("... No space left on device (os error 28)")``, which would
    otherwise read as a corrupt file.

    >>> os_error_of(ValueError("I/O error: No space left on device (os error 28)"), "x").errno
    28
    """
    match = re.search(r"\(os error (\d+)\)|Os \{ code: (\d+)", str(err))
    if match is None:
        return None
    code = int(match.group(1) or match.group(2))
    return OSError(code, os.strerror(code), None if path is None else str(path))


@contextmanager
def write_errors_as_os_errors(path: Path) -> Iterator[None]:
    """A write error that safetensors wraps in its own type, raised as the ``OSError`` it
    is, naming ``path`` (a full disk: "No space left on device: PATH", not "a corrupt
    file"); an ``OSError`` that names no file is made to name ``path``."""
    try:
        yield
    except Exception as err:
        error = os_error_of(err, path) if type(err).__name__ == "SafetensorError" else None
        if isinstance(err, OSError) and err.errno is not None and err.filename is None:
            error = OSError(err.errno, err.strerror or os.strerror(err.errno), str(path))
        if error is None:
            raise
        raise error from None


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
        if path.is_symlink():  # planted in a staging directory: never chmod through it
            raise LinkRefusedError(link_message(path))
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
    """A new directory to fill, which then takes ``final``'s place.

    The directory is made next to ``final`` (its parent made if need be; same file
    system, so each rename is atomic), named ``prefix`` + random (default
    ``.NAME.tmp-``), with the umask's permissions, as everything in it gets (some
    writers, safetensors among them, make private 0600 files). When the block ends the
    new directory takes ``final``'s place and the old one goes to ``aside`` (an older
    directory there is removed first); without ``aside`` the old one is removed, with
    ``aside`` the caller decides what becomes of it. If the block or a rename fails
    before the new directory is published, it is removed and ``final`` is untouched.

    Where the OS can swap two paths in one step (Linux ``renameat2`` with
    ``RENAME_EXCHANGE``; most local file systems) ``final`` always exists: a reader finds
    the old directory or the new one. Elsewhere the old one is renamed aside first and
    ``final`` is missing between the two renames: a reader that must always find one
    falls back to ``aside``.
    """
    final = Path(final)
    refuse_link(final)  # callers resolve a link the user named (resolve_link) first
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = make_temp_dir(final.parent, prefix or f".{final.name}.tmp-")
    swapped = False
    try:
        yield tmp
        apply_umask(tmp)
        fsync_tree(tmp)  # on disk before it is published: a power cut leaves old or new
        if final.exists() and not final.is_symlink() and exchange_paths(tmp, final):
            swapped = True  # published; the old directory is now at the temp name
            if aside is None:
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                remove_path(aside)
                os.replace(tmp, aside)
            fsync_dir(final.parent)
            return
        old = aside
        if final.exists():
            if old is None:
                old = final.parent / f".{final.name}.old-{uuid.uuid4().hex}"
            remove_path(old)
            os.replace(final, old)
        os.replace(tmp, final)
        fsync_dir(final.parent)
        if aside is None and old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        if not swapped:  # else tmp holds the old directory: a resume removes it
            shutil.rmtree(tmp, ignore_errors=True)
        raise


def remove_leftovers(parent: Path, prefix: str, *, keep: tuple[str, ...] = ()) -> list[Path]:
    """Remove what writers killed mid-write (kill -9, OOM, power) left in ``parent``:
    staging directories named ``prefix`` + anything, except the names in ``keep``.
    Call it only while holding the lock of whatever writes there. A link with such a
    name is removed (not followed). Returns the removed."""
    removed = []
    for path in sorted(Path(parent).glob(f"{prefix}*")):
        if path.name in keep or not (path.is_dir() or path.is_symlink()):
            continue
        remove_path(path)  # a link there is removed, never followed
        removed.append(path)
    return removed


def remove_path(path: Path) -> None:
    """Remove ``path`` if it is there: a link or file is unlinked (a link's target is
    never touched), a directory removed with its contents; errors are ignored."""
    path = Path(path)
    if path.is_symlink() or path.is_file():
        with contextlib.suppress(OSError):
            path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (renames into it) durable; a no-op where directories
    cannot be opened (Windows)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on a directory
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file under ``root``, then every directory (deepest first)."""
    dirs = [root]
    for path in root.rglob("*"):
        if path.is_symlink():
            continue
        if path.is_dir():
            dirs.append(path)
        else:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    for path in sorted(dirs, key=lambda d: len(d.parts), reverse=True):
        fsync_dir(path)


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100
_renameat2: Any = None


def exchange_paths(a: Path, b: Path) -> bool:
    """Swap two existing paths in one atomic step; False where the OS cannot.

    Linux >= 3.15 with glibc >= 2.28, on file systems that support it (ext4, xfs,
    btrfs, tmpfs, overlayfs, ...). Any other failure (a path missing, permissions)
    raises ``OSError`` as a rename would.
    """
    global _renameat2
    if _renameat2 is None:
        try:
            _renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
            _renameat2.argtypes = [
                ctypes.c_int,
                ctypes.c_char_p,
                ctypes.c_int,
                ctypes.c_char_p,
                ctypes.c_uint,
            ]
            _renameat2.restype = ctypes.c_int
        except (AttributeError, OSError, TypeError):
            _renameat2 = False
    if _renameat2 is False:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False  # the kernel or this file system cannot swap
    raise OSError(err, os.strerror(err), str(a), None, str(b))


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
        fsync_dir(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def append_line(path: Path, line: str) -> None:
    """Append one line and fsync it: O(line) per call, unlike rewriting the file.

    A kill mid-append can leave a torn last line; readers skip a last line that does
    not end in a newline, and a resume rewrites the file up to its checkpoint. A link
    in ``path``'s place is refused (:func:`open_own_file`).
    """
    if "\n" in line:
        raise ValueError("append_line writes exactly one line")
    fd = open_own_file(Path(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    with open(fd, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def save_figure(fig: Any, path: Path, *, dpi: int) -> Path:
    """Render a matplotlib figure to PNG and write it atomically; returns ``path``."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    atomic_write_bytes(Path(path), buf.getvalue())
    return Path(path)


def new_figure(**kwargs: Any) -> Any:
    """A matplotlib ``Figure`` (the object API: no pyplot, so the caller's backend is left
    alone, e.g. in a notebook); :func:`save_figure` renders it to PNG."""
    # lazy: matplotlib takes a while to import, and only writing a plot needs it
    from matplotlib.figure import Figure

    return Figure(**kwargs)
