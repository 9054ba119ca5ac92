"""Exact moments of the two estimators over enumerated outcomes (docs/design.md §7).

Given the score vectors of :mod:`rlid.audit.exact`, the token-plane estimator
g_y = A · ∇log π̃(y|s) and the decision estimator g_a = A · ∇log π̃(a|s) take finitely
many values, so their means and tr-covariances are finite sums. The outcomes
("atoms") are the wordings themselves for the identity, and wordings paired with a
noise value for negative control 3; negative control 1 changes the advantages.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlid.audit.exact import TextScores, WordingSet


@dataclass(frozen=True)
class EstimatorAtoms:
    """The outcomes of one sampling step, on which both estimators are evaluated.

    Text atom t (probability ``prob[t]``) is wording ``text_row[t]`` with advantage
    ``adv_text[t]``: g_y = adv_text[t] · score_text[text_row[t]]. It belongs to the
    decision outcome ``group[t]``, which is action ``action_row[g]`` with advantage
    ``adv_action[g]``: g_a = adv_action[g] · score_action[action_row[g]]. Plain atoms are
    the wordings themselves; the noise control pairs each with a noise value.
    """

    prob: torch.Tensor  # (T,) float64, sums to 1
    text_row: torch.Tensor  # (T,) long
    adv_text: torch.Tensor  # (T,) float64
    group: torch.Tensor  # (T,) long, into the G decision outcomes
    action_row: torch.Tensor  # (G,) long
    adv_action: torch.Tensor  # (G,) float64

    @property
    def group_prob(self) -> torch.Tensor:
        """(G,) probability of each decision outcome."""
        return torch.zeros(len(self.action_row), dtype=torch.float64).index_add_(
            0, self.group, self.prob
        )


def plain_atoms(scores: TextScores, wording_set: WordingSet) -> EstimatorAtoms:
    """Atoms of the identity's premise: A depends on the action only."""
    adv = torch.tensor(wording_set.advantages, dtype=torch.float64)
    index = wording_set.action_index
    return EstimatorAtoms(
        prob=scores.logp_text.exp(),
        text_row=torch.arange(len(index)),
        adv_text=adv[index],
        group=index,
        action_row=torch.arange(len(adv)),
        adv_action=adv,
    )


def wording_bonus_atoms(
    atoms: EstimatorAtoms, bonus_mask: torch.Tensor, bonus: float
) -> EstimatorAtoms:
    """Negative control 1: the token estimator's advantage also depends on the wording.

    A(y) = A(a) + bonus · (1[y in bonus_mask] − π̃(bonus_mask | a)): the wording part
    has zero mean within each action, so E[A(y) | a] = A(a) and the decision estimator
    is unchanged. The premise fails all the same: E[g_y | a] = g_a + bonus ·
    Cov(1[y in mask], ∇log π̃(y) | a), which is not zero where the policy spreads mass
    over an action's wordings.
    """
    marked = bonus_mask.to(torch.float64)[atoms.text_row]  # (T,)
    marked_given_action = (
        torch.zeros_like(atoms.adv_action).index_add_(0, atoms.group, atoms.prob * marked)
        / atoms.group_prob
    )  # (G,) π̃(mask | a)
    return EstimatorAtoms(
        prob=atoms.prob,
        text_row=atoms.text_row,
        adv_text=atoms.adv_text + bonus * (marked - marked_given_action[atoms.group]),
        group=atoms.group,
        action_row=atoms.action_row,
        adv_action=atoms.adv_action,
    )


def noisy_atoms(atoms: EstimatorAtoms, sigma: float) -> EstimatorAtoms:
    """Negative control 3: A + ε with ε = ±σ equiprobable, independent of the wording.

    Any zero-mean ε of variance σ² gives the same second moments; two points keep the
    enumeration exact. The noise value is known to both estimators' outcomes (the
    decision outcome is the pair (a, ε)), as it is for a return that is observed.
    """
    n_groups = len(atoms.action_row)
    eps = torch.tensor([-sigma, sigma], dtype=torch.float64)
    return EstimatorAtoms(
        prob=torch.cat([atoms.prob / 2, atoms.prob / 2]),
        text_row=atoms.text_row.repeat(2),
        adv_text=torch.cat([atoms.adv_text + eps[0], atoms.adv_text + eps[1]]),
        group=torch.cat([atoms.group, atoms.group + n_groups]),
        action_row=atoms.action_row.repeat(2),
        adv_action=torch.cat([atoms.adv_action + eps[0], atoms.adv_action + eps[1]]),
    )


