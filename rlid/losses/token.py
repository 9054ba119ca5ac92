"""Token-plane policy losses: GRPO, Dr. GRPO, DAPO, GSPO, CISPO, with TIS / IcePop.

Each variant is a (surrogate, aggregation) pair. A surrogate turns per-token
log-probabilities into a per-token loss of shape (B, T); an aggregation reduces
it to a scalar under the completion mask. Metrics are detached 0-d tensors
(nothing here calls ``.item()``), so they can be reduced across processes.

Three distributions have three names:

* ``logp``         current trainer policy π_θ (carries the gradient),
* ``logp_old``     the trainer's policy when the rollout was made, π_old,
* ``logp_rollout`` the sampling engine's policy μ (another dtype, kernel or engine).

π_θ/π_old is staleness, handled by the PPO / GSPO clip; π_old/μ is the
train-inference mismatch, handled by TIS or IcePop. One never replaces the other.

Sources, and where this code departs from them:

* GRPO — Shao et al. 2024, "DeepSeekMath: Pushing the Limits of Mathematical
  Reasoning in Open Language Models" (arXiv:2402.03300). Token clip, length
  mean per sequence then mean over sequences, k3 KL to a reference policy.
* Dr. GRPO — Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical
  Perspective" (arXiv:2503.20783). No std division in the advantage
  (``rlid.core.advantages.group_relative_advantages(scale="none")``) and a constant normaliser B·max_len
  instead of each sequence's length.
* DAPO — Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning
  System at Scale" (arXiv:2503.14476). Clip-higher (0.2 / 0.28) and a token
  mean over the whole batch. Dynamic sampling and overlong shaping live outside
  the loss (``nonzero_variance_groups``, ``overlong_penalty``); DAPO drops the
  KL term, which here is simply ``beta=0`` (the default).
* GSPO — Zheng et al. 2025, "Group Sequence Policy Optimization"
  (arXiv:2507.18071). One length-normalised ratio per sequence and one clip
  (3e-4 / 4e-4). The paper has no mismatch correction and no KL; here both are
  applied per sequence (the mismatch ratio is length-normalised the same way).
* CISPO — MiniMax 2025, "MiniMax-M1: Scaling Test-Time Compute Efficiently with
  Lightning Attention" (arXiv:2506.13585). A stop-gradient, clipped IS weight
  times the log-probability, token mean. The paper's lower bound is left
  effectively disabled; here there is only the upper bound.
* TIS — Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You
  Off-Policy RL Training" (blog). Weight min(π_old/μ, C): one-sided, small
  ratios kept.
* IcePop — Ling Team 2025, Ring-1T report "Every Step Evolves: Scaling
  Reinforcement Learning for Trillion-Scale Thinking Model" / the IcePop blog.
  Weight π_old/μ inside [low, high], zero outside: a two-sided mask, not a clip.

TIS and IcePop weights multiply the policy-gradient term only, never the KL
term (the KL is to a fixed reference, independent of which engine sampled).
In-mask values are used as given; masked positions may hold anything (-inf,
huge values) and never reach an ``exp``, the loss, the metrics or a gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor

from rlid.config.names import Mismatch, TokenAlgo
from rlid.losses.mismatch import (
    ICEPOP_HIGH,
    ICEPOP_LOW,
    MISMATCH_RULES,
    TIS_CAP,
    MismatchCorrection,
    MismatchRule,
)

Variant = TokenAlgo  # the loss variants are the token-plane algorithms
Metrics = dict[str, Tensor]


# ---------------------------------------------------------------------------
# masked reductions (counts are clamped at 1: an empty selection sums to 0)


def _masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1)


def _masked_min_max(values: Tensor, selected: Tensor, empty: float) -> tuple[Tensor, Tensor]:
    if values.numel() == 0:
        fill = values.new_tensor(empty)
        return fill, fill
    any_selected = selected.any()
    low = torch.where(selected, values, torch.inf).amin()
    high = torch.where(selected, values, -torch.inf).amax()
    return torch.where(any_selected, low, empty), torch.where(any_selected, high, empty)


# ---------------------------------------------------------------------------
# train-inference mismatch rules: rho = pi_old / mu  ->  (weight, metrics), shared with
# the decision and scoring planes (rlid.losses.mismatch).
# `unit_mask` marks the units the weight applies to (tokens, or sequences for GSPO).


# ---------------------------------------------------------------------------
# surrogates: per-token loss (B, T) before the KL term and before masking.
# Inputs are already cleaned: zeros at masked positions of logp, log_ratio, log_rho.

Weigh = Callable[[Tensor, Tensor], tuple[Tensor, Metrics]]


def clipped_token_surrogate(
    logp: Tensor,
    log_ratio: Tensor,
    log_rho: Tensor,
    advantages: Tensor,
    mask: Tensor,
    weigh: Weigh,
    *,
    eps_low: float,
    eps_high: float,
) -> tuple[Tensor, Metrics]:
    """PPO token clip (GRPO / Dr. GRPO / DAPO): −min(r·A, clip(r)·A)·w."""
    ratio = torch.exp(log_ratio)  # (B, T)
    adv = advantages[:, None]  # (B, 1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * adv
    weight, metrics = weigh(torch.exp(log_rho), mask)  # (B, T)
    loss = -torch.minimum(unclipped, clipped) * weight
    metrics["clip_frac"] = _masked_mean((clipped < unclipped).to(mask.dtype), mask)
    return loss, metrics


def clipped_sequence_surrogate(
    logp: Tensor,
    log_ratio: Tensor,
    log_rho: Tensor,
    advantages: Tensor,
    mask: Tensor,
    weigh: Weigh,
    *,
    eps_low: float,
    eps_high: float,
) -> tuple[Tensor, Metrics]:
    """GSPO: s_i = exp(mean_t log r), one clip per sequence, broadcast over its tokens.

    With the per-sequence token mean as aggregation, each sequence contributes
    exactly its l_i (an empty sequence contributes 0 and still counts in B).
    """
    lengths = mask.sum(-1).clamp(min=1)  # (B,)
    nonempty = (mask.sum(-1) > 0).to(mask.dtype)  # (B,)
    seq_ratio = torch.exp((log_ratio * mask).sum(-1) / lengths)  # (B,)
    seq_rho = torch.exp((log_rho * mask).sum(-1) / lengths)  # (B,)
    unclipped = seq_ratio * advantages
    clipped = torch.clamp(seq_ratio, 1.0 - eps_low, 1.0 + eps_high) * advantages
    weight, metrics = weigh(seq_rho, nonempty)
    seq_loss = -torch.minimum(unclipped, clipped) * weight  # (B,)
    metrics["clip_frac"] = _masked_mean((clipped < unclipped).to(mask.dtype), nonempty)
    return seq_loss[:, None].expand_as(mask), metrics


def cispo_surrogate(
    logp: Tensor,
    log_ratio: Tensor,
    log_rho: Tensor,
    advantages: Tensor,
    mask: Tensor,
    weigh: Weigh,
    *,
    eps_low: float,
    eps_high: float,
) -> tuple[Tensor, Metrics]:
    """CISPO: −sg(min(r, 1+eps_high))·A·log π_θ·w; every token keeps a gradient."""
    ratio = torch.exp(log_ratio)  # (B, T)
    is_weight = torch.clamp(ratio, max=1.0 + eps_high).detach()
    weight, metrics = weigh(torch.exp(log_rho), mask)
    loss = -is_weight * advantages[:, None] * logp * weight
    metrics["clip_frac"] = _masked_mean((ratio > 1.0 + eps_high).to(mask.dtype), mask)
    return loss, metrics


# ---------------------------------------------------------------------------
# aggregations: (B, T) per-token loss -> scalar, divided by a normaliser that the
# caller may pass in. The normaliser belongs to the *minibatch* (or, across ranks, to
# the global batch), never to a micro-batch: with gradient accumulation each
# micro-batch's loss is sum_over_its_sequences / minibatch_normaliser, so the summed
# gradients equal the one-batch gradient (the verl #5625 bug class is dividing by the
# micro-batch's own count). See ``aggregation_normaliser``.


def seq_mean_token_mean(loss: Tensor, mask: Tensor, normaliser: Tensor | float) -> Tensor:
    """Σ_b (token mean of sequence b) / normaliser, normaliser = number of sequences (GRPO, GSPO)."""
    per_seq = (loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # (B,)
    return per_seq.sum() / normaliser


def constant_normaliser(loss: Tensor, mask: Tensor, normaliser: Tensor | float) -> Tensor:
    """Σ m·l / normaliser, normaliser = B·max_len: every token weighs the same, whatever
    its sequence length (Dr. GRPO)."""
    return (loss * mask).sum() / normaliser


def token_mean(loss: Tensor, mask: Tensor, normaliser: Tensor | float) -> Tensor:
    """Σ m·l / normaliser, normaliser = Σ m over the whole batch (DAPO, CISPO)."""
    return (loss * mask).sum() / normaliser


def _units_per_sequence(lengths: Tensor, max_len: int | None) -> Tensor:
    return torch.ones_like(lengths, dtype=torch.float32)


def _units_max_len(lengths: Tensor, max_len: int | None) -> Tensor:
    if max_len is None or max_len <= 0:
        raise ValueError("variant 'dr_grpo' needs max_len > 0 (the generation budget in tokens)")
    return torch.full_like(lengths, float(max_len), dtype=torch.float32)


def _units_tokens(lengths: Tensor, max_len: int | None) -> Tensor:
    return lengths.to(torch.float32)


Surrogate = Callable[..., tuple[Tensor, Metrics]]
Aggregation = Callable[[Tensor, Tensor, Tensor | float], Tensor]


@dataclass(frozen=True)
class VariantSpec:
    """A loss variant: surrogate, aggregation (with the units its normaliser counts per
    sequence), and the paper's clip range.

    ``eps_high=None`` means symmetric (eps_high defaults to eps_low);
    ``eps_low=None`` means the surrogate has no lower bound.
    """

    surrogate: Surrogate
    aggregate: Aggregation
    units: Callable[[Tensor, int | None], Tensor]
    eps_low: float | None
    eps_high: float | None


VARIANTS: dict[Variant, VariantSpec] = {
    "grpo": VariantSpec(
        clipped_token_surrogate, seq_mean_token_mean, _units_per_sequence, 0.2, None
    ),
    "dr_grpo": VariantSpec(clipped_token_surrogate, constant_normaliser, _units_max_len, 0.2, None),
    "dapo": VariantSpec(clipped_token_surrogate, token_mean, _units_tokens, 0.2, 0.28),
    "gspo": VariantSpec(
        clipped_sequence_surrogate, seq_mean_token_mean, _units_per_sequence, 3e-4, 4e-4
    ),
    "cispo": VariantSpec(cispo_surrogate, token_mean, _units_tokens, None, 4.0),
}


def normaliser_units(variant: Variant, lengths: Tensor, max_len: int | None = None) -> Tensor:
    """(B,) completion lengths -> (B,) float32: what each sequence adds to the normaliser.

    grpo / gspo count sequences (1 each), dr_grpo ``max_len`` each, dapo / cispo
    their tokens. The normaliser of a batch is the sum (see ``aggregation_normaliser``);
    across ranks it is the all-reduced sum of the per-rank sums.
    """
    spec: VariantSpec = _lookup(VARIANTS, variant, "variant")
    return spec.units(torch.as_tensor(lengths), max_len)


def aggregation_normaliser(variant: Variant, lengths: Tensor, max_len: int | None = None) -> Tensor:
    """The variant's loss denominator for a batch of completions with these lengths (B,).

    ``Σ normaliser_units`` clamped at 1: number of sequences (grpo, gspo), B·max_len
    (dr_grpo), number of completion tokens (dapo, cispo). Compute it over the whole
    minibatch and pass it to every micro-batch's ``token_policy_loss(normaliser=...)``.
    """
    return normaliser_units(variant, lengths, max_len).sum().clamp(min=1)


def _lookup(table: dict, name: str, kind: str):
    if name not in table:
        raise ValueError(f"unknown {kind} {name!r}; valid: {', '.join(map(repr, table))}")
    return table[name]


def _clip_range(
    variant: str, spec: VariantSpec, eps_low: float | None, eps_high: float | None
) -> tuple[float, float]:
    if spec.eps_low is None:
        if eps_low is not None:
            raise ValueError(f"variant {variant!r} has no lower clip; leave eps_low unset")
        low = 0.0
    else:
        low = spec.eps_low if eps_low is None else eps_low
    if eps_high is not None:
        high = eps_high
    else:
        high = low if spec.eps_high is None else spec.eps_high
    if low < 0 or high < 0:
        raise ValueError(f"clip range must be non-negative, got eps_low={low}, eps_high={high}")
    return low, high


def _check_shapes(logp: Tensor, advantages: Tensor, **same_as_logp: Tensor | None) -> None:
    if logp.dim() != 2:
        raise ValueError(f"logp must be (B, T), got shape {tuple(logp.shape)}")
    for name, tensor in same_as_logp.items():
        if tensor is not None and tensor.shape != logp.shape:
            raise ValueError(
                f"{name} must have the shape of logp {tuple(logp.shape)}, got {tuple(tensor.shape)}"
            )
    if advantages.shape != logp.shape[:1]:
        raise ValueError(
            f"advantages must be (B,) = ({logp.shape[0]},), got {tuple(advantages.shape)}"
        )


@dataclass(frozen=True)
class TokenLoss:
    """Which token-plane loss, with which clip range and train-inference correction.

    Attributes:
        variant: "grpo" | "dr_grpo" | "dapo" | "gspo" | "cispo".
        eps_low, eps_high: clip range; None: the paper's (GRPO/Dr. GRPO 0.2 symmetric,
            DAPO 0.2/0.28, GSPO 3e-4/4e-4, CISPO upper 4.0 only).
        max_len: generation budget, the constant normaliser of Dr. GRPO.
        mismatch: "none" | "tis" | "icepop", applied to rho = π_old/μ.
        tis_cap: TIS cap C in min(rho, C).
        icepop_low, icepop_high: IcePop keeps rho in [low, high], zeros it outside.
        beta: weight of the k3 KL estimator exp(ref−logp) − (ref−logp) − 1.
    """

    variant: Variant
    eps_low: float | None = None
    eps_high: float | None = None
    max_len: int | None = None
    mismatch: Mismatch = "none"
    tis_cap: float = TIS_CAP
    icepop_low: float = ICEPOP_LOW
    icepop_high: float = ICEPOP_HIGH
    beta: float = 0.0

    def __post_init__(self) -> None:
        _lookup(VARIANTS, self.variant, "variant")
        _lookup(MISMATCH_RULES, self.mismatch, "mismatch")
        if self.beta < 0:
            raise ValueError(f"beta must be >= 0, got {self.beta}")
        # the rule's bounds, checked where they are defined
        MismatchCorrection(self.mismatch, self.tis_cap, self.icepop_low, self.icepop_high)


def token_policy_loss(
    logp: Tensor,
    logp_old: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    loss: TokenLoss,
    logp_rollout: Tensor | None = None,
    logp_ref: Tensor | None = None,
    normaliser: Tensor | float | None = None,
) -> tuple[Tensor, Metrics]:
    """Policy loss of one token-plane variant, with optional mismatch correction and KL.

    Args:
        logp: (B, T) log π_θ of the sampled tokens (carries the gradient).
        logp_old: (B, T) log π_old, the trainer at rollout time.
        advantages: (B,) one advantage per sequence.
        mask: (B, T) 1 (or True) on completion tokens, 0 elsewhere.
        loss: the variant and its settings (:class:`TokenLoss`).
        logp_rollout: (B, T) log μ of the sampling engine; needed by "tis"/"icepop".
        logp_ref: (B, T) log π_ref; needed when beta > 0.
        normaliser: the aggregation's denominator (``aggregation_normaliser`` over the
            whole minibatch when this batch is one micro-batch of it, or over all ranks);
            None: this batch's own. Metrics stay means over this batch.

    Returns:
        (loss, metrics). Metrics: ``clip_frac`` (masked tokens, or non-empty
        sequences for GSPO, where the clipped branch is chosen and differs),
        ``approx_kl`` (mean (r−1) − log r over masked tokens, old → new);
        with logp_rollout: ``rho_mean``/``rho_min``/``rho_max`` of the raw
        π_old/μ over masked tokens (1 for an empty batch); ``tis_truncated_frac``
        or ``icepop_masked_frac`` (same units as clip_frac); ``k3_mean`` when
        beta > 0.
    """
    variant, mismatch, beta, max_len = loss.variant, loss.mismatch, loss.beta, loss.max_len
    spec: VariantSpec = _lookup(VARIANTS, variant, "variant")
    rule: MismatchRule = _lookup(MISMATCH_RULES, mismatch, "mismatch")
    _check_shapes(
        logp,
        advantages,
        logp_old=logp_old,
        mask=mask,
        logp_rollout=logp_rollout,
        logp_ref=logp_ref,
    )
    if mismatch != "none" and logp_rollout is None:
        raise ValueError(f"mismatch={mismatch!r} needs logp_rollout (log-probs of the sampler)")
    if beta > 0 and logp_ref is None:
        raise ValueError("beta > 0 needs logp_ref (log-probs of the reference policy)")
    eps_low, eps_high = _clip_range(variant, spec, loss.eps_low, loss.eps_high)

    tokens = mask != 0  # (B, T) bool
    mask_f = tokens.to(logp.dtype)
    # Masked positions may hold garbage: select before any exp, so neither the
    # value nor the gradient can see it.
    logp_safe = torch.where(tokens, logp, 0.0)
    log_ratio = torch.where(tokens, logp - logp_old.detach(), 0.0)  # log π_θ/π_old
    if logp_rollout is None:
        log_rho = torch.zeros_like(log_ratio)
    else:
        log_rho = torch.where(tokens, logp_old - logp_rollout, 0.0).detach()  # log π_old/μ

    weigh = partial(
        rule, tis_cap=loss.tis_cap, icepop_low=loss.icepop_low, icepop_high=loss.icepop_high
    )
    loss_tok, metrics = spec.surrogate(
        logp_safe, log_ratio, log_rho, advantages, mask_f, weigh, eps_low=eps_low, eps_high=eps_high
    )
    if beta > 0:
        assert logp_ref is not None  # checked above
        log_ref_ratio = torch.where(tokens, logp_ref.detach() - logp, 0.0)  # (B, T)
        k3 = torch.exp(log_ref_ratio) - log_ref_ratio - 1.0
        loss_tok = loss_tok + beta * k3
        metrics["k3_mean"] = _masked_mean(k3, mask_f)
    if normaliser is None:
        normaliser = aggregation_normaliser(variant, mask_f.sum(-1), max_len)
    total = spec.aggregate(loss_tok, mask_f, normaliser)

    with torch.no_grad():
        metrics["approx_kl"] = _masked_mean(torch.expm1(log_ratio) - log_ratio, mask_f)
        if logp_rollout is not None:
            rho = torch.exp(log_rho)
            metrics["rho_mean"] = torch.where(tokens.any(), _masked_mean(rho, mask_f), 1.0)
            metrics["rho_min"], metrics["rho_max"] = _masked_min_max(rho, tokens, empty=1.0)
    return total, {name: value.detach() for name, value in metrics.items()}


# ---------------------------------------------------------------------------
# advantages and reward shaping


def nonzero_variance_groups(rewards: Tensor) -> Tensor:
    """(N, G) -> (N,) bool: groups whose rewards are not all equal.

    DAPO's dynamic sampling keeps only these (the others have zero advantage
    and no gradient); every filtered sample still counts in the budget.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be (N, G), got shape {tuple(rewards.shape)}")
    return (rewards != rewards[:, :1]).any(dim=1)


def overlong_penalty(lengths: Tensor, max_len: int, cache_len: int) -> Tensor:
    """DAPO's soft overlong punishment, added to the task reward.

    0 if L <= max_len − cache_len; ((max_len − cache_len) − L) / cache_len
    (a linear ramp from 0 to −1) inside the last ``cache_len`` tokens; −1 if
    L > max_len. Returns a float tensor shaped like ``lengths``.
    """
    if not 0 < cache_len <= max_len:
        raise ValueError(
            f"need 0 < cache_len <= max_len, got cache_len={cache_len}, max_len={max_len}"
        )
    lengths = torch.as_tensor(lengths)
    lengths_f = lengths if lengths.is_floating_point() else lengths.to(torch.get_default_dtype())
    free = max_len - cache_len
    ramp = (free - lengths_f) / cache_len
    penalty = torch.where(lengths <= free, torch.zeros_like(lengths_f), ramp)
    return torch.where(lengths > max_len, torch.full_like(lengths_f, -1.0), penalty)
