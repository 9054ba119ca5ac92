"""Every env id is a Gymnasium id: gymnasium.make / make_vec, env.spec, check_env."""

from __future__ import annotations

import re
import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from rlid import envs
from rlid.envs.jvm import needs_java
from rlid.envs.textworld import cache as tw_cache
from rlid.envs.textworld.verify import CHECK_GAMES

TW_OPTIONS = dict(CHECK_GAMES)


def smallest_options(env_id: str) -> dict:
    if env_id == "tw-file":
        challenge, settings = CHECK_GAMES[2][0], CHECK_GAMES[2][1]
        return {"path": str(tw_cache.ensure_game(challenge, settings, 0))}
    if env_id.startswith("tw-"):
        return {"game_seed": 0, **TW_OPTIONS[env_id]}
    return {"size": 2} if env_id == "keydoor" else {}


def test_every_env_id_has_a_versioned_namespaced_gym_id():
    ids = envs.gym_ids()
    assert sorted(ids.values()) == envs.list_envs()
    for gid in ids:
        assert re.fullmatch(r"rlid/[A-Z][A-Za-z]*(-[A-Z][A-Za-z]*)?-v\d+", gid), gid
        assert gid in gymnasium.registry
    assert {"rlid/KeyDoor-v0", "rlid/Crafting-v0", "rlid/TextWorld-CoinCollector-v0"} <= set(ids)


def test_rlid_envs_shows_the_gym_ids(capsys):
    from rlid.cli.main import main

    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    for gid, env_id in envs.gym_ids().items():
        assert f"{env_id} ({gid}):" in out


# the Java-backed ids are checked by tests/test_envs_scienceworld.py and test_envs_twx.py
@pytest.mark.parametrize("gid", sorted(g for g, e in envs.gym_ids().items() if not needs_java(e)))
def test_gymnasium_make_and_check_env(gid):
    env_id = envs.gym_ids()[gid]
    env = gymnasium.make(gid, **smallest_options(env_id))
    assert env.spec is not None and env.spec.id == gid
    assert env.unwrapped.spec.kwargs["env_id"] == env_id
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a checker warning is a contract failure too
        check_env(env.unwrapped)  # with the render check: env.spec re-makes it with "ansi"
    obs, info = env.reset(seed=1)
    short_obs, short_info = envs.make(env_id, **smallest_options(env_id)).reset(seed=1)
    assert obs == short_obs and info["legal_actions"] == short_info["legal_actions"]
    env.close()


def test_make_vec_steps_a_batch_of_games():
    vec = gymnasium.make_vec("rlid/KeyDoor-v0", num_envs=3, vectorization_mode="sync", size=2)
    obs, info = vec.reset(seed=0)
    assert len(obs) == 3 and all(isinstance(o, str) for o in obs)
    actions = [legal[0] for legal in info["legal_actions"]]
    obs, reward, terminated, truncated, info = vec.step(actions)
    assert reward.shape == (3,) and len(obs) == 3
    vec.close()


def test_module_prefix_options_and_errors():
    env = gymnasium.make("rlid.envs:rlid/Crafting-v0", split="heldout", render_mode="ansi")
    env.reset(seed=0)
    assert isinstance(env.render(), str)
    with pytest.raises(ValueError, match="unknown option.*sise"):
        gymnasium.make("rlid/KeyDoor-v0", sise=3)
    with pytest.raises(ValueError, match="render_mode"):
        gymnasium.make("rlid/KeyDoor-v0", render_mode="human")
    assert envs.gym_id("tw-foo_bar") == "rlid/TextWorld-FooBar-v0"
