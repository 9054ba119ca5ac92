"""babyai-text: GLAM's text on hand-built grids, exact afterstates, the bot, splits, options.

The generic env contract (check_env, seeding, invalid actions, info keys) runs on
``babyai-text`` in tests/test_envs_contract.py; these are the family's own checks.
"""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from rlid import envs
from rlid.envs.babyai.catalog import HELD_BACK, LEVELS, MIXED_TASKS, mixture_task
from rlid.envs.babyai.env import ACTIONS, WIN_NOTE, render
from rlid.envs.babyai.text import COLOR_NAMES, DOOR_STATES, OBJECT_NAMES, describe_view
from rlid.envs.outcome import read_outcome
from rlid.envs.registry import SPLIT_OFFSETS

pytest.importorskip("minigrid")

from minigrid.core.constants import COLOR_TO_IDX, OBJECT_TO_IDX, STATE_TO_IDX  # noqa: E402
from minigrid.core.grid import Grid  # noqa: E402
from minigrid.core.mission import MissionSpace  # noqa: E402
from minigrid.core.world_object import Ball, Box, Door, Key, Wall  # noqa: E402
from minigrid.minigrid_env import MiniGridEnv  # noqa: E402


# ------------------------------------------------------------------ GLAM's text
class HandGrid(MiniGridEnv):
    """A 9x9 walled room holding ``objects`` ({(x, y): object}), the agent at ``pos``
    facing ``direction`` (0 east, 1 south, 2 west, 3 north)."""

    def __init__(self, objects: dict, pos: tuple[int, int], direction: int) -> None:
        self.objects, self.pos, self.direction = objects, pos, direction
        space = MissionSpace(mission_func=lambda: "look around")
        super().__init__(mission_space=space, width=9, height=9, max_steps=10)

    def _gen_grid(self, width: int, height: int) -> None:
        self.grid = Grid(width, height)
        self.grid.wall_rect(0, 0, width, height)
        for (x, y), obj in self.objects.items():
            self.grid.set(x, y, obj)
        self.agent_pos, self.agent_dir = self.pos, self.direction
        self.mission = "look around"


def text_of(objects: dict, pos: tuple[int, int], direction: int, carrying=None) -> str:
    env = HandGrid(objects, pos, direction)
    env.reset(seed=0)
    env.carrying = carrying
    return render(env, env.gen_obs())


def test_encoding_tables_are_minigrids():
    assert tuple(sorted(OBJECT_TO_IDX, key=OBJECT_TO_IDX.get)) == OBJECT_NAMES
    assert tuple(sorted(COLOR_TO_IDX, key=COLOR_TO_IDX.get)) == COLOR_NAMES
    assert tuple(sorted(STATE_TO_IDX, key=STATE_TO_IDX.get)) == DOOR_STATES


def test_objects_at_angles_and_a_wall_hidden_by_an_object():
    # facing north from (2, 5): left is west; the wall at x=0 is 2 steps left; the key
    # straight ahead hides the north wall, the box to the right hides the east side
    objects = {(1, 3): Ball("red"), (2, 2): Key("green"), (5, 5): Box("blue"),
               (4, 1): Ball("purple")}  # fmt: skip
    assert text_of(objects, (2, 5), 3) == (
        "You see a wall 2 steps left, "
        "You see a red ball 1 step left and 2 steps forward, "
        "You see a green key 3 steps forward, "
        "You see a purple ball 2 steps right and 4 steps forward, "
        "You see a blue box 3 steps right"
    )


def test_walls_alone_and_the_view_depth():
    # facing north from (4, 7): the north wall is 7 cells away, beyond the 6-cell view;
    # west and east walls are 4 cells away, beyond the 3 side cells
    assert text_of({}, (4, 7), 3) == ""
    assert text_of({}, (4, 6), 3) == "You see a wall 6 steps forward"
    assert text_of({}, (1, 1), 3) == "You see a wall 1 step forward, You see a wall 1 step left"


def test_closed_and_locked_doors_hide_what_is_behind_them():
    # facing east from (2, 3): a wall at x=4 with a closed yellow door ahead and a
    # locked red door up-left; the purple box behind the wall is out of sight
    objects = {(4, y): Wall() for y in range(1, 8)}
    objects.update({(4, 3): Door("yellow"), (4, 1): Door("red", is_locked=True),
                    (6, 3): Box("purple")})  # fmt: skip
    assert text_of(objects, (2, 3), 0) == (
        "You see a wall 3 steps left, "
        "You see a locked red door 2 steps left and 2 steps forward, "
        "You see a closed yellow door 2 steps forward"
    )


