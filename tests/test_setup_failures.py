"""A failed setup leaves nothing: a new run refused before its first iteration (an env
option its game refuses, found once the first game is made) removes what it wrote, so
the corrected command starts instead of finding a directory that "already holds files".
Env options that would do nothing are refused."""

from __future__ import annotations

import pytest

from rlid.cli import main as cli_main
from rlid.config import TrainConfig
from rlid.runs.log import RunLog

TRAIN = ["train", "--model", "tiny-random", "--env", "keydoor", "-o", "size=2", "-o", "keys=0",
         "--steps", "8", "--groups-per-iter", "2", "--group-size", "2", "--epochs", "1",
         "--threads", "1", "--eval-episodes", "1", "--memory", "none", "--quiet"]  # fmt: skip


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.delenv("RLID_DEBUG", raising=False)


@pytest.mark.parametrize("made_first", [False, True])
def test_a_setup_refused_after_the_directory_was_written_leaves_nothing(
    tmp_path, monkeypatch, capsys, made_first
):
    out = tmp_path / "run"
    if made_first:
        out.mkdir()  # an empty directory the user made: kept, empty
    real = RunLog.write_origin

    def refused(self, *args, **kwargs):
        real(self, *args, **kwargs)
        raise ValueError("twx-coin: game_seed 5000 is not a game of the train split")

    monkeypatch.setattr(RunLog, "write_origin", refused)
    assert cli_main([*TRAIN, "--out", str(out)]) == 2
    assert "game_seed 5000" in capsys.readouterr().err
    assert (list(out.iterdir()) == []) if made_first else not out.exists()
    monkeypatch.setattr(RunLog, "write_origin", real)
    assert cli_main([*TRAIN, "--out", str(out)]) == 0, capsys.readouterr().err
    assert (out / "checkpoint" / "state.json").is_file()


def test_a_run_stopped_after_its_first_iteration_is_kept(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    real = RunLog.append_metrics

    def then_refused(self, row):
        real(self, row)
        raise ValueError("refused after an iteration")

    monkeypatch.setattr(RunLog, "append_metrics", then_refused)
    assert cli_main([*TRAIN, "--out", str(out)]) == 2
    assert (out / "config.json").is_file() and (out / "metrics.jsonl").read_text()


@pytest.mark.parametrize("value", ["validation", "7", "heldout"])
def test_a_split_env_option_that_would_do_nothing_is_refused(tmp_path, capsys, value):
    out = tmp_path / "run"
    assert cli_main([*TRAIN, "-o", f"split={value}", "--out", str(out)]) == 2
    assert "split" in capsys.readouterr().err
    assert not out.exists()
    with pytest.raises(ValueError, match="split"):
        TrainConfig(model="tiny-random", env="keydoor", env_options={"split": "heldout"})
