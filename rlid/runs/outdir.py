"""The one rule every command that writes a directory goes through.

``rlid train --out``, ``rlid pretrain --out`` (and its build directory beside it),
``--snapshot``, ``rlid export OUT`` and ``rlid compare --out`` all write into a
directory the user named. Before any work starts, :func:`claim_output_dir` checks it:

* the name itself may be a symbolic link the user made: the directory is then used
  where it points (and that target is checked like any other), but a dangling link is
  refused (``rlid export`` creates its target);
* a file where the directory should be is refused;
* a directory that holds files is refused unless it is an earlier output of the same
  command (``is_own``): a user's notes are never replaced or deleted, and a directory
  of another kind is never taken for one of this kind;
* nothing below the directory that the command would read or write may be a
  symbolic link (:func:`refuse_links_inside`);
* the first existing ancestor must be a directory this process can write to.

Directories a command keeps beside its output (``rlid pretrain``'s build directory,
staging directories) are checked by :func:`check_work_dir`: never a link, and when
they exist, holding only what the command writes there.

>>> claim_output_dir(Path("/dev/null"), flag="--out", is_own=lambda p: False)
Traceback (most recent call last):
...
NotADirectoryError: [Errno 20] --out is a file, not a directory: '/dev/null'
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from rlid.runs.files import LinkRefusedError, link_message
from rlid.runs.lock import LOCK_NAME


class OutputDirError(ValueError):
    """A directory a command would write into holds what is not its own."""


def _shown(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def refuse_links_inside(root: Path) -> None:
    """Refuse a symbolic link anywhere below ``root`` (``root`` itself is the caller's
    business), naming the first one found; nothing is followed while looking."""
    root = Path(root)
    if not root.is_dir() or root.is_symlink():
        return
    for path in sorted(root.rglob("*")):  # rglob lists links, never enters them
        if path.is_symlink():
            raise LinkRefusedError(link_message(path))


def claim_output_dir(
    path: Path,
    *,
    flag: str,
    is_own: Callable[[Path], bool],
    ignore: Iterable[str] = (LOCK_NAME,),
    occupied: Callable[[Path, list[str]], str] | None = None,
    create_target: bool = False,
) -> Path:
    """Where a command writes the directory the user named ``path`` (``flag``: how the
    user named it, for messages), after the checks of the module docstring.

    ``is_own(dir)``: whether an existing directory holding files is an earlier output
    of this command (then it is used, resumed or replaced by the command itself).
    ``ignore``: names that do not make a directory non-empty (a lock file).
    ``occupied(dir, names)``: the message for a directory holding others' files.
    ``create_target``: a dangling link the user named is fine, its target is created
    by the command (``rlid export``, which always did so); else it is refused.
    Raises ``OutputDirError`` / ``LinkRefusedError`` / ``OSError``; creates nothing.
    """
    path = Path(path)
    if path.is_symlink():
        target = Path(os.path.realpath(path))
        if not target.exists() and not create_target:
            raise FileNotFoundError(
                f"{flag} {path} is a symbolic link to {os.readlink(path)}, which does not "
                "exist: create that directory, or give another path"
            )
        path = target
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, f"{flag} is a file, not a directory", str(path))
    if path.is_dir():
        skip = set(ignore)
        names = sorted(p.name for p in path.iterdir() if p.name not in skip)
        if names and not is_own(path):
            message = (
                occupied(path, names)
                if occupied is not None
                else f"{flag} {path} already holds files ({_shown(names)}) that are not an "
                "earlier output of this command; choose a new or empty directory (nothing "
                "there is replaced or deleted)"
            )
            raise OutputDirError(message)
        refuse_links_inside(path)
    parent = path
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, f"part of {flag} is a file", str(parent))
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, "cannot write under this directory", str(parent))
    return path


def check_work_dir(path: Path, *, allowed: Iterable[str], what: str) -> None:
    """A directory a command keeps for itself (``what`` names it for messages): never
    a link, nothing inside it a link, and only names in ``allowed`` (or starting with
    one of them followed by ``.``, for staging) when it exists."""
    path = Path(path)
    if path.is_symlink():
        raise LinkRefusedError(link_message(path))
    if not path.exists():
        return
    if not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, f"{what} is a file, not a directory", str(path))
    names = tuple(allowed)
    strangers = sorted(
        p.name
        for p in path.iterdir()
        if p.name not in names and not any(p.name.startswith(n + ".") for n in names)
    )
    if strangers:
        raise OutputDirError(
            f"{path} ({what}) holds files rlid did not write there ({_shown(strangers)}); "
            "move them away (nothing there is replaced or deleted)"
        )
    refuse_links_inside(path)
