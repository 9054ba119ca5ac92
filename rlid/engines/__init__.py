"""Inference engines for rollouts (DESIGN §10): a real engine beside the trainer's torch model.

:class:`VLLMEngine` serves the decision readout, action scoring and generation from
vLLM, with weight sync from the trainer and a probe check after it
(``docs/inference-engine.md``). Importing this package does not import ``vllm``: it is
an optional extra (``pip install -e '.[vllm]'``), imported when an engine is built.
"""

from __future__ import annotations

from rlid.engines.probe import Probe, StaleEngineError, compare_probe, decision_probe
from rlid.engines.vllm import EngineUnavailable, SyncReport, VLLMEngine, VLLMOptions
from rlid.engines.weights import engine_state_dict

__all__ = [
    "EngineUnavailable",
    "Probe",
    "StaleEngineError",
    "SyncReport",
    "VLLMEngine",
    "VLLMOptions",
    "compare_probe",
    "decision_probe",
    "engine_state_dict",
]
