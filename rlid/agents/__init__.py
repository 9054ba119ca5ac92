"""What a run produces: evaluate it, export it as an agent directory, load it back.

* :mod:`rlid.agents.agent` — ``evaluate_run`` / ``evaluate_model`` (``rlid eval``),
  ``export_run`` (``rlid export``), ``load_agent`` / ``load_policy``.
* :mod:`rlid.agents.card`  — the exported agent's model card.

    >>> from rlid.agents import load_agent  # doctest: +SKIP
"""

from rlid.agents.agent import (
    Agent,
    EvalRequest,
    evaluate_model,
    evaluate_run,
    export_run,
    load_agent,
    load_policy,
)

__all__ = [
    "Agent",
    "EvalRequest",
    "evaluate_model",
    "evaluate_run",
    "export_run",
    "load_agent",
    "load_policy",
]
