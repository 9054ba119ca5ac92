"""Decision-level PPO: the clipped surrogate over a menu of legal actions.

The policy is a distribution over the K rows of a menu (label readout), so
``logp_all`` is (B, K) with ``-inf`` on padded rows (menus shorter than K).
Because the action space is a short explicit list, entropy and KL to a
reference policy are exact sums over the valid rows — no sampled estimator,
unlike the token plane's k3.

Sources: PPO clip (Schulman et al. 2017, "Proximal Policy Optimization
Algorithms", arXiv:1707.06347), as written in CleanRL's ``ppo.py``. Departures:
the ratio is over a decision (label probability), not over tokens, and the
entropy / KL terms are exact instead of Monte-Carlo.

Every padded entry is removed with ``torch.where`` before it can meet an
``exp`` or a product (0·(−inf) is NaN), so padded rows change neither values
nor gradients.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from rlid.losses.mismatch import MismatchCorrection

Metrics = dict[str, Tensor]


def _menu_probs(logp_all: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(valid, logp with 0 on padded rows, probs with 0 on padded rows), all (B, K)."""
    valid = logp_all != -torch.inf
    logp = torch.where(valid, logp_all, 0.0)
    probs = torch.where(valid, torch.exp(logp), 0.0)
    return valid, logp, probs


def exact_entropy(logp_all: Tensor) -> Tensor:
    """H_b = −Σ_k π(k) log π(k) over the valid rows of each menu: (B, K) -> (B,)."""
    _, logp, probs = _menu_probs(logp_all)
    return -(probs * logp).sum(-1)


def exact_kl(logp_all: Tensor, logp_ref_all: Tensor) -> Tensor:
    """KL_b(π ‖ π_ref) = Σ_k π(k)(log π(k) − log π_ref(k)) over valid rows: (B, K) -> (B,).

    Rows are valid where ``logp_all`` is finite; the reference must give those
    rows a finite log-probability (the same menu, read by another model).
    """
    if logp_ref_all.shape != logp_all.shape:
        raise ValueError(
            f"logp_ref_all must have the shape of logp_all {tuple(logp_all.shape)}, "
            f"got {tuple(logp_ref_all.shape)}"
        )
    valid, logp, probs = _menu_probs(logp_all)
    logp_ref = torch.where(valid, logp_ref_all, 0.0)
    return (probs * (logp - logp_ref)).sum(-1)


def label_marginal_kl_uniform(logp_all: Tensor) -> Tensor:
    """Label/position bias of a batch of menus: 0 means no preferred position.

    Rows are grouped by menu size n (number of valid entries). Within group n,
    p̄_n(k) is the batch mean of π_b(k) over row positions k, and ū_n(k) the
    mean of the uniform distributions over each row's valid positions (uniform
    over positions 0..n−1 when menus are padded at the end). The metric is the
    size-weighted average Σ_n (c_n / B) · KL(p̄_n ‖ ū_n), with c_n rows in group n.

    This is a different fact from row entropy: confident rows (low entropy)
    that pick different positions have a flat marginal (KL ≈ 0), while a policy
    that always favours position 0 has a large KL whatever its entropy. But only
    when each menu size has many rows in the batch: a size with one menu gives
    KL(π_b ‖ uniform) = log n − H(π_b), its confidence; :func:`position_bias` is the
    unbiased, size-pooled measure.
    Returns a detached 0-d tensor.
    """
    with torch.no_grad():
        valid, _, probs = _menu_probs(logp_all)
        batch, width = logp_all.shape
        sizes = valid.sum(-1)  # (B,)
        groups = F.one_hot((sizes - 1).clamp(min=0), width).to(probs.dtype)  # (B, n)
        uniform = valid.to(probs.dtype) / sizes.clamp(min=1)[:, None]  # (B, K)
        mass = groups.T @ probs  # (n, K): c_n · p̄_n
        counts = groups.sum(0).clamp(min=1)[:, None]  # (n, 1)
        p_bar = mass / counts
        u_bar = (groups.T @ uniform) / counts
        # u_bar > 0 wherever some row of the group puts mass, so the log is safe there
        has_mass = mass > 0
        log_ratio = torch.log(torch.where(has_mass, p_bar, 1.0)) - torch.log(
            torch.where(has_mass, u_bar, 1.0)
        )
        return (mass * log_ratio).sum() / max(batch, 1)


