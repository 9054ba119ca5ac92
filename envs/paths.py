"""Where rlid keeps generated games, warm-started models and other caches."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

CACHE_ENV_VAR = "RLID_CACHE_DIR"


def cache_root() -> Path:
    """The cache root: ``$RLID_CACHE_DIR`` if set, else the user cache dir (``~/.cache/rlid``)."""
    override = os.environ.get(CACHE_ENV_VAR)
    root = Path(override) if override else Path(platformdirs.user_cache_dir("rlid"))
    root.mkdir(parents=True, exist_ok=True)
    return root
