"""Packed forwards: a batch of prompts as ONE row of tokens, no padding, no mask.

The readouts (``rlid.lm.readout``, ``rlid.lm.tree_readout``) read a batch of prompts of
different lengths. Left padding them to the longest (the layout those modules
document) spends the model's work on pad tokens and hands the attention a (B, 1, T, T)
mask, which keeps the CPU's fused attention kernel from skipping the causal half. A
packed forward instead concatenates the prompts into one row (1, sum of lengths):
the linear layers run over real tokens only, each token's position id counts from
its own prompt's start, and the attention runs once per prompt, causal and unmasked
(``scaled_dot_product_attention(is_causal=True)`` on that prompt's slice). Each prompt
then reads exactly as if it were alone, the same numbers as the padded layout up to
float rounding (tests: within 1e-5 on log-probs, the same sampled actions).

How: a Hugging Face model looks its attention function up by
``config._attn_implementation``; :func:`packed_forward` switches that to
:data:`PACKED` (registered here) for one call and passes the prompts' lengths through
the forward's keyword arguments, which reach the attention function. A model that
does not route its attention through that interface (the call would attend across
prompts) is detected by the attention function never being called; it is then read
padded (:func:`packs` remembers the answer per model class).

``RLID_PACKING=0`` in the environment (or :func:`packing` as a context manager) reads
every batch padded, as rlid 0.4.0 did: for a byte-for-byte comparison with that code.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv

PACKED = "rlid_packed"
"""The attention implementation name a packed forward runs under."""

LENGTHS = "rlid_packed_lengths"
"""The forward keyword that carries the packed prompts' lengths to the attention."""

_enabled = os.environ.get("RLID_PACKING", "1").strip() not in ("0", "false", "no", "off")
_unsupported: set[type] = set()  # model classes whose attention ignored the interface
_calls = [0]  # attention calls of the packed function (a model that ignores it: none)


def enabled() -> bool:
    """Whether readouts pack their batches (default: yes; ``RLID_PACKING=0``: no)."""
    return _enabled


@contextmanager
def packing(on: bool) -> Iterator[None]:
    """Pack (``True``) or pad (``False``) the readouts inside the block."""
    global _enabled
    before, _enabled = _enabled, on
    try:
        yield
    finally:
        _enabled = before


def _packed_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Causal attention of each packed prompt on its own slice: query, key and value
    (1, H, T, d) with T the lengths' sum; returns (1, T, H, d) as the model expects."""
    lengths = kwargs.get(LENGTHS)
    if lengths is None or attention_mask is not None or query.shape[0] != 1:
        raise RuntimeError(
            f"the {PACKED!r} attention runs inside rlid.lm.packed.packed_forward only"
        )
    _calls[0] += 1
    groups = getattr(module, "num_key_value_groups", 1)
    if groups > 1:
        key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    # split (not slicing): its backward concatenates instead of adding a full-size zero
    # tensor per prompt
    parts = [
        F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, scale=scaling, is_causal=True)
        for q, k, v in zip(query.split(lengths, 2), key.split(lengths, 2), value.split(lengths, 2))
    ]
    out = parts[0] if len(parts) == 1 else torch.cat(parts, 2)  # (1, H, T, d)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(PACKED, _packed_attention)


def _unwrapped(model: Any) -> Any:
    """The model inside wrappers that hold it as ``module`` (DDP) and have no config."""
    while not hasattr(model, "config") and hasattr(model, "module"):
        model = model.module
    return model


def _config(model: Any) -> Any:
    """The model's config object, through wrappers (DDP's ``module``)."""
    return getattr(_unwrapped(model), "config", None)


def _model_class(model: Any) -> type:
    model = _unwrapped(model)
    base = getattr(model, "get_base_model", None)  # peft
    return type(base()) if callable(base) else type(model)


def _recomputes(model: Any) -> bool:
    """Whether a forward of ``model`` now runs under gradient checkpointing (enabled, in
    train mode): its layers are recomputed in the backward, after :func:`packed_forward`
    has put the attention implementation back, so they would recompute unpacked."""
    model = _unwrapped(model)
    name = (  # transformers 5 renamed it
        "is_activation_checkpointing"
        if hasattr(type(model), "is_activation_checkpointing")
        else "is_gradient_checkpointing"
    )
    return bool(getattr(model, name, False) and model.training)


def packs(model: Any) -> bool:
    """Whether ``model``'s readouts pack now: packing is on, the model is a Hugging Face
    model with a config whose attention runs through the interface (``sdpa`` or
    ``eager``), its class was not found to ignore it, and no gradient checkpointing will
    recompute its layers after the call."""
    if not _enabled or _recomputes(model):
        return False
    config = _config(model)
    if config is None or getattr(config, "_attn_implementation", None) not in ("sdpa", "eager"):
        return False
    return _model_class(model) not in _unsupported


def pack_ids(seqs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """One row of every sequence's ids: input_ids (1, N), position_ids (1, N) counting
    from each sequence's start, and the lengths."""
    if not seqs or any(len(s) == 0 for s in seqs):
        raise ValueError("need at least one sequence, each with at least one token")
    lengths = [len(s) for s in seqs]
    ids = torch.tensor([int(t) for s in seqs for t in s], dtype=torch.long)[None]
    positions = torch.cat([torch.arange(n) for n in lengths])[None]
    return ids, positions, lengths


def packed_forward(
    model: Any,
    seqs: Sequence[Sequence[int]],
    keep: torch.Tensor,
    device: torch.device,
) -> Any:
    """The model's output over ``seqs`` packed into one row, logits only at the row's
    columns ``keep`` (1D, indices into the packed row): ``out.logits`` is (1, len(keep), V).
    Returns None where the model turned out not to route its attention through the
    interface (the caller then reads the batch padded)."""
    ids, positions, lengths = pack_ids(seqs)
    config = _config(model)
    before = config._attn_implementation
    calls = _calls[0]
    config._attn_implementation = PACKED
    try:
        out = model(
            input_ids=ids.to(device),
            position_ids=positions.to(device),
            logits_to_keep=keep.to(device),
            use_cache=False,
            **{LENGTHS: lengths},
        )
    finally:
        config._attn_implementation = before
    if _calls[0] == calls:  # the model's attention never asked the interface
        _unsupported.add(_model_class(model))
        return None
    return out


def ends(lengths: Sequence[int]) -> torch.Tensor:
    """The packed row's column of each sequence's last token (1D long)."""
    return torch.tensor(list(lengths), dtype=torch.long).cumsum(0) - 1
