"""Which engine plays a run's rollouts: the config's engine fields and their checks.

``TrainConfig.rollout_engine`` names it (docs/inference-engine.md):

* ``trainer`` (default) — the trained torch model itself: μ = π_old;
* ``vllm`` — a vLLM engine beside the trainer, on every plane (decision readout,
  action scoring, generation); the trainer re-scores π_old, ``mismatch`` corrects
  μ ≠ π_old, weights are synced after every update (``rlid.engines.session``);
* ``perturbed`` / ``bf16`` — engines simulated with the trainer's own model, for the
  token plane's generation only (``rlid.baselines.engine``).

The ``vllm_*`` fields set up the vLLM engine and are refused with any other engine, so
a flag never goes silently unused. This module imports neither torch nor vLLM (the
config is read by ``rlid train --help``).

    >>> class Config:  # any object with the fields, e.g. a TrainConfig
    ...     plane, rollout_engine, vllm_dtype = "decision", "perturbed", "float32"
    >>> check_rollout_engine(Config())
    Traceback (most recent call last):
    ...
    ValueError: rollout_engine='perturbed' is a simulated engine of the token plane's generation; the decision plane takes rollout_engine='trainer' or 'vllm'
"""

from __future__ import annotations

from typing import Any

from rlid.config.registry import get_plane

SIMULATED = ("perturbed", "bf16")
"""Engines simulated with the trainer's model (``rlid.baselines.engine``): token plane only."""

VLLM_FIELDS = (
    "vllm_dtype",
    "vllm_max_model_len",
    "vllm_gpu_memory_utilization",
    "vllm_kv_cache_gib",
    "vllm_eager",
    "vllm_probe_tolerance",
)
"""The fields that set up the vLLM engine (recorded in a run's config when changed)."""

TOKEN_PLANE_ENGINE_FIELDS = ("rollout_engine", "mismatch")
"""Engine fields that were the token plane's own before every plane had them: a token
run's record always holds them, another plane's only when they differ from the default
(so earlier records and their fingerprints stay the same)."""


def check_rollout_engine(config: Any) -> None:
    """Raise ``ValueError`` (one line saying what to change) for an engine the plane
    cannot use, or a ``vllm_*`` value that would go unused or is out of range."""
    engine = config.rollout_engine
    if engine in SIMULATED and not get_plane(config.plane).generates_text:
        raise ValueError(
            f"rollout_engine={engine!r} is a simulated engine of the token plane's "
            f"generation; the {config.plane} plane takes rollout_engine='trainer' or 'vllm'"
        )
    fields = getattr(type(config), "__dataclass_fields__", {})
    if engine != "vllm":
        for name in VLLM_FIELDS:
            if name in fields and getattr(config, name) != fields[name].default:
                raise ValueError(
                    f"{name} sets up the vLLM engine, which this run does not use; add "
                    f"--rollout-engine vllm (rollout_engine = 'vllm') or leave {name} unset"
                )
        return
    length = config.vllm_max_model_len
    if length is not None and length < 2:
        raise ValueError(f"vllm_max_model_len must be >= 2 (or unset), got {length}")
    if not 0 < config.vllm_gpu_memory_utilization <= 1:
        raise ValueError(
            "vllm_gpu_memory_utilization must be in (0, 1], got "
            f"{config.vllm_gpu_memory_utilization}"
        )
    for name in ("vllm_kv_cache_gib", "vllm_probe_tolerance"):
        value = getattr(config, name)
        if value is not None and not value > 0:
            raise ValueError(f"{name} must be > 0 (or unset), got {value}")
