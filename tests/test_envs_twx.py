"""TextWorldExpress envs (``twx-*``): the contract, folds, gold paths, the JVM's lifecycle.

Every test here shares one TextWorldExpress JVM (the module fixture holds it).
"""

from __future__ import annotations

import json
import os
import signal
import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from jvm_helpers import ROOT, java_descendants, kill_run_and_check, start_run, wait_gone

from rlid import envs
from rlid.envs import jvm
from rlid.envs.twx.specs import GAMES
from rlid.menus import Interface
from rlid.menus.prompt import menu_for_step

TWX_IDS = [f"twx-{game}" for game in GAMES]
SMALL = {
    "twx-cookingworld": {"numLocations": 3, "numIngredients": 2, "numDistractorItems": 2},
    "twx-coin": {"numLocations": 4, "includeDoors": False},
    "twx-twc": {"numLocations": 1, "numItemsToPutAway": 2},
    "twx-mapreader": {"numLocations": 8, "maxDistanceApart": 3},
    "twx-simonsays": {"gameLength": 3},
}
INVALID = "dance wildly"


@pytest.fixture(scope="module", autouse=True)
def engine():
    engine = jvm.acquire(jvm.TEXTWORLD_EXPRESS)
    yield engine
    jvm.release(engine)


def play(env_id: str, seed: int, picks: list[int], **options):
    env = envs.make(env_id, **options)
    obs, info = env.reset(seed=seed)
    trace = [(obs, info)]
    for pick in picks:
        legal = info["legal_actions"]
        action = INVALID if pick < 0 else legal[pick % len(legal)]
        step = env.step(action)
        trace.append(step)
        info = step[4]
        if step[2] or step[3]:
            break
    env.close()
    return trace


def test_the_eight_games_are_registered_with_gym_ids():
    assert sorted(GAMES) == sorted(
        ["cookingworld", "twc", "coin", "mapreader", "arithmetic", "sorting", "simonsays",
         "peckingorder"]
    )  # fmt: skip
    ids = envs.gym_ids()
    assert ids["rlid/TextWorldExpress-CookingWorld-v0"] == "twx-cookingworld"
    assert {envs.gym_id(e) for e in TWX_IDS} <= set(ids)


@pytest.mark.parametrize("env_id", TWX_IDS)
def test_check_env_passes(env_id):
    gid = envs.gym_id(env_id)
    env = gymnasium.make(gid, **SMALL.get(env_id, {}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)  # with the render check (env.spec re-makes it)
    env.close()


@pytest.mark.parametrize("env_id", TWX_IDS)
def test_heldout_walkthrough_wins_with_legal_actions(env_id):
    env = envs.make(env_id, split="heldout", game_seed=3, **SMALL.get(env_id, {}))
    obs, info = env.reset(seed=0)
    assert info["twx_seed"] == 20003 and info["game_seed"] == 3
    assert info["walkthrough"]
    for action in info["walkthrough"]:
        assert action in info["legal_actions"]
        obs, reward, terminated, truncated, info = env.step(action)
    assert terminated and info["won"] and not info["lost"]
    assert info["score"] == info["max_score"] == 100
    env.close()


def test_folds_are_the_splits():
    train = envs.make("twx-coin", game_seed=5)
    dev = envs.make("twx-coin", split="heldout", heldout_fold="dev", game_seed=5)
    assert train.reset(seed=0)[1]["twx_seed"] == 5
    assert dev.reset(seed=0)[1]["twx_seed"] == 10005
    with pytest.raises(ValueError, match=r"game_seed=1000 is out of range.*\[0, 999\]"):
        envs.make("twx-coin", game_seed=1000).reset(seed=0)
    pooled = envs.make("twx-sorting", num_games=3)
    assert {pooled.reset(seed=s)[1]["game_seed"] for s in range(30)} == {0, 1, 2}


def test_info_afterstates_say_nothing_and_menus_show_none():
    env = envs.make("twx-cookingworld", **SMALL["twx-cookingworld"])
    obs, info = env.reset(seed=1)
    assert info["afterstates"] == [""] * len(info["legal_actions"])
    assert info["legal_actions"] == sorted(set(info["legal_actions"]))
    assert info["objective"] and 0 <= info["score"] <= info["max_score"] == 100
    menu = menu_for_step(info, Interface(), "A-Z0-9a-z", rng=np.random.default_rng(0))
    assert " -> " not in menu.render()
    assert envs.make("twx-coin", afterstates=False).reset(seed=0)[1]["afterstates"] is None


def test_same_seed_same_episode_and_invalid_actions_change_nothing():
    picks = [0, 3, -1, 1, 5, 2, 4, 1, 0, 2, 7, 3]
    first = play("twx-cookingworld", 7, picks, **SMALL["twx-cookingworld"])
    second = play("twx-cookingworld", 7, picks, **SMALL["twx-cookingworld"])
    assert first == second
    env = envs.make("twx-twc", **SMALL["twx-twc"])
    _, info = env.reset(seed=5)
    obs, reward, terminated, truncated, after = env.step(INVALID)
    assert after["invalid_action"] and "not a legal action" in obs
    assert (reward, terminated, truncated) == (0.0, False, False)
    for key in ("legal_actions", "afterstates", "score", "won", "lost"):
        assert after[key] == info[key]
    plain = envs.make("twx-twc", **SMALL["twx-twc"])
    plain.reset(seed=5)
    first_action = info["legal_actions"][0]
    assert env.step(first_action)[:4] == plain.step(first_action)[:4]


def test_a_seed_keeps_its_walkthrough_though_the_package_draws_it_unseeded(
    engine, tmp_path, monkeypatch
):
    from rlid.envs.twx.env import walkthrough_path

    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path))
    options = {"numLocations": 6, "numDistractorItems": 5, "game_seed": 4}
    walkthroughs = set()
    for _ in range(6):
        env = envs.make("twx-coin", **options)
        walkthroughs.add(tuple(env.reset(seed=0)[1]["walkthrough"]))
        env.close()
    assert len(walkthroughs) == 1
    path = walkthrough_path("coin", env.params, "train", 4)
    assert path.is_file() and tuple(json.loads(path.read_text())) in walkthroughs
    # the package itself: several gold paths for one seed
    simulator = engine.new(jvm.TEXTWORLD_EXPRESS.entry_class)
    simulator.load("coin", "numLocations=6,numDistractorItems=5")
    drawn = set()
    for _ in range(12):
        simulator.generateNewGameJSON(4, "train", True)
        drawn.add(tuple(simulator.getGoldActionSequence()))
    assert len(drawn) > 1


