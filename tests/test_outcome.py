"""Reading the predicted outcome back from afterstate texts, and the afterstate reference."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rlid import envs
from rlid.envs.outcome import Outcome, best_rows, read_outcome


@pytest.mark.parametrize(
    "text, expected",
    [
        ("the fish will be sliced (+1 point)", Outcome(1)),
        ("you will be in the garden (+1 point, you win)", Outcome(1, won=True)),
        ("the fish will be ruined (you lose)", Outcome(lost=True)),
        ("you will drop the key (-2 points, you lose)", Outcome(-2, lost=True)),
        ("you will be in the hall (3 doors)", Outcome()),  # a parenthesis, not notes
        ("nothing changes", Outcome()),
        ("you will carry the onion; this scores a point", Outcome(1)),
        ("the meal will be eaten; this scores 2 points; this wins the game", Outcome(2, won=True)),
        ("the knife will be on the floor; this loses the game", Outcome(lost=True)),
        # one command, several game actions: any alternative's marks, the most points
        (
            "either you will carry the onion; this scores a point, or the onion will be "
            "sliced; this scores 3 points (2 game actions share this command)",
            Outcome(3),
        ),
        ("the notes say this scores a point", Outcome()),  # not a clause of its own
    ],
)
def test_read_outcome_hand_checked(text, expected):
    assert read_outcome(text) == expected


def test_read_outcome_inverts_textworlds_wording():
    from rlid.envs.textworld.afterstate import describe_outcome

    for points, won, lost in itertools.product([-1, 0, 1, 2], [False, True], [False, True]):
        outcome = Outcome(points, won, lost)
        suffix = describe_outcome(outcome)
        text = f"you will carry the red apple; {suffix}" if suffix else "you will carry it"
        assert read_outcome(text) == outcome, text


@pytest.mark.parametrize(
    "env_id, options",
    [
        ("keydoor", {"size": 3, "keys": 2, "distractors": 1}),
        ("crafting", {"rooms": 1, "steps": 2, "distractors": 2}),
    ],
)
def test_read_outcome_predicts_the_step_on_built_in_games(env_id, options):
    """The marks the menu shows are what the step then does: reward, win, loss."""
    env = envs.make(env_id, **options)
    rng = np.random.default_rng(0)
    marked = steps = 0
    for game in range(6):
        obs, info = env.reset(seed=game)
        done = False
        while not done:
            row = int(rng.integers(len(info["legal_actions"])))
            predicted = read_outcome(info["afterstates"][row])
            obs, reward, terminated, truncated, info = env.step(info["legal_actions"][row])
            assert predicted == Outcome(int(reward), info["won"], info["lost"])
            marked += predicted != Outcome()
            steps += 1
            done = terminated or truncated
    assert marked >= 3 and steps > marked  # both kinds of step were checked


def test_best_rows_hand_checked():
    assert best_rows(["a", "b (+1 point)", "c (+2 points)", "d (you lose)"]) == [2]
    assert best_rows(["a (+1 point, you win)", "b (+3 points)", "c (+1 point, you win)"]) == [0, 2]
    assert best_rows(["a (you win, you lose)", "b"]) == [1]  # a win that also loses is a loss
    assert best_rows(["a (you lose)", "b (-1 point, you lose)"]) == [0, 1]  # every row loses
    assert best_rows(["a (-1 point)", "b (-2 points)", "c (you lose)"]) == [0]
    assert best_rows(["go north", "go south"]) == [0, 1]
    assert best_rows([]) == []


def test_afterstate_reference_reads_crafting_and_needs_afterstates():
    from rlid.compare.reference import AfterstatePolicy, evaluate_reference
    from rlid.menus import Interface

    options = {"rooms": 1, "steps": 2, "distractors": 2}
    run = dict(episodes=8, seed=0, interface=Interface(memory="none"))
    marks = evaluate_reference("afterstate", "crafting", options, **run)
    floor = evaluate_reference("random", "crafting", options, **run)
    # crafting's menu marks every scoring step and every losing one: reading them wins
    assert marks["success"] == 1.0 and floor["success"] < 0.5
    info = {"legal_actions": ["a", "b"], "afterstates": None}
    with pytest.raises(ValueError, match="computes none"):
        AfterstatePolicy().act(["obs"], [info], [None], rng=np.random.default_rng(0),
                               generator=None)  # fmt: skip
