"""Pin the model a run starts from: its resolved path and a content hash of its weights.

A run records the pin when it starts (``{"model", "origin", "path", "sha256"}``, made
by :func:`rlid.lm.starts.model_pin`); a resume that would load the starting model again
(LoRA base, KL reference) checks that the same name still resolves to the same
weights, so ``model = "tiny-play"`` cannot silently switch to a rebuilt start in the
middle of a run. This module only hashes and compares.
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


def describe(pin: dict[str, Any]) -> str:
    if pin.get("origin") == "fresh":
        return f"{pin.get('model')!r} (the fresh random initialisation)"
    sha = str(pin.get("sha256") or "")[:12]
    return f"{pin.get('model')!r} = {pin.get('path')} (weights sha256 {sha}...)"


def check_pin(recorded: dict[str, Any], now: dict[str, Any], where: Path) -> None:
    """Refuse when the recorded starting model no longer resolves to the same weights
    (``now``: the pin of ``recorded["model"]`` as it resolves today,
    :func:`rlid.lm.starts.model_pin`)."""
    if (now.get("origin"), now.get("sha256")) != (recorded.get("origin"), recorded.get("sha256")):
        raise ValueError(
            f"cannot resume {where}: it started from {describe(recorded)}, but that now "
            f"resolves to {describe(now)}, so the resumed run would use different starting / "
            "reference weights. Restore the original model (or warm-start cache), or start a "
            "new run"
        )
