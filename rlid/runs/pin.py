"""Pin the model a run starts from: its resolved path and a content hash of its weights.

A run records the pin when it starts; a resume that would load the starting model
again (LoRA base, KL reference) checks that the same name still resolves to the
same weights, so ``model = "tiny"`` cannot silently switch from a fresh to a warm
start (or a rebuilt warm start) in the middle of a run.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


def weights_hash(model_dir: Path) -> str:
    """sha256 over the names and contents of the weight files in ``model_dir``."""
    digest = hashlib.sha256()
    files = sorted(p for p in Path(model_dir).iterdir() if p.suffix in WEIGHT_SUFFIXES)
    if not files:
        raise ValueError(f"{model_dir} holds no weight files ({', '.join(WEIGHT_SUFFIXES)})")
    for path in files:
        digest.update(path.name.encode() + b"\0")
        with open(path, "rb") as fh:
            digest.update(hashlib.file_digest(fh, "sha256").digest())
    return digest.hexdigest()


def model_pin(name_or_path: str) -> dict[str, Any]:
    """``{"model", "origin", "path", "sha256"}`` of what ``name_or_path`` loads now."""
    from rlid.models import TINY_NAME, tiny_cache_dir

    if name_or_path == TINY_NAME:
        cache = tiny_cache_dir()
        if (cache / "config.json").is_file():
            return {"model": name_or_path, "origin": "warm", "path": str(cache.resolve()),
                    "sha256": weights_hash(cache)}  # fmt: skip
        # deterministic: built from the embedded config with seed 0
        return {"model": name_or_path, "origin": "fresh", "path": None, "sha256": None}
    path = Path(name_or_path).expanduser().resolve()
    return {"model": name_or_path, "origin": "local", "path": str(path),
            "sha256": weights_hash(path)}  # fmt: skip


def describe(pin: dict[str, Any]) -> str:
    if pin.get("origin") == "fresh":
        return f"{pin.get('model')!r} (the fresh random initialisation)"
    sha = str(pin.get("sha256") or "")[:12]
    return f"{pin.get('model')!r} = {pin.get('path')} (weights sha256 {sha}...)"


def check_pin(recorded: dict[str, Any], where: Path) -> None:
    """Refuse when the recorded starting model no longer resolves to the same weights."""
    now = model_pin(str(recorded["model"]))
    if (now.get("origin"), now.get("sha256")) != (recorded.get("origin"), recorded.get("sha256")):
        raise ValueError(
            f"cannot resume {where}: it started from {describe(recorded)}, but that now "
            f"resolves to {describe(now)}, so the resumed run would use different starting / "
            "reference weights. Restore the original model (or warm-start cache), or start a "
            "new run"
        )
