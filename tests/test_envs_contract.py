"""The env contract of docs/design.md §3, checked for every registered env id.

TextWorld ids (``tw-*``) need compiled games and the Java-backed ids (``scienceworld``,
``twx-*``) a JVM; they have their own tests. Every other id is checked here with its
default options.
"""

from __future__ import annotations

import random
import warnings

import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

from rlid import envs
from rlid.envs.base import INFO_KEYS
from rlid.envs.jvm import needs_java
from rlid.envs.registry import get_spec, parse_option_strings

ENV_IDS = [e for e in envs.list_envs() if not e.startswith("tw-") and not needs_java(e)]
INVALID = "dance wildly"  # no game here has this command
MAX_LEGAL_AT_DEFAULTS = 26


def play(env_id: str, seed: int, picks: list[int], **options):
    """Reset with ``seed`` and take ``picks`` (index into the legal actions; -1 = invalid)."""
    env = envs.make(env_id, **options)
    obs, info = env.reset(seed=seed)
    trace = [(obs, info)]
    for pick in picks:
        if not info["legal_actions"]:
            break
        legal = info["legal_actions"]
        action = INVALID if pick < 0 else legal[pick % len(legal)]
        obs, reward, terminated, truncated, info = env.step(action)
        trace.append((obs, reward, terminated, truncated, info))
        if terminated or truncated:
            break
    return trace


def check_info(info: dict) -> None:
    for key in (*INFO_KEYS, "game_seed"):
        assert key in info, key
    legal = info["legal_actions"]
    assert all(isinstance(a, str) and a for a in legal)
    assert len(set(legal)) == len(legal), "legal actions must be distinct"
    afterstates = info["afterstates"]
    assert afterstates is None or (
        len(afterstates) == len(legal) and all(isinstance(a, str) and a for a in afterstates)
    )
    assert isinstance(info["objective"], str) and info["objective"]
    assert isinstance(info["score"], int) and isinstance(info["max_score"], int)
    assert 0 <= info["score"] <= info["max_score"]
    assert isinstance(info["won"], bool) and isinstance(info["lost"], bool)
    assert isinstance(info["invalid_action"], bool)


@pytest.fixture(params=ENV_IDS)
def env_id(request) -> str:
    return request.param


def test_builtin_games_are_registered():
    assert {"keydoor", "crafting"} <= set(ENV_IDS)


def test_check_env_passes(env_id):
    env = envs.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a checker warning is a contract failure too
        check_env(env, skip_render_check=True)


def test_seeded_runs_are_identical(env_id):
    picks = [0, 3, -1, 1, 5, 2, 4, 1, 0, 2]
    first, second = play(env_id, 7, picks), play(env_id, 7, picks)
    assert first == second


def test_reset_info_and_step_infos_follow_the_contract(env_id):
    rng = random.Random(0)
    env = envs.make(env_id)
    obs, info = env.reset(seed=3)
    assert "walkthrough" in info
    assert info["walkthrough"] is None or all(isinstance(a, str) for a in info["walkthrough"])
    assert env.observation_space.contains(obs)
    check_info(info)
    assert not info["won"] and not info["lost"] and not info["invalid_action"]
    done = False
    while not done:
        action = rng.choice(info["legal_actions"])
        score_before = info["score"]
        obs, reward, terminated, truncated, info = env.step(action)
        check_info(info)
        assert env.observation_space.contains(obs)
        assert reward == info["score"] - score_before
        assert terminated == (info["won"] or info["lost"])
        assert not info["invalid_action"]
        done = terminated or truncated
    assert info["legal_actions"] == [] and info["afterstates"] == []
    with pytest.raises(RuntimeError, match="reset"):
        env.step(action)


def test_afterstates_can_be_turned_off(env_id):
    env = envs.make(env_id, afterstates=False)
    _, info = env.reset(seed=0)
    assert info["afterstates"] is None
    _, _, _, _, info = env.step(info["legal_actions"][0])
    assert info["afterstates"] is None


