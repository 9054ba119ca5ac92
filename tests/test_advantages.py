"""GAE, discounted returns and group-relative advantages."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rlid.config.planes import ScoringConfig, TokenConfig
from rlid.core.advantages import (
    discounted_returns,
    gae,
    group_relative_advantages,
    next_values_from,
)

DT = torch.float64


def column_stack(*columns: list[float]) -> torch.Tensor:
    return torch.tensor(columns, dtype=DT).T  # (T, N)


def test_gae_hand_termination_and_truncation():
    """gamma 0.9, lam 0.8 (γλ = 0.72), two envs, three steps.

    env 0: terminated at t=1 (its next value, 99, must be ignored); a new
    episode starts at t=2 and is truncated there, bootstrapping V(final obs) = 0.8.
        δ2 = 0 + 0.9·0.8 − 0.3 = 0.42                      A2 = 0.42
        δ1 = 2 + 0 − 0.6 = 1.4                             A1 = 1.4 (no trace past a terminal)
        δ0 = 1 + 0.9·0.6 − 0.5 = 1.04                      A0 = 1.04 + 0.72·1.4 = 2.048
    env 1: truncated at t=1 with V(final obs) = 1.0; rollout ends at t=2 mid-episode,
    bootstrapping from V(s_3) = 0.7.
        δ2 = 1 + 0.9·0.7 − 0.5 = 1.13                      A2 = 1.13
        δ1 = 1 + 0.9·1.0 − 0.4 = 1.5                       A1 = 1.5 (trace stops, value bootstraps)
        δ0 = 0 + 0.9·0.4 − 0.2 = 0.16                      A0 = 0.16 + 0.72·1.5 = 1.24
    returns = A + V.
    """
    rewards = column_stack([1.0, 2.0, 0.0], [0.0, 1.0, 1.0])
    values = column_stack([0.5, 0.6, 0.3], [0.2, 0.4, 0.5])
    next_values = column_stack([0.6, 99.0, 0.8], [0.4, 1.0, 0.7])
    terminated = column_stack([0, 1, 0], [0, 0, 0]).bool()
    truncated = column_stack([0, 0, 1], [0, 1, 0]).bool()
    adv, ret = gae(rewards, values, next_values, terminated, truncated, gamma=0.9, lam=0.8)
    expected = column_stack([2.048, 1.4, 0.42], [1.24, 1.5, 1.13])
    assert torch.allclose(adv, expected)
    assert torch.allclose(ret, expected + values)
    # treating env 1's truncation as a termination would lose the bootstrap: A1 = 1 − 0.4
    adv_as_terminal, _ = gae(
        rewards, values, next_values, terminated | truncated, truncated, gamma=0.9, lam=0.8
    )
    assert adv_as_terminal[1, 1].item() == pytest.approx(0.6)


def test_gae_ignores_garbage_next_value_after_termination():
    ones = torch.ones(1, 1, dtype=DT)
    adv, _ = gae(
        ones,
        ones,
        torch.full((1, 1), torch.nan, dtype=DT),
        ones.bool(),
        ~ones.bool(),
        gamma=0.99,
        lam=0.95,
    )
    assert adv.item() == 0.0  # r − V = 1 − 1


def cleanrl_gae(rewards, values, dones, next_value, next_done, gamma, lam):
    """CleanRL ppo.py's loop: dones[t] flags that obs t starts after an episode end."""
    steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    last = 0
    for t in reversed(range(steps)):
        if t == steps - 1:
            nextnonterminal = 1.0 - next_done
            nextvalues = next_value
        else:
            nextnonterminal = 1.0 - dones[t + 1]
            nextvalues = values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = last = delta + gamma * lam * nextnonterminal * last
    return advantages


