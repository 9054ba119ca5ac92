"""``rlid eval --walkthrough``: a menu policy checked state by state along each game's
walkthrough (hand-computed on a scripted game, then end to end on real envs)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from rlid import envs
from rlid.cli.main import main as cli_main
from rlid.config.budget import Budget, Timers
from rlid.core.evaluate import follow_walkthroughs
from rlid.core.seeds import EVAL_SEED_BASE
from rlid.menus import Interface


class _ScriptedGame:
    """Two steps to win: "b" then "c". Legal actions: a, b at the start; a, b, c after
    "b". ``hide`` drops an action from the second state's legal list."""

    def __init__(self, walkthrough: list[str] | None = None, hide: str | None = None) -> None:
        self.walkthrough = ["b", "c"] if walkthrough is None else walkthrough
        self.hide = hide
        self.sent: list[str] = []

    def _info(self, legal: list[str]) -> dict:
        return {"legal_actions": [a for a in legal if a != self.hide or len(self.sent) == 0],
                "walkthrough": self.walkthrough, "won": False, "lost": False}  # fmt: skip

    def reset(self, seed: int):
        self.sent = []
        self.seed = seed
        return "start", self._info(["a", "b"])

    def step(self, action: str):
        self.sent.append(action)
        done = self.sent == ["b", "c"]
        return f"after {action}", float(done), done, False, self._info(["a", "b", "c"])


class _WeightedPolicy:
    """A menu policy whose probabilities are fixed weights over the legal actions
    (a: 1, b: 3, c: 1), renormalised over the menu; greedy = the heaviest row."""

    WEIGHTS = {"a": 1.0, "b": 3.0, "c": 1.0}

    def __init__(self) -> None:
        self.budget, self.timers = Budget(), Timers()
        self.calls = 0

    def act(self, observations, infos, memory_texts, *, rng, generator, greedy, temperature=1.0):
        assert greedy  # the walk asks for the greedy row, as evaluation plays
        self.calls += 1
        decisions = []
        for info in infos:
            rows = tuple(SimpleNamespace(action=a) for a in info["legal_actions"])
            best = max(rows, key=lambda r: self.WEIGHTS[r.action]).action
            decisions.append(SimpleNamespace(action=best, menu=SimpleNamespace(rows=rows)))
        return decisions

    def score(self, decisions):
        width = max(len(d.menu.rows) for d in decisions)
        logp = torch.full((len(decisions), width), float("-inf"))
        for b, d in enumerate(decisions):
            w = torch.tensor([self.WEIGHTS[r.action] for r in d.menu.rows])
            logp[b, : len(w)] = (w / w.sum()).log()
        return logp, torch.ones(len(decisions)), torch.zeros(len(decisions), 1)


def _walk(games, env_count=2, **game_kwargs):
    policy = _WeightedPolicy()
    spent = policy.budget
    stats = follow_walkthroughs(
        policy, [_ScriptedGame(**game_kwargs) for _ in range(env_count)], games,
        interface=Interface(memory="none"),
    )  # fmt: skip
    assert policy.budget is spent  # evaluation is not training spend
    return stats, policy


def test_hand_computed_along_a_two_step_walkthrough():
    stats, policy = _walk(3)  # 3 games over 2 envs: blocks of 2 and 1
    # state 0: menu {a: 1, b: 3}, wanted b: p = 3/4, greedy b (right)
    # state 1: menu {a: 1, b: 3, c: 1}, wanted c: p = 1/5, greedy b (wrong, verb "b")
    assert stats["games"] == 3 and stats["states"] == 6
    assert stats["walkthrough_accuracy"] == pytest.approx(0.5)
    assert stats["walkthrough_prob"] == pytest.approx((0.75 + 0.2) / 2)
    assert stats["uniform_prob"] == pytest.approx((1 / 2 + 1 / 3) / 2)  # menus of 2 and 3 rows
    assert stats["greedy_follows"] == 0.0
    assert stats["sample_follows"] == pytest.approx(0.75 * 0.2)  # product along a game
    assert stats["accuracy_by_step"] == [1.0, 0.0]
    assert stats["wrong_by_verb"] == {"b": 3}
    assert stats["off_menu"] == 0
    assert policy.calls == 4  # two lockstep rounds per block: games of a block share a forward


def test_a_command_missing_from_the_menu_counts_as_wrong_with_probability_zero():
    stats, _ = _walk(2, hide="c")  # the second state's menu lacks the walkthrough's "c"
    assert stats["off_menu"] == 2 and stats["states"] == 4
    assert stats["walkthrough_prob"] == pytest.approx(0.75 / 2)
    assert stats["uniform_prob"] == pytest.approx(1 / 4)  # the missing command: 0 for either
    assert stats["sample_follows"] == 0.0
    assert stats["accuracy_by_step"] == [1.0, 0.0]