@dataclass(frozen=True)
class Decomposition:
    """Exact moments of g_y and g_a over a set of atoms (tr = trace of the covariance)."""

    mean_text: torch.Tensor  # (D,) E[g_y]
    mean_action: torch.Tensor  # (D,) E[g_a]
    trace_cov_text: float  # tr Cov[g_y]
    trace_cov_action: float  # tr Cov[g_a]
    wording_term: float  # E_a tr Cov[g_y | a], about the conditional mean E[g_y | a]
    wording_term_by_group: tuple[float, ...]  # π̃(g) tr Cov[g_y | g] per decision outcome
    fisher_text: float  # E_y ‖∇log π̃(y)‖²
    fisher_action: float  # E_a ‖∇log π̃(a)‖²

    @property
    def identity_residual_rel(self) -> float:
        """|tr Cov[g_y] − tr Cov[g_a] − E_a tr Cov[g_y|a]| / tr Cov[g_y]."""
        gap = self.trace_cov_text - self.trace_cov_action - self.wording_term
        return abs(gap) / self.trace_cov_text

    @property
    def mean_gap_rel(self) -> float:
        """‖E[g_y] − E[g_a]‖ / ‖E[g_y]‖."""
        gap = torch.linalg.vector_norm(self.mean_text - self.mean_action)
        return float(gap / torch.linalg.vector_norm(self.mean_text))


def decompose(atoms: EstimatorAtoms, scores: TextScores) -> Decomposition:
    """tr Cov[g_y], tr Cov[g_a] and E_a tr Cov[g_y|a], each as a direct sum of squared
    deviations (no ‖x‖² − ‖μ‖² cancellation), so the identity is checked to float64
    round-off."""
    s_text, s_action = scores.score_text, scores.score_action
    group_prob = atoms.group_prob
    mean_text = _weighted_rows(atoms.prob * atoms.adv_text, atoms.text_row, s_text)
    mean_action = _weighted_rows(group_prob * atoms.adv_action, atoms.action_row, s_action)
    # E[g_y | a] for each decision outcome, from the wording scores alone.
    cond_mean = torch.stack(
        [
            _weighted_rows(
                (atoms.prob * atoms.adv_text)[atoms.group == g] / group_prob[g],
                atoms.text_row[atoms.group == g],
                s_text,
            )
            for g in range(len(atoms.action_row))
        ]
    )  # (G, D)
    text_values = (atoms.adv_text, atoms.text_row, s_text)
    action_values = (atoms.adv_action, atoms.action_row, s_action)
    ones_t, ones_g = torch.ones_like(atoms.prob), torch.ones_like(group_prob)
    within = _spread(atoms.prob, *text_values, cond_mean, atoms.group)  # (T,)
    by_group = torch.zeros_like(group_prob).index_add_(0, atoms.group, within)
    return Decomposition(
        mean_text=mean_text,
        mean_action=mean_action,
        trace_cov_text=float(_spread(atoms.prob, *text_values, mean_text[None], None).sum()),
        trace_cov_action=float(_spread(group_prob, *action_values, mean_action[None], None).sum()),
        wording_term=float(within.sum()),
        wording_term_by_group=tuple(by_group.tolist()),
        fisher_text=float(_spread(atoms.prob, ones_t, atoms.text_row, s_text, None, None).sum()),
        fisher_action=float(
            _spread(group_prob, ones_g, atoms.action_row, s_action, None, None).sum()
        ),
    )


def _weighted_rows(
    weights: torch.Tensor, rows: torch.Tensor, vectors: torch.Tensor
) -> torch.Tensor:
    """Σ_t weights[t] · vectors[rows[t]] -> (D,)."""
    per_row = torch.zeros(len(vectors), dtype=vectors.dtype).index_add_(0, rows, weights)
    return per_row @ vectors


def _spread(
    prob: torch.Tensor,
    coef: torch.Tensor,
    rows: torch.Tensor,
    vectors: torch.Tensor,
    centers: torch.Tensor | None,
    center_index: torch.Tensor | None,
) -> torch.Tensor:
    """(T,) prob[t] ‖coef[t]·vectors[rows[t]] − centers[center_index[t]]‖² (center 0 if None)."""
    terms = torch.zeros(len(prob), dtype=torch.float64)
    for t in range(len(prob)):  # one (D,) vector at a time: no (T, D) copy
        value = coef[t] * vectors[rows[t]]
        if centers is not None:
            value = value - centers[0 if center_index is None else center_index[t]]
        terms[t] = prob[t] * value.square().sum()
    return terms