def test_an_open_door_is_seen_through_and_keeps_glams_article():
    # facing west from (6, 3) with a blue key in hand: the open door ahead shows the
    # ball behind it; GLAM writes "a open" for every open door
    objects = {(3, y): Wall() for y in range(1, 8)}
    objects.update({(3, 3): Door("purple", is_open=True), (1, 3): Ball("grey"),
                    (5, 5): Box("yellow")})  # fmt: skip
    assert text_of(objects, (6, 3), 2, carrying=Key("blue")) == (
        "You carry a blue key, "
        "You see a wall 3 steps right, "
        "You see a yellow box 2 steps left and 1 step forward, "
        "You see a grey ball 5 steps forward, "
        "You see a open purple door 3 steps forward"
    )


def test_carrying_comes_first_and_the_carried_object_is_not_seen():
    # facing south from (2, 1): left is east
    assert text_of({(3, 3): Key("red")}, (2, 1), 1, carrying=Box("purple")) == (
        "You carry a purple box, "
        "You see a wall 2 steps right, "
        "You see a red key 1 step left and 2 steps forward"
    )


def test_unseen_cells_are_skipped_when_looking_for_a_wall():
    view = np.ones((7, 7, 3), dtype=np.uint8)  # (V, V, 3): all empty
    view[3, 4] = (0, 0, 0)  # unseen, then a wall: the wall counts
    view[3, 2] = (2, 5, 0)
    view[2, 6] = (3, 1, 0)  # floor on the left: hides any wall, is listed as an object
    view[0, 6] = (2, 5, 0)
    view[5, 6] = (5, 3, 0)  # a purple key on the right hides the wall behind it
    view[6, 6] = (2, 5, 0)
    assert describe_view(view) == [
        "You see a wall 4 steps forward",
        "You see a green floor 1 step left",
        "You see a purple key 2 steps right",
    ]


# ------------------------------------------------------------------ env
def test_check_env_passes_on_every_level():
    for level in LEVELS:
        env = envs.make("babyai-text", level=level, game_seed=0)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check_env(env, skip_render_check=True)


def test_six_actions_goal_and_a_step_that_turns():
    env = envs.make("babyai-text", level="GoToLocal", game_seed=3)
    obs, info = env.reset(seed=0)
    assert info["legal_actions"] == list(ACTIONS) == [
        "turn left", "turn right", "go forward", "pick up", "drop", "toggle",
    ]  # fmt: skip
    assert info["objective"] == env.game.mission and info["objective"].startswith("go to the ")
    direction = env.game.agent_dir
    _, reward, _, _, info = env.step("turn right")
    assert env.game.agent_dir == (direction + 1) % 4
    assert (reward, info["babyai_reward"], info["score"], info["max_score"]) == (0.0, 0.0, 0, 1)


@pytest.mark.parametrize("level", list(LEVELS))
def test_the_bot_wins_heldout_games(level):
    for game_seed in range(6):
        env = envs.make("babyai-text", level=level, split="heldout", game_seed=game_seed,
                        afterstates=False)  # fmt: skip
        _, info = env.reset(seed=0)
        assert info["game_seed"] == SPLIT_OFFSETS["heldout"] + game_seed
        plan = info["walkthrough"]
        assert plan and set(plan) <= set(ACTIONS)
        for step, command in enumerate(plan, start=1):
            _, reward, terminated, truncated, info = env.step(command)
            assert terminated == (step == len(plan)) and not truncated
        assert info["won"] and not info["lost"] and info["score"] == 1 and reward == 1.0
        # BabyAI's own reward: 1 - 0.9 * steps / max_steps, steps = the plan's length
        assert info["babyai_reward"] == pytest.approx(1 - 0.9 * len(plan) / env.game.max_steps)


def test_an_invalid_action_changes_nothing_in_minigrid():
    env = envs.make("babyai-text", level="PutNextLocal", game_seed=1)
    obs, info = env.reset(seed=0)
    env.step("go forward")
    state = (tuple(env.game.agent_pos), env.game.agent_dir, env.game.step_count)
    before = env.game.grid.encode()
    obs, reward, terminated, truncated, info = env.step("jump")
    assert info["invalid_action"] and reward == 0.0 and info["babyai_reward"] == 0.0
    assert (tuple(env.game.agent_pos), env.game.agent_dir, env.game.step_count) == state
    assert (env.game.grid.encode() == before).all()


