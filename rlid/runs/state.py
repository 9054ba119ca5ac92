"""Trainer state (optimizer, RNG states, counters) in formats that cannot run code.

``save_state(stem, obj)`` writes ``stem.safetensors`` (every tensor) and
``stem.json`` (the structure around them); ``load_state(stem)`` reads them back.
Only plain data survives the trip: dicts (any hashable plain keys), lists, tuples,
str/int/float/bool/None (NaN and infinities included), numpy arrays and scalars,
and torch tensors. Loading builds nothing else, so a run directory from someone
else can be resumed or evaluated without trusting it -- unlike ``torch.load`` of a
pickle, which can execute arbitrary code (rlid up to 0.1 wrote ``trainer_state.pt``;
:func:`convert_legacy_state` turns one into this format without unpickling code).
"""

from __future__ import annotations

import json
import math
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

LEGACY_NAME = "trainer_state.pt"
FORMAT = "rlid-state-1"


class UnsafeStateError(ValueError):
    """A checkpoint piece that rlid refuses to load (old pickle format)."""


class StoredTensor:
    """A tensor of a ``.safetensors`` checkpoint piece, read only when :meth:`load` is
    called (``load_state(..., lazy=True)``), so that a sharded optimizer can read one
    full tensor at a time and keep only its shard of it."""

    __slots__ = ("path", "key", "shape")

    def __init__(self, path: Path, key: str, shape: torch.Size) -> None:
        self.path, self.key, self.shape = path, key, shape

    def load(self) -> torch.Tensor:

        with safe_open(str(self.path), framework="pt") as f:
            return f.get_tensor(self.key)


def materialize(value: Any) -> Any:
    """``value`` with every :class:`StoredTensor` in it read (each file opened once)."""

    with ExitStack() as stack:
        opened: dict[Path, Any] = {}

        def read(v: Any) -> Any:
            if isinstance(v, StoredTensor):
                if v.path not in opened:
                    opened[v.path] = stack.enter_context(safe_open(str(v.path), framework="pt"))
                return opened[v.path].get_tensor(v.key)
            if isinstance(v, dict):
                return {k: read(x) for k, x in v.items()}
            if isinstance(v, list):
                return [read(x) for x in v]
            if isinstance(v, tuple):
                return tuple(read(x) for x in v)
            return v

        return read(value)


def _encode(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        key = f"t{len(tensors)}"
        # clone: safetensors refuses tensors that share storage
        tensors[key] = value.detach().to("cpu").contiguous().clone()
        return {"__tensor__": key}
    if isinstance(value, np.ndarray):
        return {"__ndarray__": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"__float__": repr(value)}
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v, tensors) for v in value]}
    if isinstance(value, list):
        return [_encode(v, tensors) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: _encode(v, tensors) for k, v in value.items()}
        return {"__dict__": [[_encode(k, tensors), _encode(v, tensors)] for k, v in value.items()]}
    raise TypeError(f"cannot store a {type(value).__name__} in trainer state (plain data only)")


def _decode(value: Any, tensors: dict[str, Any], where: str) -> Any:
    if isinstance(value, list):
        return [_decode(v, tensors, where) for v in value]
    if not isinstance(value, dict):
        return value
    if "__tensor__" in value:
        key = value["__tensor__"]
        if key not in tensors:
            raise ValueError(f"{where}: tensor {key!r} is missing from the .safetensors file")
        return tensors[key]
    if "__ndarray__" in value:
        return np.asarray(value["__ndarray__"], dtype=np.dtype(str(value["dtype"])))
    if "__float__" in value:
        text = str(value["__float__"])
        if text not in ("nan", "inf", "-inf"):
            raise ValueError(f"{where}: bad float {text!r}")
        return float(text)
    if "__tuple__" in value:
        return tuple(_decode(v, tensors, where) for v in value["__tuple__"])
    if "__dict__" in value:
        out = {}
        for k, v in value["__dict__"]:
            key = _decode(k, tensors, where)
            out[tuple(key) if isinstance(key, list) else key] = _decode(v, tensors, where)
        return out
    return {k: _decode(v, tensors, where) for k, v in value.items()}


def save_state(stem: Path, obj: Any) -> None:
    """Write ``obj`` as ``stem.safetensors`` + ``stem.json`` (plain writes: callers
    put them in a temporary checkpoint directory that is renamed into place)."""

    stem = Path(stem)
    tensors: dict[str, torch.Tensor] = {}
    tree = _encode(obj, tensors)
    save_file(tensors, str(stem.with_suffix(".safetensors")), metadata={"format": FORMAT})
    text = json.dumps({"format": FORMAT, "state": tree}, sort_keys=True)
    stem.with_suffix(".json").write_text(text + "\n")


def load_state(stem: Path, *, lazy: bool = False) -> Any:
    """Read what :func:`save_state` wrote; clear errors for missing, corrupt or old files.

    ``lazy``: tensors come back as :class:`StoredTensor` (shape known, data read on
    :meth:`StoredTensor.load`); :func:`materialize` reads them all.
    """

    stem = Path(stem)
    json_path, tensor_path = stem.with_suffix(".json"), stem.with_suffix(".safetensors")
    legacy = stem.parent / LEGACY_NAME
    if not json_path.exists() and legacy.exists():
        raise UnsafeStateError(legacy_message(stem.parent))
    for path in (json_path, tensor_path):
        if not path.is_file():
            raise FileNotFoundError(
                f"checkpoint piece {path} is missing; the checkpoint in {stem.parent} is "
                "incomplete (restore the file, or start a new run)"
            )
    try:
        data = json.loads(json_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"checkpoint piece {json_path} is corrupt (not JSON: {err})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"checkpoint piece {json_path} is not rlid trainer state ({FORMAT})")
    tensors: dict[str, Any]
    try:
        if lazy:
            with safe_open(str(tensor_path), framework="pt") as f:
                tensors = {
                    key: StoredTensor(tensor_path, key, torch.Size(f.get_slice(key).get_shape()))
                    for key in f.keys()  # noqa: SIM118  (a safetensors handle, not a dict)
                }
        else:
            tensors = load_file(str(tensor_path))
    except (SafetensorError, OSError) as err:
        raise ValueError(f"checkpoint piece {tensor_path} is corrupt: {err}") from None
    return _decode(data["state"], tensors, str(json_path))


def legacy_message(ckpt: Path) -> str:
    run_dir = Path(ckpt).parent
    return (
        f"{Path(ckpt) / LEGACY_NAME} is in the old pickle format, which can run arbitrary "
        "code when loaded, so rlid does not load it (runs of rlid 0.1 wrote it; rlid 0.3's "
        f"`python -m rlid.runs.convert {run_dir}` converts one without running code); start a "
        "new run"
    )