def test_a_greedy_policy_on_the_walkthrough_follows_it():
    stats, _ = _walk(2, walkthrough=["b"])  # one step, the policy's favourite
    assert stats["walkthrough_accuracy"] == 1.0 and stats["greedy_follows"] == 1.0
    assert stats["sample_follows"] == pytest.approx(0.75)
    assert stats["wrong_by_verb"] == {}


def test_games_without_walkthroughs_and_bad_counts_are_clear_errors():
    game = _ScriptedGame()
    game.walkthrough = None  # type: ignore[assignment]
    with pytest.raises(ValueError, match="game 0 of this env has no walkthrough"):
        follow_walkthroughs(_WeightedPolicy(), [game], 1, interface=Interface(memory="none"))
    with pytest.raises(ValueError, match="must be >= 1"):
        follow_walkthroughs(_WeightedPolicy(), [_ScriptedGame()], 0, interface=Interface())


@pytest.mark.parametrize("plane", ["decision", "scoring"])
def test_cli_walks_the_games_the_evaluation_plays(plane, capsys):
    options = {"size": 2, "keys": 1, "distractors": 1, "max_episode_steps": 8}
    argv = ["eval", "--model", "tiny", "--plane", plane, "--env", "keydoor", "--episodes", "3",
            "--walkthrough", "--json", *[f"-o{k}={v}" for k, v in options.items()]]  # fmt: skip
    assert cli_main(argv) == 0
    stats = json.loads(capsys.readouterr().out)
    env = envs.make("keydoor", **options, split="heldout")
    lengths = [len(env.reset(seed=EVAL_SEED_BASE + i)[1]["walkthrough"]) for i in range(3)]
    assert stats["states"] == sum(lengths) and len(stats["accuracy_by_step"]) == max(lengths)
    assert stats["env"] == "keydoor" and stats["split"] == "heldout" and stats["off_menu"] == 0
    assert 0.0 <= stats["sample_follows"] <= stats["walkthrough_prob"] <= 1.0
    assert sum(stats["wrong_by_verb"].values()) == round(
        (1 - stats["walkthrough_accuracy"]) * stats["states"]
    )
    # the same call gives the same numbers (the menu shuffles come from the eval seed)
    assert cli_main(argv) == 0
    assert json.loads(capsys.readouterr().out) == stats


def test_cli_refuses_the_token_plane_and_sampling(capsys):
    base = ["eval", "--model", "tiny", "--env", "keydoor", "--episodes", "1", "--walkthrough"]
    assert cli_main([*base, "--plane", "token"]) == 2
    assert "not the token plane" in capsys.readouterr().err
    assert cli_main([*base, "--sample"]) == 2
    assert "drop --sample" in capsys.readouterr().err


@pytest.mark.parametrize("plane", ["decision", "scoring"])
def test_real_policies_are_walked_with_one_forward_per_state(plane, monkeypatch):
    # greedy decisions keep every row's log-prob, so the walk reads p from the forward
    # that chose the row; the numbers are those of scoring the decisions again
    from rlid.config import TrainConfig
    from rlid.config.registry import get_plane
    from rlid.lm.starts import load_policy_model

    model, tokenizer = load_policy_model("tiny-random")
    interface = Interface(memory="none")
    config = TrainConfig.from_dict({"plane": plane, "interface": interface})
    policy = get_plane(plane).make_policy(config, model, tokenizer)
    game = dict(size=2, keys=1, distractors=1, max_episode_steps=8, split="heldout")

    def walk():
        return follow_walkthroughs(
            policy, [envs.make("keydoor", **game) for _ in range(2)], 3, interface=interface
        )

    again = policy.score
    monkeypatch.setattr(policy, "score", lambda *a, **k: pytest.fail("scored twice"))
    one_forward = walk()
    monkeypatch.setattr(policy, "score", again)
    act = policy.act

    def act_without_rows(*args, **kwargs):
        decisions = act(*args, **kwargs)
        for d in decisions:
            d.extra.pop("logp_rows")
        return decisions

    monkeypatch.setattr(policy, "act", act_without_rows)
    scored_again = walk()
    assert one_forward.keys() == scored_again.keys()
    for key, value in one_forward.items():
        assert value == pytest.approx(scored_again[key], rel=1e-6, abs=1e-7), key
