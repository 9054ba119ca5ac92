"""The decision-PPO loss with a train-inference correction (TIS / IcePop on ρ = π_old/μ),
hand-computed; the shared rules of rlid.losses.mismatch; the engine fields of the config."""

from __future__ import annotations

import math

import pytest
import torch

from rlid.config import TrainConfig
from rlid.losses.decision import decision_ppo_loss
from rlid.losses.mismatch import MismatchCorrection

DT = torch.float64

# Three decisions on the menu π_θ = [0.5, 0.3, 0.2], each choosing row 0, logp_old =
# log 0.5 (r = 1), advantages A = [1, 1, -2], and engine probabilities μ(row 0) =
# [0.2, 0.5, 0.05], so ρ = π_old/μ = [2.5, 1, 10].
#   none:   w = [1, 1, 1]      loss = -(1 + 1 - 2) / 3      = 0
#   tis:    w = [2, 1, 2]      loss = -(2 + 1 - 4) / 3      = 1/3,    truncated 2/3
#   icepop: w = [2.5, 1, 0]    loss = -(2.5 + 1 + 0) / 3    = -7/6,   masked 1/3
# d loss / d logp_all[b, 0] = -w_b·A_b·r / 3 (unclipped at r = 1).
ADV = [1.0, 1.0, -2.0]
MU = [0.2, 0.5, 0.05]
HAND = {
    "none": (0.0, [1.0, 1.0, 1.0], {}),
    "tis": (1 / 3, [2.0, 1.0, 2.0], {"tis_truncated_frac": 2 / 3}),
    "icepop": (-7 / 6, [2.5, 1.0, 0.0], {"icepop_masked_frac": 1 / 3}),
}


def batch() -> tuple[torch.Tensor, ...]:
    logp_all = torch.tensor([[0.5, 0.3, 0.2]] * 3, dtype=DT).log().requires_grad_(True)
    actions = torch.zeros(3, dtype=torch.long)
    logp_old = torch.full((3,), math.log(0.5), dtype=DT)
    return (
        logp_all,
        actions,
        logp_old,
        torch.tensor(ADV, dtype=DT),
        torch.tensor(MU, dtype=DT).log(),
    )


@pytest.mark.parametrize("rule", sorted(HAND))
def test_loss_gradient_and_metrics_hand(rule):
    logp_all, actions, logp_old, adv, logp_rollout = batch()
    loss, metrics = decision_ppo_loss(
        logp_all, actions, logp_old, adv, logp_rollout=logp_rollout,
        correction=MismatchCorrection(rule),
    )  # fmt: skip
    value, weights, rule_metrics = HAND[rule]
    assert loss.item() == pytest.approx(value)
    (grad,) = torch.autograd.grad(loss, logp_all)
    expected = torch.zeros(3, 3, dtype=DT)
    expected[:, 0] = torch.tensor([-w * a / 3 for w, a in zip(weights, ADV)], dtype=DT)
    assert torch.allclose(grad, expected)
    for name, frac in rule_metrics.items():
        assert metrics[name].item() == pytest.approx(frac)
    assert not {"tis_truncated_frac", "icepop_masked_frac"} - set(rule_metrics) & set(metrics)


def test_the_weight_multiplies_the_clipped_term_and_uses_pi_old_not_pi_theta():
    # r = π_θ/π_old = 0.5 / (0.5 / 1.5) = 1.5, A = +1: min(1.5, 1.2) = 1.2 (clipped, no
    # gradient); ρ = π_old/μ = (1/3) / (2/15) = 2.5 -> TIS weight 2: loss = -2.4
    logp_all = torch.tensor([[0.5, 0.3, 0.2]], dtype=DT).log().requires_grad_(True)
    logp_old = torch.tensor([math.log(1 / 3)], dtype=DT)
    loss, metrics = decision_ppo_loss(
        logp_all, torch.tensor([0]), logp_old, torch.tensor([1.0], dtype=DT),
        logp_rollout=torch.tensor([math.log(2 / 15)], dtype=DT),
        correction=MismatchCorrection("tis"),
    )  # fmt: skip
    assert loss.item() == pytest.approx(-2.4)
    assert metrics["clip_frac"].item() == 1.0 and metrics["tis_truncated_frac"].item() == 1.0
    (grad,) = torch.autograd.grad(loss, logp_all)
    assert torch.count_nonzero(grad) == 0


def test_rule_metrics_add_up_over_micro_batches():
    logp_all, actions, logp_old, adv, logp_rollout = batch()
    whole_loss, whole = decision_ppo_loss(
        logp_all, actions, logp_old, adv, logp_rollout=logp_rollout,
        correction=MismatchCorrection("tis"),
    )  # fmt: skip
    parts = [slice(0, 1), slice(1, 3)]
    losses, fracs = [], []
    for part in parts:
        loss, metrics = decision_ppo_loss(
            logp_all[part], actions[part], logp_old[part], adv[part],
            logp_rollout=logp_rollout[part], correction=MismatchCorrection("tis"), normaliser=3,
        )  # fmt: skip
        losses.append(loss.item())
        fracs.append(metrics["tis_truncated_frac"].item())
    assert sum(losses) == pytest.approx(whole_loss.item())
    assert sum(fracs) == pytest.approx(whole["tis_truncated_frac"].item())


