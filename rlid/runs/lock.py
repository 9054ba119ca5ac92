"""One writer per directory: an exclusive, crash-safe lock recording its holder.

``RunLock(DIR, "rlid train").acquire()`` takes ``DIR/.rlid.lock`` with ``flock``:
the kernel drops it when the holding process dies (kill -9 included), so a crash
never leaves a lock that blocks the next run. The file records the holder (pid,
host, command, start time) so a refused second writer can name it; a record left
behind by a dead process is taken over with a notice. Within one process a new
lock on the same directory takes over from the previous one (a run that raised
and is resumed in the same interpreter), and the previous holder can write no more.

The lock file is never opened through a symbolic link or written while it has other
names (:func:`rlid.runs.files.open_own_file`): a link planted there is refused, not
followed to the file it names.

``flock`` is only as good as the filesystem: on network filesystems that do not
implement it, two hosts are not kept apart.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any

from rlid.runs.files import open_own_file

LOCK_NAME = ".rlid.lock"

_HELD: dict[str, RunLock] = {}  # resolved lock path -> holder in this process


def release_all() -> None:
    """Release every lock this process holds, clearing their records (the CLI calls it
    on every exit, error or signal included, so the next run finds no stale holder;
    it also runs at interpreter exit)."""
    for lock in list(_HELD.values()):
        with contextlib.suppress(Exception):
            lock.release()


atexit.register(release_all)


_RETAKES = 5  # attempts when the lock file is removed under us (see acquire)


def _names_the_file(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the file open at ``fd`` (not removed or replaced)."""
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)


class RunLockedError(RuntimeError):
    """Another process holds the directory's lock (``holder``: who, in words)."""

    def __init__(self, message: str, *, holder: str = "another process") -> None:
        super().__init__(message)
        self.holder = holder


def _holder_text(info: dict[str, Any]) -> str:
    if not info.get("pid"):
        return "another process"
    since = info.get("since")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)) if since else "?"
    return f"pid {info['pid']} on host {info.get('host', '?')} ({info.get('purpose', '?')}, since {when})"


