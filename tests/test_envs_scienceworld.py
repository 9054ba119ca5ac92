"""The ScienceWorld env (``scienceworld``): contract, splits, gold paths, no afterstates,
the JVM's lifecycle.

Every test here shares one ScienceWorld JVM (the module fixture holds it). Tasks with
short gold paths keep it fast; the gold paths are cached on disk after the first time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from jvm_helpers import ROOT, kill_run_and_check, start_run, wait_gone

from rlid import envs
from rlid.envs import jvm
from rlid.envs.scienceworld.tasks import TASKS, simplification_string
from rlid.menus import Interface
from rlid.menus.prompt import menu_for_step

INVALID = "dance wildly"
SHORT = {"task": "lifespan-longest-lived", "max_episode_steps": 12}

TRACE_SCRIPT = """
import json, sys
from rlid import envs
env = envs.make("scienceworld", **json.loads(sys.argv[1]))
obs, info = env.reset(seed=int(sys.argv[2]))
trace = [obs, info["legal_actions"]]
for pick in json.loads(sys.argv[3]):
    obs, reward, terminated, truncated, info = env.step(info["legal_actions"][pick % len(info["legal_actions"])])
    trace.append([obs, reward, terminated, info["legal_actions"]])
    if terminated or truncated:
        break
print(json.dumps(trace))
"""


@pytest.fixture(scope="module", autouse=True)
def engine():
    engine = jvm.acquire(jvm.SCIENCEWORLD)
    yield engine
    jvm.release(engine)


def trace_of(options: dict, seed: int, picks: list[int]) -> list:
    env = envs.make("scienceworld", **options)
    obs, info = env.reset(seed=seed)
    trace = [obs, info["legal_actions"]]
    for pick in picks:
        legal = info["legal_actions"]
        obs, reward, terminated, truncated, info = env.step(legal[pick % len(legal)])
        trace.append([obs, reward, terminated, info["legal_actions"]])
        if terminated or truncated:
            break
    env.close()
    return trace


def test_the_thirty_tasks_and_their_splits_are_the_simulators(engine):
    simulator = engine.new(jvm.SCIENCEWORLD.entry_class)
    assert sorted(TASKS) == sorted(str(t) for t in simulator.getTaskNames())
    simulator.load("find-plant", 0, "", False)
    train, dev, test = (
        {int(v) for v in getter()}
        for getter in (simulator.getVariationsTrain, simulator.getVariationsDev,
                       simulator.getVariationsTest)
    )  # fmt: skip
    assert train and dev and test and not (train & dev or train & test or dev & test)
    quick = {"task": "find-plant", "walkthrough": False}
    env = envs.make("scienceworld", **quick, split="heldout", game_seed=0)
    obs, info = env.reset(seed=0)
    assert info["variation"] == min(test) and info["walkthrough"] is None
    dev_env = envs.make(
        "scienceworld", **quick, split="heldout", heldout_variations="dev", game_seed=0
    )
    assert dev_env.reset(seed=0)[1]["variation"] == min(dev)
    train_env = envs.make("scienceworld", **quick, num_games=3)
    assert {train_env.reset(seed=s)[1]["variation"] for s in range(20)} == set(sorted(train)[:3])
    with pytest.raises(ValueError, match=f"game_seed={len(test)} is out of range"):
        envs.make("scienceworld", task="find-plant", split="heldout", game_seed=len(test)).reset(
            seed=0
        )


def test_check_env_passes():
    env = gymnasium.make("rlid/ScienceWorld-v0", **SHORT)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)  # with the render check (env.spec re-makes it)
    env.close()


@pytest.mark.parametrize(
    "task, game",
    [("find-plant", 0), ("lifespan-longest-lived", 3), ("use-thermometer", 1)],
)
def test_heldout_walkthrough_wins_in_legal_actions(task, game):
    env = envs.make("scienceworld", task=task, split="heldout", game_seed=game)
    obs, info = env.reset(seed=0)
    walkthrough = info["walkthrough"]
    assert walkthrough and len(walkthrough) <= len(env.gold_path().gold)
    for action in walkthrough:
        assert action in info["legal_actions"], action
        obs, reward, terminated, truncated, info = env.step(action)
    assert terminated and info["won"] and not info["lost"]
    assert info["score"] == info["max_score"] == 100
    env.close()


def test_info_templates_and_silent_afterstates():
    env = envs.make(
        "scienceworld", task="find-plant", split="heldout", game_seed=2, walkthrough=False
    )
    obs, info = env.reset(seed=0)
    legal, templates = info["legal_actions"], info["action_templates"]
    assert len(legal) > 100 and legal == sorted(set(legal)) and "reset task" not in legal
    assert len(templates) == len(legal)
    for action, template in zip(legal, templates):
        verb = template.split(" OBJ", 1)[0]
        assert action.startswith(verb), (action, template)
    assert {"open OBJ", "look at OBJ", "focus on OBJ", "look around"} <= set(templates)
    assert info["afterstates"] == [""] * len(legal)
    assert "plant" in info["objective"] and info["score"] == 0 and info["max_score"] == 100
    # the menu shows no afterstate: every row renders as with afterstates off
    interface = Interface(labels="auto", overflow="truncate")
    menu = menu_for_step(info, interface, "A-Za-z0-9", rng=np.random.default_rng(0))
    assert " -> " not in menu.render()
    assert len(menu.dropped) == len(legal) - 62
    obs, _, _, _, info = env.step("open door")
    assert len(info["action_templates"]) == len(info["legal_actions"])
    assert (
        envs.make("scienceworld", **SHORT, afterstates=False).reset(seed=0)[1]["afterstates"]
        is None
    )


def test_focusing_on_the_wrong_thing_loses():
    env = envs.make("scienceworld", task="find-plant", split="heldout", game_seed=1)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("focus on air")
    assert terminated and info["lost"] and not info["won"]
    assert info["score"] == 0 and reward == 0.0 and info["legal_actions"] == []


def test_invalid_action_changes_nothing():
    env = envs.make("scienceworld", **SHORT, split="heldout", game_seed=0)
    _, info = env.reset(seed=5)
    obs, reward, terminated, truncated, after = env.step(INVALID)
    assert after["invalid_action"] and "not a legal action" in obs
    assert (reward, terminated, truncated) == (0.0, False, False)
    for key in ("legal_actions", "afterstates", "action_templates", "score", "won", "lost"):
        assert after[key] == info[key], key
    plain = envs.make("scienceworld", **SHORT, split="heldout", game_seed=0)
    plain.reset(seed=5)
    assert env.step("open door to outside")[:4] == plain.step("open door to outside")[:4]


def test_same_seed_same_episode_in_this_jvm_and_a_fresh_one():
    options = {"task": "find-plant", "num_games": 4, "max_episode_steps": 10, "walkthrough": False}
    picks = [3, 17, 250, 8, 41, 99, 5]
    first = trace_of(options, 7, picks)
    assert trace_of(options, 7, picks) == first
    # a fresh JVM (another process) lists objects in the same order
    out = subprocess.run(
        [sys.executable, "-c", TRACE_SCRIPT, json.dumps(options), "7", json.dumps(picks)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
        text=True, check=True, timeout=300,
    )  # fmt: skip
    assert json.loads(out.stdout) == json.loads(json.dumps(first))


# grow-plant's held-out game 0 (variation 93): its seeds are alike, so listing the legal
# actions names them with the simulator's random generator
GROW = {"task": "grow-plant", "split": "heldout", "game_seed": 0, "walkthrough": False}
GROW_ACTIONS = [
    "open door to hallway", "go to hallway", "open door to kitchen", "go to kitchen",
    "open bathroom door", "go to bathroom", "look around", "pick up ceramic cup",
    "go to kitchen", "go to hallway", "go to greenhouse", "look around",
]  # fmt: skip


def test_envs_interleaved_in_one_jvm_play_as_they_do_alone():
    alone = envs.make("scienceworld", **GROW)
    trace = [alone.reset(seed=0)]
    trace += [alone.step(action) for action in GROW_ACTIONS]
    alone.close()
    first, second = envs.make("scienceworld", **GROW), envs.make("scienceworld", **GROW)
    traces: list[list] = [[first.reset(seed=0)], [second.reset(seed=0)]]
    for action in GROW_ACTIONS:  # step by step, each game's calls between the other's
        traces[0].append(first.step(action))
        traces[1].append(second.step(action))
    assert traces[0] == trace and traces[1] == trace
    assert all(action in step[-1]["legal_actions"] for step, action in zip(trace, GROW_ACTIONS))


@pytest.mark.slow
def test_a_walkthrough_through_alike_objects_wins():
    # its gold path answers the simulator's "which seed?" questions ("0")
    env = envs.make("scienceworld", **{**GROW, "walkthrough": True})
    obs, info = env.reset(seed=0)
    assert any(c.isdigit() for c in env.gold_path().gold)
    for action in info["walkthrough"]:
        assert action in info["legal_actions"], action
        obs, reward, terminated, truncated, info = env.step(action)
    assert terminated and info["won"] and info["score"] == 100


def test_the_large_menu_fixture_holds_real_states_that_replay():
    path = ROOT / "tests" / "data" / "scienceworld_states.json"
    assert path.stat().st_size < 300_000
    data = json.loads(path.read_text())
    sizes = [state["size"] for state in data["states"]]
    assert [state["target"] for state in data["states"]] == [10, 50, 100, 200, 400]
    assert sizes == sorted(sizes) and min(sizes) == data["scienceworld_smallest_menu"]
    for state in data["states"]:
        assert len(state["legal_actions"]) == len(state["action_templates"]) == state["size"]
    state = data["states"][2]  # about 100 legal actions
    env = envs.make(
        "scienceworld", task=state["task"], simplifications=state["simplifications"],
        game_seed=state["game_seed"], walkthrough=False,
    )  # fmt: skip
    obs, info = env.reset(seed=0)
    for action in state["actions_from_reset"]:
        obs, _, _, _, info = env.step(action)
    assert info["variation"] == state["variation"] and obs == state["observation"]
    assert info["legal_actions"] == state["legal_actions"]
    assert info["action_templates"] == state["action_templates"]


def test_options_are_validated():
    assert simplification_string("easy", "boil") == "easy"
    assert simplification_string("none", "boil") == ""
    assert simplification_string("openDoors, teleportAction", "boil") == "openDoors,teleportAction"
    with pytest.raises(ValueError, match="simplifications='fast'"):
        envs.make("scienceworld", simplifications="fast")
    with pytest.raises(ValueError, match="needs the electrical actions"):
        envs.make("scienceworld", task="power-component", simplifications="noElectricalAction")
    with pytest.raises(ValueError, match="task='cook'.*boil"):
        envs.make("scienceworld", task="cook")


def test_a_dead_engine_is_one_clear_error_naming_env_and_seed():
    env = envs.make("scienceworld", **SHORT, split="heldout", game_seed=2)
    _, info = env.reset(seed=9)
    old_pid = env.engine_pid
    os.kill(old_pid, signal.SIGKILL)
    assert wait_gone([old_pid]) == []
    with pytest.raises(jvm.EngineDied) as err:
        env.step(info["legal_actions"][0])
    message = str(err.value)
    assert "\n" not in message and f"pid {old_pid}" in message
    assert "scienceworld" in message and "lifespan-longest-lived" in message
    assert f"variation {info['variation']}" in message and "reset seed 9" in message
    _, again = env.reset(seed=9)  # a fresh engine
    assert env.engine_pid != old_pid and again["legal_actions"] == info["legal_actions"]
    env.close()


def test_no_java_process_survives_a_killed_run():
    run = start_run("scienceworld", SHORT, workers=0)
    kill_run_and_check(run, "sigkill", expected_jvms=1)


@pytest.mark.slow
def test_no_java_process_survives_ctrl_c_of_a_run_with_env_workers():
    run = start_run("scienceworld", SHORT, workers=2)
    kill_run_and_check(run, "ctrl-c", expected_jvms=2)


# ------------------------------------------------- options of the scienceworld-paper protocol
def test_raw_scores_keep_the_simulators_minus_100_on_failure():
    """scienceworld.py ``step``: ``score = round(100 * getScore())``, -1.0 on failure
    (Goal.scala GoalSequence.score), so -100; the default clips it at 0."""
    options = {"task": "find-plant", "split": "heldout", "game_seed": 1, "walkthrough": False}
    for raw, expected in ((True, -100), (False, 0)):
        env = envs.make("scienceworld", **options, raw_scores=raw)
        env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step("focus on air")
        assert terminated and info["lost"] and info["score"] == expected
        assert reward == float(expected)


def test_reset_task_is_a_legal_action_only_when_kept():
    options = {**SHORT, "split": "heldout", "game_seed": 0, "walkthrough": False}
    plain = envs.make("scienceworld", **options).reset(seed=0)[1]
    kept = envs.make("scienceworld", **options, reset_task=True).reset(seed=0)[1]
    assert "reset task" not in plain["legal_actions"] and "ticks" not in plain
    assert set(kept["legal_actions"]) == set(plain["legal_actions"]) | {"reset task"}


@pytest.mark.slow
def test_ambiguity_ask_offers_the_simulators_numbers_and_the_walkthrough_answers():
    """InputParser.scala: an ambiguous command is answered with a question listing
    ``i:\\t...`` choices, and the valid actions become "0", "1", ...
    (getValidActionsAmbiguousState). With ambiguity="ask" those are the legal actions, and
    the walkthrough answers "0" where the gold path does."""
    env = envs.make("scienceworld", **{**GROW, "walkthrough": True, "ambiguity": "ask"})
    obs, info = env.reset(seed=0)
    answered = env.gold_path().answered
    assert answered  # this variation's gold path meets alike seeds
    asked = 0
    for action in info["walkthrough"]:
        assert action in info["legal_actions"], action
        obs, reward, terminated, truncated, info = env.step(action)
        if obs.startswith("Ambiguous request"):
            asked += 1
            choices = [line for line in obs.splitlines() if line.split(":\t", 1)[0].isdigit()]
            assert sorted(info["legal_actions"], key=int) == [str(i) for i in range(len(choices))]
            assert set(info["action_templates"]) == {"NUMBER"}
    assert asked == len(answered)
    assert terminated and info["won"] and info["score"] == 100
