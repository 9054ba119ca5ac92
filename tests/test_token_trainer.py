"""Token-plane trainer: credit assignment, DAPO accounting, every algorithm end to end, resume."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from rlid import envs
from rlid.baselines.engine import completion_logprobs
from rlid.baselines.token.policy import Generation, TokenPolicy
from rlid.baselines.token.train import (
    rollout,
    round_reset_seeds,
    shaped_return,
    token_advantages,
    train_token,
)
from rlid.config import TrainConfig
from rlid.config.budget import Budget
from rlid.core.loop import RunContext, make_envs
from rlid.core.rollout import Episode
from rlid.core.seeds import make_reset_seeds
from rlid.lm.models import save_policy_model
from rlid.lm.starts import load_policy_model
from rlid.menus import Interface, command_completion, render_token_prompt
from rlid.runs.log import RunLog

INTERFACE = Interface(memory="none")
GAME = {"size": 2, "keys": 0, "distractors": 0, "max_episode_steps": 3}


@pytest.fixture(scope="module")
def commanding_model(tmp_path_factory):
    """The fresh tiny model after a few teacher-forced steps on random legal commands.

    A fresh model almost never writes a legal command, so every return would be equal
    and every advantage zero; this one writes one about half of the time.
    """
    torch.set_num_threads(1)
    model, tokenizer = load_policy_model("tiny-random")
    env = envs.make("keydoor", **GAME)
    rng = np.random.default_rng(0)
    pairs = []
    for seed in range(16):
        obs, info = env.reset(seed=seed)
        action = info["legal_actions"][int(rng.integers(len(info["legal_actions"])))]
        prompt = render_token_prompt(obs, info, INTERFACE, tokenizer)
        pairs.append(
            (
                tokenizer.encode(prompt, add_special_tokens=False),
                tokenizer.encode(command_completion(action), add_special_tokens=False),
            )
        )
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(30):
        idx = rng.integers(len(pairs), size=16)
        logp, mask, _ = completion_logprobs(
            model, [pairs[i][0] for i in idx], [pairs[i][1] for i in idx], tokenizer.pad_token_id
        )
        loss = -logp.sum() / mask.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return str(save_policy_model(model.eval(), tokenizer, tmp_path_factory.mktemp("model") / "m"))


def _config(model, **changes):
    base = dict(
        plane="token", model=model, env="keydoor", env_options=GAME, steps=10,
        groups_per_iter=2, group_size=4, epochs=1, minibatch_size=16, max_new_tokens=4,
        invalid_penalty=-0.5, eval_episodes=1, threads=1, lr=1e-3, interface=INTERFACE,
    )  # fmt: skip
    return TrainConfig.from_dict({**base, **changes})


def _generation(valid=True, tokens=2):
    return Generation(
        action="look", text="look", valid=valid, prompt_ids=[1], completion_ids=[5] * tokens,
        logp_rollout=[-1.0] * tokens, logp_old=[-1.0] * tokens, stopped=True,
    )  # fmt: skip


def _episode(group, reward, generations):
    e = Episode(group=group, reset_seed=0)
    e.decisions = list(generations)
    e.rewards = [0.0] * (len(generations) - 1) + [reward]
    return e


# --------------------------------------------------------------------------- credit
def test_shaped_return_adds_invalid_and_overlong_penalties():
    config = _config("tiny", max_new_tokens=4, overlong_cache=2, invalid_penalty=-0.25)
    e = _episode(0, 1.0, [_generation(valid=False, tokens=2), _generation(tokens=3)])
    # 0.99 (reward 1 at step 2, discounted once) - 0.25 (one unparsed)
    # + 0 (2 <= 4 - 2) - 0.5 (3 tokens: (2 - 3) / 2)
    assert shaped_return(e, config) == pytest.approx(0.24)


@pytest.mark.parametrize("algo,scale", [("grpo", True), ("dr_grpo", False)])
def test_every_token_of_an_episode_gets_its_group_advantage(algo, scale):
    config = _config("tiny", algo=algo, group_size=2, invalid_penalty=0.0, gamma=1.0)
    episodes = [
        _episode(0, 1.0, [_generation(), _generation()]),
        _episode(0, 0.0, [_generation()]),
        _episode(1, 2.0, [_generation()]),
        _episode(1, 2.0, [_generation(), _generation(), _generation()]),
    ]
    completions, advantages = token_advantages(episodes, config)
    assert len(completions) == 7
    top = 0.5 / (np.sqrt(0.5) + 1e-6) if scale else 0.5  # group std of (1, 0) is sqrt(0.5)
    expected = [top, top, -top, 0.0, 0.0, 0.0, 0.0]
    np.testing.assert_allclose(advantages.numpy(), expected, rtol=1e-5)


def test_resampling_rounds_play_new_games():
    config = _config("tiny")
    assert round_reset_seeds(config, 3, 0) == make_reset_seeds(config, 3)
    seeds1, groups1 = round_reset_seeds(config, 3, 1)
    assert set(seeds1).isdisjoint(make_reset_seeds(config, 3)[0])
    assert groups1 == [g + config.groups_per_iter for g in make_reset_seeds(config, 3)[1]]


# --------------------------------------------------------------------------- DAPO
def _rollout(model_dir, config, iteration=1):
    model, tokenizer = load_policy_model(model_dir)
    budget = Budget()
    policy = TokenPolicy(
        model, tokenizer, INTERFACE, max_new_tokens=config.max_new_tokens, budget=budget
    )
    env_list = make_envs(config, "train", config.episodes_per_iter)
    result = rollout(RunContext(config, budget=budget), policy, env_list, iteration)
    return result, budget


def test_dynamic_sampling_counts_every_generated_sample(commanding_model):
    # one-token commands never reach the goal: every group has equal returns, all filtered
    # (a budget that does not stop the rounds: --steps stops starting groups once spent)
    config = _config(
        commanding_model, algo="dapo", invalid_penalty=0.0, max_new_tokens=1, steps=10_000
    )
    result, budget = _rollout(commanding_model, config)
    assert result.kept == [] and result.rounds == config.max_gen_batches
    generated = sum(e.length for e in result.generated)
    assert len(result.generated) == config.max_gen_batches * config.episodes_per_iter
    assert budget.generated_samples == generated == budget.filtered_samples
    assert budget.generated_tokens == generated  # one token each

    config = _config(commanding_model, algo="dapo", max_gen_batches=4, steps=10_000)
    result, budget = _rollout(commanding_model, config)
    kept = sum(e.length for e in result.kept)
    assert budget.generated_samples == sum(e.length for e in result.generated)
    assert budget.generated_samples == kept + budget.filtered_samples
    assert budget.generated_tokens == sum(
        g.num_tokens for e in result.generated for g in e.decisions
    )
    assert len({e.group for e in result.generated}) == result.rounds * config.groups_per_iter


def test_dynamic_sampling_filters_on_task_outcomes_not_shaping(monkeypatch):
    # group 0: all failed, but one episode wrote an unparsed command (shaped 0 vs -0.5);
    # group 1: one success. Only group 1 carries task signal.
    def fake_collect(ctx, env_list, policy, iteration, episodes, round_=0):
        failed = [_episode(0, 0.0, [_generation()]) for _ in range(3)]
        failed.append(_episode(0, 0.0, [_generation(valid=False)]))
        mixed = [_episode(1, 0.0, [_generation()]) for _ in range(3)]
        mixed.append(_episode(1, 1.0, [_generation()]))
        mixed[-1].won = True
        return failed + mixed

    monkeypatch.setattr("rlid.baselines.token.train.play_groups", fake_collect)
    config = _config("tiny", algo="dapo", invalid_penalty=-0.5, max_gen_batches=1)
    budget = Budget()
    result = rollout(RunContext(config, budget=budget), None, [], 1)  # type: ignore[arg-type]
    assert [e.group for e in result.kept] == [1, 1, 1, 1]
    assert budget.filtered_samples == 4
    # the shaping still reaches the advantage of a kept group
    _, advantages = token_advantages(result.kept, config)
    assert advantages[-1] > 0 > advantages[0]


def test_dapo_run_reports_generated_kept_and_filtered(commanding_model, tmp_path):
    config = _config(commanding_model, algo="dapo", steps=30, max_gen_batches=3)
    log = train_token(config, tmp_path / "run", progress=False)
    rows = log.metrics
    for row in rows:
        assert row["generated_samples"] == row["used_samples"] + row["filtered_samples"]
    budget = rows[-1]["budget"]
    assert budget["generated_samples"] == sum(r["generated_samples"] for r in rows)
    assert budget["filtered_samples"] == sum(r["filtered_samples"] for r in rows)
    assert budget["generated_samples"] == budget["decisions"]
    assert budget["env_steps"] == budget["generated_samples"]


# --------------------------------------------------------------------------- end to end
def _finite(row):
    for key, value in row.items():
        if isinstance(value, dict):
            _finite(value)
        elif isinstance(value, float):
            assert np.isfinite(value), key


@pytest.mark.parametrize(
    "changes",
    [
        {"algo": "grpo"},
        {"algo": "dr_grpo", "rollout_engine": "perturbed", "mismatch": "tis", "engine_noise": 0.3},
        {"algo": "dapo", "overlong_cache": 2},
        {"algo": "gspo", "rollout_engine": "bf16", "mismatch": "icepop"},
        {"algo": "cispo", "rollout_engine": "perturbed", "mismatch": "icepop", "beta": 0.1},
    ],
    ids=lambda c: "-".join(str(v) for v in c.values()),
)
def test_each_algorithm_trains(commanding_model, tmp_path, changes):
    config = _config(commanding_model, **changes)
    log = train_token(config, tmp_path / "run", progress=False)
    before, _ = load_policy_model(commanding_model)
    after, _ = load_policy_model(str(log.checkpoint_model_dir()))
    assert any(not torch.equal(p, q) for p, q in zip(before.parameters(), after.parameters()))
    assert log.metrics
    for row in log.metrics:
        _finite(row)
        assert {"loss", "grad_norm", "rho_mean", "unparsed_rate", "invalid_rate"} <= set(row)
    assert any(row["grad_norm"] > 0 for row in log.metrics)
    last = log.metrics[-1]
    if config.rollout_engine == "trainer":
        assert last["rho_min"] == last["rho_max"] == 1.0
    else:
        assert last["rho_min"] < 1.0 < last["rho_max"]
    evals = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert {"before", "after"} <= set(evals)


class _Crash(Exception):
    pass


def test_sigterm_stops_the_token_plane_after_a_checkpointed_iteration(
    commanding_model, tmp_path, monkeypatch, untimed
):
    import signal

    from rlid.baselines.token import train as token_trainer
    from rlid.runs.stop import RunStopped

    config = _config(commanding_model, steps=30, checkpoint_every=100)
    straight = train_token(config, tmp_path / "a", progress=False)
    real = token_trainer.token_update

    def signalled(*args, **kwargs):
        signal.raise_signal(signal.SIGTERM)  # in iteration 1's update
        return real(*args, **kwargs)

    monkeypatch.setattr(token_trainer, "token_update", signalled)
    with pytest.raises(RunStopped) as stopped:
        train_token(config, tmp_path / "b", progress=False)
    assert stopped.value.iteration == 1
    state = json.loads((tmp_path / "b" / "checkpoint" / "state.json").read_text())
    assert state["iteration"] == 1
    monkeypatch.setattr(token_trainer, "token_update", real)
    resumed = train_token(None, tmp_path / "b", resume=True, progress=False)
    assert untimed(resumed.metrics) == untimed(straight.metrics)


def test_resume_replays_exactly(commanding_model, tmp_path, monkeypatch, untimed):
    config = _config(commanding_model, steps=30, checkpoint_every=1)
    straight = train_token(config, tmp_path / "a", progress=False)
    assert len(straight.metrics) >= 2

    original = RunLog.checkpoint

    def crash_after_first(self, **kw):
        original(self, **kw)
        if kw["iteration"] == 1:
            raise _Crash

    monkeypatch.setattr(RunLog, "checkpoint", crash_after_first)
    with pytest.raises(_Crash):
        train_token(config, tmp_path / "b", progress=False)
    monkeypatch.setattr(RunLog, "checkpoint", original)
    resumed = train_token(None, tmp_path / "b", resume=True, progress=False)

    assert untimed(resumed.metrics) == untimed(straight.metrics)
    a, _ = load_policy_model(str(straight.checkpoint_model_dir()))
    b, _ = load_policy_model(str(resumed.checkpoint_model_dir()))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    evals = [json.loads((tmp_path / d / "eval.json").read_text()) for d in ("a", "b")]
    assert evals[0] == evals[1]


def test_the_token_trainer_refuses_another_plane_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="trains plane='token', got plane='decision'"):
        train_token(TrainConfig(plane="decision"), tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()  # a setup error leaves nothing behind
