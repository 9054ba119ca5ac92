"""Where the named starts live, read without torch: the shipped start's files and manifest,
the random-play start's cache, and what a start was trained to answer.

The loading itself is :mod:`rlid.lm.starts` (torch, transformers); the command line reads
the manifest and the cache paths from here, so that its ``--help`` stays quick.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rlid.envs.paths import cache_root
from rlid.lm.pretrain.config import PretrainConfig

TINY_NAME = "tiny"


TINY_PLAY_NAME = "tiny-play"


TINY_RANDOM_NAME = "tiny-random"


START_NAMES = (TINY_NAME, TINY_PLAY_NAME, TINY_RANDOM_NAME)


MANIFEST = "manifest.json"


PLAY_RECIPE: PretrainConfig | None = None
"""The recipe a first-use build of ``tiny-play`` runs (``None``: :class:`PretrainConfig`'s
defaults, what ``rlid pretrain`` runs). Tests put a tiny recipe here; a non-default
recipe gets its own cache directory, so it never stands in for the real start."""


# ------------------------------------------------------------------- the shipped start
def shipped_dir() -> Path:
    """The shipped warm start's directory, inside the installed package."""
    return Path(__file__).resolve().parent.parent / "data" / "start"


def read_manifest(path: Path | None = None) -> dict[str, Any]:
    """The shipped start's manifest (its recipe, corpus, sequences, weights' sha256)."""
    file = (path or shipped_dir()) / MANIFEST
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"the shipped start's manifest {file} is unreadable: {err}") from None
    if not isinstance(data, dict) or "weights" not in data:
        raise ValueError(f"{file} is not a start manifest (no 'weights' entry)")
    return data


def file_sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


WEIGHTS_FILE = "model.safetensors"


def check_shipped(path: Path | None = None) -> Path:
    """The shipped start's directory, after checking it against its manifest: a closed
    set, every file listed with its sha256 (``files``) and nothing else there (a chat
    template or an adapter added to it would change every prompt or weight)."""
    # lazy: the digests of the run-directory layer
    from rlid.runs.integrity import DamagedFileError, verify_files

    path = path or shipped_dir()
    manifest = read_manifest(path)
    weights = manifest["weights"]
    files = manifest.get("files")
    file = path / MANIFEST
    if not isinstance(weights, dict) or weights.get("file") != WEIGHTS_FILE:
        raise ValueError(f"{file}: the weights must be {WEIGHTS_FILE}: reinstall rlid")
    if not isinstance(files, dict) or files.get(WEIGHTS_FILE) != weights.get("sha256"):
        raise ValueError(
            f"{file} does not list every file of the start with its sha256 (or lists other "
            "weights than its 'weights' entry): reinstall rlid"
        )
    if not (path / WEIGHTS_FILE).is_file():
        raise FileNotFoundError(
            f"the shipped start's weights {path / WEIGHTS_FILE} are missing: reinstall rlid"
        )
    if file_sha256(path / WEIGHTS_FILE) != weights.get("sha256"):
        raise ValueError(
            f"the shipped start's weights {path / WEIGHTS_FILE} do not match the sha256 in its "
            "manifest (damaged or replaced): reinstall rlid"
        )
    try:
        verify_files(path, files, record=file, closed=True, skip=(MANIFEST,), what="the start")
    except DamagedFileError as err:
        raise ValueError(
            f"the shipped start is damaged or changed: {err}; reinstall rlid"
        ) from None
    return path


def make_manifest(model_dir: Path, *, command: str, corpus: str) -> dict[str, Any]:
    """A start manifest for a directory ``rlid pretrain`` wrote (its ``pretrain.json``):
    the recipe, the command that rebuilds it, what its corpus saw, the number of
    sequences, the weights' sha256, and the software and CPU that built it."""
    record = json.loads((Path(model_dir) / "pretrain.json").read_text())
    return {
        "name": TINY_NAME,
        "recipe": record["config"],
        "command": command,
        "corpus": corpus,
        "sequences": record["sequences"],
        "answered_labels": record.get("answered_labels"),
        "final_loss": record.get("final_loss"),
        "weights": {
            "file": WEIGHTS_FILE,
            "sha256": file_sha256(Path(model_dir) / WEIGHTS_FILE),
            "dtype": "float32",
        },
        "built_with": record.get("software"),
        # a closed set: every file of the start but this manifest (check_shipped)
        "files": {
            p.name: file_sha256(p)
            for p in sorted(Path(model_dir).iterdir())
            if p.is_file() and p.name != MANIFEST
        },
    }


# ------------------------------------------------------------ the random-play start
def play_recipe() -> PretrainConfig:
    return PLAY_RECIPE if PLAY_RECIPE is not None else PretrainConfig()


def play_cache_dir() -> Path:
    """Where ``tiny-play`` lives: ``<cache_root>/models/tiny-warm`` (``$RLID_CACHE_DIR``
    moves the cache root); a non-default :data:`PLAY_RECIPE` in
    ``tiny-warm-<hash of the recipe>``."""
    recipe = play_recipe()
    if recipe == PretrainConfig():
        return cache_root() / "models" / "tiny-warm"
    digest = hashlib.sha256(json.dumps(asdict(recipe), sort_keys=True).encode()).hexdigest()
    return cache_root() / "models" / f"tiny-warm-{digest[:12]}"


def start_dir(name_or_path: str) -> Path | None:
    """Where ``name_or_path``'s weights live (None: ``tiny-random``, built from a seed)."""
    if name_or_path == TINY_RANDOM_NAME:
        return None
    if name_or_path == TINY_NAME:
        return shipped_dir()
    if name_or_path == TINY_PLAY_NAME:
        return play_cache_dir()
    return Path(name_or_path).expanduser()


def answered_labels(model_dir: str | os.PathLike[str] | None) -> dict[str, int] | None:
    """``{label: count}`` of the decision answers the warm start in ``model_dir`` was
    trained on, from its ``pretrain.json`` (written by ``rlid pretrain``); None when there
    is no such record (another model, or a build from before it)."""
    if model_dir is None or str(model_dir) == TINY_RANDOM_NAME:
        return None
    try:
        record = json.loads((Path(model_dir) / "pretrain.json").read_text())
    except (OSError, ValueError):
        return None
    labels = record.get("answered_labels") if isinstance(record, dict) else None
    return labels if isinstance(labels, dict) else None
