"""Races read through nothing: results are kept in memory and written, never read back
from the run directory mid-run; no file is read through a link (O_NOFOLLOW, checked at
open); nothing is chmod-ed through a link planted in a staging directory."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from rlid.config import TrainConfig
from rlid.core import train as trainer_mod
from rlid.menus import Interface
from rlid.runs import dir as rundir
from rlid.runs.files import LinkRefusedError
from rlid.runs.integrity import seal
from rlid.runs.log import RunLog

TINY_ENV = {"size": 2, "keys": 0, "distractors": 1, "max_episode_steps": 6}
SECRET = "sk-not-for-the-run-directory"


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def _config(**changes) -> TrainConfig:
    base = dict(
        model="tiny-random", env="keydoor", env_options=dict(TINY_ENV), steps=8,
        groups_per_iter=2, group_size=2, epochs=1, minibatch_size=8, eval_episodes=1,
        threads=1, checkpoint_every=1, interface=Interface(memory="none"),
    )  # fmt: skip
    return TrainConfig(**{**base, **changes})


def _private_secret(tmp_path: Path) -> Path:
    secret = tmp_path / "private.json"
    forged = {"before": {"success": 0.0, "return": -99.0}, "secret_api_key": SECRET}
    secret.write_text(json.dumps(seal(forged)))
    os.chmod(secret, 0o600)
    return secret


def test_eval_json_swapped_for_a_link_mid_run_is_neither_read_nor_copied(tmp_path, monkeypatch):
    secret = _private_secret(tmp_path)
    secret_before = secret.read_bytes()
    out = tmp_path / "run"
    real = RunLog.write_eval

    def then_swapped(self, key, stats):
        real(self, key, stats)
        if key == "before":  # mid-run, a link to someone's private file takes its place
            (self.path / "eval.json").unlink()
            (self.path / "eval.json").symlink_to(secret)

    monkeypatch.setattr(RunLog, "write_eval", then_swapped)
    trainer_mod.train(_config(), out, progress=False)
    for path in (out / "eval.json", out / "checkpoint" / "eval.json"):
        assert not path.is_symlink()
        text = path.read_text()
        assert SECRET not in text and "-99" not in text, path
        assert json.loads(text)["before"]["success"] != -99.0
    assert secret.read_bytes() == secret_before
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600


def test_a_link_planted_in_a_checkpoints_staging_directory_is_refused_not_chmod_ed(
    tmp_path, monkeypatch
):
    victim = tmp_path / "victim.txt"
    victim.write_text("private\n")
    os.chmod(victim, 0o600)
    real = rundir.save_state

    def and_a_link(path, obj):
        real(path, obj)
        (Path(path).parent / "planted").symlink_to(victim)

    monkeypatch.setattr(rundir, "save_state", and_a_link)
    out = tmp_path / "run"
    with pytest.raises(LinkRefusedError, match="planted"):
        trainer_mod.train(_config(), out, progress=False)
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert victim.read_text() == "private\n"
    assert not (out / "checkpoint").exists()
    assert not any(p.name.startswith(".checkpoint.") for p in out.iterdir())


@pytest.mark.parametrize("name", ["eval.json", "config.json", "metrics.jsonl"])
def test_records_are_never_read_through_a_link(tmp_path, name):
    real = tmp_path / "real"
    real.write_text(json.dumps({"a": 1}) + "\n")
    (tmp_path / name).symlink_to(real)
    reader = rundir.read_metrics if name == "metrics.jsonl" else None
    with pytest.raises(LinkRefusedError, match="symbolic link"):
        if reader is not None:
            reader(tmp_path)
        else:
            rundir.read_json(tmp_path / name)


def test_a_fifo_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "eval.json"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        rundir.read_json(fifo)