def test_gae_matches_cleanrl_without_truncation():
    gen = torch.Generator().manual_seed(0)
    steps, envs = 7, 3
    rewards = torch.randn(steps, envs, generator=gen, dtype=DT)
    values = torch.randn(steps, envs, generator=gen, dtype=DT)
    last_value = torch.randn(envs, generator=gen, dtype=DT)
    ended = torch.rand(steps, envs, generator=gen) < 0.3  # episode ends at s_{t+1}
    # CleanRL layout: dones[t] = ended[t − 1], next_done = ended[T − 1]
    dones = torch.cat([torch.zeros(1, envs), ended[:-1].to(DT)])
    expected = cleanrl_gae(rewards, values, dones, last_value, ended[-1].to(DT), 0.97, 0.9)
    adv, _ = gae(
        rewards,
        values,
        next_values_from(values, last_value),
        ended,
        torch.zeros_like(ended),
        gamma=0.97,
        lam=0.9,
    )
    assert torch.allclose(adv, expected)


def test_gae_with_lambda_one_is_discounted_return_minus_value():
    rewards = torch.tensor([[1.0], [0.0], [2.0]], dtype=DT)
    values = torch.tensor([[0.3], [0.1], [0.4]], dtype=DT)
    terminated = torch.tensor([[False], [False], [True]])
    next_values = next_values_from(values, torch.zeros(1, dtype=DT))
    adv, ret = gae(
        rewards, values, next_values, terminated, torch.zeros_like(terminated), gamma=0.5, lam=1.0
    )
    assert torch.allclose(ret, discounted_returns(rewards, 0.5))
    assert torch.allclose(adv, discounted_returns(rewards, 0.5) - values)


def test_next_values_from():
    values = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    nv = next_values_from(values, torch.tensor([5.0, 6.0]))
    assert torch.equal(nv, torch.tensor([[3.0, 4.0], [5.0, 6.0]]))


def test_discounted_returns_hand():
    # γ = 0.5: G2 = 2, G1 = 0 + 0.5·2 = 1, G0 = 1 + 0.5·1 = 1.5
    assert discounted_returns(torch.tensor([1.0, 0.0, 2.0]), 0.5).tolist() == [1.5, 1.0, 2.0]
    assert discounted_returns(torch.zeros(0), 0.9).shape == (0,)


def test_gae_errors():
    x = torch.zeros(2, 1)
    with pytest.raises(ValueError, match="next_values must be"):
        gae(x, x, torch.zeros(3, 1), x, x, gamma=0.9, lam=0.9)
    with pytest.raises(ValueError, match="time-major"):
        gae(torch.zeros(2), x, x, x, x, gamma=0.9, lam=0.9)
    with pytest.raises(ValueError, match="gamma and lam"):
        gae(x, x, x, x, x, gamma=1.5, lam=0.9)


# --- group-relative -----------------------------------------------------------------


def test_group_relative_hand():
    # group a: [1, 0, 0, 1] -> mean 0.5, unbiased std sqrt(1/3), A = ±0.866025
    # group b: [4] singleton -> 0;  group c: [2, 2] equal -> 0
    returns = torch.tensor([1.0, 4.0, 0.0, 2.0, 0.0, 2.0, 1.0], dtype=DT)
    ids = ["a", "b", "a", "c", "a", "c", "a"]
    z = 0.5 / (1 / 3) ** 0.5
    adv = group_relative_advantages(returns, ids, eps=0.0)
    assert torch.allclose(adv, torch.tensor([z, 0, -z, 0, -z, 0, z], dtype=DT))
    centred = group_relative_advantages(returns, ids, scale="none")
    assert torch.allclose(centred, torch.tensor([0.5, 0, -0.5, 0, -0.5, 0, 0.5], dtype=DT))


def test_group_relative_tuple_and_tensor_ids_agree():
    returns = torch.tensor([3.0, 1.0, 2.0, 5.0])
    by_tuple = group_relative_advantages(
        returns, [("cook", 1), ("cook", 2), ("cook", 1), ("cook", 2)]
    )
    by_tensor = group_relative_advantages(returns, torch.tensor([10, 20, 10, 20]))
    assert torch.equal(by_tuple, by_tensor)


def test_group_relative_singletons_and_equal_returns_are_zero():
    returns = torch.tensor([0.1, 0.1, 0.1, 7.0], dtype=torch.float32)
    adv = group_relative_advantages(returns, torch.tensor([0, 0, 0, 1]))
    assert torch.equal(adv, torch.zeros(4))
    assert group_relative_advantages(torch.zeros(0), torch.zeros(0, dtype=torch.long)).shape == (0,)


