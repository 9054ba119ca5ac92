"""End-to-end tests of decision-level PPO training: learning signal, resume, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rlid.cli import main as cli_main
from rlid.config import TrainConfig
from rlid.core import train as trainer_mod
from rlid.core.loop import RunContext
from rlid.core.train import DecisionBatch, preflight_menu_sizes
from rlid.lm.optim import Stepper
from rlid.lm.starts import load_policy_model
from rlid.menus import Interface
from rlid.runs.dir import read_metrics

TINY_ENV = {"size": 2, "keys": 0, "distractors": 1, "max_episode_steps": 6}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    # A private cache: "tiny" is then warm-built there from the tests' tiny recipe (conftest).
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def small_config(**changes) -> TrainConfig:
    base = dict(
        # the random start: the shipped one wins these small games from the first
        # iteration, and equal returns leave nothing to learn
        model="tiny-random",
        env="keydoor",
        env_options=dict(TINY_ENV),
        steps=30,
        groups_per_iter=2,
        group_size=2,
        epochs=1,
        minibatch_size=8,
        eval_episodes=2,
        threads=1,
        interface=Interface(memory="none"),
    )
    base.update(changes)
    return TrainConfig.from_dict(base)


def params_of(run_dir: Path) -> dict[str, torch.Tensor]:
    model, _ = load_policy_model(str(run_dir / "checkpoint" / "model"))
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_training_changes_parameters_and_writes_the_run_directory(tmp_path):
    config = small_config()
    log = trainer_mod.train(config, tmp_path / "run", progress=False)
    run = Path(log.path)
    for name in ("config.json", "metrics.jsonl", "eval.json", "curves.png", "summary.md"):
        assert (run / name).exists(), name
    assert (run / "checkpoint" / "model" / "model.safetensors").exists()
    rows = read_metrics(run)
    assert rows and rows[-1]["budget"]["env_steps"] >= config.steps
    updated = [row for row in rows if "skipped_update" not in row]  # equal returns: no step
    assert updated
    for row in updated:
        for key in ("loss", "entropy", "clip_frac", "approx_kl", "label_marginal_kl_uniform"):
            assert torch.isfinite(torch.tensor(float(row[key]))), key
    fresh, _ = load_policy_model("tiny")
    trained = params_of(run)
    changed = [k for k, v in fresh.state_dict().items() if not torch.equal(v, trained[k])]
    assert changed, "no parameter changed"
    saved = json.loads((run / "config.json").read_text())["config"]
    assert saved["interface"]["memory"] == "none"


def test_the_held_out_evaluations_show_their_progress(tmp_path, capsys):
    trainer_mod.train(small_config(steps=10, eval_every=1), tmp_path / "run")
    err = capsys.readouterr().err.replace("\r", "\n")
    for when in ("before", "iteration 1", "after"):
        assert f"held-out eval ({when}" in err, when  # then "; run left ..." where known
    assert "2/2" in err  # eval_episodes
    trainer_mod.train(small_config(steps=10), tmp_path / "quiet", progress=False)
    assert "held-out eval" not in capsys.readouterr().err


def test_gae_variant_trains_a_value_head(tmp_path):
    log = trainer_mod.train(small_config(advantage="gae"), tmp_path / "run", progress=False)
    rows = read_metrics(Path(log.path))
    assert "value_loss" in rows[-1]
    assert (Path(log.path) / "checkpoint" / "value_head.safetensors").exists()


@pytest.mark.parametrize("kl_coef", [0.0, 0.1])
def test_killed_run_resumes_to_the_same_parameters_and_metrics(
    tmp_path, interrupt_update, kl_coef, untimed
):
    # with kl_coef > 0 the resumed run must keep the *starting* model as its reference
    config = small_config(steps=40, kl_coef=kl_coef, checkpoint_every=1)
    full = trainer_mod.train(config, tmp_path / "full", progress=False)

    interrupt_update(3)  # in the middle of the third iteration, after two checkpoints
    with pytest.raises(KeyboardInterrupt):
        trainer_mod.train(config, tmp_path / "killed", progress=False)
    interrupt_update(0)
    assert len(read_metrics(tmp_path / "killed")) == 2
    state = json.loads((tmp_path / "killed" / "checkpoint" / "state.json").read_text())
    assert state["iteration"] == 2  # resumed from the checkpoint, not from the start
    trainer_mod.train(None, tmp_path / "killed", resume=True, progress=False)

    a, b = params_of(Path(full.path)), params_of(tmp_path / "killed")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert untimed(read_metrics(tmp_path / "full")) == untimed(read_metrics(tmp_path / "killed"))


def test_a_checkpoint_is_due_by_iterations_budget_or_minutes(tmp_path):
    from rlid.config.budget import Budget
    from rlid.runs.log import RunLog

    config = small_config(steps=100, checkpoint_every=10, checkpoint_minutes=1.0)
    log = RunLog(tmp_path, config, resuming=False)

    def due(iteration: int, wall: float, steps: int = 0) -> bool:
        return log.checkpoint_due(iteration, Budget(env_steps=steps, wall_time=wall))

    assert not due(3, 59.0) and due(3, 60.0)  # a minute of the run's wall time
    assert due(10, 0.0) and due(3, 0.0, steps=100)  # every 10 iterations; the budget's end
    log.checkpoint_wall = 60.0  # what checkpoint() records
    assert not due(4, 119.0) and due(4, 120.0)
    off = RunLog(tmp_path, small_config(checkpoint_minutes=0.0), resuming=False)
    assert not off.checkpoint_due(3, Budget(wall_time=1e9))
    assert "checkpoint_minutes" not in small_config().to_dict()  # old configs stay identical
    with pytest.raises(ValueError, match="checkpoint_minutes must be >= 0"):
        small_config(checkpoint_minutes=-1.0)


def test_a_run_killed_before_its_iteration_checkpoint_resumes_from_a_timed_one(
    tmp_path, interrupt_update
):
    # iterations are "long" here (any wall time is past a tiny checkpoint_minutes):
    # checkpoint_every alone would have written nothing before the kill
    for minutes, name in ((1e-9, "timed"), (30.0, "default")):
        interrupt_update(3)
        config = small_config(steps=40, checkpoint_every=100, checkpoint_minutes=minutes)
        with pytest.raises(KeyboardInterrupt):
            trainer_mod.train(config, tmp_path / name, progress=False)
    state = json.loads((tmp_path / "timed" / "checkpoint" / "state.json").read_text())
    assert state["iteration"] == 2
    assert not (tmp_path / "default" / "checkpoint").exists()


def test_refuses_to_overwrite_a_run_and_leaves_nothing_on_setup_errors(tmp_path, capsys):
    out = tmp_path / "bad"
    code = cli_main(["train", "--env", "keydoor", "-o", "size=99", "--out", str(out)])
    assert code == 2
    assert "size" in capsys.readouterr().err
    assert not out.exists()
    code = cli_main(["train", "--env", "nope", "--out", str(out)])
    assert code == 2 and "valid ids" in capsys.readouterr().err
    code = cli_main(["train", "--model", str(tmp_path / "missing"), "--out", str(out)])
    assert code == 2 and "does not exist" in capsys.readouterr().err
    assert not out.exists()
    code = cli_main(["train", "--lr", "-1", "--out", str(out)])
    assert code == 2 and "lr" in capsys.readouterr().err
    (out / "x").parent.mkdir(parents=True)
    (out / "x").write_text("keep me")
    code = cli_main(["train", "--out", str(out), "--steps", "1"])
    err = capsys.readouterr().err  # not a run: not told to resume it
    assert code == 2 and "not a run directory" in err and "--resume" not in err
    assert (out / "x").read_text() == "keep me"


def test_label_alphabet_too_small_is_caught_before_training(tmp_path, capsys):
    out = tmp_path / "run"
    code = cli_main(
        ["train", "--env", "keydoor", "-o", "size=3", "--labels", "A-C", "--overflow", "error",
         "--out", str(out)]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert "label alphabet" in err and "--overflow truncate" in err and "--overflow tree" in err
    assert not out.exists()


def test_incompatible_checkpoint_is_a_clear_error(tmp_path, capsys):
    log = trainer_mod.train(small_config(steps=5), tmp_path / "run", progress=False)
    cfg = Path(log.path) / "config.json"
    data = json.loads(cfg.read_text())
    del data["sha256"]  # (else refused as a changed record before the config is compared)
    data["config"]["lr"] = 0.5  # a config the checkpoint was not written with
    cfg.write_text(json.dumps(data))
    code = cli_main(["train", "--resume", str(log.path)])
    assert code == 2 and "different config" in capsys.readouterr().err


def test_toml_config_and_flags(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text(
        'env = "keydoor"\nsteps = 7\nlr = 0.001\n[env_options]\nsize = 2\n'
        '[interface]\nmemory = "none"\n'
    )
    import argparse

    from rlid.config.run import add_config_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    args = parser.parse_args(["--config", str(toml), "--lr", "0.01", "-o", "keys=0"])
    config = config_from_args(args)
    assert config.steps == 7 and config.lr == 0.01
    assert config.env_options == {"size": 2, "keys": 0}  # typed by the env's options
    assert config.interface.memory == "none"
    toml.write_text("bogus_key = 3\n")
    with pytest.raises(ValueError, match="bogus_key"):
        config_from_args(parser.parse_args(["--config", str(toml)]))


def test_no_optimizer_step_when_there_is_nothing_to_learn():
    import numpy as np

    from rlid import envs
    from rlid.config.budget import Budget
    from rlid.decision.policy import DecisionPolicy
    from rlid.lm.models import build_tiny_model
    from rlid.lm.tokenizer import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, seed=0)
    config = small_config(ent_coef=0.0)
    policy = DecisionPolicy(model, tokenizer, config.interface)
    env = envs.make("keydoor", size=2, game_seed=0)
    obs, info = env.reset(seed=0)
    decisions = policy.act(
        [obs, obs], [info, info], [None, None],
        rng=np.random.default_rng(0), generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(params, lr=1e-2)
    before = [p.detach().clone() for p in params]
    budget = Budget()
    out = trainer_mod.ppo_update(
        RunContext(config, budget=budget), policy, DecisionBatch(decisions, torch.zeros(2), torch.zeros(2)),
        Stepper(optimizer, params, config.max_grad_norm), np.random.default_rng(0),
    )  # fmt: skip
    assert out == {"skipped_update": 1.0} and budget.optimizer_steps == 0
    assert all(torch.equal(a, b) for a, b in zip(before, params))
    out = trainer_mod.ppo_update(
        RunContext(config, budget=budget), policy, DecisionBatch(decisions, torch.tensor([1.0, -1.0]), torch.zeros(2)),
        Stepper(optimizer, params, config.max_grad_norm), np.random.default_rng(0),
    )  # fmt: skip
    assert budget.optimizer_steps >= 1
    assert any(not torch.equal(a, b) for a, b in zip(before, params))


def test_label_mass_penalty_raises_the_label_mass():
    import numpy as np

    from rlid import envs
    from rlid.config.budget import Budget
    from rlid.decision.policy import DecisionPolicy
    from rlid.lm.models import build_tiny_model
    from rlid.lm.tokenizer import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, seed=0)
    config = small_config(ent_coef=0.0, label_mass_coef=1.0, epochs=3)
    policy = DecisionPolicy(model, tokenizer, config.interface)
    env = envs.make("keydoor", size=2, game_seed=0)
    obs, info = env.reset(seed=0)
    decisions = policy.act(
        [obs, obs], [info, info], [None, None],
        rng=np.random.default_rng(0), generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    _, mass_before, _ = policy.score(decisions)
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(params, lr=1e-3)
    # the penalty regularises an update with policy-gradient signal (alone it is skipped,
    # like every regulariser: Adam would turn it into a full-size step)
    out = trainer_mod.ppo_update(
        RunContext(config, budget=Budget()), policy, DecisionBatch(decisions, torch.zeros(2), torch.zeros(2)),
        Stepper(optimizer, params, config.max_grad_norm), np.random.default_rng(0),
    )  # fmt: skip
    assert out == {"skipped_update": 1.0}
    out = trainer_mod.ppo_update(
        RunContext(config, budget=Budget()), policy, DecisionBatch(decisions, torch.tensor([1.0, -1.0]), torch.zeros(2)),
        Stepper(optimizer, params, config.max_grad_norm), np.random.default_rng(0),
    )  # fmt: skip
    assert "label_mass_loss" in out
    _, mass_after, _ = policy.score(decisions)
    assert float(mass_after.mean()) > float(mass_before.mean())
    assert out["label_mass_loss"] == pytest.approx(-float(torch.log(mass_before).mean()), rel=0.5)


def test_position_penalty_lowers_the_preference_for_menu_positions():
    import numpy as np

    from rlid import envs
    from rlid.config.budget import Budget
    from rlid.decision.policy import DecisionPolicy
    from rlid.lm.models import build_tiny_model
    from rlid.lm.tokenizer import build_tiny_tokenizer
    from rlid.losses.decision import label_marginal_kl_uniform

    tokenizer = build_tiny_tokenizer()
    env = envs.make("keydoor", size=2, game_seed=0)
    resets = [env.reset(seed=seed) for seed in range(8)]
    advantages = torch.tensor([1.0, -1.0] * 4)

    def bias_after(position_coef: float) -> tuple[float, float, dict]:
        model = build_tiny_model(tokenizer, seed=0)
        config = small_config(ent_coef=0.0, epochs=3, minibatch_size=8,
                              position_coef=position_coef)  # fmt: skip
        policy = DecisionPolicy(model, tokenizer, config.interface)
        decisions = policy.act(
            [o for o, _ in resets], [i for _, i in resets], [None] * 8,
            rng=np.random.default_rng(0), generator=torch.Generator().manual_seed(0),
        )  # fmt: skip
        before = float(label_marginal_kl_uniform(policy.score(decisions)[0]))
        params = list(model.parameters())
        out = trainer_mod.ppo_update(
        RunContext(config, budget=Budget()), policy, DecisionBatch(decisions, advantages, torch.zeros(8)),
        Stepper(torch.optim.AdamW(params, lr=1e-3), params, config.max_grad_norm), np.random.default_rng(0),
    )  # fmt: skip
        return before, float(label_marginal_kl_uniform(policy.score(decisions)[0])), out

    start, plain, out_plain = bias_after(0.0)
    same_start, penalised, out = bias_after(1.0)
    assert same_start == pytest.approx(start) and start > 0
    # logged with or without the penalty (mean over the steps of the size-pooled,
    # unbiased estimate before each step): 0.21 without, 0.13 with it
    assert out["position_bias"] < out_plain["position_bias"]
    # the policy-gradient steps alone make position 2 the favourite (0.01 -> 0.24); the
    # penalty, recomputed at every step, keeps the marginal near uniform (0.03; one
    # menu size here, so the grouped diagnostic is the plain marginal KL)
    assert penalised < plain / 3


def test_position_penalty_is_for_the_decision_plane():
    with pytest.raises(ValueError, match="position_coef is for the decision plane"):
        small_config(plane="scoring", position_coef=0.1)
    with pytest.raises(ValueError, match="position_coef must be >= 0"):
        small_config(position_coef=-1.0)
    assert "position_coef" not in small_config().to_dict()  # old configs stay identical
    assert small_config(position_coef=0.1).to_dict()["position_coef"] == 0.1


def test_eval_of_a_model_as_it_is_equals_the_runs_before_and_after_rows(tmp_path, capsys):
    from rlid.agents.agent import EvalRequest, evaluate_model, evaluate_run

    config = small_config(eval_episodes=5)
    run = Path(trainer_mod.train(config, tmp_path / "run", progress=False).path)
    rows = json.loads((run / "eval.json").read_text())
    stats = evaluate_model(config, EvalRequest(episodes=5))
    assert stats["origin"] == "fresh" and stats["model"] == "tiny-random"
    assert {k: stats[k] for k in rows["before"]} == rows["before"]
    # The trained model, played as a model dir with the run's config, is the "after" row.
    trained = evaluate_model(
        TrainConfig.from_record({**config.to_dict(), "model": str(run / "checkpoint" / "model")}),
        EvalRequest(episodes=5),
    )  # fmt: skip
    assert trained["origin"] == "local"
    assert {k: trained[k] for k in rows["after"]} == rows["after"]
    assert {k: evaluate_run(run, EvalRequest(episodes=5))[k] for k in rows["after"]} == rows[
        "after"
    ]

    # From the command line: the config file gives plane, interface and env; flags win.
    (tmp_path / "c.toml").write_text(
        'env = "keydoor"\nthreads = 1\n[env_options]\n'
        + "".join(f"{k} = {v}\n" for k, v in TINY_ENV.items())
        + '[interface]\nmemory = "none"\n'
    )
    argv = [
        "eval",
        "--model",
        "tiny-random",
        "--config",
        str(tmp_path / "c.toml"),
        "--episodes",
        "5",
    ]
    assert cli_main([*argv, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert {k: printed[k] for k in rows["before"]} == rows["before"]
    assert printed["env"] == "keydoor" and printed["split"] == "heldout"
    # Another env drops the file's options (they belong to its env).
    assert cli_main([*argv, "--env", "tw-simple", "--episodes", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["env"] == "tw-simple"

    # Mistakes are one clear line each.
    assert cli_main(["eval", "--episodes", "1"]) == 2
    assert "give --run DIR (a trained run), --model M" in capsys.readouterr().err
    assert cli_main(["eval", "--run", str(run), "--config", "c.toml"]) == 2
    assert "--config go with --model" in capsys.readouterr().err
    assert cli_main(["eval", "--model", "tiny", "--plane", "nope"]) == 2
    assert "plane='nope'" in capsys.readouterr().err
    assert cli_main(["eval", "--model", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli_main([*argv, "--episodes", "0"]) == 2
    assert "--episodes 0 is out of range" in capsys.readouterr().err


def test_step_level_group_advantages_train_and_are_recorded(tmp_path):
    """--step-group-coef end to end: the same rollouts as without it (same seed), a
    `shared_states` diagnostic on every row, the coefficient in config.json and summary.md,
    and an update that differs from the episode-level one."""
    off = trainer_mod.train(small_config(steps=12), tmp_path / "off", progress=False)
    on = trainer_mod.train(
        small_config(steps=12, step_group_coef=1.0), tmp_path / "on", progress=False
    )
    rows_off, rows_on = read_metrics(Path(off.path)), read_metrics(Path(on.path))
    assert rows_on[0]["return"] == rows_off[0]["return"]  # the first rollout is the same
    assert all(0.0 <= row["shared_states"] <= 1.0 for row in rows_on)
    assert any(row["shared_states"] > 0 for row in rows_on)  # groups start in one state
    assert "shared_states" not in rows_off[0]
    saved = json.loads((Path(on.path) / "config.json").read_text())["config"]
    assert saved["step_group_coef"] == 1.0
    assert "step-level" in (Path(on.path) / "summary.md").read_text()
    trained_on, trained_off = params_of(Path(on.path)), params_of(Path(off.path))
    assert any(not torch.equal(trained_on[k], trained_off[k]) for k in trained_on)


def test_rows_labelled_beyond_the_warm_starts_answers_are_warned_about(capsys):
    from rlid import envs

    env = envs.make("keydoor", size=3)
    interface = Interface(labels="A-Z", overflow="truncate")
    labels = [chr(ord("A") + i) for i in range(26)]

    def warning(answered):
        trainer_mod.preflight_menu_sizes(
            [env], 26, interface, labels=labels, answered=answered, model="WARM"
        )
        return capsys.readouterr().err

    biggest = trainer_mod.largest_menu(env)  # what the preflight's walk sees
    assert 3 < biggest < 26
    text = warning({"A": 5, "B": 2, "C": 1})
    never = labels[3:biggest]
    assert f"menus of up to {biggest} rows" in text and "warm start WARM" in text
    assert f"a label past C ({len(never)} of their labels: {' '.join(never[:8])}" in text
    assert "--spread-labels" in text
    assert warning({label: 1 for label in labels[:biggest]}) == ""  # every shown label answered
    assert warning({"A": 1, "C": 1, labels[biggest - 1]: 1}) == ""  # a gap is not a warning
    assert warning(None) == ""  # no record: nothing to say
    assert "past none" in warning({"a": 3})  # answered in another alphabet only


class _FixedMenu:
    """An env whose every state shows ``n`` legal actions; one step ends it."""

    def __init__(self, n: int) -> None:
        self.n = n

    def reset(self, seed=None):
        return "", {"legal_actions": [f"a{i}" for i in range(self.n)]}

    def step(self, action):
        return "", 0.0, True, False, {"legal_actions": []}


def test_preflight_names_the_labels_a_start_never_answered(capsys):
    labels, answered = list("ABCDE"), {"A": 3, "B": 1}
    tree = SimpleNamespace(overflow="tree", labels="A-E")
    preflight_menu_sizes([_FixedMenu(4)], 5, tree, labels=labels, answered=answered, model="tiny")
    err = capsys.readouterr().err
    assert (
        "shows menus of up to 4 rows, and the warm start tiny was never trained to answer " in err
    )
    assert "with a label past B (2 of their labels: C D;" in err
    # a menu larger than the alphabet is read level by level: every label is used
    preflight_menu_sizes([_FixedMenu(12)], 5, tree, labels=labels, answered=answered, model="tiny")
    err = capsys.readouterr().err
    assert "menus of up to 12 rows (read as label trees of at most 5 rows per level)" in err
    assert "(3 of their labels: C D E;" in err
    # a start that answered with every label the menus use: silent
    preflight_menu_sizes([_FixedMenu(2)], 5, tree, labels=labels, answered=answered, model="tiny")
    assert capsys.readouterr().err == ""
    with pytest.raises(ValueError, match="shows up to 12 legal actions but the label alphabet"):
        preflight_menu_sizes([_FixedMenu(12)], 5, SimpleNamespace(overflow="error", labels="A-E"))
