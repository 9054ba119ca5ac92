"""Decision PPO on label-tree decisions: the clipped ratio over the joint action.

A label-tree decision is a path of rows, one per level (``rlid.decision.tree_walk``):
``log pi(a|s) = sum_l log pi_l(row_l | s, path_<l)``. PPO's ratio is taken on that
joint log-probability, so the surrogate is the one of :func:`rlid.losses.decision.decision_ppo_loss`
with ``logp_action`` the path's sum.

Entropy and KL: exact over one menu (a one-level path: the numbers of
``decision_ppo_loss``); over a tree, exact would need every group's menu read (one
sequence per group, ``rlid.decision.tree_walk.tree_logprobs``), so the update estimates them
along the sampled path with the chain rule

    H(pi) = sum_l E_{path_<l ~ pi}[ H(pi_l(. | path_<l)) ],

each level's entropy exact over its rows. The path was drawn from pi_old, so level l's
term is weighted by the prefix ratio ``w_l = pi(path_<l) / pi_old(path_<l)``
(``w_1 = 1``):

    H_hat = sum_l w_l * H_l,    E_{pi_old}[H_hat] = H(pi)   for every theta,

so the estimate's value and its gradient (through ``w_l`` and ``H_l``) are unbiased;
the same holds for ``KL(pi || pi_ref)`` with each level's exact KL to the reference
read on the same path. At the first epoch ``w_l = 1``. A one-level path gives exactly
the exact terms.

The position penalty and the label-marginal diagnostic are about label positions,
so they read level 1 (the menu every decision starts with).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from rlid.losses.decision import (
    Metrics,
    PPOCoefs,
    add_menu_terms,
    exact_entropy,
    exact_kl,
    label_marginal_kl_uniform,
)

_DEFAULT_COEFS = PPOCoefs()


def path_terms(logp_levels: Tensor, rows: Tensor) -> tuple[Tensor, Tensor]:
    """(present (B, D) bool, logp of each level's chosen row (B, D), 0 where absent).

    ``logp_levels`` (B, D, W) is -inf on padded rows and absent levels; ``rows`` (B, D)
    is the chosen row per level, -1 where the path has no such level. Raises if a
    chosen row is padding."""
    present = rows >= 0
    picked = logp_levels.gather(2, rows.clamp(min=0)[..., None]).squeeze(-1)  # (B, D)
    if not bool(torch.isfinite(picked[present]).all()):
        raise ValueError("a path's row points at a padded row or outside its menu")
    return present, torch.where(present, picked, 0.0)


def prefix_weights(logp_rows: Tensor, logp_old_rows: Tensor, present: Tensor) -> Tensor:
    """w_l = pi(path_<l) / pi_old(path_<l) (B, D): 1 at level 1, gradients through pi."""
    step = torch.where(present, logp_rows - logp_old_rows.detach(), 0.0)  # (B, D)
    before = torch.cumsum(step, -1)[:, :-1]  # log-ratio of the levels above each level
    return torch.exp(torch.nn.functional.pad(before, (1, 0)))


def _per_level(fn: Callable[..., Tensor], *levels: Tensor) -> Tensor:
    """``fn`` of (N, W) menus applied to (B, D, W) levels -> (B, D)."""
    batch, depth, width = levels[0].shape
    return fn(*(t.reshape(batch * depth, width) for t in levels)).view(batch, depth)


def factored_ppo_loss(
    logp_levels: Tensor,
    rows: Tensor,
    logp_old_rows: Tensor,
    advantages: Tensor,
    *,
    coefs: PPOCoefs = _DEFAULT_COEFS,
    normaliser: float | Tensor | None = None,
    logp_ref_levels: Tensor | None = None,
    label_mass: Tensor | None = None,
    position_direction: Tensor | None = None,
) -> tuple[Tensor, Metrics]:
    """Clipped PPO over label-tree decisions (see the module docstring).

    loss = -mean_b min(r A, clip(r) A) - ent_coef mean_b H_hat_b + kl_coef mean_b KL_hat_b
           + position_coef mean_b sum_k pi_1b(k) g_b(k) - label_mass_coef mean_b log m_b,
    r = exp(sum_l logp_l[b, row_l] - sum_l logp_old_l[b]).

    Args:
        logp_levels: (B, D, W) log pi_l over each level's rows (-inf padded; a level
            the path lacks is all -inf).
        rows: (B, D) long, the chosen row per level, -1 where absent.
        logp_old_rows: (B, D) log pi_old of each chosen row at rollout time (0 where absent).
        advantages: (B,).
        coefs, normaliser: as in :func:`rlid.losses.decision.decision_ppo_loss`.
        logp_ref_levels: (B, D, W) the reference policy on the same paths (kl_coef > 0).
        label_mass: (B,) the product of the levels' label masses.
        position_direction: (B, W) level 1's position directions (position_coef > 0).

    Returns:
        (loss, metrics) with the metric names of ``decision_ppo_loss``; ``entropy`` and
        ``kl_ref`` are the path estimates.
    """
    if logp_levels.dim() != 3 or rows.shape != logp_levels.shape[:2]:
        raise ValueError(
            f"logp_levels must be (B, D, W) and rows (B, D), got {tuple(logp_levels.shape)} "
            f"and {tuple(rows.shape)}"
        )
    if logp_old_rows.shape != rows.shape or advantages.shape != rows.shape[:1]:
        raise ValueError("logp_old_rows must be (B, D) and advantages (B,)")
    if coefs.kl_coef > 0 and logp_ref_levels is None:
        raise ValueError("kl_coef > 0 needs logp_ref_levels (the reference on the same paths)")
    if coefs.label_mass_coef > 0 and label_mass is None:
        raise ValueError("label_mass_coef > 0 needs label_mass (the mass on the legal labels)")
    if coefs.position_coef > 0 and position_direction is None:
        raise ValueError("position_coef > 0 needs position_direction (see position_directions)")
    batch = logp_levels.shape[0]
    present, logp_rows = path_terms(logp_levels, rows)
    old = torch.where(present, logp_old_rows, 0.0)
    log_ratio = logp_rows.sum(-1) - old.sum(-1).detach()  # (B,) the joint action's
    ratio = torch.exp(log_ratio)
    eps = coefs.clip_eps
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - eps, 1.0 + eps) * advantages
    n = max(batch, 1) if normaliser is None else normaliser
    policy_loss = -torch.minimum(unclipped, clipped).sum() / n
    weights = prefix_weights(logp_rows, old, present)  # (B, D)
    entropy = (weights * _per_level(exact_entropy, logp_levels)).sum() / n
    loss = policy_loss - coefs.ent_coef * entropy
    first = logp_levels[:, 0]  # (B, W)
    metrics: Metrics = {
        "policy_loss": policy_loss,
        "clip_frac": (clipped < unclipped).to(logp_levels.dtype).sum() / n,
        "approx_kl": (torch.expm1(log_ratio) - log_ratio).sum() / n,
        "entropy": entropy,
        "label_marginal_kl_uniform": label_marginal_kl_uniform(first) * (batch / n),
    }
    if logp_ref_levels is not None:
        if logp_ref_levels.shape != logp_levels.shape:
            raise ValueError("logp_ref_levels must have the shape of logp_levels")
        kl_levels = _per_level(exact_kl, logp_levels, logp_ref_levels.detach())
        kl_ref = (weights * kl_levels).sum() / n
        if coefs.kl_coef > 0:
            loss = loss + coefs.kl_coef * kl_ref
        metrics["kl_ref"] = kl_ref
    loss = add_menu_terms(loss, metrics, coefs, first, position_direction, label_mass, n)
    return loss, {name: value.detach() for name, value in metrics.items()}
