"""Label trees end to end: training on the three planes over a 400-action env with no
action dropped, flat runs unchanged by the tree default, scoring every legal action
of a 400-action menu on a shared KV cache, and the audit's identity on a factored
decision."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rlid import envs
from rlid.audit.exact import float64_copy
from rlid.audit.factored import factored_identity
from rlid.audit.run import AUDIT_INTERFACE
from rlid.audit.states import BUILTIN_STATES
from rlid.baselines.scoring import ScoringPolicy
from rlid.cli import main as cli_main
from rlid.config import TrainConfig
from rlid.core.loop import run_training
from rlid.lm.starts import load_policy_model
from rlid.menus import Interface
from rlid.runs.dir import read_metrics

BIG_LAB = ["-o", "objects=20", "-o", "containers=8", "-o", "max_episode_steps=3"]
# the scoring plane runs one continuation per legal action (its update too): 106 here
LAB = {
    "decision": BIG_LAB,
    "token": BIG_LAB,
    "scoring": ["-o", "objects=8", "-o", "containers=4", "-o", "max_episode_steps=3"],
}
SIZES = {"decision": 414, "token": 414, "scoring": 106}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.mark.slow
@pytest.mark.parametrize("plane", ["decision", "scoring", "token"])
def test_every_plane_trains_on_large_menus_dropping_no_action(tmp_path, plane):
    out = tmp_path / plane
    args = ["train", "--plane", plane, "--env", "lab", *LAB[plane], "--model", "tiny-random",
            "--threads", "1", "--steps", "6", "--groups-per-iter", "1", "--group-size", "2",
            "--minibatch-size", "4", "--epochs", "1", "--eval-episodes", "1", "--memory", "none",
            "--quiet", "--out", str(out)]  # fmt: skip
    assert cli_main(args) == 0
    rows = read_metrics(out)
    assert rows and all(row["menu_rows_max"] == SIZES[plane] for row in rows)
    assert all(row["actions_dropped"] == 0 for row in rows)
    if plane == "decision":  # every decision was a path of two or more menus
        assert all(row["rollout_levels"] >= 2 for row in rows)
        assert all(0 < row["rollout_label_mass_level_2"] <= 1 for row in rows)
    if plane == "token":  # the legal list does not fit the tiny model's context: groups
        assert rows[-1]["budget"]["grouped_lists"] > 0


@pytest.mark.slow
def test_a_run_whose_menus_fit_is_the_same_under_tree_and_error(tmp_path, untimed):
    """The tree default changes nothing where the legal actions fit the alphabet: the
    same metrics (less the new keys) and the same weights as overflow='error'."""

    def run(overflow: str) -> tuple[list[dict], dict[str, torch.Tensor]]:
        config = TrainConfig(
            env="keydoor", env_options={"size": 2, "keys": 0, "distractors": 1,
                                        "max_episode_steps": 6},
            model="tiny-random", steps=40, groups_per_iter=2, group_size=2, epochs=1,
            minibatch_size=8, eval_episodes=2, threads=1, seed=3, kl_coef=0.05,
            position_coef=0.1, interface=Interface(memory="none", overflow=overflow),
        )  # fmt: skip
        out = tmp_path / overflow
        run_training(config, out, resume=False, progress=False)
        model, _ = load_policy_model(str(Path(out) / "checkpoint" / "model"))
        return untimed(read_metrics(out)), model.state_dict()

    tree_rows, tree_weights = run("tree")
    error_rows, error_weights = run("error")
    assert len(tree_rows) >= 2 and tree_rows == error_rows
    assert all(row["menu_rows_max"] <= 26 and row["actions_dropped"] == 0 for row in tree_rows)
    assert "rollout_levels" not in tree_rows[0]
    for name, value in tree_weights.items():
        assert torch.equal(value, error_weights[name]), name


@pytest.fixture(scope="module")
def tree_rollout():
    """Decisions over lab states of 16 to 414 legal actions (paths and flat menus mixed)."""
    from rlid.decision.policy import DecisionPolicy
    from tests.test_microbatch import _tiny

    model, tokenizer = _tiny()
    policy = DecisionPolicy(model, tokenizer, Interface(memory="none", afterstates=False))
    observations, infos = [], []
    for b, (objects, containers) in enumerate([(20, 8), (12, 5), (2, 1), (20, 8), (8, 4), (2, 1)]):
        env = envs.make("lab", objects=objects, containers=containers, game_seed=b)
        obs, info = env.reset(seed=b)
        observations.append(obs)
        infos.append(info)
    with torch.no_grad():
        decisions = policy.act(
            observations, infos, [None] * len(infos), rng=np.random.default_rng(0),
            generator=torch.Generator().manual_seed(0),
        )  # fmt: skip
    assert {len(d.path) for d in decisions} >= {1, 2}
    advantages = torch.randn(len(decisions), generator=torch.Generator().manual_seed(3))
    return decisions, advantages


@pytest.mark.slow
@pytest.mark.parametrize("micro", [1, 4])
def test_the_tree_update_in_micro_batches_equals_one_batch(tree_rollout, micro):
    """PPO on joint actions through ppo_update: micro-batches of 1 and 4 take the step
    of one batch (every term divided by the minibatch's size), with a value head, the
    entropy and KL path estimates, the label-mass term and the position penalty."""
    from rlid.core.loop import RunContext
    from rlid.core.records import ValueHead
    from rlid.core.rollout import Episode
    from rlid.core.train import DecisionBatch, attach_reference_logprobs, ppo_update
    from rlid.decision.policy import DecisionPolicy
    from rlid.lm.optim import Stepper
    from tests.test_microbatch import _sgd_step_params, _tiny

    decisions, advantages = tree_rollout
    interface = Interface(memory="none", afterstates=False)
    ref_model, tokenizer = _tiny()
    with torch.no_grad():  # a reference a little away from the policy
        for p in ref_model.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    ref = DecisionPolicy(ref_model, tokenizer, interface)
    attach_reference_logprobs(ref, [Episode(0, 0, decisions=decisions)], 4)
    assert all("logp_ref_levels" in d.extra for d in decisions)

    def step_with(micro_batch_size):
        def step(model, tokenizer, params, optimizer):
            config = TrainConfig(
                env="lab", epochs=1, minibatch_size=len(decisions), advantage="gae",
                micro_batch_size=micro_batch_size, ent_coef=0.05, kl_coef=0.1,
                label_mass_coef=0.1, position_coef=0.5, max_grad_norm=1e9, interface=interface,
            )  # fmt: skip
            head = ValueHead(model.config.hidden_size)
            torch.nn.init.normal_(head.linear.weight, generator=torch.Generator().manual_seed(0))
            params += list(head.parameters())
            optimizer.add_param_group({"params": list(head.parameters())})
            policy = DecisionPolicy(model, tokenizer, interface, value_head=head)
            batch = DecisionBatch(decisions, advantages, advantages * 2, np.arange(len(decisions)))
            metrics = ppo_update(
                RunContext(config), policy, batch, Stepper(optimizer, params, 1e9),
                np.random.default_rng(0),
            )  # fmt: skip
            assert all(np.isfinite(v) for v in metrics.values())
            assert abs(metrics["approx_kl"]) < 1e-6  # the first epoch re-scores pi_old

        return step

    one = _sgd_step_params(step_with(None))
    many = _sgd_step_params(step_with(micro))
    start = _sgd_step_params(lambda *a: None)
    assert any(not torch.equal(a, b) for a, b in zip(one, start))
    for a, b in zip(many, one):  # padding between a path's blocks differs: float rounding
        torch.testing.assert_close(a, b, rtol=1e-4, atol=2e-5)


@pytest.mark.slow
def test_scoring_scores_every_action_of_a_400_action_menu_on_a_shared_cache():
    model, tok = load_policy_model("tiny-random")
    env = envs.make("lab", objects=20, containers=8, game_seed=1)
    obs, info = env.reset(seed=0)
    interface = Interface(memory="none", show_legal_to_token_plane=False)
    logps = []
    for share in (True, False):
        policy = ScoringPolicy(model, tok, interface, share_prompt=share)
        with torch.no_grad():
            decision = policy.act(
                [obs], [info], [None], rng=np.random.default_rng(0),
                generator=torch.Generator().manual_seed(0),
            )[0]  # fmt: skip
            logp, _, _ = policy.score([decision])
        assert decision.num_rows == len(info["legal_actions"]) == 414
        probs = logp[0].double().exp()
        assert abs(float(probs.sum()) - 1) < 1e-5 and bool((probs > 0).all())
        logps.append(logp[0])
    assert torch.allclose(logps[0], logps[1], atol=1e-4)  # shared cache == one sequence each


def test_the_audit_identity_holds_on_a_factored_decision():
    model, tok = load_policy_model("tiny-random")
    report = factored_identity(
        float64_copy(model), tok, BUILTIN_STATES["hallway"], AUDIT_INTERFACE, fanout=2
    )
    assert report["depth"] == 3  # a three-level tree over five actions
    assert abs(report["prob_sum"] - 1) < 1e-12
    assert report["first_level_is_marginal_gap"] < 1e-12
    assert report["identity_residual_rel"] < 1e-9 and report["mean_gap_rel"] < 1e-9
    assert report["within_row_term"] > 0  # the rows below level 1 carry variance


def test_the_large_menu_benchmark_runs_the_three_planes(capsys):
    from tests.test_benchmarks import _script

    _script("large_menus").main(
        ["--model", "tiny-random", "--buckets", "10", "50", "--per-bucket", "1", "--reps", "1"]
    )
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert len(rows) == 3  # the header and one row per bucket
    k10, k50 = (row.split("|")[1:-1] for row in rows[1:])
    assert 10 <= int(k10[0]) <= 20 and float(k10[1]) == 1.0  # the fixture's nearest: one menu
    assert int(k50[0]) > int(k10[0]) and float(k50[1]) >= 2  # a label tree
    assert "skipped" not in rows[2]  # every plane measured
