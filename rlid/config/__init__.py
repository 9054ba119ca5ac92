"""The base layer: what a run is configured with, below everything that trains.

* :mod:`rlid.config.run`      — :class:`TrainConfig`, a run's whole configuration.
* :mod:`rlid.config.planes`   — :class:`TokenConfig` and :class:`ScoringConfig`, the token and
  scoring planes' fields on top of it.
* :mod:`rlid.config.registry` — the plane registry (name -> config class, policy, trainer).
* :mod:`rlid.config.names`, :mod:`rlid.config.flags`, :mod:`rlid.config.limits`,
  :mod:`rlid.config.budget`, :mod:`rlid.config.rollout_engines` — the names a config may
  use, the CLI derived from the dataclasses, the machine's bounds, the budget counters.

Nothing here imports torch or any plane (the layering contract in ``pyproject.toml``).
"""

from rlid.config.planes import ScoringConfig, TokenConfig
from rlid.config.run import TrainConfig, option

__all__ = ["ScoringConfig", "TokenConfig", "TrainConfig", "option"]
