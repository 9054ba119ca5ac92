"""The weights an inference engine should serve, taken from the trainer's torch model.

:func:`engine_state_dict` returns the model's parameters under the names of its Hugging
Face checkpoint (``model.layers.0.self_attn.q_proj.weight``, ...), which is what an
engine's weight loader reads, on the CPU and in the engine's dtype:

* a plain model: its state dict, with tied tensors written once (the engine ties its
  output head to the embedding itself);
* a peft LoRA model: the **merged** weights ``W + scale · B A`` of every adapted layer,
  computed out of place from ``get_delta_weight``. TRL merges in place, pushes, then
  unmerges; that leaves ``(W + ΔW) − ΔW``, which is not ``W`` in float arithmetic
  (measured on the tiny model with rank-4 adapters on q/v: one merge/unmerge round
  changed 25,126 of the 98,304 frozen base weights, by up to 7.5e-9), so the frozen
  base, and with it the KL reference and bit-exact resume, would no longer be the
  run's. Out of place, the trainer's tensors are never written.

:func:`write_safetensors` stores such a dict in one file, atomically (a temporary
sibling, then a rename), for a worker in another process to read.

Example::

    >>> from rlid.lm.models import build_tiny_model
    >>> from rlid.lm.tokenizer import build_tiny_tokenizer
    >>> state = engine_state_dict(build_tiny_model(build_tiny_tokenizer()), torch.float32)
    >>> "lm_head.weight" in state, "model.embed_tokens.weight" in state  # tied: once
    (False, True)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

LORA_PARTS = ("lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B")
"""Name parts of adapter tensors (never sent to an engine: it gets merged weights)."""


def engine_state_dict(model: torch.nn.Module, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """``{checkpoint name: tensor}`` of ``model`` for an engine, CPU, ``dtype``, contiguous.

    A peft-wrapped model gives its merged weights (module docstring); a tensor that
    shares storage with an earlier one (tied embeddings) is left out.
    """
    inner = base_model(model)
    merged = _merged_lora_weights(inner)
    state: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, int]] = set()
    with torch.no_grad():
        for raw_name, tensor in inner.state_dict().items():
            if any(f".{part}." in raw_name for part in LORA_PARTS):
                continue
            if "lora_magnitude_vector" in raw_name:
                raise ValueError(
                    "DoRA adapters (use_dora=True) cannot be merged for the engine; "
                    "train plain LoRA adapters"
                )
            name = raw_name.replace(".base_layer.", ".")
            key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
            if key in seen and name not in merged:
                continue  # tied to a tensor already written
            seen.add(key)
            value = merged.get(name, tensor)
            state[name] = value.detach().to(device="cpu", dtype=dtype).contiguous()
    return state


def base_model(model: torch.nn.Module) -> Any:
    """The Hugging Face model inside a peft wrapper (``model`` itself otherwise)."""
    unwrap: Any = getattr(model, "get_base_model", None)
    return unwrap() if callable(unwrap) else model


def _merged_lora_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``{"<layer>.weight": W + Σ_active ΔW}`` for each peft LoRA layer not merged yet."""
    merged: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, module in model.named_modules():
            if not (hasattr(module, "base_layer") and hasattr(module, "get_delta_weight")):
                continue
            base: Any = module.base_layer
            weight = base.weight
            if not getattr(module, "merged", False) and not getattr(
                module, "disable_adapters", False
            ):
                for adapter in module.active_adapters:
                    if adapter in getattr(module, "lora_A", {}) or adapter in getattr(
                        module, "lora_embedding_A", {}
                    ):
                        weight = weight + module.get_delta_weight(adapter).to(weight.dtype)
            merged[f"{name}.weight"] = weight
    return merged


def write_safetensors(state: dict[str, torch.Tensor], path: str | os.PathLike[str]) -> Path:
    """Write ``state`` to ``path`` (a temporary sibling first, then a rename); return it."""

    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    save_file(state, str(tmp))
    os.replace(tmp, path)
    return path
