"""A refused command writes nothing: ``rlid train --resume R --steps N`` on a run whose
resume is then refused leaves config.json, eval.json and summary.md as they were (it
printed "steps 8 -> 200", rewrote config.json and dropped the "after" evaluation)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from rlid.cli import main as cli_main
from rlid.config import TrainConfig
from rlid.core import train as trainer_mod
from rlid.menus import Interface
from rlid.runs.integrity import seal

TINY_ENV = {"size": 2, "keys": 0, "distractors": 1, "max_episode_steps": 6}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.delenv("RLID_DEBUG", raising=False)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("refused") / "run"
    config = TrainConfig(
        model="tiny-random", env="keydoor", env_options=dict(TINY_ENV), steps=8,
        groups_per_iter=2, group_size=2, epochs=1, minibatch_size=8, eval_episodes=1,
        threads=1, checkpoint_every=1, interface=Interface(memory="none"),
    )  # fmt: skip
    trainer_mod.train(config, out, progress=False)
    return out


def digests(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".rlid.lock"
    }


def _legacy_checkpoint_and_emptied_metrics(run: Path) -> None:
    """A checkpoint keeping no copy of the rows (an earlier version's) and an emptied
    metrics.jsonl: nothing to rebuild the rows from."""
    ckpt = run / "checkpoint"
    (ckpt / "metrics.jsonl").unlink()
    state = json.loads((ckpt / "state.json").read_text())
    state.pop("sha256")
    state["files"].pop("metrics.jsonl")
    (ckpt / "state.json").write_text(json.dumps(seal(state)))
    (run / "metrics.jsonl").write_text("")


def _flipped_weights(run: Path) -> None:
    weights = run / "checkpoint" / "model" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01
    weights.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [_legacy_checkpoint_and_emptied_metrics, _flipped_weights])
def test_a_resume_with_changes_that_is_then_refused_changes_nothing(
    finished_run, tmp_path, capsys, damage
):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    (run / ".rlid.lock").unlink(missing_ok=True)
    damage(run)
    before = digests(run)
    assert cli_main(["train", "--resume", str(run), "--steps", "200", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "-> 200" not in err, err
    assert len([ln for ln in err.strip().splitlines() if ln]) == 1, err
    assert digests(run) == before
    assert "after" in json.loads((run / "eval.json").read_text())
