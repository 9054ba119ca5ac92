"""The built-in games: optimal walkthroughs, exact afterstates, splits, game rules."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlid import envs
from rlid.envs.builtin.common import describe_outcome, room_distances, shortest_plan
from rlid.envs.builtin.crafting import CraftingRules
from rlid.envs.builtin.keydoor import KeyDoorRules, KeyDoorState

# (env id, options): tiny, default and harder settings
SETTINGS = [
    ("keydoor", {"size": 2, "keys": 0, "distractors": 0}),
    ("keydoor", {"size": 2, "keys": 1, "distractors": 1}),
    ("keydoor", {}),
    ("keydoor", {"size": 5, "keys": 2, "distractors": 4}),
    ("keydoor", {"size": 8, "keys": 3, "distractors": 6}),
    ("crafting", {"rooms": 1, "steps": 1, "distractors": 0}),
    ("crafting", {}),
    ("crafting", {"rooms": 2, "steps": 2, "distractors": 2}),
    ("crafting", {"rooms": 3, "steps": 4, "distractors": 3}),
    ("crafting", {"rooms": 4, "steps": 6, "distractors": 2}),
]


def legal_bound(env_id: str, options: dict) -> int:
    """The documented maximum number of legal actions for a setting."""
    opts = {name: opt.default for name, opt in envs.get_spec(env_id).options.items()}
    opts.update(options)
    if env_id == "keydoor":
        keys = opts["keys"]
        return 4 + 4 + keys * min(keys, 4) + min(keys, 4) + 2
    items = min(opts["steps"], 4) + opts["distractors"]
    return min(opts["rooms"] - 1, 4) + 3 * items + 3


@pytest.mark.parametrize(("env_id", "options"), SETTINGS)
@pytest.mark.parametrize("split", ["train", "heldout"])
def test_walkthrough_wins_with_max_score(env_id, options, split):
    for game_seed in range(25):
        env = envs.make(env_id, split=split, game_seed=game_seed, **options)
        obs, info = env.reset(seed=game_seed)
        plan = info["walkthrough"]
        assert plan, "every game needs at least one command"
        total = 0.0
        for step, command in enumerate(plan):
            assert command in info["legal_actions"]
            obs, reward, terminated, truncated, info = env.step(command)
            total += reward
            assert terminated == (step == len(plan) - 1)
            assert not truncated
        assert info["won"] and not info["lost"]
        assert info["score"] == info["max_score"] == total


def full_bfs_length(rules) -> int:
    """Shortest win over *all* legal actions (no pruning), to check the planner."""
    start = rules.initial_state()
    seen = {start}
    frontier = deque([(start, 0)])
    while frontier:
        state, depth = frontier.popleft()
        for action in rules.legal_actions(state):
            nxt, _ = rules.apply(state, action)
            if rules.won(nxt):
                return depth + 1
            if nxt not in seen and not rules.lost(nxt):
                seen.add(nxt)
                frontier.append((nxt, depth + 1))
    raise AssertionError("no winning plan")


@pytest.mark.parametrize(
    ("rules_class", "options"),
    [
        (KeyDoorRules, {"size": 3, "keys": 1, "distractors": 2}),
        (KeyDoorRules, {"size": 4, "keys": 2, "distractors": 1}),
        (CraftingRules, {"rooms": 1, "steps": 2, "distractors": 2}),
        (CraftingRules, {"rooms": 2, "steps": 2, "distractors": 1}),
    ],
)
def test_planner_pruning_keeps_plans_optimal(rules_class, options):
    for seed in range(12):
        rules = rules_class(seed, **options)
        assert len(shortest_plan(rules)) == full_bfs_length(rules)


def test_default_solutions_are_short():
    for env_id, (low, high) in {"keydoor": (4, 6), "crafting": (3, 6)}.items():
        env = envs.make(env_id, num_games=64)
        lengths = [len(env.reset(seed=s)[1]["walkthrough"]) for s in range(64)]
        assert low <= min(lengths) and max(lengths) <= high + 1, (env_id, lengths)
        assert low <= sum(lengths) / len(lengths) <= high


@pytest.mark.parametrize(("env_id", "options"), SETTINGS)
def test_afterstates_match_the_real_transition(env_id, options):
    """Each predicted afterstate = the describe function on the states actually visited."""
    rng = random.Random(1)
    bound = legal_bound(env_id, options)
    for episode in range(6):
        env = envs.make(env_id, **options)
        _, info = env.reset(seed=episode)
        done = False
        while not done:
            assert len(info["legal_actions"]) <= bound
            index = rng.randrange(len(info["legal_actions"]))
            action = info["legal_actions"][index]
            predicted = info["afterstates"][index]
            before = env.state
            _, reward, terminated, truncated, info = env.step(action)
            assert predicted == describe_outcome(env.rules, before, env.state)
            assert (predicted == "nothing changes") == (env.state == before)
            assert ("you win" in predicted) == info["won"]
            assert ("you lose" in predicted) == info["lost"]
            assert (f"(+{int(reward)} point" in predicted) == (reward > 0)
            done = terminated or truncated


@pytest.mark.parametrize("env_id", ["keydoor", "crafting"])
def test_info_only_actions_change_nothing(env_id):
    env = envs.make(env_id)
    _, info = env.reset(seed=0)
    for action in ("look", "inventory"):
        index = info["legal_actions"].index(action)
        assert info["afterstates"][index] == "nothing changes"
        before = env.state
        obs, reward, _, _, info = env.step(action)
        assert env.state == before and reward == 0.0
        assert obs


@pytest.mark.parametrize(("env_id", "options"), SETTINGS[2::3])
def test_heldout_games_differ_from_train_games(env_id, options):
    def layouts(split: str) -> list:
        env = envs.make(env_id, split=split, **options)
        keys = []
        for game_seed in range(30):
            env.game_seed = game_seed
            env.reset(seed=0)
            keys.append(env.rules.layout_key())
        return keys

    train, heldout = layouts("train"), layouts("heldout")
    assert len(set(train)) >= 28 and len(set(heldout)) >= 28
    assert not set(train) & set(heldout)


@pytest.mark.parametrize("env_id", ["keydoor", "crafting"])
def test_games_are_deterministic_given_the_game_seed(env_id):
    a = envs.make(env_id, game_seed=4)
    b = envs.make(env_id, game_seed=4)
    obs_a, info_a = a.reset(seed=1)
    obs_b, info_b = b.reset(seed=99)  # the env seed only matters when sampling games
    assert (obs_a, info_a) == (obs_b, info_b)
    assert a.rules.layout_key() == b.rules.layout_key()
    pool = envs.make(env_id, num_games=3)
    seeds = {pool.reset(seed=s)[1]["game_seed"] for s in range(40)}
    assert seeds == {0, 1, 2}


def test_walkthrough_is_a_fresh_list():
    env = envs.make("keydoor", game_seed=0)
    _, info = env.reset(seed=0)
    info["walkthrough"].clear()
    assert env.reset(seed=0)[1]["walkthrough"]


def test_keydoor_wrong_key_does_nothing_and_max_score():
    for seed in range(10):
        rules = KeyDoorRules(seed, size=5, keys=2, distractors=0)
        assert rules.max_score == 5
        door = rules.doors[0]
        wrong = next(k for k in rules.key_names if k != door.key)
        state = KeyDoorState(room=min(door.rooms), held=rules.key_names)
        after, feedback = rules.apply(state, f"unlock {door.name} with {wrong}")
        assert after == state and "does not fit" in feedback
        after, feedback = rules.apply(state, f"unlock {door.name} with {door.key}")
        assert after.unlocked == {0} and rules.score(after) == 3
        assert describe_outcome(rules, state, after) == (
            f"the {door.name} will be unlocked (+1 point)"
        )


def test_crafting_wrong_processing_and_early_make_lose():
    saw_wrong = saw_early = False
    for seed in range(40):
        env = envs.make("crafting", rooms=1, steps=2, distractors=0, game_seed=seed)
        _, info = env.reset(seed=0)
        rules = env.rules
        state = env.state
        for action in info["walkthrough"]:
            for other in rules.legal_actions(state):
                after, _ = rules.apply(state, other)
                if other.startswith("make") and not rules.won(after):
                    assert rules.lost(after) and "you lose" in describe_outcome(rules, state, after)
                    saw_early = True
                if other.split()[0] in ("slice", "fry", "roast") and rules.lost(after):
                    assert "ruined" in describe_outcome(rules, state, after)
                    saw_wrong = True
            state, _ = rules.apply(state, action)
        if saw_wrong and saw_early:
            break
    assert saw_wrong and saw_early
    # losing through the env: terminated, lost, no reward
    env = envs.make("crafting", rooms=1, steps=1, distractors=0, game_seed=0)
    _, info = env.reset(seed=0)
    _, _, _, _, info = env.step(info["walkthrough"][0])  # take the ingredient
    losing = [a for a, s in zip(info["legal_actions"], info["afterstates"]) if "you lose" in s]
    _, reward, terminated, _, info = env.step(losing[0])
    assert terminated and info["lost"] and not info["won"] and reward == 0.0


def test_cross_option_checks_say_how_to_fix():
    with pytest.raises(ValueError, match="keys=3 needs size >= 4"):
        envs.make("keydoor", size=3, keys=3)
    with pytest.raises(ValueError, match="lower distractors or raise size"):
        envs.make("keydoor", size=2, keys=1, distractors=4)


def test_step_limit_defaults_to_twice_the_optimal_length():
    env = envs.make("keydoor", size=12, keys=3, distractors=8, game_seed=0)
    _, info = env.reset(seed=0)
    assert env.max_episode_steps == max(20, 2 * len(info["walkthrough"]))
    assert envs.make("keydoor", max_episode_steps=7).max_episode_steps == 7


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**20),
    size=st.integers(2, 6),
    keys=st.integers(0, 3),
    picks=st.lists(st.integers(0, 30), max_size=30),
)
def test_keydoor_random_walks_stay_legal(seed, size, keys, picks):
    keys = min(keys, size - 1)
    rules = KeyDoorRules(seed, size=size, keys=keys, distractors=2)
    state = rules.initial_state()
    score = 0
    for pick in picks:
        legal = rules.legal_actions(state)
        state, _ = rules.apply(state, legal[pick % len(legal)])
        # the player is always reachable from the start through open doors only
        closed = frozenset(d.rooms for j, d in enumerate(rules.doors) if j not in state.opened)
        assert state.room in room_distances(rules.exits, rules.start, closed)
        assert state.opened <= state.unlocked
        assert score <= rules.score(state) <= rules.max_score
        score = rules.score(state)
        if rules.won(state):
            break


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**20),
    rooms=st.integers(1, 4),
    steps=st.integers(1, 5),
    picks=st.lists(st.integers(0, 30), max_size=30),
)
def test_crafting_random_walks_stay_legal(seed, rooms, steps, picks):
    rules = CraftingRules(seed, rooms=rooms, steps=steps, distractors=2)
    state = rules.initial_state()
    score = 0
    for pick in picks:
        legal = rules.legal_actions(state)
        assert len(set(legal)) == len(legal)
        state, _ = rules.apply(state, legal[pick % len(legal)])
        assert all(len(set(done)) == len(done) for done in state.done)  # no step twice
        assert score <= rules.score(state) <= rules.max_score
        score = rules.score(state)
        if rules.won(state) or rules.lost(state):
            assert rules.won(state) != rules.lost(state)
            break


def test_games_do_not_depend_on_the_python_hash_seed():
    """Rollout workers in other processes must see the same games and action order."""
    script = (
        "import envs\n"
        "for env_id in ('keydoor', 'crafting'):\n"
        "    env = envs.make(env_id)\n"
        "    obs, info = env.reset(seed=3)\n"
        "    print(obs, info)\n"
        "    for action in info['walkthrough']:\n"
        "        print(env.step(action))\n"
    )
    outputs = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        run = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        outputs.add(run.stdout)
    assert len(outputs) == 1