def test_failure_ends_the_game_as_lost():
    env = envs.make("twx-simonsays", game_seed=0)
    obs, info = env.reset(seed=0)
    wrong = next(a for a in info["legal_actions"] if a != info["walkthrough"][0])
    obs, reward, terminated, truncated, info = env.step(wrong)
    assert terminated and info["lost"] and not info["won"]
    assert info["score"] == 0 and info["legal_actions"] == []


def test_options_are_validated_by_name():
    with pytest.raises(ValueError, match="numLocations=12 is out of range"):
        envs.make("twx-coin", numLocations=12)
    with pytest.raises(ValueError, match="unknown option.*numIngredients"):
        envs.make("twx-coin", numIngredients=2)
    env = envs.make("twx-cookingworld", numLocations="2", includeDoors="false")
    assert env.params["numLocations"] == 2 and env.params["includeDoors"] is False


def test_snapshot_restore_replays_the_episode_exactly():
    env = envs.make("twx-cookingworld", **SMALL["twx-cookingworld"])
    obs, info = env.reset(seed=2)
    rng = np.random.default_rng(0)
    for _ in range(6):
        obs, _, _, _, info = env.step(
            info["legal_actions"][int(rng.integers(len(info["legal_actions"])))]
        )
    saved = env.snapshot()
    branches = []
    for action in info["legal_actions"][:5]:
        branches.append(env.step(action))
        env.restore(saved)
    again = [env.step(a) for a in info["legal_actions"][:1]]
    assert again[0] == branches[0]
    env.restore(saved)
    assert env.step(info["legal_actions"][1]) == branches[1]


def test_envs_of_a_process_share_one_jvm_and_close_it(engine):
    a, b = envs.make("twx-coin"), envs.make("twx-sorting")
    a.reset(seed=0)
    b.reset(seed=0)
    assert a.engine_pid == b.engine_pid == engine.pid
    assert java_descendants(os.getpid()) == [engine.pid]
    a.close()
    b.close()
    assert engine.alive()  # the module fixture still holds it


