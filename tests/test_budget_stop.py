"""``--steps N`` stops at N env steps: an iteration starts no group once the budget is
reached (the episodes in flight are finished), and the summary says so."""

from __future__ import annotations

import pytest

from rlid.config import TrainConfig
from rlid.core import train as trainer_mod
from rlid.menus import Interface
from rlid.runs.dir import read_metrics

TINY_ENV = {"size": 2, "keys": 0, "distractors": 1, "max_episode_steps": 6}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def config(**changes) -> TrainConfig:
    base = dict(
        model="tiny-random", env="keydoor", env_options=dict(TINY_ENV), steps=5,
        groups_per_iter=4, group_size=2, epochs=1, minibatch_size=8, eval_episodes=0,
        threads=1, interface=Interface(memory="none"),
    )  # fmt: skip
    base.update(changes)
    return TrainConfig.from_dict(base)


def test_a_budget_reached_inside_an_iteration_starts_no_further_group(tmp_path):
    """5 env steps with 4 groups of 2 episodes (each at least 1 step): the first group's
    episodes are finished, the next groups are not started while the budget is spent,
    and the summary says what the last iteration played."""
    log = trainer_mod.train(config(), tmp_path / "run", progress=False)
    rows = read_metrics(log.path)
    assert len(rows) == 1  # one iteration: the budget was reached inside it
    budget = rows[-1]["budget"]
    episodes, steps, skipped = budget["episodes"], budget["env_steps"], budget["groups_skipped"]
    assert episodes % 2 == 0 and episodes == 2 * (4 - skipped)  # whole groups only
    assert skipped >= 1 and steps >= 5
    # no group was started after the budget was reached: without the last group played,
    # the budget was not yet reached (each group plays 2 episodes of at most 6 steps)
    assert steps - 2 * 6 < 5
    summary = (log.path / "summary.md").read_text()
    assert "groups_skipped" in summary
    assert f"did not start {skipped} more group(s)" in summary


def test_a_budget_reached_at_an_iteration_end_changes_nothing(tmp_path):
    """An episode budget of one whole iteration: every group is played, none skipped."""
    log = trainer_mod.train(
        config(budget_currency="episodes", steps=8), tmp_path / "run", progress=False
    )
    rows = read_metrics(log.path)
    assert len(rows) == 1
    assert rows[-1]["budget"]["episodes"] == 8
    assert rows[-1]["budget"]["groups_skipped"] == 0
    assert "did not start" not in (log.path / "summary.md").read_text()


def test_groups_to_play_reads_the_runs_spend_per_group():
    """Hand-computed: 40 env steps over 8 episodes in groups of 2 is 10 a group; 15 left
    need 2 groups; nothing left, or no bound known, plays them all; an episode budget
    counts exactly; before any group, a group costs at most 2 x the 6-step limit."""
    from rlid.config.budget import Budget
    from rlid.core.loop import RunContext, groups_to_play

    def ctx(steps: int, currency: str = "env_steps", **spent: int) -> RunContext:
        run = RunContext(config(steps=steps, budget_currency=currency))
        run.budget = Budget(**spent)
        return run

    assert groups_to_play(ctx(55, env_steps=40, episodes=8), 4) == 2
    assert groups_to_play(ctx(41, env_steps=40, episodes=8), 4) == 1
    assert groups_to_play(ctx(500, env_steps=40, episodes=8), 4) == 4
    assert groups_to_play(ctx(11, "episodes", episodes=8), 4) == 2
    assert groups_to_play(ctx(13), 4) == 2  # ceil(13 / (2 x 6))
    assert groups_to_play(ctx(100, "forward_passes"), 4) == 4