def _check_inputs(
    logp_all: Tensor,
    actions: Tensor,
    logp_old: Tensor,
    advantages: Tensor,
    logp_ref: Tensor | None,
    label_mass: Tensor | None,
    position_direction: Tensor | None = None,
) -> None:
    if logp_all.dim() != 2:
        raise ValueError(f"logp_all must be (B, K), got shape {tuple(logp_all.shape)}")
    batch = logp_all.shape[:1]
    for name, tensor in [
        ("actions", actions),
        ("logp_old", logp_old),
        ("advantages", advantages),
        ("label_mass", label_mass),
    ]:
        if tensor is not None and tensor.shape != batch:
            raise ValueError(f"{name} must be (B,) = ({batch[0]},), got {tuple(tensor.shape)}")
    if actions.is_floating_point() or actions.dtype == torch.bool:
        raise ValueError(f"actions must be integer row indices, got dtype {actions.dtype}")
    for name, other in [("logp_ref", logp_ref), ("position_direction", position_direction)]:
        if other is not None and other.shape != logp_all.shape:
            raise ValueError(
                f"{name} must have the shape of logp_all {tuple(logp_all.shape)}, "
                f"got {tuple(other.shape)}"
            )


@dataclass(frozen=True)
class PPOCoefs:
    """The weights of the decision-PPO loss terms (``TrainConfig``'s fields of the same
    names; :meth:`for_minibatch` zeroes the regularisers of a minibatch without
    policy-gradient signal, so none of them gets a full-size step alone).

    Attributes:
        clip_eps: PPO clip ε.
        ent_coef: weight of the exact entropy bonus.
        kl_coef: weight of the exact KL(π_θ ‖ π_ref) penalty.
        position_coef: weight of the position penalty (preference for menu positions).
        label_mass_coef: weight of −mean log(label mass), which holds the LM's
            probability on the legal labels.
    """

    clip_eps: float = 0.2
    ent_coef: float = 0.0
    kl_coef: float = 0.0
    position_coef: float = 0.0
    label_mass_coef: float = 0.0

    def __post_init__(self) -> None:
        for name in ("clip_eps", "kl_coef", "position_coef", "label_mass_coef"):
            if getattr(self, name) < 0:
                raise ValueError(f"need {name} >= 0, got {getattr(self, name)}")

    @classmethod
    def for_minibatch(cls, config: Any, signal: bool) -> PPOCoefs:
        """The config's coefficients; without ``signal`` (all advantages zero: a value
        head's minibatch) every regulariser is 0."""
        return cls(
            clip_eps=config.clip_eps,
            ent_coef=config.ent_coef if signal else 0.0,
            kl_coef=config.kl_coef if signal else 0.0,
            position_coef=config.position_coef if signal else 0.0,
            label_mass_coef=config.label_mass_coef if signal else 0.0,
        )


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


def _check_paths(
    logp_levels: Tensor,
    rows: Tensor,
    logp_old_rows: Tensor,
    advantages: Tensor,
    logp_ref_levels: Tensor | None,
) -> None:
    if logp_levels.dim() != 3 or rows.shape != logp_levels.shape[:2]:
        raise ValueError(
            f"logp_levels must be (B, D, W) and rows (B, D), got {tuple(logp_levels.shape)} "
            f"and {tuple(rows.shape)}"
        )
    if logp_old_rows.shape != rows.shape or advantages.shape != rows.shape[:1]:
        raise ValueError("logp_old_rows must be (B, D) and advantages (B,)")
    if logp_ref_levels is not None and logp_ref_levels.shape != logp_levels.shape:
        raise ValueError("logp_ref_levels must have the shape of logp_levels")


