"""The worker side of the vLLM weight sync: a ``worker_extension_cls`` mixed into vLLM's worker.

vLLM runs its model in a worker process. :class:`WeightSyncExtension` is named by its
import path in ``LLM(worker_extension_cls=...)``; vLLM adds its methods to the worker
class, and ``llm.collective_rpc("rlid_reload_weights", args=(path,))`` calls them in the
worker. (Sending a function through ``collective_rpc`` instead needs
``VLLM_ALLOW_INSECURE_SERIALIZATION=1``: it is pickled; an extension class is not.)

The weights go through a safetensors file (in ``/dev/shm`` where it exists, so in
memory) in checkpoint names, and the model runner's ``reload_weights`` loads them the way
a checkpoint is loaded at start-up, kernel repacking included. Calling
``model.load_weights`` directly after start-up fails on the CPU build ("Attempted to load
weight (torch.Size([128, 256])) into parameter (torch.Size([0]))": the CPU backend has
repacked its linear weights); releases without ``reload_weights`` fall back to it.

Tied weights: a model whose output head shares the embedding matrix (the tiny model,
small Qwen2s) loads that matrix once, for the embedding; the head's own kernel state is
never rebuilt by the reload. On the CPU build that state is a repacked copy of the old
matrix, so the head kept serving the old weights (measured: probe gap 0.79 after a sync
that changed the embedding). :func:`reprocess_tied` rebuilds every module that shares
its weight with another one.

This module imports neither vLLM nor anything that needs it, so importing it is cheap.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from safetensors.torch import load_file


class WeightSyncExtension:
    """Methods vLLM mixes into its worker (``self`` is the worker: ``self.model_runner``)."""

    model_runner: Any

    def rlid_reload_weights(self, path: str) -> int:
        """Load every tensor of the safetensors file ``path`` into the served model.

        Returns how many tensors were loaded.
        """

        weights = load_file(path, device="cpu")
        runner = self.model_runner
        # the reload warns "Failed to load weights" for modules with nothing to load (the
        # rotary cache) and for a tied head, which reprocess_tied rebuilds below
        quiet = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            if hasattr(runner, "reload_weights"):
                runner.reload_weights(weights_iterator=iter(weights.items()))
            else:  # older releases: the model's own loader
                runner.model.load_weights(weights=iter(weights.items()))
        finally:
            quiet.setLevel(level)
        reprocess_tied(runner.get_model() if hasattr(runner, "get_model") else runner.model)
        return len(weights)

    def rlid_worker_info(self) -> dict[str, Any]:
        """Where the worker computes: its device and torch thread count (diagnostics)."""

        return {"device": str(getattr(self, "device", "cpu")), "threads": torch.get_num_threads()}


def reprocess_tied(model: Any) -> int:
    """Run ``quant_method.process_weights_after_loading`` again on every module whose
    ``weight`` is shared with another module (after the shared matrix was reloaded);
    returns how many modules were processed."""
    owners: dict[int, list[Any]] = {}
    for module in model.modules():
        weight = module.__dict__.get("_parameters", {}).get("weight")
        if weight is not None:
            owners.setdefault(id(weight), []).append(module)
    done = 0
    for modules in owners.values():
        if len(modules) < 2:
            continue
        for module in modules:
            method = getattr(module, "quant_method", None)
            if method is not None and hasattr(method, "process_weights_after_loading"):
                method.process_weights_after_loading(module)
                done += 1
    return done
