"""The default model is the warm-started one; the run summary says where weights came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from menus import Interface
from rlid.config import TrainConfig
from rlid.runs.summary import write_summary


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def _small(model: str) -> TrainConfig:
    return TrainConfig(
        model=model, env="keydoor",
        env_options={"size": 2, "keys": 0, "distractors": 1, "max_episode_steps": 4},
        steps=8, groups_per_iter=1, group_size=2, epochs=1, minibatch_size=8, eval_episodes=1,
        threads=1, interface=Interface(memory="none"),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("model", "origin", "phrase"),
    [("tiny", "warm", "warm-started tiny model"), ("tiny-random", "fresh", "fresh random")],
)
def test_run_summary_states_the_model_origin_first(tmp_path, model, origin, phrase):
    from rlid import trainer

    log = trainer.train(_small(model), tmp_path / "run", progress=False)
    lines = (Path(log.path) / "summary.md").read_text().splitlines()
    assert lines[2].startswith(f"**Model:** `{model}`") and phrase in lines[2]
    assert (Path(log.path) / "eval.json").read_text().count(f'"model_origin": "{origin}"') == 1


def test_summary_of_an_unknown_origin_says_so(tmp_path):
    path = write_summary(tmp_path, _small("tiny"), [])
    assert "origin unknown" in path.read_text().splitlines()[2]
