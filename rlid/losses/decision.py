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

from dataclasses import dataclass
from typing import Any, NamedTuple

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


def _deviations(logp_all: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(valid, uniform u_b, deviation d_b = π_b − u_b), all (B, K) float64 on the CPU,
    detached; u_b is uniform over menu b's valid rows, both 0 on padded rows."""
    valid, _, probs = _menu_probs(logp_all.detach().to("cpu", torch.float64))
    uniform = valid / valid.sum(-1, keepdim=True).clamp(min=1)
    return valid, uniform, probs - uniform


class PositionSums(NamedTuple):
    """Sums over a batch of menus from which the position bias is computed; each field
    adds up over micro-batches and processes (float64, on the CPU).

    With d_b(k) = π_b(k) − u_b(k), u_b uniform over menu b's n_b rows (positions
    0..n_b−1, padded at the end; both 0 beyond): ``dev`` = Σ_b d_b (W,), ``sq`` =
    Σ_b d_b² (W,), ``uniform`` = Σ_b u_b (W,), ``batch`` = B (0-d).
    """

    dev: Tensor
    sq: Tensor
    uniform: Tensor
    batch: Tensor

    @classmethod
    def zeros(cls, width: int) -> PositionSums:
        z = torch.zeros(width, dtype=torch.float64)
        return cls(z, z.clone(), z.clone(), torch.zeros((), dtype=torch.float64))

    @classmethod
    def of(cls, logp_all: Tensor, width: int) -> PositionSums:
        """The sums of one batch (B, K ≤ width) of menu log-probs (−inf padded)."""
        _, uniform, dev = _deviations(logp_all)
        pad = (0, width - logp_all.shape[1])
        return cls(
            F.pad(dev.sum(0), pad),
            F.pad((dev * dev).sum(0), pad),
            F.pad(uniform.sum(0), pad),
            torch.tensor(float(logp_all.shape[0]), dtype=torch.float64),
        )

    def __add__(self, other: object) -> PositionSums:
        assert isinstance(other, PositionSums)
        return PositionSums(*(a + b for a, b in zip(self, other)))

    def flat(self) -> Tensor:
        return torch.cat([self.dev, self.sq, self.uniform, self.batch[None]])

    @classmethod
    def unflat(cls, values: Tensor) -> PositionSums:
        width = (len(values) - 1) // 3
        v = values.to(torch.float64)
        return cls(v[:width], v[width : 2 * width], v[2 * width : 3 * width], v[-1])

    def weights(self) -> Tensor:
        """w(k) = 1 / (2 ū(k)), ū = uniform / B: the χ²/2 weights (0 where ū = 0)."""
        u_bar = self.uniform / self.batch.clamp(min=1)
        return torch.where(u_bar > 0, 0.5 / torch.where(u_bar > 0, u_bar, 1.0), 0.0)


def position_bias(sums: PositionSums) -> float:
    """Unbiased estimate of Σ_k (p(k) − ū(k))² / (2 ū(k)) (≈ KL(p ‖ ū)), where p is the
    policy's *expected* probability on menu position k and ū that of uniform rows,
    menu sizes pooled.

    The plug-in statistic of the batch mean p̄ = ū + Σ_b d_b / B has a noise floor that
    grows with confidence (each decision's own deviation enters squared), so a
    penalty on it pushes every row toward uniform like an entropy bonus (measured:
    row entropy 1.3 -> 1.9 in five iterations), and grouping menus by size makes it
    worse (a size with one menu gives log n − H). The U-statistic keeps only the
    cross terms, P = Σ_k w(k) (dev(k)² − sq(k)) / (B(B−1)) = Σ_{b≠c} Σ_k w(k) d_b(k)
    d_c(k) / (B(B−1)): with shuffled menus a policy that reads only the rows' content
    has E[d_b] = 0, so E[P] = 0 whatever its confidence; a real preference for a
    position gives P > 0. (A single batch's P can be negative.) B < 2: 0.
    """
    if float(sums.batch) < 2:
        return 0.0
    w = sums.weights()
    b = float(sums.batch)
    return float((w * (sums.dev * sums.dev - sums.sq)).sum() / (b * (b - 1)))


def position_directions(logp_all: Tensor, sums: PositionSums) -> Tensor:
    """(B, K) per-decision directions g_b of the position penalty P = position_bias(sums).

    ∂P/∂π_b(k) = 2 w(k) (dev(k) − d_b(k)) / (B(B−1)): the other decisions'
    deviations only. With g_b(k) = 2 w(k) (dev(k) − d_b(k)) / (B − 1) the per-decision
    term Σ_k π_b(k) g_b(k), summed and divided by B like every other loss term, has
    P's gradient, so micro-batches and processes add up to the one-batch step; ``sums``
    must cover the whole minibatch at the current parameters (a no-grad pass first)
    and ``logp_all`` are this micro-batch's rows (detached here). 0 on padded rows.
    """
    b = float(sums.batch)
    if b < 2:
        return torch.zeros(logp_all.shape, dtype=torch.float32, device=logp_all.device)
    width = logp_all.shape[1]
    valid, _, own = _deviations(logp_all)
    g = 2.0 * sums.weights()[:width] * (sums.dev[:width] - own) / (b - 1)
    return torch.where(valid, g, 0.0).to(device=logp_all.device, dtype=torch.float32)


def _check_inputs(
    logp_all: Tensor,
    actions: Tensor,
    logp_old: Tensor,
    advantages: Tensor,
    logp_ref_all: Tensor | None,
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
    for name, other in [("logp_ref_all", logp_ref_all), ("position_direction", position_direction)]:
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


def decision_ppo_loss(
    logp_all: Tensor,
    actions: Tensor,
    logp_old: Tensor,
    advantages: Tensor,
    *,
    coefs: PPOCoefs = PPOCoefs(),
    normaliser: float | Tensor | None = None,
    logp_ref_all: Tensor | None = None,
    label_mass: Tensor | None = None,
    position_direction: Tensor | None = None,
    logp_rollout: Tensor | None = None,
    correction: MismatchCorrection | None = None,
) -> tuple[Tensor, Metrics]:
    """Clipped PPO loss over menu decisions, with exact entropy bonus and KL penalty.

    loss = −mean_b w_b·min(r·A, clip(r, 1−ε, 1+ε)·A) − ent_coef·mean_b H_b
           + kl_coef·mean_b KL_b
           + position_coef·mean_b Σ_k π_b(k) g_b(k)   (g_b: :func:`position_directions`)
           − label_mass_coef·mean_b log m_b           (m_b: the label mass),
    r = exp(logp_all[b, a_b] − logp_old[b]), and w_b = 1 unless a rollout engine played
    the decisions: then w_b = correction(ρ_b), ρ_b = exp(logp_old[b] − logp_rollout[b])
    = π_old/μ of the chosen row (TIS or IcePop, :mod:`rlid.losses.mismatch`), which weighs the
    policy-gradient term only, as on the token plane.

    Args:
        logp_all: (B, K) log π_θ over menu rows, ``-inf`` on padded rows.
        actions: (B,) long, the chosen row of each menu (must be a valid row).
        logp_old: (B,) log π_old of the chosen row at rollout time.
        advantages: (B,) advantages (normalise them before, if wanted).
        coefs: the terms' weights (:class:`PPOCoefs`).
        logp_ref_all: (B, K) log π_ref over the same menus; needed when kl_coef > 0,
            and reported as ``kl_ref`` whenever given.
        label_mass: (B,) probability mass the full vocabulary puts on the legal
            labels (1 − leakage); reported as its mean; needed when label_mass_coef > 0
            (the label softmax is blind to a shift of all label logits, so nothing else
            holds the LM's mass on the labels: leakage grows at high lr).
        normaliser: the denominator of every mean above (None: B). With gradient
            accumulation pass the *minibatch's* decision count (across ranks: the
            global one) to each micro-batch, so the summed micro-batch losses and
            metrics are the minibatch's means — never the micro-batch's own B.
        position_direction: (B, K) g_b of :func:`position_directions` (0 on padded
            rows); needed when position_coef > 0. Its value is
            :func:`position_bias`, reported by the trainer, not here.
        logp_rollout: (B,) log μ of the chosen row under the engine that sampled it
            (the behaviour distribution); needed by a correction other than "none".
        correction: the mismatch rule on ρ = π_old/μ (None: none).

    Returns:
        (loss, metrics) with detached 0-d metrics: ``policy_loss``,
        ``clip_frac`` (decisions where the clipped branch is chosen and
        differs), ``approx_kl`` (mean (r−1) − log r, old → new), ``entropy``
        (mean H_b), ``label_marginal_kl_uniform`` (see that function), and
        ``kl_ref`` / ``label_mass`` when given, ``label_mass_loss`` when weighted,
        ``tis_truncated_frac`` / ``icepop_masked_frac`` (decisions) with that correction.
    """
    _check_inputs(
        logp_all, actions, logp_old, advantages, logp_ref_all, label_mass, position_direction
    )
    correcting = correction is not None and correction.rule != "none"
    if correcting and logp_rollout is None:
        raise ValueError("a mismatch correction needs logp_rollout (log μ of the sampler)")
    if logp_rollout is not None and logp_rollout.shape != logp_old.shape:
        raise ValueError(
            f"logp_rollout must be (B,) = ({logp_old.shape[0]},), got {tuple(logp_rollout.shape)}"
        )
    clip_eps, ent_coef, kl_coef = coefs.clip_eps, coefs.ent_coef, coefs.kl_coef
    if kl_coef > 0 and logp_ref_all is None:
        raise ValueError("kl_coef > 0 needs logp_ref_all (the reference policy over the menus)")
    if coefs.label_mass_coef > 0 and label_mass is None:
        raise ValueError("label_mass_coef > 0 needs label_mass (the mass on the legal labels)")
    if coefs.position_coef > 0 and position_direction is None:
        raise ValueError("position_coef > 0 needs position_direction (see position_directions)")
    batch, width = logp_all.shape
    valid = logp_all != -torch.inf  # (B, K)
    in_range = (actions >= 0) & (actions < width)
    index = actions.clamp(0, max(width - 1, 0))[:, None]  # (B, 1)
    if batch > 0 and not bool((in_range & valid.gather(1, index).squeeze(1)).all()):
        raise ValueError("an action index points at a padded row or outside the menu")

    logp_action = logp_all.gather(1, index).squeeze(1)  # (B,)
    log_ratio = logp_action - logp_old.detach()
    ratio = torch.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    # float32 whatever the model's dtype: the readout returns float32 log-probs, and
    # ratios, advantages and every term below stay in that dtype
    n = max(batch, 1) if normaliser is None else normaliser
    surrogate = torch.minimum(unclipped, clipped)  # (B,)
    rule_metrics: Metrics = {}
    if correcting:
        assert correction is not None and logp_rollout is not None  # checked above
        rho = torch.exp(logp_old.detach() - logp_rollout.detach())  # (B,) π_old / μ
        weight, rule_metrics = correction.weigh(rho)
        surrogate = surrogate * weight
    policy_loss = -surrogate.sum() / n
    entropy = exact_entropy(logp_all).sum() / n
    loss = policy_loss - ent_coef * entropy

    metrics: Metrics = {
        "policy_loss": policy_loss,
        "clip_frac": (clipped < unclipped).to(logp_all.dtype).sum() / n,
        "approx_kl": (torch.expm1(log_ratio) - log_ratio).sum() / n,
        "entropy": entropy,
        # a batch-level diagnostic: not additive over micro-batches, scaled by its share
        "label_marginal_kl_uniform": label_marginal_kl_uniform(logp_all) * (batch / n),
    }
    for name, mean in rule_metrics.items():  # the rule's means, as sums / n like the rest
        metrics[name] = mean * (batch / n)
    if logp_ref_all is not None:
        kl_ref = exact_kl(logp_all, logp_ref_all.detach()).sum() / n
        if kl_coef > 0:
            loss = loss + kl_coef * kl_ref
        metrics["kl_ref"] = kl_ref
    loss = add_menu_terms(loss, metrics, coefs, logp_all, position_direction, label_mass, n)
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
