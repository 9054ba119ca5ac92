"""The token and scoring planes' configs: ``TrainConfig`` plus each plane's own fields.

As TRL's ``GRPOConfig`` extends its ``TrainingArguments``, :class:`TokenConfig` adds
the GRPO family's fields and :class:`ScoringConfig` the action-scoring norm; both stay
settable from the same CLI flags and TOML keys, and a run's ``config.json`` records
them as flat keys. ``TrainConfig.from_dict({"plane": "token", ...})`` returns a
:class:`TokenConfig` (the plane registry, :mod:`rlid.config.registry`, names the class).

    >>> TokenConfig(algo="dapo").plane
    'token'
"""

from __future__ import annotations

from dataclasses import dataclass

from rlid.config.names import PlaneName, ScoreNorm, TokenAlgo
from rlid.config.run import TrainConfig, option


@dataclass(frozen=True)
class TokenConfig(TrainConfig):
    """A token-plane run: free-text commands trained with the GRPO family."""

    plane: PlaneName = option("token", "decision (menu readout), token (free text) or scoring")
    algo: TokenAlgo = option("grpo", "token-plane loss: grpo, dr_grpo, dapo, gspo or cispo")
    engine_noise: float = option(0.05, "logit-noise scale of the perturbed rollout engine")
    max_new_tokens: int = option(8, "token plane: longest generated command")
    invalid_penalty: float = option(0.0, "token plane: reward added when a command does not parse")
    max_gen_batches: int = option(3, "DAPO dynamic sampling: most generation rounds per iteration")
    beta: float = option(0.0, "token plane: k3 KL-to-reference coefficient")
    overlong_cache: int = option(
        0, "DAPO overlong shaping: penalty ramp over the last N of max_new_tokens (0: off)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("max_new_tokens", "max_gen_batches"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("beta", "engine_noise"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 <= self.overlong_cache <= self.max_new_tokens:
            raise ValueError(
                f"overlong_cache must be in [0, max_new_tokens={self.max_new_tokens}], "
                f"got {self.overlong_cache}"
            )


@dataclass(frozen=True)
class ScoringConfig(TrainConfig):
    """A scoring-plane run: TWOSOME-style action scoring trained with decision PPO."""

    plane: PlaneName = option("scoring", "decision (menu readout), token (free text) or scoring")
    norm: ScoreNorm = option("token", "action scoring: sum, token-mean or word-mean log-likelihood")