def test_invalid_action_is_a_noop(env_id):
    env = envs.make(env_id)
    _, info = env.reset(seed=5)
    first = info["legal_actions"][0]
    obs, reward, terminated, truncated, after = env.step(INVALID)
    assert after["invalid_action"] is True
    assert "not a legal action" in obs and INVALID in obs
    assert (reward, terminated, truncated) == (0.0, False, False)
    for key in ("legal_actions", "afterstates", "score", "won", "lost"):
        assert after[key] == info[key], key
    # ...and the game goes on exactly as if the invalid action had not happened
    with_invalid = env.step(first)
    plain = envs.make(env_id)
    plain.reset(seed=5)
    assert plain.step(first)[:4] == with_invalid[:4]


def test_invalid_actions_still_count_toward_truncation(env_id):
    env = envs.make(env_id, max_episode_steps=2)
    env.reset(seed=0)
    assert env.step(INVALID)[3] is False
    assert env.step(INVALID)[3] is True


@pytest.mark.parametrize("action", [3, None, b"look", ["look"]])
def test_non_str_action_raises_type_error(env_id, action):
    env = envs.make(env_id)
    env.reset(seed=0)
    with pytest.raises(TypeError, match="action must be a str"):
        env.step(action)


def test_unknown_env_id_lists_valid_ids():
    with pytest.raises(ValueError, match="unknown env id") as err:
        envs.make("no-such-game")
    for env_id in envs.list_envs():
        assert env_id in str(err.value)
    with pytest.raises(TypeError):
        envs.make(3)


def test_unknown_option_names_it_and_the_valid_ones(env_id):
    with pytest.raises(ValueError, match="bogus_size") as err:
        envs.make(env_id, bogus_size=3)
    for name in get_spec(env_id).all_options():
        assert name in str(err.value)


def test_out_of_range_options_name_the_option_and_the_range(env_id):
    for name, option in get_spec(env_id).all_options().items():
        if option.max is not None:
            bad = option.max + 1
        elif option.min is not None:
            bad = option.min - 1
        elif option.choices is not None:
            bad = "nonsense"
        else:
            continue
        with pytest.raises(ValueError, match=name) as err:
            envs.make(env_id, **{name: bad})
        assert option.describe() in str(err.value)


def test_options_of_the_wrong_type_are_rejected(env_id):
    for name, option in get_spec(env_id).all_options().items():
        if option.kind is int:
            with pytest.raises(ValueError, match=name):
                envs.make(env_id, **{name: "three"})


def test_parse_option_strings_feeds_make():
    parsed = parse_option_strings(["size=2", " keys = 1 ", "max-episode-steps=9", "split=heldout"])
    assert parsed == {"size": "2", "keys": "1", "max_episode_steps": "9", "split": "heldout"}
    env = envs.make("keydoor", **parsed)
    assert env.max_episode_steps == 9 and env.split == "heldout"
    _, info = env.reset(seed=0)
    assert info["game_seed"] >= 1_000_000
    assert parse_option_strings(["note=a=b"]) == {"note": "a=b"}
    with pytest.raises(ValueError, match="key=value"):
        parse_option_strings(["size"])
    with pytest.raises(ValueError, match="empty key"):
        parse_option_strings(["=3"])
    with pytest.raises(ValueError, match="size"):
        envs.make("keydoor", **parse_option_strings(["size=big"]))


@pytest.mark.parametrize("env_id", ENV_IDS)
@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**16),
    picks=st.lists(st.integers(-1, 40), max_size=25),
)
def test_random_walks_keep_the_contract(env_id, seed, picks):
    trace = play(env_id, seed, picks)
    env = envs.make(env_id)
    obs, info = trace[0]
    check_info(info)
    score = info["score"]
    for obs, reward, terminated, truncated, info in trace[1:]:
        check_info(info)
        assert env.observation_space.contains(obs)
        assert len(info["legal_actions"]) <= MAX_LEGAL_AT_DEFAULTS
        assert reward == info["score"] - score
        assert not (terminated and truncated)
        score = info["score"]