def test_group_relative_errors():
    with pytest.raises(ValueError, match="unknown scale"):
        group_relative_advantages(torch.zeros(2), [0, 0], scale="rank")
    with pytest.raises(ValueError, match="2 entries"):
        group_relative_advantages(torch.zeros(2), [0, 0, 1])
    with pytest.raises(ValueError, match="integer"):
        group_relative_advantages(torch.zeros(2), torch.zeros(2))


# --------------------------------------------------------------------------- discounted group return
def test_group_advantages_compare_discounted_returns_in_both_planes():
    from rlid.baselines.token.train import token_advantages
    from rlid.config import TrainConfig
    from rlid.core.advantages import compute_advantages, episode_return
    from rlid.core.rollout import Episode

    assert episode_return([0.0, 0.0, 1.0], 0.5) == pytest.approx(0.25)
    assert episode_return([1.0, 0.0, 1.0], 1.0) == pytest.approx(2.0)

    def success(steps):
        e = Episode(group=0, reset_seed=0, decisions=[SimpleNamespace(valid=True)] * steps)
        e.rewards = [0.0] * (steps - 1) + [1.0]
        return e

    # two successes in one group, in 1 and 3 steps: returns 1 and 0.25 at gamma 0.5,
    # mean 0.625, so the short one gets +0.375 and the long one -0.375 on each step
    episodes = [success(1), success(3)]
    # (length weighting: every step the episode's advantage, as on the token plane)
    config = TrainConfig(gamma=0.5, group_size=2, adv_scale="none", episode_weight="length")
    _, adv, targets = compute_advantages(episodes, config)
    torch.testing.assert_close(adv, torch.tensor([0.375, -0.375, -0.375, -0.375]))
    torch.testing.assert_close(targets, torch.tensor([1.0, 0.25, 0.25, 0.25]))
    token_config = TokenConfig(
        plane="token", gamma=0.5, group_size=2, algo="dr_grpo", invalid_penalty=0.0
    )
    _, token_adv = token_advantages(episodes, token_config)
    torch.testing.assert_close(token_adv, adv)
    # gamma = 1: equal successes, no preference
    _, adv, _ = compute_advantages(episodes, TrainConfig(gamma=1.0, group_size=2))
    torch.testing.assert_close(adv, torch.zeros(4))


