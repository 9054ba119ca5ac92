"""Small JSON files cached on disk, written atomically, readable by concurrent processes.

>>> import pathlib, tempfile
>>> path = pathlib.Path(tempfile.mkdtemp()) / "a.json"
>>> write_once(path, {"x": 1}), write_once(path, {"x": 2})  # the first writer's wins
({'x': 1}, {'x': 1})
>>> write(path, {"x": 3}); read(path)
{'x': 3}
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def read(path: Path) -> Any | None:
    """The file's JSON, or None when it is absent or unreadable (then recompute it)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _temporary(path: Path, data: Any) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        handle.write(json.dumps(data, indent=1))
    return tmp


def write(path: Path, data: Any) -> None:
    """Write ``data`` to ``path`` atomically (the last writer wins)."""
    tmp = _temporary(path, data)
    try:
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def write_once(path: Path, data: Any) -> Any:
    """Create ``path`` with ``data`` unless it exists; return what the file holds, so
    processes racing to write different contents all go on with the first one's."""
    tmp = _temporary(path, data)
    try:
        os.link(tmp, path)  # atomic, and fails if the file exists
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    found = read(path)
    return data if found is None else found
