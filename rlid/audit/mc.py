"""Monte-Carlo view of the marginalization identity: sample wordings, estimate variances.

Both estimators are evaluated on the *same* n sampled wordings y_i ~ π̃(·|s): the
token-plane value g_{y_i} and the decision value g_{a_i} with a_i = f(y_i) (a_i is a
sample of π̃(a|s)). The sample tr-variance of n vectors needs only their Gram matrix:

    tr Ĉov = (Σ_i ‖g_i‖² − ‖Σ_i g_i‖² / n) / (n − 1)  =  (c·diag(K) − cᵀKc / n) / (n − 1)

with c the count of each atom among the samples and K the atoms' Gram matrix, so the
bootstrap (resampling the n draws with replacement) costs O(B·T²), not O(B·n·D).
Intervals are bootstrap percentile intervals, 95% by default.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rlid.audit.config import DEFAULT_SIZES
from rlid.audit.exact import TextScores
from rlid.audit.moments import EstimatorAtoms


@dataclass(frozen=True)
class Interval:
    """A point estimate with a bootstrap percentile interval."""

    estimate: float
    low: float
    high: float

    def covers(self, value: float) -> bool:
        return self.low <= value <= self.high


@dataclass(frozen=True)
class MonteCarloRow:
    """Variance estimates from n sampled wordings."""

    n: int
    trace_cov_text: Interval  # tr Ĉov[g_y]
    trace_cov_action: Interval  # tr Ĉov[g_a] on the same draws
    difference: Interval  # paired: tr Ĉov[g_y] − tr Ĉov[g_a], an estimate of the wording term


def estimator_grams(atoms: EstimatorAtoms, scores: TextScores) -> tuple[torch.Tensor, torch.Tensor]:
    """Gram matrices (T, T) of the text and decision estimator values on each text atom."""
    g_text = scores.score_text @ scores.score_text.T  # (N, N)
    g_action = scores.score_action @ scores.score_action.T  # (M, M)
    rows = atoms.text_row
    action_rows = atoms.action_row[atoms.group]  # (T,) the action of each text atom
    adv_action = atoms.adv_action[atoms.group]  # (T,)
    k_text = atoms.adv_text[:, None] * atoms.adv_text[None, :] * g_text[rows][:, rows]
    k_action = adv_action[:, None] * adv_action[None, :] * g_action[action_rows][:, action_rows]
    return k_text, k_action


def sample_trace_cov(counts: torch.Tensor, gram: torch.Tensor) -> torch.Tensor:
    """Unbiased sample tr-variance from atom counts: counts (..., T), gram (T, T) -> (...)."""
    n = counts.sum(-1)
    sum_sq = counts @ gram.diagonal()
    sq_sum = torch.einsum("...i,ij,...j->...", counts, gram, counts)
    return (sum_sq - sq_sum / n) / (n - 1)


def monte_carlo(
    prob: torch.Tensor,
    k_text: torch.Tensor,
    k_action: torch.Tensor,
    *,
    sizes: Sequence[int] = DEFAULT_SIZES,
    n_boot: int = 1000,
    level: float = 0.95,
    generator: torch.Generator,
) -> list[MonteCarloRow]:
    """One independent sample of each size n from ``prob`` (T,), with bootstrap intervals.

    ``k_text`` / ``k_action`` come from :func:`estimator_grams`. Sizes must be >= 2.
    """
    if any(n < 2 for n in sizes):
        raise ValueError(
            f"Monte-Carlo sizes must be >= 2 (a variance needs two draws), got {sizes}"
        )
    n_atoms = len(prob)
    alpha = (1.0 - level) / 2
    rows = []
    for n in sizes:
        draws = torch.multinomial(prob, n, replacement=True, generator=generator)  # (n,)
        resample = torch.randint(n, (n_boot, n), generator=generator)  # (B, n)
        boot_counts = _counts(draws[resample], n_atoms)  # (B, T)
        counts = _counts(draws[None], n_atoms)[0]  # (T,)

        def interval(values: torch.Tensor, boot: torch.Tensor) -> Interval:
            low, high = torch.quantile(boot, torch.tensor([alpha, 1 - alpha], dtype=boot.dtype))
            return Interval(float(values), float(low), float(high))

        text, action = sample_trace_cov(counts, k_text), sample_trace_cov(counts, k_action)
        boot_text = sample_trace_cov(boot_counts, k_text)
        boot_action = sample_trace_cov(boot_counts, k_action)
        rows.append(
            MonteCarloRow(
                n=n,
                trace_cov_text=interval(text, boot_text),
                trace_cov_action=interval(action, boot_action),
                difference=interval(text - action, boot_text - boot_action),
            )
        )
    return rows


def _counts(draws: torch.Tensor, n_atoms: int) -> torch.Tensor:
    """(B, n) atom indices -> (B, T) float64 counts."""
    counts = torch.zeros(draws.shape[0], n_atoms, dtype=torch.float64)
    return counts.scatter_add_(1, draws, torch.ones_like(draws, dtype=torch.float64))