def decision_ppo_loss(
    logp: Tensor,
    actions: Tensor,
    logp_old: Tensor,
    advantages: Tensor,
    *,
    coefs: PPOCoefs = PPOCoefs(),
    normaliser: float | Tensor | None = None,
    logp_ref: Tensor | None = None,
    label_mass: Tensor | None = None,
    position_direction: Tensor | None = None,
    logp_rollout: Tensor | None = None,
    correction: MismatchCorrection | None = None,
) -> tuple[Tensor, Metrics]:
    """Clipped PPO over menu decisions, a flat menu being a one-level label tree.

    A decision is a path of rows, one per level of its label tree
    (``log π(a|s) = Σ_l log π_l(row_l | s, path_<l)``); a flat menu is the path of one
    level. With ``ρ_b = exp(log π_θ(a_b) − log π_old(a_b))`` on the joint action,

        loss = −mean_b w_b·min(ρ_b A_b, clip(ρ_b, 1−ε, 1+ε) A_b) − ent_coef·mean_b Ĥ_b
               + kl_coef·mean_b KL̂_b
               + position_coef·mean_b Σ_k π_b1(k) g_b(k)   (g_b: position directions)
               − label_mass_coef·mean_b log m_b           (m_b: the label mass),

    and w_b = 1 unless a rollout engine played the decisions: then w_b = correction(ρ'_b),
    ρ'_b = exp(log π_old(a_b) − log μ(a_b)) (TIS or IcePop, :mod:`rlid.losses.mismatch`),
    which weighs the policy-gradient term only, as on the token plane.

    Entropy and KL are exact over a one-level menu (sums over its valid rows: no sampled
    estimator, unlike the token plane's k3). Over a tree, exact would need every group's
    menu read, so they are estimated along the sampled path with the chain rule
    ``H(π) = Σ_l E_{path_<l ~ π}[H(π_l(. | path_<l))]``, each level's term exact over its
    rows and weighted by the prefix ratio ``w_l = π(path_<l) / π_old(path_<l)``
    (:func:`prefix_weights`, ``w_1 = 1``): its value and gradient are unbiased for every
    θ, and a one-level path gives exactly the exact terms. The position penalty and the
    label-marginal diagnostic read level 1, the menu every decision starts with.

    Sources: PPO clip (Schulman et al. 2017, arXiv:1707.06347), as written in CleanRL's
    ``ppo.py``; the ratio is over a decision, not over tokens.

    Args:
        logp: (B, K) log π_θ over one menu per decision, or (B, D, W) over each level of
            a label-tree path (``-inf`` on padded rows and on levels a path lacks).
        actions: (B,) the chosen row of each menu, or (B, D) per level (-1 where absent).
        logp_old: (B,) or (B, D): log π_old of the chosen row(s) at rollout time (0 where
            absent).
        advantages: (B,) (normalise them before, if wanted).
        coefs: the terms' weights (:class:`PPOCoefs`).
        normaliser: the denominator of every mean (None: B). With gradient accumulation
            pass the *minibatch's* decision count (across ranks: the global one) to each
            micro-batch, so the summed micro-batch losses and metrics are the
            minibatch's means — never the micro-batch's own B.
        logp_ref: the reference policy over the same menus (the shape of ``logp``);
            needed when kl_coef > 0, and reported as ``kl_ref`` whenever given.
        label_mass: (B,) probability the full vocabulary puts on the legal labels (the
            product over a path's levels); reported as its mean; needed when
            label_mass_coef > 0 (the label softmax is blind to a shift of all label
            logits, so nothing else holds the LM's mass on the labels).
        position_direction: (B, K) level 1's position directions
            (:func:`rlid.losses.position.position_directions`); needed when
            position_coef > 0.
        logp_rollout: (B,) log μ of the chosen action under the engine that sampled it;
            needed by a correction other than "none".
        correction: the mismatch rule on π_old/μ (None: none).

    Returns:
        (loss, metrics) with detached 0-d metrics: ``policy_loss``, ``clip_frac``
        (decisions where the clipped branch is chosen and differs), ``approx_kl``
        (mean (ρ−1) − log ρ, old → new), ``entropy``, ``label_marginal_kl_uniform``, and
        ``kl_ref`` / ``label_mass`` when given, ``label_mass_loss`` when weighted,
        ``tis_truncated_frac`` / ``icepop_masked_frac`` with that correction.
    """
    if logp.dim() not in (2, 3):
        raise ValueError(
            "logp must be (B, K) (one menu per decision) or (B, D, W) (label-tree levels), "
            f"got shape {tuple(logp.shape)}"
        )
    if logp.dim() == 2:  # a flat menu: the path of one level
        _check_inputs(logp, actions, logp_old, advantages, logp_ref, label_mass, position_direction)
        width = logp.shape[1]
        in_range = (actions >= 0) & (actions < width)
        index = actions.clamp(0, max(width - 1, 0))[:, None]  # (B, 1)
        valid = (logp != -torch.inf).gather(1, index).squeeze(1)
        if logp.shape[0] > 0 and not bool((in_range & valid).all()):
            raise ValueError("an action index points at a padded row or outside the menu")
        logp, actions, logp_old = logp[:, None], actions[:, None], logp_old[:, None]
        logp_ref = logp_ref[:, None] if logp_ref is not None else None
    else:
        _check_paths(logp, actions, logp_old, advantages, logp_ref)
    correcting = correction is not None and correction.rule != "none"
    if correcting and logp_rollout is None:
        raise ValueError("a mismatch correction needs logp_rollout (log μ of the sampler)")
    if logp_rollout is not None and logp_rollout.shape != advantages.shape:
        raise ValueError(
            f"logp_rollout must be (B,) = ({advantages.shape[0]},), got {tuple(logp_rollout.shape)}"
        )
    if coefs.kl_coef > 0 and logp_ref is None:
        raise ValueError("kl_coef > 0 needs logp_ref (the reference policy over the menus)")
    if coefs.label_mass_coef > 0 and label_mass is None:
        raise ValueError("label_mass_coef > 0 needs label_mass (the mass on the legal labels)")
    if coefs.position_coef > 0 and position_direction is None:
        raise ValueError("position_coef > 0 needs position_direction (see position_directions)")
    batch = logp.shape[0]
    present, logp_rows = path_terms(logp, actions)  # (B, D) each
    old = torch.where(present, logp_old, 0.0)
    log_ratio = logp_rows.sum(-1) - old.sum(-1).detach()  # (B,) on the joint action
    ratio = torch.exp(log_ratio)
    eps = coefs.clip_eps
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - eps, 1.0 + eps) * advantages
    # float32 whatever the model's dtype: the readout returns float32 log-probs, and
    # ratios, advantages and every term below stay in that dtype
    n = max(batch, 1) if normaliser is None else normaliser
    surrogate = torch.minimum(unclipped, clipped)  # (B,)
    rule_metrics: Metrics = {}
    if correcting:
        assert correction is not None and logp_rollout is not None  # checked above
        rho = torch.exp(old.sum(-1).detach() - logp_rollout.detach())  # (B,) π_old / μ
        weight, rule_metrics = correction.weigh(rho)
        surrogate = surrogate * weight
    policy_loss = -surrogate.sum() / n
    weights = prefix_weights(logp_rows, old, present)  # (B, D), 1 on a flat menu
    entropy = (weights * _per_level(exact_entropy, logp)).sum() / n
    loss = policy_loss - coefs.ent_coef * entropy
    first = logp[:, 0]  # (B, W): the menu every decision starts with
    metrics: Metrics = {
        "policy_loss": policy_loss,
        "clip_frac": (clipped < unclipped).to(logp.dtype).sum() / n,
        "approx_kl": (torch.expm1(log_ratio) - log_ratio).sum() / n,
        "entropy": entropy,
        # a batch-level diagnostic: not additive over micro-batches, scaled by its share
        "label_marginal_kl_uniform": label_marginal_kl_uniform(first) * (batch / n),
    }
    for name, mean in rule_metrics.items():  # the rule's means, as sums / n like the rest
        metrics[name] = mean * (batch / n)
    if logp_ref is not None:
        kl_ref = (weights * _per_level(exact_kl, logp, logp_ref.detach())).sum() / n
        if coefs.kl_coef > 0:
            loss = loss + coefs.kl_coef * kl_ref
        metrics["kl_ref"] = kl_ref
    loss = add_menu_terms(loss, metrics, coefs, first, position_direction, label_mass, n)
    return loss, {name: value.detach() for name, value in metrics.items()}


