"""Where and in which precision a run computes: device, weight dtype, mixed precision.

One small object, :class:`Precision`, carries the choices of ``TrainConfig.device``,
``dtype`` and ``mixed_precision`` to the few places that need them:

* **device** — ``auto`` is CUDA when available, else the CPU; ``cuda`` / ``cuda:N``
  without CUDA is a clear error. Models, the value head and the KL reference live
  there; per-minibatch tensors are moved once per minibatch by the trainers.
  Sampling is *not* done on the device: probabilities are moved to the CPU and drawn
  with the run's CPU ``torch.Generator`` (``rlid.decision.policy.sample_rows``), so a seed
  samples the same actions on CPU and GPU.
* **dtype** — storage dtype of the weights. With ``mixed_precision`` the trained
  parameters are kept in float32 (master weights, so AdamW's state is float32 too)
  and ``dtype`` applies only to frozen weights (a LoRA base model, the KL reference).
* **mixed_precision** — ``torch.autocast`` around model forwards only; everything
  after the logits (label log-softmax, ratios, losses, advantages) runs in float32
  because the readout casts logits with ``.float()`` outside the autocast region.
  ``fp16`` also scales the loss with a ``GradScaler`` (float16 gradients underflow).

Gradient checkpointing is only active in train mode in Hugging Face models, so the
update runs under :func:`train_mode_without_dropout`: train mode with every dropout
probability temporarily set to zero (rollouts and updates must see the same function).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
AUTOCAST_DTYPES: dict[str, torch.dtype | None] = {
    "none": None,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


def cuda_memory_row(device: torch.device) -> dict[str, float] | None:
    """The CUDA allocator's peaks on ``device`` since the last call (GiB), then reset.

    None when ``device`` is not a CUDA device. Logged per iteration as ``gpu_memory``
    in ``metrics.jsonl``: ``peak_allocated_gib`` (tensors) and ``peak_reserved_gib``
    (what the caching allocator held, closer to what ``nvidia-smi`` shows). With
    several processes each measures its own device; rank 0's row is the one written.
    """
    if device.type != "cuda":
        return None
    row = {
        "peak_allocated_gib": torch.cuda.max_memory_allocated(device) / 2**30,
        "peak_reserved_gib": torch.cuda.max_memory_reserved(device) / 2**30,
    }
    torch.cuda.reset_peak_memory_stats(device)
    return row


def resolve_device(name: str) -> torch.device:
    """``auto`` | ``cpu`` | ``cuda`` | ``cuda:N`` -> a usable ``torch.device`` (clear errors)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(
            f"device={name!r} is not valid; choose auto, cpu, cuda or cuda:N"
        ) from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device={name!r} asks for CUDA but torch sees no CUDA device "
                f"(torch {torch.__version__}, built with CUDA {torch.version.cuda}); "
                "use --device cpu or --device auto"
            )
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise ValueError(f"device={name!r}: only {count} CUDA device(s) (cuda:0..{count - 1})")
    elif device.type != "cpu":
        raise ValueError(f"device={name!r} is not valid; choose auto, cpu, cuda or cuda:N")
    return device


def model_device(model: torch.nn.Module) -> torch.device:
    """Where the model computes (an offloaded model says so with ``compute_device``)."""
    compute = getattr(model, "compute_device", None)
    return compute if compute is not None else next(model.parameters()).device


