"""Decision-level PPO loss: clipping cases, exact entropy / KL, padding, label bias."""

from __future__ import annotations

import math

import pytest
import torch

from rlid.ppo import (
    decision_ppo_loss,
    exact_entropy,
    exact_kl,
    label_marginal_kl_uniform,
    position_directions,
)

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
        ent_coef=0.1,
        logp_ref_all=ref,
        kl_coef=0.5,
        label_mass=torch.tensor([0.9], dtype=DT),
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
    loss_with, metrics = decision_ppo_loss(*args, logp_ref_all=ref)
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
            ent_coef=0.01,
            logp_ref_all=ref_all,
            kl_coef=0.1,
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
            ent_coef=0.05,
            logp_ref_all=ref_all,
            kl_coef=0.1,
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


# --- position penalty: the pooled position marginal's KL, an additive per-decision term


def _directions(logp_all: torch.Tensor) -> torch.Tensor:
    """(B, K) directions on each decision's rows, as the trainer builds them."""
    valid = logp_all != NEG_INF
    sizes = valid.sum(-1, keepdim=True)
    mass = torch.where(valid, logp_all.exp(), 0.0).sum(0)
    expected = (valid / sizes).sum(0)
    return torch.where(valid, position_directions(mass, expected)[None, :], 0.0)


def _pooled_kl(logp_all: torch.Tensor) -> torch.Tensor:
    """KL(p̄ ‖ ū) over positions pooled across menu sizes, with gradients."""
    valid = logp_all != NEG_INF
    p_bar = torch.where(valid, logp_all.exp(), 0.0).mean(0)
    u_bar = (valid / valid.sum(-1, keepdim=True)).mean(0)
    return (p_bar * (p_bar / u_bar).log()).sum()


def test_position_directions_hand():
    # menus [0.8, 0.2] and [0.6, 0.4]: mass [1.4, 0.6], expected [1, 1] -> g = [ln 1.4, ln 0.6]
    g = position_directions(
        torch.tensor([1.4, 0.6, 0.0], dtype=DT), torch.tensor([1.0, 1.0, 0.0], dtype=DT)
    )
    assert g.tolist() == pytest.approx([math.log(1.4), math.log(0.6), 0.0])  # no 3rd row


def test_position_penalty_equals_the_marginal_kl():
    # per-decision terms: 0.8 ln 1.4 + 0.2 ln 0.6 = 0.167010 and 0.6 ln 1.4 + 0.4 ln 0.6
    # = -0.002452; their mean 0.082279 = 0.7 ln 1.4 + 0.3 ln 0.6 = KL(p̄ ‖ uniform)
    logp = log([[0.8, 0.2], [0.6, 0.4]])
    _, metrics = decision_ppo_loss(
        logp, torch.tensor([0, 0]), logp[:, 0], torch.zeros(2, dtype=DT),
        position_direction=_directions(logp), position_coef=1.0,
    )  # fmt: skip
    expected = 0.7 * math.log(1.4) + 0.3 * math.log(0.6)
    assert metrics["position_penalty"].item() == pytest.approx(expected)
    # one menu size: the same as the size-grouped diagnostic
    assert label_marginal_kl_uniform(logp).item() == pytest.approx(expected)


def test_position_penalty_pools_menu_sizes_and_ignores_confidence():
    # [0.8, 0.2] (2 rows) and [1/30, 19/30, 1/3] (3 rows): position mass [5/6, 5/6, 1/3]
    # is what uniform rows would put there, so no position preference (0), while the
    # size-grouped diagnostic, one menu per size, counts their confidence:
    # (0.8 ln 1.6 + 0.2 ln 0.4 + 1/30 ln 0.1 + 19/30 ln 1.9) / 2 = 0.261253
    logp = log([[0.8, 0.2, 0.0], [1 / 30, 19 / 30, 1 / 3]])
    _, metrics = decision_ppo_loss(
        logp, torch.tensor([0, 0]), logp[:, 0], torch.zeros(2, dtype=DT),
        position_direction=_directions(logp), position_coef=1.0,
    )  # fmt: skip
    assert metrics["position_penalty"].item() == pytest.approx(0.0, abs=1e-6)
    grouped = (
        0.8 * math.log(1.6) + 0.2 * math.log(0.4) + math.log(0.1) / 30 + 19 / 30 * math.log(1.9)
    ) / 2
    assert label_marginal_kl_uniform(logp).item() == pytest.approx(grouped)


def test_position_penalty_has_the_marginal_kls_gradient():
    # menus of 2 and 3 rows (padded): the per-decision term's gradient with respect to
    # the logits equals the gradient of the batch-level KL itself
    logits = torch.tensor(
        [[1.0, -0.5, -torch.inf], [0.3, 0.2, -torch.inf], [2.0, 0.1, -1.0], [0.0, 1.5, 0.4]],
        dtype=DT,
    )
    logits.requires_grad_(True)
    logp = torch.log_softmax(logits, -1)
    loss, metrics = decision_ppo_loss(
        logp, torch.tensor([0, 0, 0, 0]), logp.detach()[:, 0], torch.zeros(4, dtype=DT),
        position_direction=_directions(logp.detach()), position_coef=1.0,
    )  # fmt: skip
    (term,) = torch.autograd.grad(loss, logits)
    kl = _pooled_kl(torch.log_softmax(logits, -1))
    (exact,) = torch.autograd.grad(kl, logits)
    assert metrics["position_penalty"].item() == pytest.approx(kl.item())
    finite = torch.isfinite(logits)
    torch.testing.assert_close(term[finite], exact[finite], rtol=1e-10, atol=1e-12)
    assert exact[finite].abs().max() > 1e-3  # a real gradient, not two zeros


def test_position_penalty_pushes_mass_off_the_favoured_position():
    logits = torch.tensor([[2.0, 0.0], [1.0, 0.0]], dtype=DT, requires_grad=True)
    logp = torch.log_softmax(logits, -1)
    loss, _ = decision_ppo_loss(
        logp, torch.tensor([0, 0]), logp.detach()[:, 0], torch.zeros(2, dtype=DT),
        position_direction=_directions(logp.detach()), position_coef=1.0,
    )  # fmt: skip
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
    with pytest.raises(ValueError, match="needs logp_ref_all"):
        decision_ppo_loss(logp, torch.tensor([0]), old, adv, kl_coef=0.1)
    with pytest.raises(ValueError, match="integer"):
        decision_ppo_loss(logp, torch.tensor([0.0]), old, adv)
    with pytest.raises(ValueError, match="advantages must be"):
        decision_ppo_loss(logp, torch.tensor([0]), old, torch.ones(2, dtype=DT))
    with pytest.raises(ValueError, match="logp_ref_all must have"):
        decision_ppo_loss(logp, torch.tensor([0]), old, adv, logp_ref_all=logp[:, :2])
    with pytest.raises(ValueError, match="needs position_direction"):
        decision_ppo_loss(logp, torch.tensor([0]), old, adv, position_coef=0.1)
    with pytest.raises(ValueError, match="position_direction must have"):
        decision_ppo_loss(
            logp, torch.tensor([0]), old, adv, position_direction=torch.zeros(1, 2, dtype=DT)
        )
    with pytest.raises(ValueError, match=r"\(B, K\)"):
        decision_ppo_loss(logp[0], torch.tensor([0]), old, adv)
