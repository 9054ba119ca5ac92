"""A training run's vLLM engine: started beside the trainer, synced after every update.

``rlid train --rollout-engine vllm`` (docs/inference-engine.md). The trainer keeps its
torch model for gradients; :class:`EngineSession` holds the engine that plays the
rollouts and keeps it on the trainer's weights:

1. :func:`check_engine_installed` — before any work (``rlid.core.loop.open_run``): without
   the ``vllm`` package the run stops with one line naming the extra;
2. :meth:`EngineSession.start` — after the run directory is written and the starting
   weights are final (resumed, and broadcast over processes): the engine serves the
   model as it is then, and the probe check runs once;
3. :meth:`EngineSession.sync` — after every optimizer phase: full weights (LoRA
   merged), a prefix-cache reset, then the probe check (:class:`StaleEngineError`
   stops the run when the engine does not serve the trainer's weights);
4. :meth:`EngineSession.close` — at the end, also on an error.

The decision and scoring planes' rollouts record μ (the engine's distribution); the
trainer then re-scores π_old, the ratio's denominator, in micro-batches
(:func:`rescore_decisions`), as the token plane re-scores its completions' tokens.

**Several processes (torchrun): one engine per rank.** Each rank plays its own groups
(g mod N) in lockstep with no collective per env step; an engine of its own keeps it
so (one engine on rank 0 would need every other rank's prompts and results to cross
the process group at every step, and would serialise the ranks' rollouts on one
engine). It is the layout of TRL's colocate mode and verl's hybrid engine: every
process holds its engine beside its trainer, on its own device, with the memory
fraction ``vllm_gpu_memory_utilization``. Every rank syncs its own engine after the
update, from its full copy of the weights (FSDP2 keeps them gathered between updates;
:func:`rlid.engines.weights.engine_state_dict` gathers a sharded tensor).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from rlid.engines.probe import Probe, decision_probe
from rlid.engines.vllm import VLLMEngine
from rlid.engines.vllm_options import VLLMOptions, import_vllm
from rlid.lm.optim import chunks
from rlid.lm.readout import context_limit

TORCHRUN_VARIABLES = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_USE_AGENT_STORE", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
)  # fmt: skip
"""What torchrun tells a trainer process about its group: hidden from the engine's own
processes, which set up a distributed group of their own (a world of one)."""


def check_engine_installed(config: Any) -> None:
    """With ``rollout_engine='vllm'``: import vLLM now, so a missing or broken install
    stops the run before any work, in one line naming the extra
    (:class:`rlid.engines.EngineUnavailable`)."""
    if config.rollout_engine == "vllm":
        import_vllm()


def engine_options(config: Any, model: Any) -> VLLMOptions:
    """The engine's options from a run's ``vllm_*`` fields; ``vllm_max_model_len`` unset
    is the model's context length (what the policies fit their prompts to)."""
    length = config.vllm_max_model_len or context_limit(model) or VLLMOptions.max_model_len
    return VLLMOptions(
        dtype=config.vllm_dtype,
        max_model_len=int(length),
        gpu_memory_utilization=config.vllm_gpu_memory_utilization,
        kv_cache_gib=config.vllm_kv_cache_gib,
        enforce_eager=config.vllm_eager,
        seed=config.seed,
        probe_tolerance=config.vllm_probe_tolerance,
    )


@contextlib.contextmanager
def engine_environment(device: torch.device) -> Iterator[None]:
    """The environment the engine's processes start in: no torchrun variables and, for
    a trainer on a GPU, that GPU alone visible (vLLM's worker takes its first visible
    device). Restored afterwards."""
    saved = dict(os.environ)
    for name in TORCHRUN_VARIABLES:
        os.environ.pop(name, None)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        visible = saved.get("CUDA_VISIBLE_DEVICES")
        ids = [v.strip() for v in visible.split(",")] if visible else None
        os.environ["CUDA_VISIBLE_DEVICES"] = ids[index] if ids else str(index)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@dataclass
class EngineSession:
    """A run's engine, its probe, and how its last sync went.

    Attributes:
        engine: the vLLM engine playing the rollouts.
        probe: the fixed decision prompt of the probe check
            (:func:`rlid.engines.decision_probe` in the run's interface).
        start_seconds: how long the engine took to start (and pass its first probe).
    """

    engine: VLLMEngine
    probe: Probe
    start_seconds: float

    @classmethod
    def start(cls, config: Any, model: torch.nn.Module, tokenizer: Any) -> EngineSession:
        """Start the engine on ``model``'s current weights (on the trainer's device) and
        check the probe once."""
        began = time.perf_counter()
        device = next(model.parameters()).device
        with engine_environment(device):
            engine = VLLMEngine.from_model(model, tokenizer, engine_options(config, model))
        try:
            probe = decision_probe(tokenizer, config.interface)
            engine.check_probe(model, probe)
        except BaseException:
            engine.close()
            raise
        return cls(engine, probe, time.perf_counter() - began)

    def sync(self, model: torch.nn.Module) -> dict[str, float]:
        """Push ``model``'s weights, reset the prefix cache, check the probe; returns the
        sync's seconds and probe gap. Raises
        :class:`rlid.engines.StaleEngineError` when the engine disagrees."""
        report = self.engine.sync_weights(model, probe=self.probe)
        assert report.probe_gap is not None  # a probe was given
        return {"sync_seconds": report.seconds, "probe_gap": report.probe_gap}

    def close(self) -> None:
        self.engine.close()


@torch.no_grad()
def rescore_decisions(policy: Any, decisions: list[Any], micro_batch_size: int | None) -> None:
    """The trainer's π_old for decisions an engine played (``extra["logp_rollout"]``):
    ``logp`` becomes log π_old of the chosen row, ``extra["logp_old_rows"]`` its menu's
    log π_old, and with a value head ``value`` is V(s) — from ``policy.score`` (the
    model, at each decision's temperature) in micro-batches of ``micro_batch_size``
    (None: all at once)."""
    for part in chunks(len(decisions), micro_batch_size):
        batch = decisions[part]
        logp_all, _, hidden = policy.score(batch)  # (B, K), (B,), (B, d)
        values = policy.value_head(hidden).tolist() if policy.value_head is not None else None
        rows = logp_all.float().cpu()
        for b, d in enumerate(batch):
            d.logp = float(rows[b, d.chosen])
            d.extra["logp_old_rows"] = rows[b, : d.num_rows].tolist()
            if values is not None:
                d.value = float(values[b])