def test_no_correction_is_the_plain_loss_bit_for_bit():
    logp_all, actions, logp_old, adv, logp_rollout = batch()
    plain, plain_metrics = decision_ppo_loss(logp_all, actions, logp_old, adv)
    loss, metrics = decision_ppo_loss(
        logp_all, actions, logp_old, adv, logp_rollout=logp_rollout,
        correction=MismatchCorrection("none"),
    )  # fmt: skip
    assert torch.equal(loss, plain)
    assert metrics.keys() == plain_metrics.keys()


def test_a_correction_needs_the_engine_logprobs():
    logp_all, actions, logp_old, adv, _ = batch()
    with pytest.raises(ValueError, match="needs logp_rollout"):
        decision_ppo_loss(logp_all, actions, logp_old, adv, correction=MismatchCorrection("tis"))
    with pytest.raises(ValueError, match="logp_rollout must be"):
        decision_ppo_loss(
            logp_all, actions, logp_old, adv, logp_rollout=torch.zeros(2, dtype=DT),
            correction=MismatchCorrection("tis"),
        )  # fmt: skip


def test_the_rules_hand():
    rho = torch.tensor([0.25, 1.0, 3.0, 6.0])
    weight, metrics = MismatchCorrection("tis").weigh(rho)
    assert weight.tolist() == [0.25, 1.0, 2.0, 2.0]
    assert metrics["tis_truncated_frac"].item() == 0.5
    weight, metrics = MismatchCorrection("icepop").weigh(rho)
    assert weight.tolist() == [0.0, 1.0, 3.0, 0.0]
    assert metrics["icepop_masked_frac"].item() == 0.5
    correction = MismatchCorrection("none", tis_cap=1.5, icepop_low=0.3, icepop_high=4.0)
    assert correction.weigh(rho)[0].tolist() == [1.0] * 4
    assert correction.truncated(rho).tolist() == [False, False, True, True]
    assert correction.masked(rho).tolist() == [True, False, False, True]
    with pytest.raises(ValueError, match="unknown mismatch 'clip'"):
        MismatchCorrection("clip")  # type: ignore[arg-type]


# --- the config: engine fields on every plane, records unchanged ---------------------------


def test_every_plane_takes_the_engine_and_the_correction():
    for plane in ("decision", "scoring", "token"):
        config = TrainConfig.from_dict(
            {"plane": plane, "rollout_engine": "vllm", "mismatch": "tis"}
        )
        assert (config.rollout_engine, config.mismatch) == ("vllm", "tis")
        assert config.to_dict()["rollout_engine"] == "vllm"


def test_simulated_engines_are_the_token_planes_own():
    assert (
        TrainConfig.from_dict({"plane": "token", "rollout_engine": "bf16"}).rollout_engine == "bf16"
    )
    for plane in ("decision", "scoring"):
        with pytest.raises(ValueError, match="token plane's generation; the .* plane takes"):
            TrainConfig.from_dict({"plane": plane, "rollout_engine": "perturbed"})


def test_vllm_options_need_the_vllm_engine_and_sensible_values():
    with pytest.raises(ValueError, match="vllm_kv_cache_gib sets up the vLLM engine"):
        TrainConfig(vllm_kv_cache_gib=2.0)
    good = TrainConfig(rollout_engine="vllm", vllm_kv_cache_gib=2.0, vllm_eager=False)
    assert good.to_dict()["vllm_kv_cache_gib"] == 2.0 and good.to_dict()["vllm_eager"] is False
    for bad, match in [
        ({"vllm_max_model_len": 1}, "vllm_max_model_len must be >= 2"),
        ({"vllm_gpu_memory_utilization": 0.0}, r"must be in \(0, 1\]"),
        ({"vllm_probe_tolerance": -1.0}, "vllm_probe_tolerance must be > 0"),
    ]:
        with pytest.raises(ValueError, match=match):
            TrainConfig(rollout_engine="vllm", **bad)


def test_records_keep_their_keys():
    # a decision or scoring record gains the engine keys only when they are changed; a
    # token record has always held rollout_engine and mismatch (TokenConfig fields before)
    for plane in ("decision", "scoring"):
        record = TrainConfig.from_dict({"plane": plane}).to_dict()
        assert not {"rollout_engine", "mismatch"} & set(record)
        assert not [k for k in record if k.startswith("vllm_")]
    token = TrainConfig.from_dict({"plane": "token"}).to_dict()
    assert (token["rollout_engine"], token["mismatch"]) == ("trainer", "none")
    assert not [k for k in token if k.startswith("vllm_")]
    # a record written before the planes had their own configs held every plane's fields
    old = {**TrainConfig().to_dict(), "rollout_engine": "trainer", "mismatch": "none"}
    assert TrainConfig.from_record(old).to_dict() == TrainConfig().to_dict()