@dataclass(frozen=True)
class Precision:
    """Device, weight dtype and autocast of a run (see the module docstring)."""

    device: torch.device = torch.device("cpu")
    weight_dtype: torch.dtype = torch.float32
    autocast_dtype: torch.dtype | None = None

    @classmethod
    def from_config(cls, config: Any) -> Precision:
        return cls(
            device=resolve_device(config.device),
            weight_dtype=DTYPES[config.dtype],
            autocast_dtype=AUTOCAST_DTYPES[config.mixed_precision],
        )

    def autocast(self) -> AbstractContextManager[Any]:
        """Autocast for model forwards (a no-op without mixed precision)."""
        if self.autocast_dtype is None:
            return nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)

    def place(self, model: torch.nn.Module) -> torch.nn.Module:
        """Move ``model`` to the device in the weight dtype; trained parameters stay float32
        under mixed precision (master weights). Returns the same module."""
        model.to(device=self.device, dtype=self.weight_dtype)
        if self.autocast_dtype is not None:
            for param in model.parameters():
                if param.requires_grad:
                    param.data = param.data.float()
        return model

    def grad_scaler(self) -> torch.amp.GradScaler | None:
        """A GradScaler for fp16 autocast, else None."""
        if self.autocast_dtype != torch.float16:
            return None
        return torch.amp.GradScaler(self.device.type)


_DROPOUT_ATTRS = ("attention_dropout", "dropout", "hidden_dropout", "attn_dropout", "resid_pdrop")


@contextmanager
def train_mode_without_dropout(model: torch.nn.Module, enabled: bool = True) -> Iterator[None]:
    """``model.train()`` with every dropout probability at 0, restored afterwards.

    Hugging Face models only checkpoint activations in train mode; zeroing the
    dropouts keeps the update's function equal to the rollout's (eval) function.
    Covers ``nn.Dropout`` modules and float dropout attributes that attention
    modules read in their forward (``attention_dropout`` and kin).
    """
    if not enabled:
        yield
        return
    saved: list[tuple[Any, str, float]] = []
    modes = {module: module.training for module in model.modules()}
    try:
        for module in model.modules():
            if isinstance(module, torch.nn.modules.dropout._DropoutNd):
                saved.append((module, "p", module.p))
                module.p = 0.0
            for attr in _DROPOUT_ATTRS:
                value = getattr(module, attr, None)
                if isinstance(value, float) and not isinstance(value, bool):
                    saved.append((module, attr, value))
                    setattr(module, attr, 0.0)
        model.train()
        yield
    finally:
        for module, attr, value in saved:
            setattr(module, attr, value)
        for module, training in modes.items():
            module.training = training


def enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    """Non-reentrant activation checkpointing of every decoder layer (HF models)."""
    kwargs = {"use_reentrant": False}
    hf_model: Any = model
    if hasattr(hf_model, "activation_checkpointing_enable"):  # transformers >= 5.x name
        hf_model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    elif hasattr(hf_model, "gradient_checkpointing_enable"):
        hf_model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    else:
        raise ValueError(
            f"gradient_checkpointing: {type(model).__name__} has no gradient_checkpointing_enable "
            "(not a Hugging Face PreTrainedModel)"
        )
    if hasattr(hf_model, "enable_input_require_grads"):
        # frozen embeddings (LoRA) would otherwise cut the graph at the first layer
        hf_model.enable_input_require_grads()


class OffloadedModel(torch.nn.Module):
    """A frozen model kept on the CPU and moved to ``device`` for each forward (``ref_offload``)."""

    def __init__(self, model: torch.nn.Module, device: torch.device) -> None:
        super().__init__()
        self.inner = model.to("cpu").eval().requires_grad_(False)
        self.compute_device = device  # read by rlid.lm.readout / baselines.engine
        self.config = model.config

    def get_output_embeddings(self) -> torch.nn.Module:
        inner: Any = self.inner
        return inner.get_output_embeddings()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.compute_device.type == "cpu":
            return self.inner(*args, **kwargs)
        self.inner.to(self.compute_device)
        try:
            with torch.no_grad():
                return self.inner(*args, **kwargs)
        finally:
            self.inner.to("cpu")


def cuda_rng_state() -> list[torch.Tensor] | None:
    """Every CUDA device's RNG state, or None without CUDA."""
    return torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None


def set_cuda_rng_state(state: list[torch.Tensor] | None) -> None:
    if state is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state)