def test_equal_episode_weights_give_each_episode_of_a_group_one_weight():
    """episode_weight='equal': A_i * mean_g(T) / T_i on each decision, so a group's
    decisions sum to zero; 'length' lets a long failure outweigh a short win."""
    from rlid.config import TrainConfig
    from rlid.core.advantages import compute_advantages, equal_episode_weights
    from rlid.core.rollout import Episode

    def episode(group, steps, won):
        e = Episode(group=group, reset_seed=group, decisions=[SimpleNamespace(valid=True)] * steps)
        e.rewards = [0.0] * (steps - 1) + [1.0 if won else 0.0]
        return e

    # group 0: a win in 2 steps, a failure in 6 (returns 1, 0: advantages +0.5, -0.5);
    # group 1: two failures of 3 and 5 steps (equal returns: advantage 0)
    episodes = [
        episode(0, 2, True),
        episode(0, 6, False),
        episode(1, 3, False),
        episode(1, 5, False),
    ]
    torch.testing.assert_close(
        equal_episode_weights([2, 6, 3, 5], torch.tensor([0, 0, 1, 1])),
        torch.tensor([2.0, 2 / 3, 4 / 3, 4 / 5]),  # group means 4 and 4
    )
    common = dict(gamma=1.0, group_size=2, adv_scale="none")
    _, by_length, _ = compute_advantages(episodes, TrainConfig(**common, episode_weight="length"))
    _, equal, targets = compute_advantages(episodes, TrainConfig(**common, episode_weight="equal"))
    _, default, _ = compute_advantages(episodes, TrainConfig(**common))  # auto: equal here
    torch.testing.assert_close(default, equal)
    torch.testing.assert_close(by_length, torch.tensor([0.5] * 2 + [-0.5] * 6 + [0.0] * 8))
    torch.testing.assert_close(equal, torch.tensor([1.0] * 2 + [-1 / 3] * 6 + [0.0] * 8))
    assert float(by_length[:8].sum()) == pytest.approx(-2.0)  # the failure's 6 steps win
    assert float(equal[:8].sum()) == pytest.approx(0.0, abs=1e-6)
    assert float(equal.abs()[:8].sum()) == pytest.approx(4.0)  # the group's weight: 8 x 0.5
    torch.testing.assert_close(targets, torch.tensor([1.0] * 2 + [0.0] * 14))
    # the same episodes in another order, and with std scaling, keep the property
    _, scaled = compute_advantages(
        episodes[::-1], TrainConfig(gamma=1.0, group_size=2, episode_weight="equal")
    )[:2]
    assert float(scaled.sum()) == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize(
    "fields", [dict(plane="token"), dict(advantage="gae")], ids=["token-plane", "gae"]
)
def test_equal_episode_weights_are_refused_where_they_mean_nothing(fields):
    from rlid.config import TrainConfig

    with pytest.raises(ValueError, match="episode_weight='equal'"):
        TrainConfig.from_dict(dict(episode_weight="equal", **fields))
    with pytest.raises(ValueError, match="episode_weight"):
        TrainConfig(episode_weight="both")
    # the default, auto, is length there (what those settings always did)
    assert TrainConfig.from_dict(fields).resolved_episode_weight == "length"
    assert (
        TrainConfig.from_dict(dict(episode_weight="length", **fields)).resolved_episode_weight
        == "length"
    )


def test_a_record_says_which_episode_weight_ran_and_old_records_read_as_length():
    """auto is resolved in every record (a run's config.json, its fingerprint), so an
    auto config is the same run as an explicit one; a record without the key was
    written while length was the default and left out, and reads as length."""
    from rlid.config import TrainConfig
    from rlid.runs.log import config_fingerprint

    auto = TrainConfig()
    assert (auto.episode_weight, auto.resolved_episode_weight) == ("auto", "equal")
    assert auto.to_dict()["episode_weight"] == "equal"
    assert config_fingerprint(auto) == config_fingerprint(TrainConfig(episode_weight="equal"))
    assert ScoringConfig(plane="scoring").resolved_episode_weight == "equal"
    length = TrainConfig(episode_weight="length")
    assert "episode_weight" not in length.to_dict()  # as 0.2 wrote it
    old = TrainConfig.from_record(length.to_dict())
    assert old.episode_weight == "length" and old.to_dict() == length.to_dict()
    assert TrainConfig.from_record(auto.to_dict()).episode_weight == "equal"
    # a config a user writes leaves it at the default
    assert TrainConfig.from_dict(length.to_dict()).episode_weight == "auto"
    for other in (TokenConfig(plane="token"), TrainConfig(advantage="gae")):
        assert "episode_weight" not in other.to_dict()  # length, as before
        assert TrainConfig.from_record(other.to_dict()).to_dict() == other.to_dict()


