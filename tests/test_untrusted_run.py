"""A run directory is untrusted input: links in it are refused, never followed; its
weights and records are checked against their digests; damage is refused or repaired,
and nothing outside the directory is ever read into it or written."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from rlid.cli import main as cli_main
from rlid.config import TrainConfig
from rlid.core import train as trainer_mod
from rlid.menus import Interface

TINY_ENV = {"size": 2, "keys": 0, "distractors": 1, "max_episode_steps": 6}
TRAIN = ["--model", "tiny-random", "--env", "keydoor", "-o", "size=2", "-o", "keys=0",
         "-o", "distractors=1", "--steps", "8", "--groups-per-iter", "2", "--group-size", "2",
         "--epochs", "1", "--threads", "1", "--eval-episodes", "1", "--memory", "none",
         "--quiet"]  # fmt: skip


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.delenv("RLID_DEBUG", raising=False)


def small_config(**changes) -> TrainConfig:
    base = dict(
        model="tiny-random", env="keydoor", env_options=dict(TINY_ENV), steps=24,
        groups_per_iter=2, group_size=2, epochs=1, minibatch_size=8, eval_episodes=1,
        threads=1, checkpoint_every=1, advantage="gae", interface=Interface(memory="none"),
    )  # fmt: skip
    base.update(changes)
    return TrainConfig(**base)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """One small finished run (GAE: a value head too), copied by the tests that change it."""
    out = tmp_path_factory.mktemp("finished") / "run"
    trainer_mod.train(small_config(), out, progress=False)
    return out


def copy_run(run: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "run"
    shutil.copytree(run, dest, symlinks=True)
    (dest / ".rlid.lock").unlink(missing_ok=True)
    return dest


def tree(root: Path) -> dict[str, bytes | str]:
    """Everything under ``root``: file contents, link targets (to see nothing changed);
    lock files aside."""
    found: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.name == ".rlid.lock" and not path.is_symlink():
            continue
        if path.is_symlink():
            found[key] = "-> " + os.readlink(path)
        elif path.is_file():
            found[key] = path.read_bytes()
    return found


@pytest.fixture
def outside(tmp_path) -> Path:
    """A directory outside any run, holding a file someone cares about."""
    place = tmp_path / "outside"
    place.mkdir()
    (place / "precious.txt").write_text("precious\n")
    return place


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith(("note:", "WARN"))]
    assert len(lines) == 1, err
    return lines[0]


# ------------------------------------------------------------- 1. no write through a link
def test_a_lock_link_in_a_new_out_is_refused_and_its_target_kept(tmp_path, outside, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / ".rlid.lock").symlink_to(outside / "precious.txt")
    before = tree(outside)
    assert cli_main(["train", *TRAIN, "--out", str(out)]) == 2
    assert "symbolic link" in one_line(capsys)
    assert tree(outside) == before
    assert sorted(p.name for p in out.iterdir()) == [".rlid.lock"]  # nothing written


def test_a_lock_link_in_a_run_to_resume_is_refused_and_its_target_kept(
    finished_run, tmp_path, outside, capsys
):
    run = copy_run(finished_run, tmp_path)
    (run / ".rlid.lock").symlink_to(outside / "precious.txt")
    before, run_before = tree(outside), tree(run)
    assert cli_main(["train", "--resume", str(run), "--quiet"]) == 2
    assert "symbolic link" in one_line(capsys)
    # refused also when the resume is refused for another reason (a flag it cannot change)
    assert cli_main(["train", "--resume", str(run), "--lr", "0.5", "--quiet"]) == 2
    one_line(capsys)
    assert tree(outside) == before and tree(run) == run_before


def test_a_hard_linked_lock_is_refused(tmp_path, outside, capsys):
    out = tmp_path / "run"
    out.mkdir()
    os.link(outside / "precious.txt", out / ".rlid.lock")
    assert cli_main(["train", *TRAIN, "--out", str(out)]) == 2
    assert "hard link" in one_line(capsys)
    assert (outside / "precious.txt").read_text() == "precious\n"


def test_a_lock_link_in_a_comparison_out_is_refused(tmp_path, outside, capsys):
    config = tmp_path / "c.toml"
    config.write_text(
        'name = "t"\nseeds = [0]\nheldout_episodes = 1\n'
        'budget = {currency = "env_steps", amount = 8}\ninterface = {memory = "none"}\n'
        "defaults = {groups_per_iter = 2, group_size = 2, epochs = 1, threads = 1, "
        'model = "tiny-random"}\n'
        'envs = [{id = "keydoor", options = {size = 2, keys = 0, distractors = 1}}]\n'
        '[arms.decision]\nplane = "decision"\n'
    )
    out = tmp_path / "out"
    out.mkdir()
    (out / ".rlid.lock").symlink_to(outside / "precious.txt")
    before = tree(outside)
    assert cli_main(["compare", "--config", str(config), "--out", str(out), "--quiet"]) == 2
    assert "symbolic link" in one_line(capsys)
    assert tree(outside) == before


def test_a_checkpoint_link_pointing_outside_is_refused(finished_run, tmp_path, capsys):
    run = copy_run(finished_run, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    shutil.move(run / "checkpoint", elsewhere)
    (run / "checkpoint").symlink_to(elsewhere)
    before, run_before = tree(elsewhere), tree(run)
    for argv in (
        ["train", "--resume", str(run), "--steps", "40", "--quiet"],
        ["eval", "--run", str(run), "--episodes", "1"],
        ["export", str(run), str(tmp_path / "agent")],
    ):
        assert cli_main(argv) == 2, argv
        line = one_line(capsys)
        assert "checkpoint is a symbolic link" in line, line
    assert tree(elsewhere) == before and tree(run) == run_before
    assert not list(run.glob(".checkpoint.*")) and not (tmp_path / "agent").exists()


def test_a_metrics_link_is_never_appended_to(finished_run, tmp_path, outside, capsys):
    run = copy_run(finished_run, tmp_path)
    shutil.copy(run / "metrics.jsonl", outside / "metrics.jsonl")
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").symlink_to(outside / "metrics.jsonl")
    before = tree(outside)
    assert cli_main(["train", "--resume", str(run), "--steps", "40", "--quiet"]) == 2
    assert "metrics.jsonl is a symbolic link" in one_line(capsys)
    assert tree(outside) == before


def test_appending_and_locking_refuse_a_link_planted_after_the_checks(tmp_path, outside):
    from rlid.runs.files import LinkRefusedError, append_line
    from rlid.runs.lock import RunLock

    (tmp_path / "metrics.jsonl").symlink_to(outside / "precious.txt")
    with pytest.raises(LinkRefusedError, match="symbolic link"):
        append_line(tmp_path / "metrics.jsonl", "{}")
    (tmp_path / ".rlid.lock").symlink_to(outside / "precious.txt")
    with pytest.raises(LinkRefusedError, match="symbolic link"):
        RunLock(tmp_path, "test").acquire()
    assert (outside / "precious.txt").read_text() == "precious\n"


def test_a_staging_link_left_in_a_run_is_removed_not_followed(finished_run, tmp_path, outside):
    from rlid.runs import dir as rundir

    run = copy_run(finished_run, tmp_path)
    (outside / "dir").mkdir()
    (outside / "dir" / "keep").write_text("x")
    (run / ".checkpoint.old.123").symlink_to(outside / "dir")
    before = tree(outside)
    with pytest.raises(ValueError, match="symbolic link"):  # refused while resuming
        rundir.refuse_run_links(run)
    rundir.recover_checkpoint_dir(run, tidy=True)  # a clean-up removes the link itself
    assert not (run / ".checkpoint.old.123").is_symlink()
    assert tree(outside) == before


def test_an_out_that_is_itself_a_link_still_works(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert cli_main(["train", *TRAIN, "--out", str(tmp_path / "link")]) == 0
    assert (real / "checkpoint" / "state.json").is_file()


# ------------------------------------------------------- 3. weights verified on load
def flip_bit(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))


def test_every_file_of_a_checkpoint_has_its_sha256_recorded(finished_run):
    ckpt = finished_run / "checkpoint"
    state = json.loads((ckpt / "state.json").read_text())
    on_disk = {
        p.relative_to(ckpt).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in ckpt.rglob("*")
        if p.is_file() and p.name != "state.json"
    }
    assert {"model/model.safetensors", "trainer_state.safetensors", "value_head.safetensors",
            "trainer_state.json", "model/config.json"} <= set(on_disk)  # fmt: skip
    assert state["files"] == on_disk


def test_a_bit_flipped_in_the_weights_is_refused_by_resume_eval_and_export(
    finished_run, tmp_path, capsys
):
    run = copy_run(finished_run, tmp_path)
    weights = run / "checkpoint" / "model" / "model.safetensors"
    flip_bit(weights, weights.stat().st_size - 1000)  # in the data, past the header
    before = tree(run)
    for argv in (
        ["train", "--resume", str(run), "--quiet"],
        ["eval", "--run", str(run), "--episodes", "1"],
        ["export", str(run), str(tmp_path / "agent")],
    ):
        assert cli_main(argv) == 2, argv
        line = one_line(capsys)
        assert f"{weights} does not match the sha256" in line, line
    assert tree(run) == before and not (tmp_path / "agent").exists()


def _as_an_older_checkpoint(run: Path) -> None:
    """Drop the digests, as a checkpoint written before they were recorded."""
    path = run / "checkpoint" / "state.json"
    state = json.loads(path.read_text())
    state.pop("files", None), state.pop("sha256", None)
    path.write_text(json.dumps(state))


def test_non_finite_weights_in_a_checkpoint_are_one_line_naming_them(
    finished_run, tmp_path, capsys
):
    from safetensors.torch import load_file, save_file

    run = copy_run(finished_run, tmp_path)
    _as_an_older_checkpoint(run)  # else the changed file fails its sha256 first
    path = run / "checkpoint" / "model" / "model.safetensors"
    weights = load_file(str(path))
    name = sorted(weights)[-1]
    weights[name].view(-1)[0] = float("nan")
    save_file(weights, str(path), metadata={"format": "pt"})
    for argv in (
        ["train", "--resume", str(run), "--steps", "60", "--quiet"],
        ["eval", "--run", str(run), "--episodes", "1"],
    ):
        assert cli_main(argv) == 2, argv
        line = one_line(capsys)
        assert "not finite" in line and name in line and "internal error" not in line, line


def test_a_checkpoint_state_with_a_field_of_the_wrong_type_is_named(finished_run, tmp_path, capsys):
    run = copy_run(finished_run, tmp_path)
    (run / "checkpoint" / "state.json").write_text('{"iteration": "x", "budget": {}}')
    assert cli_main(["train", "--resume", str(run), "--quiet"]) == 2
    line = one_line(capsys)
    assert "not a valid checkpoint state (iteration must be a whole number" in line, line
    assert "different config" not in line


def test_a_changed_record_is_refused_not_taken_at_its_word(finished_run, tmp_path, capsys):
    run = copy_run(finished_run, tmp_path)
    raw = json.loads((run / "config.json").read_text())
    raw["start_model"]["origin"] = "warm"  # outside the config's fingerprint
    (run / "config.json").write_text(json.dumps(raw))
    assert cli_main(["eval", "--run", str(run), "--episodes", "1"]) == 2
    assert "config.json was changed after rlid wrote it" in one_line(capsys)


# ------------------------------------------------------- 6. nothing lost silently on resume
def _rows(run: Path) -> list[dict]:
    from rlid.runs.dir import read_metrics

    return read_metrics(run)


@pytest.mark.parametrize("damage", ["emptied", "removed", "cut short", "bit flipped"])
def test_a_resume_rebuilds_lost_metrics_rows_from_the_checkpoint_and_says_so(
    finished_run, tmp_path, capsys, damage
):
    run = copy_run(finished_run, tmp_path)
    rows = _rows(run)
    path = run / "metrics.jsonl"
    if damage == "emptied":
        path.write_text("")
    elif damage == "removed":
        path.unlink()
    elif damage == "cut short":
        path.write_text("".join(path.read_text().splitlines(keepends=True)[:1]))
    else:
        text = path.read_text()
        path.write_text(text.replace('"iteration": 1', '"iteration": 3', 1))
    assert cli_main(["train", "--resume", str(run), "--steps", "40", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert f"{path} " in err and f"rebuilt iterations 1-{len(rows)} from" in err, err
    after = _rows(run)
    assert [r["iteration"] for r in after] == list(range(1, len(after) + 1))
    assert len(after) > len(rows) and after[: len(rows)] == rows
    assert cli_main(["train", "--resume", str(run), "--steps", "60", "--quiet"]) == 0
    assert "rebuilt" not in capsys.readouterr().err  # a whole history is left alone


@pytest.mark.parametrize("damage", ["removed", "bit flipped"])
def test_a_resume_rebuilds_a_lost_eval_json_from_the_checkpoint(
    finished_run, tmp_path, capsys, damage
):
    run = copy_run(finished_run, tmp_path)
    before = json.loads((run / "eval.json").read_text())["before"]
    if damage == "removed":
        (run / "eval.json").unlink()
    else:
        text = (run / "eval.json").read_text()
        (run / "eval.json").write_text(text.replace('"episodes": 1', '"episodes": 9', 1))
    assert cli_main(["train", "--resume", str(run), "--quiet"]) == 0
    assert "eval.json" in capsys.readouterr().err
    evals = json.loads((run / "eval.json").read_text())
    assert evals["before"] == before and "after" in evals  # the final one ran again


def test_a_checkpoint_without_a_copy_refuses_a_resume_that_would_lose_rows(
    finished_run, tmp_path, capsys
):
    run = copy_run(finished_run, tmp_path)
    _as_an_older_checkpoint(run)
    (run / "checkpoint" / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").write_text("")
    assert cli_main(["train", "--resume", str(run), "--steps", "40", "--quiet"]) == 2
    line = one_line(capsys)
    assert "metrics.jsonl holds the rows of 0 of the" in line and "keeps no copy" in line, line


def test_a_checkpoint_swapped_in_while_it_is_verified_is_verified_again(
    finished_run, tmp_path, monkeypatch
):
    # rlid eval and export take no lock: a training run may publish its next checkpoint
    # between their reading state.json and hashing the files it lists
    from rlid.runs import dir as rundir

    run = copy_run(finished_run, tmp_path)
    older = tmp_path / "older-checkpoint"
    shutil.copytree(run / "checkpoint", older)
    assert cli_main(["train", "--resume", str(run), "--steps", "40", "--quiet"]) == 0
    newer = tmp_path / "newer-checkpoint"
    shutil.move(run / "checkpoint", newer)
    shutil.move(older, run / "checkpoint")  # the reader starts on the older one
    real, calls = rundir.verify_files, []

    def swapped_meanwhile(root, digests, *, record, **kw):
        calls.append(1)
        if len(calls) == 1:
            shutil.rmtree(run / "checkpoint")
            shutil.move(newer, run / "checkpoint")
        return real(root, digests, record=record, **kw)

    monkeypatch.setattr(rundir, "verify_files", swapped_meanwhile)
    state = rundir.verify_checkpoint(run / "checkpoint")
    assert len(calls) == 2 and state["iteration"] == _rows(run)[-1]["iteration"]


def test_extending_a_run_whose_eval_json_is_damaged_rebuilds_it(finished_run, tmp_path, capsys):
    run = copy_run(finished_run, tmp_path)
    before = json.loads((run / "eval.json").read_text())["before"]
    (run / "eval.json").write_text("{")
    assert cli_main(["train", "--resume", str(run), "--steps", "40", "--quiet"]) == 0
    assert "eval.json is damaged: rebuilt from" in capsys.readouterr().err
    evals = json.loads((run / "eval.json").read_text())
    assert evals["before"] == before and "after" in evals