def add_menu_terms(
    loss: Tensor,
    metrics: Metrics,
    coefs: PPOCoefs,
    logp_menu: Tensor,
    position_direction: Tensor | None,
    label_mass: Tensor | None,
    n: float | Tensor,
) -> Tensor:
    """``loss`` plus the position penalty over the rows of ``logp_menu`` (B, K) and the
    label-mass term, each summed over the batch and divided by ``n``; ``metrics`` gains
    ``label_mass`` and ``label_mass_loss`` (a label tree passes its first menu)."""
    if coefs.position_coef > 0 and position_direction is not None:
        _, _, probs = _menu_probs(logp_menu)
        loss = loss + coefs.position_coef * (probs * position_direction.detach()).sum() / n
    if label_mass is not None:
        metrics["label_mass"] = label_mass.sum() / n
    if coefs.label_mass_coef > 0 and label_mass is not None:
        mass_loss = -torch.log(label_mass.clamp_min(1e-12)).sum() / n
        loss = loss + coefs.label_mass_coef * mass_loss
        metrics["label_mass_loss"] = mass_loss
    return loss


def value_loss(values: Tensor, targets: Tensor, normaliser: float | Tensor) -> Tensor:
    """½ Σ_b (V(s_b) − target_b)² / normaliser: the value head's regression loss
    (``advantage="gae"``), divided like every term of :func:`decision_ppo_loss`.

    values, targets: (B,) float32 -> 0-d.
    """
    if values.shape != targets.shape:
        raise ValueError(
            f"values {tuple(values.shape)} and targets {tuple(targets.shape)} must match"
        )
    return 0.5 * (values - targets).pow(2).sum() / normaliser
