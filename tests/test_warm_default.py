"""The default model is the shipped warm start; the run summary says where weights came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlid.config import TrainConfig
from rlid.menus import Interface
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
    [
        ("tiny", "shipped", "the shipped warm start"),
        ("tiny-play", "warm", "the random-play warm start"),
        ("tiny-random", "fresh", "fresh random"),
    ],
)
def test_run_summary_states_the_model_origin_first(tmp_path, model, origin, phrase):
    from rlid.core import train as trainer

    log = trainer.train(_small(model), tmp_path / "run", progress=False)
    lines = (Path(log.path) / "summary.md").read_text().splitlines()
    assert lines[2].startswith(f"**Model:** `{model}`") and phrase in lines[2]
    assert (Path(log.path) / "eval.json").read_text().count(f'"model_origin": "{origin}"') == 1


def test_summary_of_an_unknown_origin_says_so(tmp_path):
    path = write_summary(tmp_path, _small("tiny"), [])
    assert "origin unknown" in path.read_text().splitlines()[2]


def test_summary_states_the_prompt_template_and_the_largest_gpu_memory_peak(tmp_path):
    import json

    (tmp_path / "eval.json").write_text(json.dumps({"prompt_template": "chat"}))
    peaks = [1.5, 2.25, None]
    rows = [
        {"iteration": i + 1, "budget": {"env_steps": 8 * (i + 1)}}
        | ({"gpu_memory": {"peak_allocated_gib": p, "peak_reserved_gib": 4.0}} if p else {})
        for i, p in enumerate(peaks)
    ]
    text = write_summary(tmp_path, _small("tiny"), rows).read_text()
    assert "prompt template chat" in text
    assert "peak GPU memory 2.25 GiB allocated (largest iteration)" in text
    assert "GPU memory" not in write_summary(tmp_path, _small("tiny"), rows[2:]).read_text()
