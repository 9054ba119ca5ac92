"""Registers the token and scoring planes in :mod:`rlid.planes`.

Loaded through the ``rlid.planes`` entry point (``pyproject.toml``), so the ``rlid``
core finds these planes without importing ``baselines``. Call :func:`register`
yourself when using an uninstalled checkout. Policies and trainers are named by
``"module:attribute"``: registering imports nothing heavy.
"""

from __future__ import annotations

from rlid.planes import Plane, register_plane

SCORING = Plane(
    name="scoring",
    summary="TWOSOME-style action scoring (log-likelihood of each legal action), same PPO",
    policy="baselines.scoring:scoring_policy",
    trainer="rlid.trainer:train",  # decision-level PPO, with the scoring policy
    config="baselines.config:ScoringConfig",
)
TOKEN = Plane(
    name="token",
    summary="free-text commands, the GRPO family (GRPO, Dr. GRPO, DAPO, GSPO, CISPO)",
    policy="baselines.token_policy:make_token_policy",
    trainer="baselines.token_trainer:train_token",
    config="baselines.config:TokenConfig",
)


def register() -> None:
    """Add the scoring and token planes to :mod:`rlid.planes`."""
    register_plane(SCORING)
    register_plane(TOKEN)
