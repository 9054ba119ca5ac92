"""Experiment trackers: flattened keys, budget x-axis, files read back from each backend."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rlid.cli.main import main as cli_main
from rlid.config import TrainConfig
from rlid.config.names import TRACKERS, parse_report_to
from rlid.menus import Interface
from rlid.runs.dir import read_json, read_metrics
from rlid.runs.trackers import RunTrackers, flatten_row

ROWS = [
    {"iteration": 1, "return": 0.5, "skipped": True, "note": "x", "nan": float("nan"),
     "time": {"forward": 1.25}, "budget": {"env_steps": 12, "episodes": 4},
     "eval": {"success": 0.25}},
    {"iteration": 2, "return": 1.0, "time": {"forward": 0.75},
     "budget": {"env_steps": 30, "episodes": 8}},
]  # fmt: skip


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def test_flatten_row_namespaces_numbers_and_drops_the_rest():
    assert flatten_row(ROWS[0]) == {
        "train/iteration": 1.0,
        "train/return": 0.5,
        "train/skipped": 1.0,
        "time/forward": 1.25,
        "budget/env_steps": 12.0,
        "budget/episodes": 4.0,
        "eval/success": 0.25,
    }


def test_report_to_parsing_and_errors():
    assert parse_report_to("tensorboard, wandb") == ("tensorboard", "wandb")
    assert parse_report_to(["mlflow", "mlflow"]) == ("mlflow",)
    assert parse_report_to("none") == parse_report_to(None) == ()
    assert parse_report_to("all") == TRACKERS
    with pytest.raises(ValueError, match="unknown tracker 'tensorbord'.*tensorboard"):
        parse_report_to("tensorbord")
    assert TrainConfig(report_to="tensorboard").report_to == ("tensorboard",)
    assert "report_to" not in TrainConfig().to_dict()  # old fingerprints unchanged
    assert TrainConfig.from_dict(TrainConfig(report_to="wandb").to_dict()).report_to == ("wandb",)


def test_missing_tracker_package_is_one_clear_line(tmp_path, monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    trackers = RunTrackers(tmp_path, ["wandb"], currency="env_steps")  # reading a run: no check
    with pytest.raises(ValueError, match=r"pip install 'rlid\[wandb\]'"):
        trackers.check()
    out = tmp_path / "run"
    code = cli_main(["train", "--report-to", "wandb", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "rlid[wandb]" in err
    assert not out.exists()  # failed before writing anything


def _scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


def test_tensorboard_events_of_a_training_run_read_back(tmp_path):
    pytest.importorskip("tensorboard", reason="the test extra installs tensorboard")
    from rlid.core import train as trainer

    config = TrainConfig(
        model="tiny-random",  # mixed outcomes: an update (and its loss) every iteration
        env="keydoor", env_options={"size": 2, "keys": 0, "distractors": 1, "max_episode_steps": 6},
        steps=20, groups_per_iter=2, group_size=2, epochs=1, minibatch_size=8, eval_episodes=2,
        eval_every=1, threads=1, interface=Interface(memory="none"), report_to="tensorboard",
    )  # fmt: skip
    log = trainer.train(config, tmp_path / "run", progress=False)
    rows = read_metrics(Path(log.path))
    scalars = _scalars(Path(log.path) / "tensorboard")
    for key in ("train/return", "train/loss", "budget/env_steps", "time/forward", "eval/success"):
        assert key in scalars, (key, sorted(scalars))
    # x-axis = env steps (the budget currency); one point per iteration, values as logged
    steps = [row["budget"]["env_steps"] for row in rows]
    assert [s for s, _ in scalars["train/return"]] == steps
    assert [v for _, v in scalars["train/return"]] == pytest.approx([r["return"] for r in rows])
    # held-out evaluations: before training at 0, every iteration (--eval-every 1), after
    evals = read_json(Path(log.path) / "eval.json")
    assert scalars["eval/success"] == [
        (0, pytest.approx(evals["before"]["success"])),
        *[(r["budget"]["env_steps"], pytest.approx(r["eval"]["success"])) for r in rows],
        (steps[-1], pytest.approx(evals["after"]["success"])),
    ]


def test_tensorboard_resume_purges_replayed_steps(tmp_path):
    pytest.importorskip("tensorboard")
    first = RunTrackers(tmp_path, ["tensorboard"], currency="env_steps")
    for row in ROWS:
        first.log_row(row)
    first.close()
    again = RunTrackers(tmp_path, ["tensorboard"], currency="env_steps", resuming=True)
    again.log_row({**ROWS[1], "return": 2.0})  # iteration 2 replayed after a crash
    again.close()
    assert _scalars(tmp_path / "tensorboard")["train/return"] == [(12, 0.5), (30, 2.0)]


def test_wandb_runs_offline_by_default(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    trackers = RunTrackers(tmp_path, ["wandb"], currency="env_steps", config={"lr": 1e-4})
    for row in ROWS:
        trackers.log_row(row)
    trackers.close()
    import os

    assert os.environ["WANDB_MODE"] == "offline"
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))


def test_mlflow_file_store_reads_back(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    trackers = RunTrackers(tmp_path, ["mlflow"], currency="episodes", config={"lr": 1e-4})
    for row in ROWS:
        trackers.log_row(row)
    trackers.close()
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=(tmp_path / "mlruns").resolve().as_uri())
    (run,) = client.search_runs(experiment_ids=["0"])
    history = client.get_metric_history(run.info.run_id, "train/return")
    assert [(m.step, m.value) for m in history] == [(4, 0.5), (8, 1.0)]  # x-axis: episodes
    assert run.data.params["lr"] == "0.0001"


def test_library_train_fails_before_writing_when_a_tracker_is_missing(tmp_path, monkeypatch):
    from rlid.core import train as trainer

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a)
    )
    config = TrainConfig(
        env="keydoor", env_options={"size": 2}, steps=4, eval_episodes=1, threads=1,
        report_to="mlflow",
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"rlid\[mlflow\]"):
        trainer.train(config, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()
