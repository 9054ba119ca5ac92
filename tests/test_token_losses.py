"""Token-plane losses: hand-computed values, gradients, edge cases, properties."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlid.core.advantages import group_relative_advantages
from rlid.losses.token import (
    MISMATCH_RULES,
    VARIANTS,
    TokenLoss,
    nonzero_variance_groups,
    overlong_penalty,
    token_policy_loss,
)

DT = torch.float64
GARBAGE = 123.0  # masked positions; the tests below also try -inf, nan and huge values


def base_batch(garbage: float = GARBAGE) -> dict[str, torch.Tensor]:
    """B=2, T=3. Sequence 0 has 2 tokens (A=+1), sequence 1 has 1 token (A=-1).

    Ratios r = π_θ/π_old      = [[1.5, 0.9, ·], [0.7, ·, ·]]
    log π_θ                   = [[-1, -2, ·], [-0.5, ·, ·]]
    mismatch rho = π_old/μ    = [[3.0, 0.25, ·], [1.0, ·, ·]]
    reference: log π_ref − log π_θ = [[log 2, 0, ·], [−log 2, ·, ·]]
    """
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    g = garbage

    def fill(values: list[list[float]]) -> torch.Tensor:
        t = torch.tensor(values, dtype=DT)
        return torch.where(mask.bool(), t, torch.tensor(g, dtype=DT))

    logp = fill([[-1.0, -2.0, 0], [-0.5, 0, 0]])
    log_r = fill([[math.log(1.5), math.log(0.9), 0], [math.log(0.7), 0, 0]])
    log_rho = fill([[math.log(3.0), math.log(0.25), 0], [0.0, 0, 0]])
    ref_gap = fill([[math.log(2.0), 0.0, 0], [-math.log(2.0), 0, 0]])
    logp_old = logp - log_r
    return {
        "logp": fill(logp.tolist()),
        "logp_old": fill(logp_old.tolist()),
        "logp_rollout": fill((logp_old - log_rho).tolist()),
        "logp_ref": fill((logp + ref_gap).tolist()),
        "advantages": torch.tensor([1.0, -1.0], dtype=DT),
        "mask": mask,
    }


LOSS_FIELDS = {f.name for f in dataclasses.fields(TokenLoss)}


def run(batch: dict[str, torch.Tensor], **kwargs):
    """token_policy_loss on ``batch`` with ``kwargs`` (TokenLoss fields among them)."""
    args = dict(batch)
    settings = {k: v for k, v in kwargs.items() if k in LOSS_FIELDS}
    rest = {k: v for k, v in kwargs.items() if k not in LOSS_FIELDS}
    return token_policy_loss(
        args.pop("logp"),
        args.pop("logp_old"),
        args.pop("advantages"),
        args.pop("mask"),
        loss=TokenLoss(**settings),
        **args,
        **rest,
    )


# Per-token surrogate values of the base batch (w = mismatch weight):
#   TIS cap 2:             w = [2, 0.25 (small rho kept), 1]
#   IcePop [0.5, 5]:       w = [3 (kept unchanged), 0 (masked), 1]
# GRPO / Dr. GRPO, eps 0.2 (clip range [0.8, 1.2]):
#   t0: min(1.5·1, 1.2·1) = 1.2 -> -1.2 (clipped); t1: min(0.9, 0.9) -> -0.9;
#   s1: min(0.7·-1, 0.8·-1) = -0.8 -> +0.8 (clipped)
# DAPO, eps 0.2/0.28: t0 -> -1.28, t1 -> -0.9, s1 -> +0.8
# CISPO, cap 1+4 = 5 (no clip): l = -r·A·logp: t0 -1.5·1·-1 = 1.5, t1 -0.9·1·-2 = 1.8,
#   s1 -0.7·-1·-0.5 = -0.35
# GSPO (eps 0.2 override): s0 = exp((log 1.5 + log 0.9)/2) = sqrt(1.35) = 1.161895 (inside),
#   s1 = 0.7 -> 0.8 (clipped); seq rho0 = sqrt(3·0.25) = 0.866025 (kept by TIS and IcePop), rho1 = 1
HAND = {
    # grpo: mean over sequences of token means
    ("grpo", "none"): ((-1.2 - 0.9) / 2 + 0.8) / 2,  # = -0.125
    ("grpo", "tis"): ((-1.2 * 2 - 0.9 * 0.25) / 2 + 0.8) / 2,  # = -0.25625
    ("grpo", "icepop"): ((-1.2 * 3 - 0.9 * 0) / 2 + 0.8) / 2,  # = -0.5
    # dr_grpo: Σ / (B·max_len) = Σ / (2·4)
    ("dr_grpo", "none"): (-1.2 - 0.9 + 0.8) / 8,  # = -0.1625
    ("dr_grpo", "tis"): (-2.4 - 0.225 + 0.8) / 8,  # = -0.228125
    ("dr_grpo", "icepop"): (-3.6 + 0.0 + 0.8) / 8,  # = -0.35
    # dapo: Σ / 3 tokens
    ("dapo", "none"): (-1.28 - 0.9 + 0.8) / 3,  # = -0.46
    ("dapo", "tis"): (-1.28 * 2 - 0.9 * 0.25 + 0.8) / 3,  # = -0.661667
    ("dapo", "icepop"): (-1.28 * 3 - 0.0 + 0.8) / 3,  # = -1.013333
    # gspo (eps 0.2): mean over sequences of l_i
    ("gspo", "none"): (-math.sqrt(1.35) + 0.8) / 2,  # = -0.180948
    ("gspo", "tis"): (-math.sqrt(1.35) * math.sqrt(0.75) + 0.8) / 2,  # = -0.103115
    ("gspo", "icepop"): (-math.sqrt(1.35) * math.sqrt(0.75) + 0.8) / 2,  # = -0.103115
    # cispo: Σ / 3 tokens
    ("cispo", "none"): (1.5 + 1.8 - 0.35) / 3,  # = 0.983333
    ("cispo", "tis"): (1.5 * 2 + 1.8 * 0.25 - 0.35) / 3,  # = 1.033333
    ("cispo", "icepop"): (1.5 * 3 + 1.8 * 0 - 0.35) / 3,  # = 1.383333
}
EXTRA = {"dr_grpo": {"max_len": 4}, "gspo": {"eps_low": 0.2, "eps_high": 0.2}}


@pytest.mark.parametrize(("variant", "mismatch"), sorted(HAND))
def test_hand_values(variant, mismatch):
    loss, metrics = run(base_batch(), variant=variant, mismatch=mismatch, **EXTRA.get(variant, {}))
    assert loss.item() == pytest.approx(HAND[variant, mismatch], rel=1e-9)
    # raw rho over the 3 masked tokens: [3, 0.25, 1]
    assert metrics["rho_mean"].item() == pytest.approx(4.25 / 3)
    assert metrics["rho_min"].item() == pytest.approx(0.25)
    assert metrics["rho_max"].item() == pytest.approx(3.0)
    # approx KL: (r − 1) − log r over r = [1.5, 0.9, 0.7]
    expected_kl = sum((r - 1) - math.log(r) for r in (1.5, 0.9, 0.7)) / 3  # = 0.052190
    assert metrics["approx_kl"].item() == pytest.approx(expected_kl)
    for value in metrics.values():
        assert value.dim() == 0 and not value.requires_grad


def test_every_variant_and_mode_has_a_hand_value():
    assert set(HAND) == {(v, m) for v in VARIANTS for m in MISMATCH_RULES}


@pytest.mark.parametrize(
    ("variant", "expected"),
    [("grpo", 2 / 3), ("dr_grpo", 2 / 3), ("dapo", 2 / 3), ("cispo", 0.0), ("gspo", 1.0)],
)
def test_clip_fraction(variant, expected):
    # token clip: t0 (r=1.5, A>0) and s1 (r=0.7, A<0) clipped, t1 not -> 2/3;
    # CISPO cap 5 never reached; GSPO with its default 3e-4/4e-4 clips both sequences
    extra = {"max_len": 4} if variant == "dr_grpo" else {}
    _, metrics = run(base_batch(), variant=variant, **extra)
    assert metrics["clip_frac"].item() == pytest.approx(expected)


def test_gspo_default_clip_range():
    # s0 = 1.161895 -> 1.0004 (A=+1) -> -1.0004; s1 = 0.7 -> 0.9997 (A=-1) -> +0.9997
    loss, _ = run(base_batch(), variant="gspo")
    assert loss.item() == pytest.approx((-1.0004 + 0.9997) / 2)


def test_cispo_clip_counts_and_caps():
    # eps_high 0.2: t0's weight 1.5 -> 1.2: (1.2 + 1.8 - 0.35)/3; 1 of 3 tokens capped
    loss, metrics = run(base_batch(), variant="cispo", eps_high=0.2)
    assert loss.item() == pytest.approx((1.2 + 1.8 - 0.35) / 3)
    assert metrics["clip_frac"].item() == pytest.approx(1 / 3)


def test_mismatch_fractions():
    _, tis = run(base_batch(), variant="grpo", mismatch="tis")
    _, ice = run(base_batch(), variant="grpo", mismatch="icepop")
    assert tis["tis_truncated_frac"].item() == pytest.approx(1 / 3)  # rho = 3 > 2
    assert ice["icepop_masked_frac"].item() == pytest.approx(1 / 3)  # rho = 0.25 < 0.5
    # GSPO: sequence rhos [0.866, 1] are inside both rules
    _, seq = run(base_batch(), variant="gspo", mismatch="icepop")
    assert seq["icepop_masked_frac"].item() == 0.0


def test_gspo_icepop_masks_whole_sequence():
    # icepop_low 0.9 > rho0 = 0.866: sequence 0 weight 0; only s1 = +0.8 remains, /B=2
    loss, metrics = run(
        base_batch(), variant="gspo", eps_low=0.2, eps_high=0.2, mismatch="icepop", icepop_low=0.9
    )
    assert loss.item() == pytest.approx(0.4)
    assert metrics["icepop_masked_frac"].item() == pytest.approx(0.5)


def test_tis_keeps_small_rho_icepop_zeros_it():
    # one token, r = 1 (no staleness), A = 1, rho = 0.25: TIS weight 0.25, IcePop weight 0
    logp = torch.zeros(1, 1, dtype=DT)
    rollout = logp - math.log(0.25)
    one = (logp, logp, torch.ones(1, dtype=DT), torch.ones(1, 1))
    tis, _ = token_policy_loss(
        *one, logp_rollout=rollout, loss=TokenLoss(variant="dapo", mismatch="tis")
    )
    ice, _ = token_policy_loss(
        *one, logp_rollout=rollout, loss=TokenLoss(variant="dapo", mismatch="icepop")
    )
    assert tis.item() == pytest.approx(-0.25)
    assert ice.item() == 0.0


@pytest.mark.parametrize("rho", [0.5, 0.8, 1.7, 5.0])
def test_icepop_keeps_rho_unchanged_inside_range(rho):
    # inside [0.5, 5] (bounds included) the weight is rho itself, not clipped to 1
    logp = torch.zeros(1, 1, dtype=DT)
    loss, _ = token_policy_loss(
        logp,
        logp,
        torch.ones(1, dtype=DT),
        torch.ones(1, 1),
        logp_rollout=logp - math.log(rho),
        loss=TokenLoss(variant="dapo", mismatch="icepop"),
    )
    assert loss.item() == pytest.approx(-rho)


def test_kl_term_k3():
    # k3 = exp(d) − d − 1, d = log π_ref − log π_θ: d = log 2 -> 2 − log 2 − 1 = 0.306853;
    # d = 0 -> 0; d = −log 2 -> 0.5 + log 2 − 1 = 0.193147; mean = 0.5 / 3.
    # GRPO, beta 0.1: seq0 (−1.2 − 0.9 + 0.1·0.306853)/2, seq1 0.8 + 0.1·0.193147
    k3_a, k3_c = 2 - math.log(2) - 1, 0.5 + math.log(2) - 1
    expected = ((-2.1 + 0.1 * k3_a) / 2 + 0.8 + 0.1 * k3_c) / 2  # = -0.107671
    loss, metrics = run(base_batch(), variant="grpo", beta=0.1)
    assert loss.item() == pytest.approx(expected)
    assert metrics["k3_mean"].item() == pytest.approx(0.5 / 3)
    # GSPO adds beta times each sequence's token mean of k3: same sum here
    loss, _ = run(base_batch(), variant="gspo", eps_low=0.2, eps_high=0.2, beta=0.1)
    assert loss.item() == pytest.approx(
        ((-math.sqrt(1.35) + 0.1 * k3_a / 2) + 0.8 + 0.1 * k3_c) / 2
    )


def test_gspo_differs_from_token_average_with_an_outlier():
    # one sequence, A = 1, log r = [0, 0, 0, log 3], both clip ranges 0.2:
    # token average: mean(−1, −1, −1, −1.2) = −1.05, the outlier alone is clipped
    # GSPO: s = 3^(1/4) = 1.316 > 1.2: the whole sequence is clipped -> −1.2, no gradient
    logp = torch.zeros(1, 4, dtype=DT, requires_grad=True)
    logp_old = torch.tensor([[0.0, 0.0, 0.0, -math.log(3.0)]], dtype=DT)
    adv, mask = torch.ones(1, dtype=DT), torch.ones(1, 4)
    tok, _ = token_policy_loss(logp, logp_old, adv, mask, loss=TokenLoss(variant="grpo"))
    (tok_grad,) = torch.autograd.grad(tok, logp)
    seq, _ = token_policy_loss(
        logp, logp_old, adv, mask, loss=TokenLoss(variant="gspo", eps_low=0.2, eps_high=0.2)
    )
    (seq_grad,) = torch.autograd.grad(seq, logp)
    assert tok.item() == pytest.approx(-1.05)
    assert seq.item() == pytest.approx(-1.2)
    assert torch.equal(seq_grad, torch.zeros_like(seq_grad))
    assert torch.allclose(tok_grad, torch.tensor([[-0.25, -0.25, -0.25, 0.0]], dtype=DT))


def test_dr_grpo_constant_normaliser_vs_grpo_length_mean():
    # r = 1, A = 1: every token's surrogate is −1. Lengths 1 and 3, B = 2, max_len 4.
    # GRPO: each sequence mean −1 -> −1; token gradients −1/(1·2) = −0.5 and −1/(3·2) = −1/6
    # Dr. GRPO: Σ = −4, / (2·4) = −0.5; every token gradient −1/8, whatever its length
    logp = torch.zeros(2, 3, dtype=DT, requires_grad=True)
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    adv = torch.ones(2, dtype=DT)
    grpo, _ = token_policy_loss(logp, logp.detach(), adv, mask, loss=TokenLoss(variant="grpo"))
    (g_grpo,) = torch.autograd.grad(grpo, logp)
    dr, _ = token_policy_loss(
        logp, logp.detach(), adv, mask, loss=TokenLoss(variant="dr_grpo", max_len=4)
    )
    (g_dr,) = torch.autograd.grad(dr, logp)
    assert grpo.item() == pytest.approx(-1.0)
    assert dr.item() == pytest.approx(-0.5)
    assert torch.allclose(g_grpo, torch.tensor([[-0.5, 0, 0], [-1 / 6] * 3], dtype=DT))
    assert torch.allclose(g_dr, mask.to(DT) * -0.125)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_empty_sequence_counts_in_batch(variant):
    # add an empty third sequence: per-sequence means divide by B = 3, token means unchanged
    batch = base_batch()
    for key in ("logp", "logp_old", "logp_rollout", "logp_ref"):
        batch[key] = torch.cat([batch[key], torch.full((1, 3), GARBAGE, dtype=DT)])
    batch["advantages"] = torch.cat([batch["advantages"], torch.tensor([5.0], dtype=DT)])
    batch["mask"] = torch.cat([batch["mask"], torch.zeros(1, 3, dtype=torch.long)])
    extra = EXTRA.get(variant, {})
    loss, _ = run(batch, variant=variant, **extra)
    two = HAND[variant, "none"]
    if variant in ("grpo", "gspo"):
        expected = two * 2 / 3
    elif variant == "dr_grpo":
        expected = two * 8 / 12  # B·max_len: 2·4 -> 3·4
    else:
        expected = two
    assert loss.item() == pytest.approx(expected)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("mismatch", sorted(MISMATCH_RULES))
@pytest.mark.parametrize("batch_size", [0, 2])
def test_empty_batch_is_finite_zero(variant, mismatch, batch_size):
    garbage = torch.full((batch_size, 3), -torch.inf, dtype=DT)
    logp = garbage.clone().requires_grad_(True)
    loss, metrics = token_policy_loss(
        logp,
        garbage,
        torch.ones(batch_size, dtype=DT),
        torch.zeros(batch_size, 3),
        logp_rollout=garbage,
        logp_ref=garbage,
        loss=TokenLoss(variant=variant, max_len=3, mismatch=mismatch, beta=0.1),
    )
    loss.backward()
    assert loss.item() == 0.0
    assert torch.equal(logp.grad, torch.zeros_like(logp))
    assert all(torch.isfinite(v) for v in metrics.values())


@pytest.mark.parametrize("garbage", [-torch.inf, torch.inf, 1e30, -1e30, torch.nan])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_garbage_in_masked_positions_changes_nothing(variant, garbage):
    clean = base_batch(0.0)
    dirty = base_batch(garbage)
    outs = []
    for batch in (clean, dirty):
        logp = batch.pop("logp").requires_grad_(True)
        loss, metrics = token_policy_loss(
            logp,
            batch["logp_old"],
            batch["advantages"],
            batch["mask"],
            logp_rollout=batch["logp_rollout"],
            logp_ref=batch["logp_ref"],
            loss=TokenLoss(variant=variant, max_len=4, mismatch="icepop", beta=0.1),
        )
        (grad,) = torch.autograd.grad(loss, logp)
        outs.append((loss, metrics, grad))
    (l0, m0, g0), (l1, m1, g1) = outs
    assert torch.equal(l0, l1)
    assert m0.keys() == m1.keys() and all(torch.equal(m0[k], m1[k]) for k in m0)
    assert torch.equal(g0, g1)
    assert torch.isfinite(g1).all()


# --- gradients ---------------------------------------------------------------
# d loss / d logp by hand on the base batch (no mismatch, no KL):
#   token clip: unclipped token -> −r·A / normaliser, clipped token -> 0.
#     Only t1 (r = 0.9, A = 1) is unclipped: GRPO −0.9/(2 tokens·2 seqs) = −0.225,
#     Dr. GRPO −0.9/(2·4) = −0.1125, DAPO (t0 clipped at 1.28 too) −0.9/3 = −0.3.
#   GSPO (eps 0.2): l0 = −s0·A0, ds0/dlogp_t = s0/n0 -> −1.161895/(2·2) on both tokens of
#     sequence 0; sequence 1 clipped -> 0.
#   CISPO: −sg(min(r, 5))·A·m/Σm: t0 −1.5/3, t1 −0.9/3, s1 −0.7·(−1)/3.
S0 = math.sqrt(1.35)
HAND_GRAD = {
    "grpo": [[0.0, -0.225, 0.0], [0.0, 0.0, 0.0]],
    "dr_grpo": [[0.0, -0.1125, 0.0], [0.0, 0.0, 0.0]],
    "dapo": [[0.0, -0.3, 0.0], [0.0, 0.0, 0.0]],
    "gspo": [[-S0 / 4, -S0 / 4, 0.0], [0.0, 0.0, 0.0]],
    "cispo": [[-0.5, -0.3, 0.0], [0.7 / 3, 0.0, 0.0]],
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_hand_gradients(variant):
    batch = base_batch(-torch.inf)
    batch["logp"].requires_grad_(True)
    loss, _ = run(batch, variant=variant, **EXTRA.get(variant, {}))
    (grad,) = torch.autograd.grad(loss, batch["logp"])
    assert torch.allclose(grad, torch.tensor(HAND_GRAD[variant], dtype=DT))


def test_cispo_gradient_keeps_clipped_tokens():
    # eps_high 0.2: t0's weight is capped at 1.2 but still carries gradient −1.2/3
    # (PPO would give a clipped token zero gradient)
    batch = base_batch(-torch.inf)
    batch["logp"].requires_grad_(True)
    loss, _ = run(batch, variant="cispo", eps_high=0.2)
    (grad,) = torch.autograd.grad(loss, batch["logp"])
    assert torch.allclose(grad, torch.tensor([[-0.4, -0.3, 0.0], [0.7 / 3, 0.0, 0.0]], dtype=DT))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("mismatch", sorted(MISMATCH_RULES))
def test_gradients_match_finite_differences(variant, mismatch):
    batch = base_batch(0.0)
    # nudge the ratios away from clip kinks and the rhos away from TIS/IcePop edges
    logp = (batch["logp"] + 0.01).requires_grad_(True)
    extra = EXTRA.get(variant, {})

    def loss_of(x):
        return token_policy_loss(
            x,
            batch["logp_old"],
            batch["advantages"],
            batch["mask"],
            logp_rollout=batch["logp_rollout"],
            logp_ref=batch["logp_ref"],
            loss=TokenLoss(variant=variant, mismatch=mismatch, beta=0.05, **extra),
        )[0]

    if variant == "cispo":
        # the stop-gradient makes the true gradient differ from d loss / d x numerically;
        # check the analytic form instead: −sg(w_is)·A·w/Σm + beta·dk3/dlogp /Σm
        (grad,) = torch.autograd.grad(loss_of(logp), logp)
        r = torch.exp(logp.detach() - batch["logp_old"])
        rho = torch.exp(batch["logp_old"] - batch["logp_rollout"])
        w = {"none": torch.ones_like(rho), "tis": rho.clamp(max=2.0)}.get(
            mismatch, torch.where((rho >= 0.5) & (rho <= 5.0), rho, 0.0)
        )
        d = batch["logp_ref"] - logp.detach()
        dk3 = -(torch.exp(d) - 1)  # d/dlogp of exp(d) − d − 1
        adv = batch["advantages"][:, None]
        expected = (-r.clamp(max=5.0) * adv * w + 0.05 * dk3) * batch["mask"] / 3
        assert torch.allclose(grad, expected)
    else:
        assert torch.autograd.gradcheck(loss_of, (logp,))


# --- errors ------------------------------------------------------------------


def test_errors():
    b = base_batch()
    with pytest.raises(ValueError, match="unknown variant 'ppo'.*'grpo'.*'cispo'"):
        run(b, variant="ppo")
    with pytest.raises(ValueError, match="unknown mismatch 'clip'.*'tis'.*'icepop'"):
        run(b, variant="grpo", mismatch="clip")
    with pytest.raises(ValueError, match="needs logp_rollout"):
        token_policy_loss(
            b["logp"],
            b["logp_old"],
            b["advantages"],
            b["mask"],
            loss=TokenLoss(variant="grpo", mismatch="tis"),
        )
    with pytest.raises(ValueError, match="needs logp_ref"):
        token_policy_loss(
            b["logp"],
            b["logp_old"],
            b["advantages"],
            b["mask"],
            loss=TokenLoss(variant="grpo", beta=0.1),
        )
    with pytest.raises(ValueError, match="max_len"):
        run(b, variant="dr_grpo")
    with pytest.raises(ValueError, match="no lower clip"):
        run(b, variant="cispo", eps_low=0.2)
    with pytest.raises(ValueError, match="advantages must be"):
        token_policy_loss(
            b["logp"], b["logp_old"], b["advantages"][:1], b["mask"], loss=TokenLoss(variant="grpo")
        )
    with pytest.raises(ValueError, match="mask must have the shape"):
        token_policy_loss(
            b["logp"],
            b["logp_old"],
            b["advantages"],
            b["mask"][:, :2],
            loss=TokenLoss(variant="grpo"),
        )
    with pytest.raises(ValueError, match=r"logp must be \(B, T\)"):
        token_policy_loss(
            b["logp"][0],
            b["logp_old"][0],
            b["advantages"],
            b["mask"][0],
            loss=TokenLoss(variant="grpo"),
        )


# --- properties ----------------------------------------------------------------


@st.composite
def random_batches(draw):
    rows, cols = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    n = rows * cols
    logp_values = st.floats(-12.0, 0.0, allow_nan=False)

    def grid(values):
        return torch.tensor(draw(st.lists(values, min_size=n, max_size=n)), dtype=DT).reshape(
            rows, cols
        )

    return {
        "logp": grid(logp_values),
        "logp_old": grid(logp_values),
        "logp_rollout": grid(logp_values),
        "logp_ref": grid(logp_values),
        "mask": grid(st.sampled_from([0.0, 1.0])),
        "advantages": torch.tensor(
            draw(st.lists(st.floats(-5.0, 5.0), min_size=rows, max_size=rows)), dtype=DT
        ),
    }


@settings(max_examples=60, deadline=None)
@given(
    batch=random_batches(),
    variant=st.sampled_from(sorted(VARIANTS)),
    mismatch=st.sampled_from(sorted(MISMATCH_RULES)),
    beta=st.sampled_from([0.0, 0.04]),
)
def test_finite_loss_and_gradients(batch, variant, mismatch, beta):
    batch["logp"].requires_grad_(True)
    loss, metrics = run(batch, variant=variant, mismatch=mismatch, beta=beta, max_len=4)
    (grad,) = torch.autograd.grad(loss, batch["logp"])
    assert torch.isfinite(loss)
    assert torch.isfinite(grad).all()
    assert all(torch.isfinite(v) for v in metrics.values())
    assert torch.equal(grad[batch["mask"] == 0], torch.zeros_like(grad[batch["mask"] == 0]))


@settings(max_examples=60, deadline=None)
@given(batch=random_batches(), variant=st.sampled_from(["grpo", "dapo"]))
def test_unit_ratio_gives_minus_aggregated_advantage(batch, variant):
    lengths = batch["mask"].sum(-1)
    loss, _ = token_policy_loss(
        batch["logp"],
        batch["logp"],
        batch["advantages"],
        batch["mask"],
        loss=TokenLoss(variant=variant),
    )
    adv = batch["advantages"]
    if variant == "grpo":  # sequences with tokens contribute A_i, all B count
        expected = -(adv * (lengths > 0)).sum() / len(adv)
    else:  # every token carries its sequence's A
        expected = -(adv * lengths).sum() / lengths.sum().clamp(min=1)
    assert loss.item() == pytest.approx(expected.item(), abs=1e-12)


# --- advantages and shaping ------------------------------------------------------
def group_advantages(rewards: torch.Tensor, **kwargs) -> torch.Tensor:
    """(N, G) rewards -> (N, G) advantages through the one group-advantage function both
    planes use (rlid.core.advantages.group_relative_advantages), groups as rows."""
    ids = (
        torch.arange(rewards.shape[0]).repeat_interleave(rewards.shape[1])
        if rewards.dim() == 2
        else torch.zeros(0)
    )
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be (N, G), got shape {tuple(rewards.shape)}")
    return group_relative_advantages(rewards.flatten(), ids, **kwargs).view_as(rewards)


@pytest.mark.parametrize("scale", ["std", "none"])
def test_equal_rewards_give_zero_advantage(scale):
    rewards = torch.tensor([[0.1, 0.1, 0.1], [1.0, 0.0, 1.0], [7.3, 7.3, 7.3]], dtype=torch.float32)
    adv = group_advantages(rewards, scale=scale)
    assert torch.equal(adv[0], torch.zeros(3)) and torch.equal(adv[2], torch.zeros(3))
    assert not torch.equal(adv[1], torch.zeros(3))


def test_group_advantages_hand():
    # [1, 0, 0, 1]: mean 0.5, centred ±0.5, unbiased var (4·0.25)/3 = 1/3, std 0.57735
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]], dtype=DT)
    z = 0.5 / math.sqrt(1 / 3)  # = 0.866025
    assert torch.allclose(
        group_advantages(rewards, eps=0.0), torch.tensor([[z, -z, -z, z]], dtype=DT)
    )
    assert torch.allclose(group_advantages(rewards, scale="none"), rewards - 0.5)


@pytest.mark.parametrize("eps", [1e-6, 0.0])
def test_group_of_one_is_zero_not_nan(eps):
    adv = group_advantages(torch.tensor([[3.0], [-1.0]]), eps=eps)
    assert torch.equal(adv, torch.zeros(2, 1))
    assert torch.equal(group_advantages(torch.ones(1, 3), eps=eps), torch.zeros(1, 3))


def test_group_advantages_errors():
    with pytest.raises(ValueError, match="unknown scale"):
        group_advantages(torch.zeros(1, 2), scale="mad")


def test_nonzero_variance_groups():
    rewards = torch.tensor([[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]])
    assert nonzero_variance_groups(rewards).tolist() == [False, True, False]


def test_overlong_penalty():
    # max_len 8, cache 4: free up to 4; ramp (4 − L)/4 for 4 < L <= 8; −1 beyond 8
    lengths = torch.tensor([3, 4, 5, 6, 8, 9])
    expected = torch.tensor([0.0, 0.0, -0.25, -0.5, -1.0, -1.0])
    assert torch.allclose(overlong_penalty(lengths, max_len=8, cache_len=4), expected)
    with pytest.raises(ValueError, match="cache_len"):
        overlong_penalty(lengths, max_len=8, cache_len=0)
