"""Decision-level PPO loss: clipping cases, exact entropy / KL, padding, label bias."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from rlid.losses.decision import (
    PPOCoefs,
    decision_ppo_loss,
    exact_entropy,
    exact_kl,
    label_marginal_kl_uniform,
)
from rlid.losses.position import PositionSums, position_bias, position_directions

DT = torch.float64
NEG_INF = -torch.inf


def log(values: list[list[float]]) -> torch.Tensor:
    """Probabilities -> log-probabilities, 0 -> -inf (a padded row)."""
    return torch.tensor(values, dtype=DT).log()


# --- clipping: both sides of 1, both signs of A (clip_eps 0.2 -> [0.8, 1.2]) -----------
# menu π = [0.5, 0.3, 0.2], action 0, logp_old = log(0.5 / r) so that r is exact.
#   r = 1.5, A = +1: min(1.5, 1.2) = 1.2 -> loss −1.2, clipped, gradient 0
#   r = 1.5, A = −1: min(−1.5, −1.2) = −1.5 -> loss 1.5, gradient d(−r·A)/dlogp = −r·A = +1.5
#   r = 0.5, A = +1: min(0.5, 0.8) = 0.5 -> loss −0.5, gradient −0.5
#   r = 0.5, A = −1: min(−0.5, −0.8) = −0.8 -> loss 0.8, clipped, gradient 0
CLIP_CASES = [
    (1.5, 1.0, -1.2, 0.0, 1.0),
    (1.5, -1.0, 1.5, 1.5, 0.0),
    (0.5, 1.0, -0.5, -0.5, 0.0),
    (0.5, -1.0, 0.8, 0.0, 1.0),
]


@pytest.mark.parametrize(("ratio", "adv", "loss_value", "grad_value", "clip_frac"), CLIP_CASES)
def test_clipping_cases(ratio, adv, loss_value, grad_value, clip_frac):
    logp_all = log([[0.5, 0.3, 0.2]]).requires_grad_(True)
    logp_old = torch.tensor([math.log(0.5 / ratio)], dtype=DT)
    loss, metrics = decision_ppo_loss(
        logp_all, torch.tensor([0]), logp_old, torch.tensor([adv], dtype=DT)
    )
    (grad,) = torch.autograd.grad(loss, logp_all)
    assert loss.item() == pytest.approx(loss_value)
    assert torch.allclose(grad, torch.tensor([[grad_value, 0.0, 0.0]], dtype=DT))
    assert metrics["clip_frac"].item() == clip_frac
    assert metrics["approx_kl"].item() == pytest.approx((ratio - 1) - math.log(ratio))


def test_exact_entropy_and_kl_hand():
    # π = [0.5, 0.25, 0.25, pad]: H = 0.5·ln 2 + 2·0.25·ln 4 = 1.5·ln 2
    # π_ref = [0.25, 0.5, 0.25, pad]: KL = 0.5·ln 2 + 0.25·ln 0.5 + 0 = 0.25·ln 2
    logp = log([[0.5, 0.25, 0.25, 0.0], [1.0, 0.0, 0.0, 0.0]])
    ref = log([[0.25, 0.5, 0.25, 0.0], [1.0, 0.0, 0.0, 0.0]])
    assert torch.allclose(exact_entropy(logp), torch.tensor([1.5 * math.log(2), 0.0], dtype=DT))
    assert torch.allclose(exact_kl(logp, ref), torch.tensor([0.25 * math.log(2), 0.0], dtype=DT))


def test_loss_with_entropy_bonus_and_kl_penalty():
    # r = 1 (logp_old = log 0.5), A = 2: policy term −2;
    # −0.1·H + 0.5·KL = −0.1·1.5 ln 2 + 0.5·0.25 ln 2 = −2 − 0.103972 + 0.086643
    logp = log([[0.5, 0.25, 0.25, 0.0]])
    ref = log([[0.25, 0.5, 0.25, 0.0]])
    loss, metrics = decision_ppo_loss(
        logp,
        torch.tensor([0]),
        torch.tensor([math.log(0.5)], dtype=DT),
        torch.tensor([2.0], dtype=DT),
        logp_ref=ref,
        label_mass=torch.tensor([0.9], dtype=DT),
        coefs=PPOCoefs(ent_coef=0.1, kl_coef=0.5),
    )
    assert loss.item() == pytest.approx(-2 - 0.15 * math.log(2) + 0.125 * math.log(2))
    assert metrics["entropy"].item() == pytest.approx(1.5 * math.log(2))
    assert metrics["kl_ref"].item() == pytest.approx(0.25 * math.log(2))
    assert metrics["label_mass"].item() == pytest.approx(0.9)
    assert metrics["policy_loss"].item() == pytest.approx(-2.0)
    for value in metrics.values():
        assert value.dim() == 0 and not value.requires_grad


def test_kl_ref_reported_without_penalty():
    logp = log([[0.5, 0.5]])
    ref = log([[0.25, 0.75]])
    args = (
        logp,
        torch.tensor([0]),
        torch.tensor([math.log(0.5)], dtype=DT),
        torch.ones(1, dtype=DT),
    )
    loss_with, metrics = decision_ppo_loss(*args, logp_ref=ref)
    loss_without, _ = decision_ppo_loss(*args)
    # KL = 0.5·ln 2 + 0.5·ln(2/3)
    assert metrics["kl_ref"].item() == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(2 / 3))
    assert loss_with.item() == loss_without.item()


def _menu_batch(extra_pad: int):
    """Two menus of 3 and 2 legal rows, padded to 3 + extra_pad columns."""
    legal = torch.tensor([[True, True, True], [True, True, False]])
    legal = torch.cat([legal, torch.zeros(2, extra_pad, dtype=torch.bool)], dim=1)
    logits = torch.zeros(legal.shape, dtype=DT)
    logits[:, :3] = torch.tensor([[0.3, -1.2, 0.7], [2.0, -0.5, 9.0]], dtype=DT)
    logits.requires_grad_(True)
    ref_logits = torch.zeros(legal.shape, dtype=DT)
    ref_logits[:, :3] = torch.tensor([[0.0, 0.5, -0.5], [1.0, 1.0, 0.0]], dtype=DT)
    logp_all = torch.log_softmax(logits.masked_fill(~legal, NEG_INF), dim=-1)
    ref_all = torch.log_softmax(ref_logits.masked_fill(~legal, NEG_INF), dim=-1)
    return logits, logp_all, ref_all


def test_padded_rows_change_nothing():
    results = []
    for extra_pad in (0, 2):
        logits, logp_all, ref_all = _menu_batch(extra_pad)
        loss, metrics = decision_ppo_loss(
            logp_all,
            torch.tensor([2, 1]),
            torch.tensor([-1.0, -2.0], dtype=DT),
            torch.tensor([0.7, -1.3], dtype=DT),
            logp_ref=ref_all,
            coefs=PPOCoefs(ent_coef=0.01, kl_coef=0.1),
        )
        (grad,) = torch.autograd.grad(loss, logits)
        assert torch.isfinite(grad).all()
        assert torch.equal(grad[:, 3:], torch.zeros_like(grad[:, 3:]))
        assert grad[1, 2] == 0.0  # the padded row of the 2-row menu
        results.append((loss, metrics, grad[:, :3]))
    (l0, m0, g0), (l1, m1, g1) = results
    assert torch.allclose(l0, l1)
    assert all(torch.allclose(m0[k], m1[k]) for k in m0)
    assert torch.allclose(g0, g1)


def test_gradients_match_finite_differences():
    logits, _, _ = _menu_batch(1)
    legal = torch.tensor([[True, True, True, False], [True, True, False, False]])
    _, _, ref_all = _menu_batch(1)

    def loss_of(x):
        logp_all = torch.log_softmax(x.masked_fill(~legal, NEG_INF), dim=-1)
        return decision_ppo_loss(
            logp_all,
            torch.tensor([2, 1]),
            torch.tensor([-1.0, -2.0], dtype=DT),
            torch.tensor([0.7, -1.3], dtype=DT),
            logp_ref=ref_all,
            coefs=PPOCoefs(ent_coef=0.05, kl_coef=0.1),
        )[0]

    assert torch.autograd.gradcheck(loss_of, (logits.detach().requires_grad_(True),))


def test_entropy_gradient_hand():
    # dH/dlogit_j = −π_j (log π_j + H) for a softmax; π = [0.5, 0.5, pad] -> H = ln 2, grad 0
    # π = softmax([ln 3, 0]) = [0.75, 0.25]: H = 0.562335; grads −0.75(ln .75 + H), −0.25(ln .25 + H)
    logits = torch.tensor([[math.log(3.0), 0.0, 0.0]], dtype=DT, requires_grad=True)
    legal = torch.tensor([[True, True, False]])
    h = exact_entropy(torch.log_softmax(logits.masked_fill(~legal, NEG_INF), -1)).sum()
    (grad,) = torch.autograd.grad(h, logits)
    entropy = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    expected = [-0.75 * (math.log(0.75) + entropy), -0.25 * (math.log(0.25) + entropy), 0.0]
    assert h.item() == pytest.approx(entropy)
    assert torch.allclose(grad, torch.tensor([expected], dtype=DT))


# --- label marginal: position bias vs row entropy -------------------------------------


def test_confident_rows_on_different_positions_have_flat_marginal():
    # rows [0.99, 0.01] and [0.01, 0.99]: entropy 0.056 each (low), p̄ = [0.5, 0.5] -> KL 0
    logp = log([[0.99, 0.01], [0.01, 0.99]])
    assert exact_entropy(logp).max().item() < 0.06
    assert label_marginal_kl_uniform(logp).item() == pytest.approx(0.0, abs=1e-12)


def test_rows_favouring_one_position_have_biased_marginal():
    # both rows [0.99, 0.01]: p̄ = [0.99, 0.01], KL = 0.99 ln 1.98 + 0.01 ln 0.02 = 0.637146
    logp = log([[0.99, 0.01], [0.99, 0.01]])
    assert label_marginal_kl_uniform(logp).item() == pytest.approx(
        0.99 * math.log(1.98) + 0.01 * math.log(0.02)
    )
    # uniform rows: high entropy and no bias
    assert label_marginal_kl_uniform(log([[0.5, 0.5], [0.5, 0.5]])).item() == 0.0


def test_label_marginal_groups_by_menu_size():
    # uniform rows of sizes 2 and 3 padded to 3 columns: no bias (a single marginal over
    # 3 positions would see [5/12, 5/12, 1/6] and report one)
    uniform = log([[0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3]])
    assert label_marginal_kl_uniform(uniform).item() == pytest.approx(0.0, abs=1e-12)
    # size-3 row [0.5, 0.25, 0.25]: KL = 0.5 ln 1.5 + 0.5 ln 0.75 = 0.058892; weight 1/2
    biased = log([[0.5, 0.5, 0.0], [0.5, 0.25, 0.25]])
    expected = 0.5 * (0.5 * math.log(1.5) + 0.5 * math.log(0.75))
    assert label_marginal_kl_uniform(biased).item() == pytest.approx(expected)
    # the same batch with two padded columns more: unchanged
    wide = torch.cat([biased, torch.full((2, 2), NEG_INF, dtype=DT)], dim=1)
    assert label_marginal_kl_uniform(wide).item() == pytest.approx(expected)


# --- position bias: an unbiased, size-pooled U-statistic, and the penalty's directions


def _bias(logp_all: torch.Tensor) -> float:
    return position_bias(PositionSums.of(logp_all, logp_all.shape[1]))


def test_position_bias_hand():
    # [0.9, 0.1] and [0.8, 0.2]: d = [0.4, -0.4], [0.3, -0.3]; w = 1 / (2 * 0.5) = 1;
    # P = sum over b != c of d_b . d_c / (B (B-1)) = 2 * (0.12 + 0.12) / 2 = 0.24
    assert _bias(log([[0.9, 0.1], [0.8, 0.2]])) == pytest.approx(0.24)
    # opposite favourites: -0.32 (one batch's estimate can be negative)
    assert _bias(log([[0.9, 0.1], [0.1, 0.9]])) == pytest.approx(-0.32)
    assert _bias(log([[0.9, 0.1]])) == 0.0  # one decision: no pair


def test_position_bias_is_zero_over_shuffles_whatever_the_confidence():
    # menus [0.9, 0.1] (2 rows) and [0.7, 0.2, 0.1] (3 rows), each shuffled independently:
    # a policy that follows the rows' content. Averaged over all 2 x 6 shufflings the
    # estimate is exactly 0, while the size-grouped diagnostic counts confidence (> 0.3).
    ours, grouped = [], []
    for a in itertools.permutations([0.9, 0.1]):
        for b in itertools.permutations([0.7, 0.2, 0.1]):
            logp = log([[*a, 0.0], list(b)])
            ours.append(_bias(logp))
            grouped.append(label_marginal_kl_uniform(logp).item())
    assert sum(ours) / len(ours) == pytest.approx(0.0, abs=1e-12)
    assert sum(grouped) / len(grouped) > 0.3


def test_position_sums_add_up_over_parts():
    logp = log([[0.5, 0.5, 0.0], [0.7, 0.2, 0.1], [0.9, 0.1, 0.0]])
    whole = PositionSums.of(logp, 4)
    parts = PositionSums.of(logp[:1, :2], 4) + PositionSums.of(logp[1:], 4)
    for a, b in zip(whole, parts):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(PositionSums.unflat(whole.flat()).dev, whole.dev)


def _u_statistic(logp_all: torch.Tensor) -> torch.Tensor:
    """position_bias written out pair by pair, with gradients."""
    valid = logp_all != NEG_INF
    uniform = valid / valid.sum(-1, keepdim=True)
    d = torch.where(valid, logp_all.exp(), 0.0) - uniform
    w = 0.5 / uniform.mean(0)
    batch = len(d)
    pairs = [(b, c) for b in range(batch) for c in range(batch) if b != c]
    return sum((w * d[b] * d[c]).sum() for b, c in pairs) / (batch * (batch - 1))


def test_position_penalty_has_the_bias_gradient():
    # menus of 2 and 3 rows (padded): the per-decision term's gradient with respect to
    # the logits equals the gradient of the batch-level statistic itself
    logits = torch.tensor(
        [[1.0, -0.5, -torch.inf], [0.3, 0.2, -torch.inf], [2.0, 0.1, -1.0], [0.0, 1.5, 0.4]],
        dtype=DT,
    )
    logits.requires_grad_(True)
    logp = torch.log_softmax(logits, -1)
    sums = PositionSums.of(logp, 3)
    loss, _ = decision_ppo_loss(logp, torch.tensor([0, 0, 0, 0]), logp.detach()[:, 0], torch.zeros(4, dtype=DT), position_direction=position_directions(logp, sums).to(DT), coefs=PPOCoefs(position_coef=1.0))  # fmt: skip
    (term,) = torch.autograd.grad(loss, logits)
    exact_value = _u_statistic(torch.log_softmax(logits, -1))
    (exact,) = torch.autograd.grad(exact_value, logits)
    assert position_bias(sums) == pytest.approx(exact_value.item())
    finite = torch.isfinite(logits)
    torch.testing.assert_close(term[finite], exact[finite], rtol=1e-5, atol=1e-7)
    assert exact[finite].abs().max() > 1e-3  # a real gradient, not two zeros


def test_position_penalty_pushes_mass_off_the_favoured_position():
    logits = torch.tensor([[2.0, 0.0], [1.0, 0.0]], dtype=DT, requires_grad=True)
    logp = torch.log_softmax(logits, -1)
    loss, _ = decision_ppo_loss(logp, torch.tensor([0, 0]), logp.detach()[:, 0], torch.zeros(2, dtype=DT), position_direction=position_directions(logp, PositionSums.of(logp, 2)).to(DT), coefs=PPOCoefs(position_coef=1.0))  # fmt: skip
    loss.backward()
    assert (logits.grad[:, 0] > 0).all()  # descent lowers position 0's logit in both menus
    assert (logits.grad[:, 1] < 0).all()


# --- errors -------------------------------------------------------------------------


def test_errors():
    logp = log([[0.5, 0.5, 0.0]])
    old = torch.zeros(1, dtype=DT)
    adv = torch.ones(1, dtype=DT)
    with pytest.raises(ValueError, match="padded row"):
        decision_ppo_loss(logp, torch.tensor([2]), old, adv)
    with pytest.raises(ValueError, match="outside the menu"):
        decision_ppo_loss(logp, torch.tensor([3]), old, adv)
    with pytest.raises(ValueError, match="outside the menu"):
        decision_ppo_loss(logp, torch.tensor([-1]), old, adv)
    with pytest.raises(ValueError, match="needs logp_ref"):
        decision_ppo_loss(logp, torch.tensor([0]), old, adv, coefs=PPOCoefs(kl_coef=0.1))
    with pytest.raises(ValueError, match="integer"):
        decision_ppo_loss(logp, torch.tensor([0.0]), old, adv)
    with pytest.raises(ValueError, match="advantages must be"):
        decision_ppo_loss(logp, torch.tensor([0]), old, torch.ones(2, dtype=DT))
    with pytest.raises(ValueError, match="logp_ref must have"):
        decision_ppo_loss(logp, torch.tensor([0]), old, adv, logp_ref=logp[:, :2])
    with pytest.raises(ValueError, match="needs position_direction"):
        decision_ppo_loss(logp, torch.tensor([0]), old, adv, coefs=PPOCoefs(position_coef=0.1))
    with pytest.raises(ValueError, match="position_direction must have"):
        decision_ppo_loss(
            logp, torch.tensor([0]), old, adv, position_direction=torch.zeros(1, 2, dtype=DT)
        )
    with pytest.raises(ValueError, match=r"\(B, K\)"):
        decision_ppo_loss(logp[0], torch.tensor([0]), old, adv)