@pytest.mark.parametrize("level", ["MixedTrainLocal", "PutNextLocal", "UnlockLocal"])
def test_the_same_seed_gives_the_same_episode(level):
    def episode() -> list:
        env = envs.make("babyai-text", level=level)
        rng = random.Random(5)
        obs, info = env.reset(seed=11)
        trace = [(obs, info["objective"], info["walkthrough"], info["game_seed"])]
        for _ in range(30):
            obs, reward, terminated, truncated, info = env.step(rng.choice(ACTIONS))
            trace.append((obs, reward, info["afterstates"], info["babyai_reward"]))
            if terminated or truncated:
                break
        return trace

    assert episode() == episode()


@pytest.mark.slow  # ~5 s: 1,000 states x 6 copied envs
def test_afterstates_equal_the_next_observation_on_1000_random_pairs():
    rng = random.Random(0)
    env = envs.make("babyai-text", level="MixedTrainLocal", num_games=1000)
    obs, info = env.reset(seed=0)
    for _ in range(1000):
        row = rng.randrange(len(info["legal_actions"]))
        predicted = info["afterstates"][row]
        obs, _, terminated, truncated, info = env.step(info["legal_actions"][row])
        assert predicted == obs + (WIN_NOTE if info["won"] else "")
        if terminated or truncated:
            obs, info = env.reset()
    # the winning rows, on the bot's path of every task: the note is the built-in games'
    wins = 0
    for task in MIXED_TASKS:
        env = envs.make("babyai-text", level="MixedTrainLocal", task=task, game_seed=0)
        _, info = env.reset(seed=0)
        for command in info["walkthrough"]:
            predicted = info["afterstates"][info["legal_actions"].index(command)]
            obs, _, _, _, info = env.step(command)
            assert predicted == obs + (WIN_NOTE if info["won"] else "")
        assert read_outcome(predicted).won and read_outcome(predicted).points == 1
        wins += 1
    assert wins == len(MIXED_TASKS)


def test_splits_are_disjoint_and_tasks_follow_the_seed():
    train = envs.make("babyai-text", num_games=50)
    heldout = envs.make("babyai-text", split="heldout", num_games=50)
    train_seeds = {train.reset(seed=s)[1]["game_seed"] for s in range(20)}
    heldout_seeds = {heldout.reset(seed=s)[1]["game_seed"] for s in range(20)}
    assert max(train_seeds) < 50 and min(heldout_seeds) >= SPLIT_OFFSETS["heldout"]
    env = envs.make("babyai-text", split="heldout")
    for s in range(10):
        _, info = env.reset(seed=s)
        assert info["babyai_task"] == mixture_task(info["game_seed"])
    counts = {task: 0 for task in MIXED_TASKS}
    for seed in range(1000):
        counts[mixture_task(seed)] += 1
    assert all(150 <= n <= 250 for n in counts.values()), counts


def test_the_mixtures_hold_back_their_words():
    train = envs.make("babyai-text", level="MixedTrainLocal", afterstates=False)
    test = envs.make("babyai-text", level="MixedTestLocal", afterstates=False)
    for seed in range(25):
        mission = train.reset(seed=seed)[1]["objective"]
        assert not any(words in mission for words in HELD_BACK), mission
        mission = test.reset(seed=seed)[1]["objective"]
        assert any(words in mission for words in HELD_BACK), mission


def test_task_option_pins_a_mixture_and_max_episode_steps_sets_minigrids_limit():
    starts = {"goto": "go to ", "pickup": "pick up ", "open": "open ", "putnext": "put "}
    for task, start in starts.items():
        env = envs.make("babyai-text", task=task, afterstates=False)
        _, info = env.reset(seed=0)
        assert info["babyai_task"] == task and info["objective"].startswith(start)
    env = envs.make("babyai-text", level="GoToLocal", max_episode_steps=9)
    _, info = env.reset(seed=0)
    assert env.game.max_steps == 9 and info["steps_left"] == 9
    _, info = envs.make("babyai-text", level="GoToLocal").reset(seed=0)
    assert info["steps_left"] == 64  # BabyAI's limit: 8 x 8 cells x 1 room x 1 navigation
    with pytest.raises(ValueError, match="task=goto pins a mixture"):
        envs.make("babyai-text", level="GoToLocal", task="goto")
    with pytest.raises(ValueError, match="level"):
        envs.make("babyai-text", level="BossLevel")


def test_rlid_envs_lists_the_family_and_its_options(capsys):
    from rlid.cli.main import main

    assert main(["envs", "babyai-text"]) == 0
    out = capsys.readouterr().out
    assert "babyai-text (rlid/BabyAIText-v0)" in out
    for name in ("level", "task", "max_episode_steps", "MixedTrainLocal", "PickUpSeqGoToLocal"):
        assert name in out
