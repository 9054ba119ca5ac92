"""The train-inference gap of one iteration: how far the engine's μ is from the trainer's π_old.

After the rollout each sampled unit (a decision on the decision and scoring planes, a
generated token on the token plane) carries log μ (the engine that sampled it) and
log π_old (the trainer's re-scoring at rollout time). The iteration's row records,
under ``engine_gap`` (docs/inference-engine.md):

* ``logp_abs_mean`` / ``logp_abs_max`` — mean and max of |log μ − log π_old| over the
  sampled units;
* ``kl`` — KL(μ ‖ π_old) per unit. A decision's is exact, Σ_k μ_k (log μ_k − log π_old_k)
  over its menu; a token's is the k3 estimate (ρ − 1) − log ρ with ρ = π_old/μ of the
  sampled token (unbiased for KL(μ ‖ π_old) because the token was drawn from μ, and never
  negative), as the full vocabulary distributions are not kept;
* ``tis_truncated_frac`` / ``icepop_masked_frac`` — the fraction of units whose ρ TIS
  would truncate (ρ > C) or IcePop would mask (outside [low, high]), whichever
  correction the run applies (the rule's own fraction in the loss is the one counted
  over the update's minibatches);
* ``units`` — how many units the numbers are over.

Sums add over processes (:func:`gap_row` reduces them), so N processes record what
one would.

    >>> sums = GapSums.of([-0.5, -1.0], [-0.5, -1.1], [0.0, 0.01])
    >>> row = sums.row()
    >>> round(row["logp_abs_mean"], 6), round(row["logp_abs_max"], 6), row["units"]
    (0.05, 0.1, 2)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rlid.lm import distributed as dist_
from rlid.lm.distributed import World
from rlid.losses.mismatch import MismatchCorrection


@dataclass(frozen=True)
class GapSums:
    """Sums over sampled units, additive over batches and processes."""

    units: int = 0
    abs_sum: float = 0.0
    abs_max: float = 0.0
    kl_sum: float = 0.0
    truncated: int = 0
    masked: int = 0

    @classmethod
    def of(
        cls,
        logp_rollout: Sequence[float],
        logp_old: Sequence[float],
        kl: Sequence[float],
        correction: MismatchCorrection | None = None,
    ) -> GapSums:
        """The sums of units with log μ ``logp_rollout``, log π_old ``logp_old`` and
        per-unit KL ``kl`` (all the same length); ``correction`` gives the TIS cap and
        the IcePop band (default: their defaults)."""
        if not len(logp_rollout) == len(logp_old) == len(kl):
            raise ValueError("logp_rollout, logp_old and kl need one value per unit")
        correction = correction or MismatchCorrection()
        gaps = [abs(mu - old) for mu, old in zip(logp_rollout, logp_old)]
        rhos = [math.exp(min(old - mu, 700.0)) for mu, old in zip(logp_rollout, logp_old)]
        return cls(
            units=len(gaps),
            abs_sum=sum(gaps),
            abs_max=max(gaps, default=0.0),
            kl_sum=sum(kl),
            truncated=sum(rho > correction.tis_cap for rho in rhos),
            masked=sum(not correction.icepop_low <= rho <= correction.icepop_high for rho in rhos),
        )

    def __add__(self, other: GapSums) -> GapSums:
        return GapSums(
            self.units + other.units,
            self.abs_sum + other.abs_sum,
            max(self.abs_max, other.abs_max),
            self.kl_sum + other.kl_sum,
            self.truncated + other.truncated,
            self.masked + other.masked,
        )

    def row(self) -> dict[str, Any]:
        """The ``engine_gap`` metrics (means over units; 0 without any)."""
        n = max(self.units, 1)
        return {
            "logp_abs_mean": self.abs_sum / n,
            "logp_abs_max": self.abs_max,
            "kl": self.kl_sum / n,
            "tis_truncated_frac": self.truncated / n,
            "icepop_masked_frac": self.masked / n,
            "units": self.units,
        }


def decision_gap(decisions: Iterable[Any], correction: MismatchCorrection) -> GapSums:
    """The gap over menu decisions played by an engine and re-scored by the trainer
    (``extra["logp_rollout"]``, ``["logp_rollout_rows"]``, ``["logp_old_rows"]``; ``logp``
    is π_old of the chosen row). The KL is exact over each menu."""
    mu, old, kl = [], [], []
    for d in decisions:
        mu.append(d.extra["logp_rollout"])
        old.append(d.logp)
        kl.append(menu_kl(d.extra["logp_rollout_rows"], d.extra["logp_old_rows"]))
    return GapSums.of(mu, old, kl, correction)


def menu_kl(logp_mu: Sequence[float], logp_old: Sequence[float]) -> float:
    """KL(μ ‖ π_old) = Σ_k μ_k (log μ_k − log π_old_k) over one menu's rows.

    >>> round(menu_kl([math.log(0.5), math.log(0.5)], [math.log(0.25), math.log(0.75)]), 6)
    0.143841
    """
    return sum(math.exp(m) * (m - o) for m, o in zip(logp_mu, logp_old) if m > -math.inf)


def token_gap(completions: Iterable[Any], correction: MismatchCorrection) -> GapSums:
    """The gap over generated tokens (``logp_rollout`` and ``logp_old`` per token of each
    completion); the KL per token is the k3 estimate (module docstring)."""
    mu: list[float] = []
    old: list[float] = []
    for g in completions:
        mu += list(g.logp_rollout)
        old += list(g.logp_old)
    kl = [math.expm1(o - m) - (o - m) for m, o in zip(mu, old)]
    return GapSums.of(mu, old, kl, correction)


def gap_row(sums: GapSums, world: World = dist_.SINGLE) -> dict[str, Any]:
    """The ``engine_gap`` metrics of every process's sums (a collective when several)."""
    if world.distributed:
        total = GapSums()
        for part in dist_.gather_objects(sums, world):
            total = total + part
        sums = total
    return sums.row()
