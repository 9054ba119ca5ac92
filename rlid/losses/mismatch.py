"""Train-inference mismatch corrections: TIS and IcePop on ρ = π_old / μ.

When a separate engine plays the rollouts, the behaviour distribution μ (the engine's)
and the trainer's π_old at rollout time differ (another dtype, kernel or engine). The
PPO ratio π_θ/π_old handles staleness; the mismatch ratio ρ = π_old/μ is corrected by
weighting the policy-gradient term of each unit (a decision, a token, or a sequence
for GSPO) with ``rule(ρ)``:

* ``none``   — weight 1: trust the sampler to be the trainer's π_old;
* ``tis``    — truncated importance sampling (Yao et al. 2025, "Your Efficient RL
  Framework Secretly Brings You Off-Policy RL Training"): ``min(ρ, C)``, one-sided,
  small ratios kept;
* ``icepop`` — IcePop (Ling Team 2025, the Ring-1T report): ρ itself inside
  ``[low, high]``, **zero** outside (a two-sided mask, not a clip).

The token plane (``rlid.losses.token``) and the decision and scoring planes
(:func:`rlid.losses.decision.decision_ppo_loss`) use the same rules, which sit here, in the core,
for that reason.

    >>> import torch
    >>> weight, metrics = MismatchCorrection("tis").weigh(torch.tensor([0.5, 3.0]))
    >>> weight.tolist(), float(metrics["tis_truncated_frac"])
    ([0.5, 2.0], 0.5)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from rlid.config.names import Mismatch

Metrics = dict[str, Tensor]


def _masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1)


def no_correction(
    rho: Tensor, unit_mask: Tensor, *, tis_cap: float, icepop_low: float, icepop_high: float
) -> tuple[Tensor, Metrics]:
    """Weight 1: trust the sampler to be the trainer's π_old."""
    return torch.ones_like(rho), {}


def tis_weight(
    rho: Tensor, unit_mask: Tensor, *, tis_cap: float, icepop_low: float, icepop_high: float
) -> tuple[Tensor, Metrics]:
    """Truncated importance sampling (Yao et al. 2025): min(rho, cap)."""
    truncated = (rho > tis_cap).to(unit_mask.dtype)
    return rho.clamp(max=tis_cap), {"tis_truncated_frac": _masked_mean(truncated, unit_mask)}


def icepop_weight(
    rho: Tensor, unit_mask: Tensor, *, tis_cap: float, icepop_low: float, icepop_high: float
) -> tuple[Tensor, Metrics]:
    """IcePop (Ring-1T): rho inside [low, high], 0 outside — rho itself, not clipped."""
    keep = (rho >= icepop_low) & (rho <= icepop_high)
    masked = (~keep).to(unit_mask.dtype)
    weight = torch.where(keep, rho, torch.zeros_like(rho))
    return weight, {"icepop_masked_frac": _masked_mean(masked, unit_mask)}


MismatchRule = Callable[..., tuple[Tensor, Metrics]]
"""``rule(rho, unit_mask, *, tis_cap, icepop_low, icepop_high) -> (weight, metrics)``:
``rho`` and ``unit_mask`` have one entry per unit (token, sequence or decision); the
metrics are means over the units the mask selects."""

MISMATCH_RULES: dict[Mismatch, MismatchRule] = {
    "none": no_correction,
    "tis": tis_weight,
    "icepop": icepop_weight,
}

TIS_CAP = 2.0
"""TIS's cap C in min(ρ, C) (the value of Yao et al.'s examples)."""
ICEPOP_LOW, ICEPOP_HIGH = 0.5, 5.0
"""IcePop's band [low, high] for ρ (the IcePop blog's values)."""


@dataclass(frozen=True)
class MismatchCorrection:
    """One mismatch rule with its bounds.

    Attributes:
        rule: ``"none"``, ``"tis"`` or ``"icepop"``.
        tis_cap: TIS's C in min(ρ, C).
        icepop_low, icepop_high: IcePop keeps ρ in [low, high] and zeroes it outside.
    """

    rule: Mismatch = "none"
    tis_cap: float = TIS_CAP
    icepop_low: float = ICEPOP_LOW
    icepop_high: float = ICEPOP_HIGH

    def __post_init__(self) -> None:
        if self.rule not in MISMATCH_RULES:
            valid = ", ".join(map(repr, MISMATCH_RULES))
            raise ValueError(f"unknown mismatch {self.rule!r}; valid: {valid}")
        if self.tis_cap <= 0 or not 0 <= self.icepop_low <= self.icepop_high:
            raise ValueError(
                f"need tis_cap > 0 and 0 <= icepop_low <= icepop_high, got "
                f"tis_cap={self.tis_cap}, icepop_low={self.icepop_low}, "
                f"icepop_high={self.icepop_high}"
            )

    def weigh(self, rho: Tensor, unit_mask: Tensor | None = None) -> tuple[Tensor, Metrics]:
        """The weight of each unit (shaped like ``rho``) and the rule's metrics (means
        over ``unit_mask``, default every unit)."""
        mask = torch.ones_like(rho) if unit_mask is None else unit_mask
        return MISMATCH_RULES[self.rule](
            rho, mask, tis_cap=self.tis_cap, icepop_low=self.icepop_low,
            icepop_high=self.icepop_high,
        )  # fmt: skip

    def truncated(self, rho: Tensor) -> Tensor:
        """(…) bool: where TIS would truncate ρ (ρ > C), whichever rule is active."""
        return rho > self.tis_cap

    def masked(self, rho: Tensor) -> Tensor:
        """(…) bool: where IcePop would zero ρ (outside [low, high]), whichever rule is
        active."""
        return (rho < self.icepop_low) | (rho > self.icepop_high)
