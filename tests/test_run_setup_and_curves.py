"""What a run shows its user: the resolved configuration as it starts (and in
summary.md), the time left for the whole run, and one figure of what moved."""

from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace

import pytest

from rlid.config import TrainConfig
from rlid.core.progress import RunClock, format_left
from rlid.menus import Interface
from rlid.runs.curves import held_out_series, write_curves
from rlid.runs.summary import setup_lines, write_summary


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def _small(**changes) -> TrainConfig:
    values = dict(
        env="keydoor", env_options={"size": "2", "keys": 0, "distractors": 1, "max_episode_steps": 4},
        steps=8, groups_per_iter=1, group_size=2, epochs=1, minibatch_size=8, eval_episodes=1,
        threads=1, interface=Interface(memory="none"),
    )  # fmt: skip
    return TrainConfig(**{**values, **changes})


def _rows(n: int, *, eval_every: int = 0) -> list[dict]:
    rows = []
    for i in range(1, n + 1):
        row = {"iteration": i, "budget": {"env_steps": 10 * i}, "success": 0.1 * i,
               "return": float(i), "episode_length": 4.0, "rollout_label_mass": 0.9}  # fmt: skip
        if eval_every and i % eval_every == 0:
            row["eval"] = {"success": 0.05 * i, "return": 0.5 * i, "episode_length": 3.0}
        rows.append(row)
    return rows


# ------------------------------------------------------------------------- the setup
def test_setup_lines_say_what_the_run_is_about_to_do(tmp_path):
    start = tmp_path / "start"
    start.mkdir()
    (start / "model.safetensors").write_bytes(b"weights")
    pin = {"model": "tiny", "origin": "shipped", "path": str(start), "sha256": "f" * 64}
    (tmp_path / "config.json").write_text(json.dumps({"start_model": pin}))
    text = "\n".join(setup_lines(tmp_path, _small(eval_every=3)))
    sha = hashlib.sha256(b"weights").hexdigest()  # what `sha256sum` prints
    for expected in (
        f"model: tiny (shipped) {start}, model.safetensors sha256 {sha}",
        "env: keydoor (size=2, keys=0, distractors=1, max_episode_steps=4), seed 0",
        "plane: decision; algorithm: PPO, group advantages",
        "budget: 8 env_steps, 1 games x 2 episodes an iteration",
        "evaluation: 1 held-out episodes (greedy) before and after training and every 3",
        f"output: {tmp_path}",
        "threads: 1; device: cpu (float32, mixed precision none)",
    ):
        assert expected in text, expected
    summary = write_summary(tmp_path, _small(), []).read_text()
    assert "## Setup" in summary and f"model.safetensors sha256 {sha}" in summary


def test_the_setup_is_printed_as_a_run_starts_unless_quiet(tmp_path, capsys):
    from rlid.core import train as trainer

    trainer.train(_small(), tmp_path / "shown", progress=True)
    err = capsys.readouterr().err
    assert "rlid: starting a run with this configuration" in err
    assert "- env: keydoor (size=2, keys=0" in err and f"- output: {tmp_path / 'shown'}" in err
    assert "run left" in err  # the progress bar's estimate for the whole run
    trainer.train(_small(), tmp_path / "quiet", progress=False)
    assert capsys.readouterr().err == ""
    assert "## Setup" in (tmp_path / "quiet" / "summary.md").read_text()


# -------------------------------------------------------------------- the time left
def test_the_time_left_counts_the_evaluations_still_to_come():
    clock = RunClock(SimpleNamespace(steps=100, eval_every=2), iteration=0, spent=0)
    assert clock.left(5.0) is None and format_left(None) == "?"
    clock.record(1, 25, 10.0)  # 25 env steps an iteration, 10 s each
    # 3 iterations left (30 s), evaluations after iterations 2 and 4 and after training
    assert clock.left(5.0) == pytest.approx(30 + 3 * 5)
    assert clock.left(None) == pytest.approx(30)
    assert format_left(45.0) == "~00:45" and format_left(30.0, evaluations=False) == "~00:30 + eval"
    once = RunClock(SimpleNamespace(steps=100, eval_every=0), iteration=0, spent=0)
    once.record(1, 50, 20.0)
    assert once.left(7.0) == pytest.approx(20 + 7)  # the evaluation after training only


# ------------------------------------------------------------------------ the figure
def test_held_out_points_before_periodic_and_after():
    rows = _rows(4, eval_every=2)
    evals = {"before": {"success": 0.0}, "after": {"success": 0.2}}
    xs, ys = held_out_series(rows, evals, "success")
    assert xs == [0.0, 20.0, 40.0] and ys == [0.0, 0.1, 0.2]  # the last periodic one is "after"
    assert held_out_series(rows, {}, "return") == ([20.0, 40.0], [1.0, 2.0])


def test_curves_png_has_the_outcome_row(tmp_path):
    evals = {"before": {"success": 0.0, "return": 0.0, "episode_length": 4.0},
             "after": {"success": 0.5, "return": 2.0, "episode_length": 3.0, "episodes": 8}}  # fmt: skip
    (tmp_path / "eval.json").write_text(json.dumps(evals))
    config = {"env": "keydoor", "plane": "decision", "env_options": {"max_episode_steps": 8}}
    (tmp_path / "config.json").write_text(json.dumps({"config": config}))
    path = write_curves(tmp_path, _rows(5, eval_every=2))
    assert path is not None and path.read_bytes()[:4] == b"\x89PNG"
    assert write_curves(tmp_path, []) is None