def _read_info(fd: int) -> dict[str, Any]:
    try:
        raw = os.pread(fd, 4096, 0)
        info = json.loads(raw.decode()) if raw.strip() else {}
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def _process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot, from ``/proc``), or None
    where that cannot be read (no such process, not Linux)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        # field 22; the command name (field 2) is in parentheses and may hold spaces
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def recorded_holder(directory: Path) -> dict[str, Any] | None:
    """Who holds ``directory``'s lock by its record, read without touching the lock.

    ``None`` when no holder is recorded (never locked, or released) or the recorded
    process has died on this host (also when its pid now names a later process: the
    record keeps the holder's start time where ``/proc`` gives it); else the record
    with ``"text"`` (who, in words). A holder on another host is taken at its word
    (its liveness cannot be seen here).
    """
    try:
        fd = os.open(Path(directory) / LOCK_NAME, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            raw = os.pread(fd, 4096, 0)
        finally:
            os.close(fd)
        info = json.loads(raw.decode()) if raw.strip() else {}
    except (OSError, ValueError):  # a link there is no record (ELOOP)
        return None
    if not isinstance(info, dict) or not info.get("pid"):
        return None
    if info.get("host") == socket.gethostname() and isinstance(info["pid"], int):
        pid = info["pid"]
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None  # died without releasing (kill -9): the kernel dropped its lock
        except (PermissionError, OverflowError):
            pass
        recorded = info.get("pid_start")
        if recorded is not None and _process_start(pid) not in (recorded, None):
            return None  # its pid now names a later process
    return {**info, "text": _holder_text(info)}


class RunLock:
    """The exclusive lock of one directory (see the module docstring)."""

    def __init__(self, directory: Path, purpose: str) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_NAME
        self.purpose = purpose
        self._fd: int | None = None
        self.lost = False

    @property
    def held(self) -> bool:
        return self._fd is not None and not self.lost

    def acquire(self, *, create: bool = False, wait: float | None = 0.0) -> RunLock:
        """Take the lock or raise :class:`RunLockedError` naming the holder.

        ``create``: make the directory first, and again if a finishing holder removes
        it (:meth:`remove_directory`) while this call is taking the lock.
        ``wait``: seconds to wait for a holder to let go (``None``: as long as it takes;
        a note on stderr says who is waited for).
        """

        key = str(self.path.resolve())
        previous = _HELD.get(key)
        if previous is not None and previous is not self:
            previous._close()
            previous.lost = True
        deadline = None if wait is None else time.monotonic() + wait
        retakes, noted = 0, False
        while True:
            if retakes >= _RETAKES:
                raise RunLockedError(f"{self.directory}: it or its lock file keeps being removed")
            if create:
                self.directory.mkdir(parents=True, exist_ok=True)
            try:  # never through a link: the record is truncated and written in place
                fd = open_own_file(self.path, os.O_RDWR | os.O_CREAT)
            except FileNotFoundError:
                if not create:
                    raise
                retakes += 1  # removed between the mkdir and the open
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder_text(_read_info(fd))
                os.close(fd)
                if deadline is None or time.monotonic() < deadline:
                    if not noted:
                        print(f"note: waiting for {holder} to let go of {self.directory}",
                              file=sys.stderr)  # fmt: skip
                        noted = True
                    time.sleep(0.2)
                    continue
                raise RunLockedError(
                    f"{self.directory} is in use by {holder}; two writers would "
                    "mix their files. Wait for it to finish (or stop it), or use another directory",
                    holder=holder,
                ) from None
            except BaseException:
                os.close(fd)
                raise
            if _names_the_file(self.path, fd):
                break
            # the holder removed the lock file (remove_directory) between our open and
            # our flock: this lock guards nothing; take the one the path names now
            os.close(fd)
            retakes += 1
        stale = _read_info(fd)
        if stale.get("pid") and stale.get("pid") != os.getpid():
            print(
                f"note: {self.directory}: taking over the lock left by {_holder_text(stale)}, "
                "which is no longer running",
                file=sys.stderr,
            )
        info = {
            "pid": os.getpid(),
            "pid_start": _process_start(os.getpid()),
            "host": socket.gethostname(),
            "purpose": self.purpose,
            "since": time.time(),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        os.fsync(fd)
        self._fd = fd
        self.lost = False
        _HELD[key] = self
        return self

    def check(self) -> None:
        """Raise unless this object still holds the lock (before every write)."""
        if self.lost:
            raise RunLockedError(
                f"{self.directory} was taken over by a newer writer in this process; "
                "this one must not write there any more"
            )
        if self._fd is None:
            raise RunLockedError(f"{self.directory}: write without holding its lock")

    def release(self) -> None:
        """Drop the lock and clear the holder record (a no-op when not held)."""
        if self._fd is None:
            return
        if not self.lost:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
        self._close()

    def remove_directory(self) -> None:
        """Remove the locked directory, lock file last, then drop the lock.

        Removing it after :meth:`release` would race a writer that takes the lock in
        between: its lock file and files would go. Removed while held, a writer that
        opened the lock file meanwhile finds it gone once it gets the lock, and
        :meth:`acquire` retakes the lock on a new file.
        """

        self.check()
        try:  # best effort, as a clean-up: what cannot be removed stays, the lock goes
            for child in self.directory.iterdir():
                if child.name == LOCK_NAME:
                    continue
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        child.unlink()
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            with contextlib.suppress(OSError):  # a writer may already be creating it again
                self.directory.rmdir()
        finally:
            self._close()

    def _close(self) -> None:
        if self._fd is None:
            return
        key = str(self.path.resolve())
        if _HELD.get(key) is self:
            del _HELD[key]
        os.close(self._fd)  # closing the descriptor drops the flock
        self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown
            self._close()


def is_empty_dir(path: Path) -> bool:
    """No files in ``path`` other than a lock file (or ``path`` does not exist)."""
    path = Path(path)
    return not path.exists() or all(p.name == LOCK_NAME for p in path.iterdir())