def test_step_group_advantages_compare_returns_to_go_of_one_state_within_a_group():
    """GiGPO's step level, by hand (gamma 0.5, adv_scale none, length weighting).

    group 0, episode a: states s0, s1, rewards 0, 1 -> returns-to-go 0.5, 1
    group 0, episode b: states s0, s2, rewards 1, 0 -> returns-to-go 1, 0
    group 1, episode c: states s0, s3, rewards 0, 0; episode d: s4, rewards 0
    Step groups: (0, s0) = {a0: 0.5, b0: 1} -> -0.25, +0.25; every other decision is
    alone in its step group -> 0 (c's s0 is another game's state: never compared).
    Episode level: returns a 0.5, b 1 -> -0.25, +0.25 on each step; c, d 0.
    """
    from rlid.config import TrainConfig
    from rlid.core.advantages import compute_advantages, step_group_advantages
    from rlid.core.rollout import Episode

    def episode(group, states, rewards):
        e = Episode(group=group, reset_seed=group, decisions=[SimpleNamespace()] * len(states))
        e.states, e.rewards = list(states), list(rewards)
        return e

    episodes = [
        episode(0, ["s0", "s1"], [0.0, 1.0]),
        episode(0, ["s0", "s2"], [1.0, 0.0]),
        episode(1, ["s0", "s3"], [0.0, 0.0]),
        episode(1, ["s4"], [0.0]),
    ]
    common = dict(gamma=0.5, group_size=2, adv_scale="none", episode_weight="length")
    step = step_group_advantages(episodes, TrainConfig(**common))
    torch.testing.assert_close(step, torch.tensor([-0.25, 0.0, 0.25, 0.0, 0.0, 0.0, 0.0]))
    _, off, _ = compute_advantages(episodes, TrainConfig(**common))
    torch.testing.assert_close(off, torch.tensor([-0.25, -0.25, 0.25, 0.25, 0.0, 0.0, 0.0]))
    _, on, targets = compute_advantages(episodes, TrainConfig(**common, step_group_coef=2.0))
    torch.testing.assert_close(on, off + 2.0 * step)
    torch.testing.assert_close(targets, torch.tensor([0.5, 0.5, 1.0, 1.0, 0.0, 0.0, 0.0]))
    # std scaling as the episode level: (0.5 - 0.75) / (std 0.3536 + 1e-6) = -0.7071
    scaled = step_group_advantages(episodes, TrainConfig(**{**common, "adv_scale": "std"}))
    assert float(scaled[0]) == pytest.approx(-(0.5**0.5), rel=1e-5)
    assert float(scaled[2]) == pytest.approx(0.5**0.5, rel=1e-5)
    # a state met twice in one episode is compared with itself too (all occurrences count)
    loop = [episode(0, ["s0", "s0"], [0.0, 1.0]), episode(0, ["s1"], [0.0])]
    torch.testing.assert_close(
        step_group_advantages(loop, TrainConfig(**{**common, "gamma": 1.0})),
        torch.tensor([0.0, 0.0, 0.0]),  # returns-to-go 1, 1: equal
    )
    # episodes without recorded states cannot be grouped by state: a clear error
    bare = Episode(group=0, reset_seed=0, decisions=[SimpleNamespace()], rewards=[1.0])
    with pytest.raises(ValueError, match="1 decisions but 0 states"):
        step_group_advantages([bare], TrainConfig(**common))


@pytest.mark.parametrize(
    "fields", [dict(plane="token"), dict(advantage="gae")], ids=["token-plane", "gae"]
)
def test_step_group_coef_is_refused_without_group_advantages(fields):
    from rlid.config import TrainConfig

    with pytest.raises(ValueError, match="step_group_coef"):
        TrainConfig.from_dict(dict(step_group_coef=1.0, **fields))
    with pytest.raises(ValueError, match="step_group_coef must be >= 0"):
        TrainConfig(step_group_coef=-1.0)
    # left out of records at 0, so runs from before it existed keep their fingerprint
    assert "step_group_coef" not in TrainConfig().to_dict()
    assert TrainConfig(step_group_coef=1.0).to_dict()["step_group_coef"] == 1.0


def test_state_key_ignores_the_menu_order_and_sees_score_and_afterstates():
    from rlid.core.rollout import state_key

    info = {"legal_actions": ["go east", "take key"], "afterstates": ["x", "y"], "score": 0}
    shuffled = {"legal_actions": ["take key", "go east"], "afterstates": ["y", "x"], "score": 0}
    assert state_key("room", info) == state_key("room", shuffled)
    assert state_key("room", info) != state_key("other room", info)
    assert state_key("room", info) != state_key("room", {**info, "score": 1})
    assert state_key("room", info) != state_key("room", {**info, "afterstates": ["x", "z"]})
    no_after = {"legal_actions": ["go east", "take key"], "score": 0}
    assert state_key("room", no_after) == state_key("room", {**no_after, "afterstates": None})