def test_engine_closes_with_its_last_env():
    # a family nobody holds: start and close an engine of our own through the registry
    kind = jvm.EngineKind(**{**jvm.TEXTWORLD_EXPRESS.__dict__, "name": "TWX (test)"})
    engine = jvm.acquire(kind)
    again = jvm.acquire(kind)
    assert again is engine
    jvm.release(engine)
    assert engine.alive()
    jvm.release(again)
    assert wait_gone([engine.pid], timeout=10) == []


@pytest.mark.parametrize("seen", ["before the call", "during the call"])
def test_a_dead_engine_is_one_clear_error_naming_env_and_seed(seen, monkeypatch):
    env = envs.make("twx-coin", split="heldout", game_seed=2)
    _, info = env.reset(seed=5)
    engine = env._lease.engine
    old_pid = env.engine_pid
    os.kill(old_pid, signal.SIGKILL)
    assert wait_gone([old_pid]) == []
    if seen == "during the call":  # the death is noticed by the call that fails
        monkeypatch.setattr(engine, "alive", lambda: True)
    with pytest.raises(jvm.EngineDied) as err:
        env.step(info["legal_actions"][0])  # a legal action: it reaches the engine
    message = str(err.value)
    assert "\n" not in message and f"pid {old_pid}" in message
    assert "twx-coin" in message and "test seed 20002" in message and "reset seed 5" in message
    chained = err.value.__cause__ or (
        None if err.value.__suppress_context__ else err.value.__context__
    )
    assert chained is None  # one error, not py4j's traceback under it
    monkeypatch.undo()
    obs, info = env.reset(seed=5)  # a fresh engine
    assert env.engine_pid != old_pid and info["legal_actions"]
    env.close()


def test_java_missing_names_the_package(monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(jvm.JavaMissingError, match="default-jre-headless"):
        jvm.JavaEngine(jvm.TEXTWORLD_EXPRESS)


def test_env_workers_each_run_their_own_jvm_with_the_same_episodes():
    from rlid.core.env_workers import WorkerEnvs

    options = {**SMALL["twx-coin"], "game_seed": 1}
    with WorkerEnvs("twx-coin", options, count=2, workers=2) as pool:
        results = pool.reset_many([0, 1], [3, 3])
        jvms = [java_descendants(pid) for pid in pool.pids]
        assert all(len(j) == 1 for j in jvms) and jvms[0] != jvms[1]
        action = results[0][1]["legal_actions"][0]
        stepped = pool.step_many([0, 1], [action, action])
    local = envs.make("twx-coin", **options)
    assert results[0][0] == results[1][0] == local.reset(seed=3)[0]
    assert stepped[0] == stepped[1] == local.step(action)
    assert wait_gone([p for j in jvms for p in j]) == []


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm", "sigkill"])
def test_no_java_process_survives_a_stopped_run(how):
    run = start_run("twx-coin", SMALL["twx-coin"], workers=0)
    kill_run_and_check(run, how, expected_jvms=1)


@pytest.mark.slow
def test_no_java_process_survives_a_killed_run_with_env_workers():
    run = start_run("twx-coin", SMALL["twx-coin"], workers=2)
    kill_run_and_check(run, "sigkill", expected_jvms=2)


def test_throughput_benchmark_covers_the_family_with_and_without_env_workers(capsys):
    import importlib.util
    import sys

    path = ROOT / "benchmarks" / "env_throughput.py"
    spec = importlib.util.spec_from_file_location("_bench_env_throughput", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)
    bench.main(["--only", "twx-coin", "--steps", "20", "--rounds", "1", "--env-workers", "2"])
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    rows = [line for line in lines if line and line[0] == "twx-coin"]
    assert len(rows) == 2  # the per-env table and the env-workers table
    single, batched = rows
    assert float(single[1]) > 0 and float(single[-1]) > 0  # steps/s; replay us per row
    assert batched[1] == "2" and float(batched[2]) > 0 and float(batched[3]) > 0


def test_raw_scores_keep_the_packages_minus_one_on_failure():
    """TextWorldExpress SimonSays: a wrong action is ``GameScore(scoreRaw=-1,
    scoreNormalized=-1, taskFailure=true)``: -100 in rlid's 0-100 scale; clipped at 0 by
    default."""
    for raw, expected in ((True, -100), (False, 0)):
        env = envs.make("twx-simonsays", game_seed=0, raw_scores=raw)
        obs, info = env.reset(seed=0)
        wrong = next(a for a in info["legal_actions"] if a != info["walkthrough"][0])
        obs, reward, terminated, truncated, info = env.step(wrong)
        assert terminated and info["lost"] and info["score"] == expected
