"""Run directories as shared artefacts: no code on load, one writer, honest resume,
non-finite guards, append-only metrics, umask permissions."""

from __future__ import annotations

import fcntl
import json
import math
import os
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from rlid.cli import main as cli_main
from rlid.config import TrainConfig
from rlid.core import train as trainer_mod
from rlid.lm.models import save_policy_model
from rlid.lm.start_files import play_cache_dir
from rlid.lm.starts import load_policy_model
from rlid.menus import Interface
from rlid.runs import dir as rundir
from rlid.runs.lock import RunLock, RunLockedError, recorded_holder
from rlid.runs.log import NonFiniteError, RunLog
from rlid.runs.state import load_state, save_state

TINY_ENV = {"size": 2, "keys": 0, "distractors": 1, "max_episode_steps": 6}
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    # A private cache: "tiny" is then warm-built there from the tests' tiny recipe (conftest).
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def small_config(**changes) -> TrainConfig:
    base = dict(
        # the random start: the shipped one wins these small games from the first
        # iteration, and equal returns leave nothing to learn
        model="tiny-random",
        env="keydoor", env_options=dict(TINY_ENV), steps=24, groups_per_iter=2, group_size=2,
        epochs=1, minibatch_size=8, eval_episodes=2, threads=1, kl_coef=0.1,
        checkpoint_every=1, interface=Interface(memory="none"),
    )  # fmt: skip
    base.update(changes)
    return TrainConfig.from_dict(base)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """One small finished run (written under umask 022), copied by the tests that change it."""
    cache = tmp_path_factory.getbasetemp() / "cache"
    old_env, old_mask = os.environ.get("RLID_CACHE_DIR"), os.umask(0o022)
    os.environ["RLID_CACHE_DIR"] = str(cache)
    try:
        out = tmp_path_factory.mktemp("finished") / "run"
        trainer_mod.train(small_config(), out, progress=False)
    finally:
        os.umask(old_mask)
        if old_env is None:
            del os.environ["RLID_CACHE_DIR"]
        else:
            os.environ["RLID_CACHE_DIR"] = old_env
    return out


def copy_run(run: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "copy"
    shutil.copytree(run, dest)
    (dest / ".rlid.lock").unlink(missing_ok=True)
    return dest


def snapshot(run: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(run)): p.read_bytes()
        for p in sorted(run.rglob("*"))
        if p.is_file() and p.name != ".rlid.lock"
    }


# --------------------------------------------------------------- no code on load
class _Exploit:
    """Unpickling this creates ``marker`` (a stand-in for ``os.system``)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_checkpoint_holds_no_pickle(finished_run):
    ckpt = finished_run / "checkpoint"
    assert (ckpt / "trainer_state.json").is_file()
    assert (ckpt / "trainer_state.safetensors").is_file()
    assert not list(finished_run.rglob("*.pt")) and not list(finished_run.rglob("*.bin"))
    state = rundir.load_trainer_state(ckpt)
    assert state["optimizer"]["state"]  # AdamW moments restored as tensors
    assert isinstance(state["rng"]["numpy"][1], np.ndarray)


def test_a_malicious_pickle_in_a_run_is_never_loaded(finished_run, tmp_path, capsys):
    run = copy_run(finished_run, tmp_path)
    marker = tmp_path / "pwned"
    payload = pickle.dumps({"optimizer": _Exploit(marker), "rng": {}})
    pickle.loads(payload)  # the payload works: loading it the old way would run code
    assert marker.exists()
    marker.unlink()
    ckpt = run / "checkpoint"
    for name in ("trainer_state.json", "trainer_state.safetensors"):
        (ckpt / name).unlink()
    (ckpt / "trainer_state.pt").write_bytes(payload)

    assert cli_main(["train", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert "old pickle format" in err and "python -m rlid.runs.convert" in err
    assert "Traceback" not in err
    assert cli_main(["eval", "--run", str(run), "--episodes", "1"]) == 2
    assert "old pickle format" in capsys.readouterr().err
    assert not marker.exists()
    assert (ckpt / "trainer_state.pt").exists()  # left as it was


def test_state_round_trip_keeps_types(tmp_path):
    obj = {
        "state": {0: {"step": torch.tensor(3.0), "m": torch.randn(2, 3)}},
        "groups": [{"betas": (0.9, 0.999), "params": [0], "lr": 1e-4, "x": None}],
        "odd": [math.inf, -math.inf, True, "s", np.float32(2.5), np.arange(4, dtype=np.uint32)],
        "__dunder": 1,
    }
    save_state(tmp_path / "s", obj)
    back = load_state(tmp_path / "s")
    assert set(back["state"]) == {0}
    assert torch.equal(back["state"][0]["m"], obj["state"][0]["m"])
    assert back["groups"][0]["betas"] == (0.9, 0.999)
    assert back["odd"][:5] == [math.inf, -math.inf, True, "s", 2.5]
    assert back["odd"][5].dtype == np.uint32 and list(back["odd"][5]) == [0, 1, 2, 3]
    assert back["__dunder"] == 1
    with pytest.raises(TypeError, match="plain data"):
        save_state(tmp_path / "bad", {"f": print})
    # lazily: tensors stay on disk, with their shapes, until read
    from rlid.runs.state import StoredTensor, materialize

    lazy = load_state(tmp_path / "s", lazy=True)
    stored = lazy["state"][0]["m"]
    assert isinstance(stored, StoredTensor) and stored.shape == (2, 3)
    assert torch.equal(stored.load(), obj["state"][0]["m"])
    read = materialize(lazy)
    assert torch.equal(read["state"][0]["step"], torch.tensor(3.0))
    assert read["groups"] == back["groups"] and read["odd"][:5] == back["odd"][:5]


# --------------------------------------------------------------- one writer
def test_a_second_writer_fails_at_once_naming_the_holder(finished_run, tmp_path, capsys, hold_lock):
    run = copy_run(finished_run, tmp_path)
    with hold_lock(run, "holder test") as pid:
        before = snapshot(run)
        start = time.perf_counter()
        assert cli_main(["train", "--resume", str(run)]) == 2
        assert time.perf_counter() - start < 20
        err = capsys.readouterr().err
        assert f"pid {pid}" in err and "holder test" in err and "in use" in err
        assert snapshot(run) == before
    # the holder died (kill -9): its lock is gone with it, and its record is taken over
    with RunLock(run, "after"):
        pass
    assert "no longer running" in capsys.readouterr().err


def test_the_recorded_holder_is_the_live_holder_not_a_later_process_on_its_pid(tmp_path, hold_lock):
    with hold_lock(tmp_path, "holder test") as pid:
        held = recorded_holder(tmp_path)
        assert held is not None and held["pid"] == pid and "holder test" in held["text"]
    assert recorded_holder(tmp_path) is None  # killed: its pid names no process
    # a record whose pid is alive but started at another time: the pid was reused
    record = json.loads((tmp_path / ".rlid.lock").read_text())
    assert isinstance(record["pid_start"], int)  # /proc exists here
    mine = {**record, "pid": os.getpid()}
    (tmp_path / ".rlid.lock").write_text(json.dumps({**mine, "pid_start": -1}))
    assert recorded_holder(tmp_path) is None
    live = RunLock(tmp_path / "live", "me").acquire(create=True)
    assert recorded_holder(tmp_path / "live")["pid"] == os.getpid()
    live.release()
    # a record from before start times were kept is taken at its pid
    (tmp_path / ".rlid.lock").write_text(
        json.dumps({k: v for k, v in mine.items() if k != "pid_start"})
    )
    assert recorded_holder(tmp_path)["pid"] == os.getpid()


def test_two_concurrent_trainings_into_one_out(tmp_path):
    out = tmp_path / "shared"
    # tiny-random: a subprocess would build the full warm start (conftest's tiny recipe
    # is this process's only)
    cmd = [sys.executable, "-m", "rlid", "train", "--env", "keydoor", "--quiet",
           "--model", "tiny-random",
           "--steps", "12", "--groups-per-iter", "2", "--group-size", "2", "--epochs", "1",
           "--eval-episodes", "1", "--threads", "1", "--memory", "none", "--out", str(out)]  # fmt: skip
    for k, v in TINY_ENV.items():
        cmd += ["-o", f"{k}={v}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(cmd + ["--seed", str(s)], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for s in (1, 2)
    ]  # fmt: skip
    results = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    loser = next(err for code, err in results if code == 2)
    assert "in use by pid" in loser or "already holds files" in loser
    saved = json.loads((out / "config.json").read_text())
    state = json.loads((out / "checkpoint" / "state.json").read_text())
    assert saved["fingerprint"] == state["fingerprint"]  # one run's files, not a mix
    winner_seed = saved["config"]["seed"]
    assert all(r["iteration"] >= 1 for r in rundir.read_metrics(out))
    assert winner_seed in (1, 2)


def test_a_newer_writer_in_the_same_process_takes_over(tmp_path):
    first = RunLock(tmp_path, "first").acquire()
    second = RunLock(tmp_path, "second").acquire()
    with pytest.raises(RunLockedError, match="taken over"):
        first.check()
    second.check()
    second.release()
    assert (tmp_path / ".rlid.lock").read_text() == ""


def test_a_lock_on_a_file_removed_meanwhile_is_retaken_on_the_new_one(tmp_path, monkeypatch):
    # A finishing holder removes its directory while still holding the lock; a writer
    # that opened the old lock file before that gets its flock on a removed file, which
    # guards nothing: acquire must notice and lock the file the path names now.
    import rlid.runs.lock as lock_mod

    work = tmp_path / "work"
    work.mkdir()
    holder = RunLock(work, "finishing").acquire()
    (work / "progress").mkdir()
    (work / "progress" / "state.json").write_text("{}")
    stale_fd = os.open(work / ".rlid.lock", os.O_RDWR)  # opened before the removal
    holder.remove_directory()
    assert not work.exists() and not holder.held
    work.mkdir()
    real_open, opened = os.open, []

    def open_stale_first(path, flags, mode=0o777):
        opened.append(path)
        return stale_fd if len(opened) == 1 else real_open(path, flags, mode)

    monkeypatch.setattr(lock_mod.os, "open", open_stale_first)
    lock = RunLock(work, "next").acquire()
    monkeypatch.undo()
    assert len(opened) == 2  # the stale file was noticed and the lock retaken
    assert json.loads((work / ".rlid.lock").read_text())["purpose"] == "next"
    probe = os.open(work / ".rlid.lock", os.O_RDWR)  # the path's file is the locked one
    with pytest.raises(BlockingIOError):
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(probe)
    lock.release()


def test_create_makes_the_directory_again_if_it_is_removed_while_locking(tmp_path, monkeypatch):
    # A finishing build removes its work dir (remove_directory) while the next build
    # is between making it and opening its lock file: the open then finds no directory.
    import rlid.runs.lock as lock_mod

    work = tmp_path / "a" / "work"
    real_open, opened = os.open, []

    def remove_before_first_open(path, flags, mode=0o777):
        opened.append(path)
        if len(opened) == 1:
            os.rmdir(work)
        return real_open(path, flags, mode)

    monkeypatch.setattr(lock_mod.os, "open", remove_before_first_open)
    lock = RunLock(work, "next").acquire(create=True)
    monkeypatch.undo()
    assert len(opened) == 2 and lock.held
    assert json.loads((work / ".rlid.lock").read_text())["purpose"] == "next"
    lock.release()
    with pytest.raises(FileNotFoundError):  # without create, a missing directory is an error
        RunLock(tmp_path / "missing", "x").acquire()


def test_start_refuses_a_directory_another_run_filled(tmp_path):
    out = tmp_path / "run"
    log = RunLog.open(out, small_config(), resume=False)
    out.mkdir()
    (out / "config.json").write_text("{}")  # another run got there between open and start
    with pytest.raises(ValueError, match="already holds files"):
        log.start()
    assert (out / "config.json").read_text() == "{}"


# --------------------------------------------------------------- non-finite values
@pytest.mark.parametrize("poison", ["loss", "params"])
def test_non_finite_training_stops_and_keeps_the_last_good_checkpoint(
    tmp_path, monkeypatch, poison
):
    real_update = trainer_mod.ppo_update
    calls = {"n": 0}

    def poisoned(ctx, policy, *args, **kwargs):
        calls["n"] += 1
        metrics = real_update(ctx, policy, *args, **kwargs)
        if calls["n"] == 3:  # after two good checkpoints
            with torch.no_grad():
                for p in policy.model.parameters():
                    p.fill_(math.nan)
            if poison == "loss":
                metrics["loss"] = math.nan
        return metrics

    monkeypatch.setattr(trainer_mod, "ppo_update", poisoned)
    out = tmp_path / "run"
    with pytest.raises(NonFiniteError, match="last good checkpoint \\(iteration 2\\)"):
        trainer_mod.train(small_config(steps=60, kl_coef=0.0), out, progress=False)
    assert json.loads((out / "checkpoint" / "state.json").read_text())["iteration"] == 2
    model, _ = load_policy_model(str(out / "checkpoint" / "model"))
    assert all(torch.isfinite(p).all() for p in model.parameters())
    logged = [r["iteration"] for r in rundir.read_metrics(out)]
    # a NaN loss is never logged; NaN parameters are caught at the checkpoint after a
    # finite loss was logged (a resume drops that row with the others past the checkpoint)
    assert logged == ([1, 2] if poison == "loss" else [1, 2, 3])


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"lr": math.inf}, "'lr'.*finite"),
        ({"ent_coef": math.nan}, "'ent_coef'.*finite"),
        ({"lr": "fast"}, "'lr'.*must be a number"),
        ({"group_size": 2.5}, "'group_size'.*whole number"),
        ({"steps": True}, "'steps'.*whole number"),
        ({"target_kl": math.nan}, "'target_kl'.*finite"),
        ({"env": 3}, "'env'.*string"),
    ],
)
def test_config_values_are_checked_by_type_naming_the_key(changes, key):
    with pytest.raises(ValueError, match=key):
        small_config(**changes)


@pytest.mark.parametrize(
    ("toml", "flags", "key"),
    [
        ("lr = inf\n", [], "'lr'"),
        ("ent_coef = nan\n", [], "'ent_coef'"),
        ('lr = "fast"\n', [], "'lr'"),
        ("group_size = 2.5\n", [], "'group_size'"),
        ("", ["--lr", "nan"], "'lr'"),
        ("", ["--max-grad-norm", "inf"], "'max_grad_norm'"),
    ],
)
def test_train_cli_refuses_non_finite_and_wrong_typed_values(tmp_path, capsys, toml, flags, key):
    path = tmp_path / "c.toml"
    path.write_text(toml)
    out = tmp_path / "run"
    assert cli_main(["train", "--config", str(path), *flags, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert key in err and "Traceback" not in err
    assert not out.exists()


# --------------------------------------------------------------- honest resume
@pytest.mark.parametrize(
    "piece",
    ["state.json", "trainer_state.json", "trainer_state.safetensors", "model/model.safetensors"],
)
def test_resume_with_a_missing_checkpoint_piece_is_an_error(finished_run, tmp_path, capsys, piece):
    run = copy_run(finished_run, tmp_path)
    (run / "checkpoint" / piece).unlink()
    before = snapshot(run)
    assert cli_main(["train", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert "missing" in err and "new run" in err
    assert snapshot(run) == before  # never a silent restart from iteration 1


def test_resume_without_any_checkpoint_after_progress_is_an_error(finished_run, tmp_path, capsys):
    run = copy_run(finished_run, tmp_path)
    shutil.rmtree(run / "checkpoint")
    assert cli_main(["train", "--resume", str(run)]) == 2
    assert "checkpoint is missing" in capsys.readouterr().err


@pytest.mark.parametrize("piece", ["trainer_state.safetensors", "model/model.safetensors"])
def test_a_truncated_safetensors_file_is_a_one_line_error(finished_run, tmp_path, capsys, piece):
    run = copy_run(finished_run, tmp_path)
    path = run / "checkpoint" / piece
    path.write_bytes(path.read_bytes()[:100])
    assert cli_main(["train", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    if piece.startswith("model/"):  # eval reads the model only
        assert cli_main(["eval", "--run", str(run), "--episodes", "1"]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_corrupt_config_json_is_a_one_line_error(finished_run, tmp_path, capsys):
    run = copy_run(finished_run, tmp_path)
    (run / "config.json").write_text('{"config": {"lr": ')
    assert cli_main(["train", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert "config.json is corrupt" in err and "Traceback" not in err


def test_resume_refuses_flags_it_cannot_apply(finished_run, tmp_path, capsys):
    run = copy_run(finished_run, tmp_path)
    before = snapshot(run)
    assert cli_main(["train", "--resume", str(run), "--lr", "5"]) == 2
    err = capsys.readouterr().err
    assert "--lr cannot change" in err and "--steps" in err
    assert cli_main(["train", "--resume", str(run), "--steps", "4"]) == 2
    assert "extend a run, not shorten" in capsys.readouterr().err
    assert cli_main(["train", "--resume", str(run), "-o", "size=3"]) == 2
    assert "--env-options cannot change" in capsys.readouterr().err
    assert snapshot(run) == before


def test_resume_reads_episode_weight_auto_as_the_run_resolves_it(finished_run, tmp_path):
    from rlid.runs.changes import apply_resume_changes

    run = copy_run(finished_run, tmp_path)  # a decision run with group advantages: equal
    before = snapshot(run)
    assert apply_resume_changes(run, {"episode_weight": "auto"}) == {}
    assert apply_resume_changes(run, {"episode_weight": "equal"}) == {}
    with pytest.raises(ValueError, match="--episode-weight cannot change"):
        apply_resume_changes(run, {"episode_weight": "length"})
    # a run 0.2 trained (length, left out of the record): auto would mean equal, a change
    raw = json.loads((run / "config.json").read_text())
    del raw["sha256"]  # records of 0.2 carry no digest of their own
    del raw["config"]["episode_weight"]
    raw["fingerprint"] = _as_written_fingerprint(raw["config"])
    (run / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="--episode-weight cannot change"):
        apply_resume_changes(run, {"episode_weight": "auto"})
    assert apply_resume_changes(run, {"episode_weight": "length"}) == {}
    assert {k: v for k, v in snapshot(run).items() if k != "config.json"} == {
        k: v for k, v in before.items() if k != "config.json"
    }


def test_resume_with_a_larger_steps_extends_the_run(finished_run, tmp_path, capsys):
    run = copy_run(finished_run, tmp_path)
    rows_before = rundir.read_metrics(run)
    after_before = json.loads((run / "eval.json").read_text())["after"]
    more = rows_before[-1]["budget"]["env_steps"] + 20  # past what the run has spent
    assert cli_main(["train", "--resume", str(run), "--steps", str(more), "--quiet"]) == 0
    rows = rundir.read_metrics(run)
    assert len(rows) > len(rows_before) and rows[-1]["budget"]["env_steps"] >= more
    saved = json.loads((run / "config.json").read_text())
    assert saved["config"]["steps"] == more
    (entry,) = saved["history"]
    assert entry["changes"] == {"steps": [24, more]} and entry["previous_after"] == after_before
    assert "after" in json.loads((run / "eval.json").read_text())  # evaluated again
    # the same value again is no change at all
    assert cli_main(["train", "--resume", str(run), "--steps", str(more), "--quiet"]) == 0
    assert len(json.loads((run / "config.json").read_text())["history"]) == 1


def test_resume_refuses_when_the_starting_model_changed(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path / "cache"))  # a private tiny-play
    run = tmp_path / "run"
    # a KL reference: a resume loads the starting model again, so it must be unchanged
    trainer_mod.train(small_config(model="tiny-play", kl_coef=0.1), run, progress=False)
    pin = json.loads((run / "config.json").read_text())["start_model"]
    assert pin["origin"] == "warm" and pin["path"] == str(play_cache_dir().resolve())
    # the random-play start is rebuilt after the run started: "tiny-play" means other weights
    model, tokenizer = load_policy_model("tiny-play")
    with torch.no_grad():
        next(model.parameters()).add_(0.01)
    save_policy_model(model, tokenizer, play_cache_dir())
    assert cli_main(["train", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert "different starting / reference weights" in err and pin["sha256"][:12] in err


# --------------------------------------------------------------- files
def test_metrics_are_appended_not_rewritten(tmp_path):
    log = RunLog.open(tmp_path / "run", small_config(), resume=False)
    log.start()
    log.append_metrics({"iteration": 1, "loss": 0.5})
    inode = (tmp_path / "run" / "metrics.jsonl").stat().st_ino
    log.append_metrics({"iteration": 2, "loss": torch.tensor(0.25)})
    assert (tmp_path / "run" / "metrics.jsonl").stat().st_ino == inode  # same file, appended
    with open(tmp_path / "run" / "metrics.jsonl", "a") as fh:
        fh.write('{"iteration": 3, "lo')  # a kill mid-append
    assert rundir.read_metrics(tmp_path / "run") == [
        {"iteration": 1, "loss": 0.5},
        {"iteration": 2, "loss": 0.25},
    ]
    log.close()


def test_run_files_follow_the_umask(finished_run):
    # finished_run was written under umask 022 (mkstemp / mkdtemp alone give 0600 / 0700)
    for path in [finished_run, *finished_run.rglob("*")]:
        mode = path.stat().st_mode & 0o777
        assert mode == (0o755 if path.is_dir() else 0o644), (path, oct(mode))


def test_a_staged_directory_replaces_the_old_one_only_when_complete(tmp_path):
    from rlid.runs.files import staged_dir

    final = tmp_path / "model"
    final.mkdir()
    (final / "old.txt").write_text("old")
    with pytest.raises(RuntimeError), staged_dir(final) as tmp:
        (tmp / "half.txt").write_text("half")
        raise RuntimeError("killed mid-write")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temp left
    assert [p.name for p in final.iterdir()] == ["old.txt"]  # untouched
    old_mask = os.umask(0o027)
    try:
        with staged_dir(final) as tmp:
            (tmp / "new.txt").write_text("new")
            os.chmod(tmp / "new.txt", 0o600)  # as safetensors writes its files
    finally:
        os.umask(old_mask)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # the old one removed
    assert [p.name for p in final.iterdir()] == ["new.txt"]
    assert final.stat().st_mode & 0o777 == 0o750  # the umask's, not mkdtemp's 0700
    assert (final / "new.txt").stat().st_mode & 0o777 == 0o640
    aside = tmp_path / ".model.previous"
    aside.mkdir()
    (aside / "stale.txt").write_text("stale")
    with staged_dir(final, aside=aside) as tmp:
        (tmp / "newer.txt").write_text("newer")
    assert [p.name for p in aside.iterdir()] == ["new.txt"]  # kept for the caller
    assert [p.name for p in final.iterdir()] == ["newer.txt"]


@pytest.mark.parametrize("swap", [True, False], ids=["exchange", "two-renames"])
def test_a_staged_directory_behaves_the_same_with_or_without_the_atomic_swap(
    tmp_path, monkeypatch, swap
):
    from rlid.runs import files

    if swap and not _can_exchange(tmp_path):
        pytest.skip("this OS or file system cannot swap two paths atomically")
    if not swap:
        monkeypatch.setattr(files, "exchange_paths", lambda a, b: False)
    final, aside = tmp_path / "ckpt", tmp_path / ".ckpt.old"
    for i in range(3):
        with files.staged_dir(final, aside=aside if i == 2 else None) as tmp:
            (tmp / f"v{i}.txt").write_text(str(i))
    assert [p.name for p in final.iterdir()] == ["v2.txt"]
    assert [p.name for p in aside.iterdir()] == ["v1.txt"]  # kept for the caller
    assert sorted(p.name for p in tmp_path.iterdir()) == [".ckpt.old", "ckpt"]  # no temp


def test_a_staged_directory_is_on_disk_before_it_is_published(tmp_path, monkeypatch):
    """A power cut after the rename must not leave empty files: every file and
    directory is fsynced before the swap, and the parent's entries after it."""
    from rlid.runs.files import staged_dir

    final = tmp_path / "ckpt"
    opened: dict[int, str] = {}
    synced: list[tuple[str, bool]] = []  # (path, was final published then)
    real_open, real_fsync = os.open, os.fsync

    def open_(path, flags, *args, **kwargs):
        fd = real_open(path, flags, *args, **kwargs)
        opened[fd] = os.fspath(path)
        return fd

    def fsync(fd):
        synced.append((opened.get(fd, "?"), final.exists()))
        return real_fsync(fd)

    with staged_dir(final) as tmp:
        (tmp / "sub").mkdir()
        (tmp / "sub" / "weights.bin").write_bytes(b"w" * 100)
        (tmp / "state.json").write_text("{}")
        monkeypatch.setattr(os, "open", open_)
        monkeypatch.setattr(os, "fsync", fsync)
    before = {
        Path(p).relative_to(tmp)
        for p, published in synced
        if not published and p.startswith(str(tmp))
    }
    assert before == {Path("."), Path("sub"), Path("sub/weights.bin"), Path("state.json")}
    assert (str(tmp_path), True) in synced  # the parent, after the swap


def _can_exchange(where: Path) -> bool:
    from rlid.runs.files import exchange_paths

    a, b = where / ".probe-a", where / ".probe-b"
    a.mkdir()
    b.mkdir()
    (a / "in-a").touch()
    try:
        ok = exchange_paths(a, b)
        assert not ok or [p.name for p in b.iterdir()] == ["in-a"]
        return ok
    finally:
        shutil.rmtree(a)
        shutil.rmtree(b)


def test_a_reader_always_finds_a_staged_directory_where_the_os_can_swap(tmp_path):
    """Replacing a warm start or checkpoint while another process loads it: with the
    atomic swap the path never goes missing (with two renames it does, for an instant)."""
    import threading

    from rlid.runs.files import staged_dir

    if not _can_exchange(tmp_path):
        pytest.skip("this OS or file system cannot swap two paths atomically")
    final = tmp_path / "model"
    with staged_dir(final) as tmp:
        (tmp / "config.json").write_text("{}")
    missing, done = [], threading.Event()

    def read() -> None:
        while not done.is_set():
            if not (final / "config.json").exists():
                missing.append(1)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(300):
            with staged_dir(final) as tmp:
                (tmp / "config.json").write_text("{}")
    finally:
        done.set()
        reader.join()
    assert not missing
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


@pytest.mark.parametrize("checkpoint_left", [True, False], ids=["after-swap", "between-renames"])
def test_resume_removes_what_a_save_killed_mid_write_left(
    finished_run, tmp_path, monkeypatch, checkpoint_left
):
    """kill -9 or a power cut mid-save leaves a staging directory (a real model's is
    gigabytes); resuming, with the run's lock held, recovers the checkpoint and removes
    the rest."""
    import rlid.runs.log as runlog

    monkeypatch.setattr(runlog, "check_pin", lambda *a: None)  # another test rebuilds "tiny"
    run = copy_run(finished_run, tmp_path)
    kept = snapshot(run / "checkpoint")
    staging = run / ".checkpoint.k9x2ab"
    shutil.copytree(run / "checkpoint", staging)  # a save killed before its swap
    (staging / "model" / "model.safetensors").write_bytes(b"half")
    old = run / ".checkpoint.old.4242"
    if checkpoint_left:  # killed after the swap, before the old one was retired
        shutil.copytree(run / "checkpoint", old)
    else:  # killed between the two renames: only the old one is left
        os.replace(run / "checkpoint", old)
    log = RunLog.open(run, None, resume=True)
    log.close()
    assert log.resuming
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(".checkpoint")) == []
    assert snapshot(run / "checkpoint") == kept


def test_a_pretraining_build_removes_what_a_save_killed_mid_write_left(tmp_path, monkeypatch):
    import rlid.lm.pretrain.build as pretrain_mod

    out = tmp_path / "start"
    work = pretrain_mod.work_dir(out)
    work.mkdir(parents=True)
    for name in (".progress.k9x2ab", ".corpus.k9x2ab"):
        (work / name).mkdir()
        (work / name / "state.json").write_text("{half")
    seen = []
    real_save = pretrain_mod._save_progress

    def save(work_: Path, state) -> None:
        seen.append(sorted(p.name for p in work_.glob(".*k9x2ab")))
        real_save(work_, state)

    monkeypatch.setattr(pretrain_mod, "_save_progress", save)
    config = pretrain_mod.PretrainConfig(
        envs=("keydoor",), episodes_per_env=2, max_episode_steps=3, steps=2, batch_size=4,
        threads=1,
    )  # fmt: skip
    pretrain_mod.pretrain(config, out=out, progress=False, checkpoint_every=1)
    assert seen and seen[0] == []  # gone before the build's first save
    assert (out / "config.json").is_file()


def test_a_link_resolves_to_where_it_points_even_when_dangling(tmp_path):
    from rlid.runs.files import resolve_link

    link = tmp_path / "out"
    link.symlink_to(tmp_path / "elsewhere" / "out")
    assert resolve_link(link) == Path(os.path.realpath(tmp_path)) / "elsewhere" / "out"
    assert resolve_link(tmp_path / "plain") == tmp_path / "plain"


def test_a_run_killed_before_its_first_checkpoint_restarts_cleanly(tmp_path, monkeypatch):
    real_update = trainer_mod.ppo_update

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # in the first iteration: no checkpoint yet

    monkeypatch.setattr(trainer_mod, "ppo_update", killed)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        trainer_mod.train(small_config(steps=8), out, progress=False)
    assert not (out / "checkpoint").exists() and (out / "config.json").exists()
    monkeypatch.setattr(trainer_mod, "ppo_update", real_update)
    trainer_mod.train(None, out, resume=True, progress=False)
    rows = rundir.read_metrics(out)
    assert [r["iteration"] for r in rows] == list(range(1, len(rows) + 1))
    assert json.loads((out / "checkpoint" / "state.json").read_text())["iteration"] == len(rows)


@pytest.mark.parametrize(
    ("restart_git", "weights_known", "kept"),
    [
        ({"commit": "a" * 40, "uncommitted_changes": False}, True, True),  # the same code
        ({"commit": "b" * 40, "uncommitted_changes": False}, True, False),  # other code
        ({"commit": "a" * 40, "uncommitted_changes": True}, True, False),  # code unknown
        ({"commit": "a" * 40, "uncommitted_changes": False}, False, False),  # weights unknown
    ],
)
def test_a_restart_before_the_first_checkpoint_keeps_the_before_eval_of_the_same_code(
    tmp_path, monkeypatch, capsys, restart_git, weights_known, kept
):
    """Killed in iteration 1, the run restarts from scratch; its held-out evaluation of
    the starting model is kept only where the same code would compute it again on the
    same weights (a pin with no sha256, e.g. a warm start not built yet, is not known)."""
    import rlid.core.loop
    import rlid.runs.log as log_mod

    if not weights_known:
        unknown = {"model": "tiny-random", "origin": "warm", "path": None, "sha256": None}
        monkeypatch.setattr(rlid.core.loop, "model_pin", lambda name: unknown)

    real_update, real_evaluate = trainer_mod.ppo_update, rlid.core.loop.HeldOut.evaluate
    evaluated: list[str] = []

    def counted(self, ctx, when):
        evaluated.append(when)
        return real_evaluate(self, ctx, when)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    record = {"rlid": "0", "git": {"commit": "a" * 40, "uncommitted_changes": False}}
    monkeypatch.setattr(log_mod, "software_record", lambda: record)
    monkeypatch.setattr(rlid.core.loop.HeldOut, "evaluate", counted)
    monkeypatch.setattr(trainer_mod, "ppo_update", killed)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        trainer_mod.train(small_config(steps=8), out, progress=False)
    first = json.loads((out / "eval.json").read_text())["before"]
    assert evaluated == ["before"] and not (out / "checkpoint").exists()
    monkeypatch.setattr(trainer_mod, "ppo_update", real_update)
    monkeypatch.setattr(log_mod, "software_record", lambda: {**record, "git": restart_git})
    capsys.readouterr()
    trainer_mod.train(None, out, resume=True, progress=False)
    assert evaluated == (["before", "after"] if kept else ["before", "before", "after"])
    assert ("kept from the start before the restart" in capsys.readouterr().err) == kept
    saved = json.loads((out / "eval.json").read_text())
    assert set(saved) >= {"before", "after"}
    if kept:
        assert saved["before"] == first
    config = json.loads((out / "config.json").read_text())
    assert config["software"]["git"] == restart_git  # what ran this start


def test_kill_9_then_resume_gives_the_uninterrupted_parameters(tmp_path, capsys):
    # tiny-random: the subprocess would otherwise build the full warm start
    flags = ["--model", "tiny-random",
             "--env", "keydoor", "--steps", "80", "--groups-per-iter", "2", "--group-size", "2",
             "--epochs", "1", "--eval-episodes", "1", "--threads", "1", "--memory", "none",
             "--kl-coef", "0.1", "--quiet"]  # fmt: skip
    for k, v in TINY_ENV.items():
        flags += ["-o", f"{k}={v}"]
    assert cli_main(["train", *flags, "--out", str(tmp_path / "full")]) == 0
    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlid", "train", *flags, "--out", str(killed)],
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    state = killed / "checkpoint" / "state.json"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        try:
            if json.loads(state.read_text())["iteration"] >= 2:
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.02)
    proc.kill()  # SIGKILL: no cleanup, the lock record stays behind
    assert proc.wait() == -9, "the run finished before it could be killed"
    capsys.readouterr()
    assert cli_main(["train", "--resume", str(killed), "--quiet"]) == 0
    assert "no longer running" in capsys.readouterr().err  # the stale lock was taken over
    full = load_policy_model(str(tmp_path / "full" / "checkpoint" / "model"))[0].state_dict()
    resumed = load_policy_model(str(killed / "checkpoint" / "model"))[0].state_dict()
    for key, value in full.items():
        assert torch.equal(value, resumed[key]), key


# ------------------------------------------------------- config files of earlier versions
def _as_written_fingerprint(config_dict: dict) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(config_dict, sort_keys=True).encode()).hexdigest()[:16]


def test_a_run_that_recorded_a_field_now_left_out_at_its_default_still_resumes(
    finished_run, tmp_path
):
    # a version that wrote episode_weight = "length" into config.json and fingerprinted that
    # (today a length run leaves it out)
    run = copy_run(finished_run, tmp_path)
    raw = json.loads((run / "config.json").read_text())
    del raw["sha256"]  # such records carried no digest of their own
    raw["config"]["episode_weight"] = "length"
    raw["fingerprint"] = _as_written_fingerprint(raw["config"])
    (run / "config.json").write_text(json.dumps(raw))
    state_path = run / rundir.CHECKPOINT / "state.json"
    state = json.loads(state_path.read_text())
    del state["sha256"]
    state["fingerprint"] = raw["fingerprint"]
    state_path.write_text(json.dumps(state))

    from rlid.runs.log import read_run_config

    config, _ = read_run_config(run)
    assert config.episode_weight == "length"
    trainer_mod.train(None, run, resume=True, progress=False)  # the checkpoint is accepted
    # 0.2 left episode_weight out at its default then, length: such a record reads as
    # length, not as today's default (auto, equal on this plane)
    del raw["config"]["episode_weight"]
    raw["fingerprint"] = _as_written_fingerprint(raw["config"])
    (run / "config.json").write_text(json.dumps(raw))
    config, _ = read_run_config(run)
    assert config.episode_weight == "length" and config.to_dict() == raw["config"]
    # a hand edit is refused as before
    raw["config"]["lr"] = 0.5
    (run / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="different config"):
        read_run_config(run)


def test_run_configs_written_by_0_4_still_read():
    """Run configs written by rlid 0.4.0 (tests/data/runs_0.4: each plane, a flat and a
    label-tree menu, ScienceWorld's options) still parse and match their fingerprints,
    so today's code evaluates, exports and resumes those runs (older records are not
    read: their compatibility code went in 0.5)."""
    from rlid.runs.log import read_run_config

    root = Path(__file__).resolve().parent / "data" / "runs_0.4"
    planes = {}
    for path in sorted(root.glob("*/config.json")):
        raw = json.loads(path.read_text())
        assert raw["software"]["rlid"] == "0.4.0"
        config, _ = read_run_config(path.parent)
        planes[path.parent.name] = config.plane
        assert config.to_dict()["seed"] == raw["config"]["seed"]
    assert sorted(set(planes.values())) == ["decision", "scoring", "token"]


# --------------------------------------------------------------- which code trained a run
def _git(root: Path, *args: str) -> str:
    cmd = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


def test_git_state_names_the_commit_and_whether_tracked_files_changed(tmp_path):
    from rlid.runs.software import git_state

    assert git_state(tmp_path) is None  # not a checkout
    _git(tmp_path, "init", "-q")
    assert git_state(tmp_path) is None  # no commit yet
    (tmp_path / "a.py").write_text("x = 1\n")
    _git(tmp_path, "add", "a.py")
    _git(tmp_path, "commit", "-q", "-m", "one")
    head = _git(tmp_path, "rev-parse", "HEAD")
    assert git_state(tmp_path) == {"commit": head, "uncommitted_changes": False}
    (tmp_path / "new.py").write_text("")  # untracked files are not the code that runs
    assert git_state(tmp_path) == {"commit": head, "uncommitted_changes": False}
    (tmp_path / "a.py").write_text("x = 2\n")
    assert git_state(tmp_path) == {"commit": head, "uncommitted_changes": True}


def test_a_run_records_the_code_that_trained_it_and_each_resume_by_other_code(
    finished_run, tmp_path, monkeypatch
):
    import rlid
    from rlid.runs import log as log_mod
    from rlid.runs.software import describe_software, software_record

    run = copy_run(finished_run, tmp_path)
    raw = json.loads((run / "config.json").read_text())
    assert raw["software"] == software_record() and raw["software"]["rlid"] == rlid.__version__
    assert raw["software"]["torch"] == torch.__version__
    assert raw["software"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert f"trained by {describe_software(software_record())}" in (run / "summary.md").read_text()
    # the recipe's episode weight (auto, resolved) is stated beside the advantage
    assert raw["config"]["episode_weight"] == "equal"
    assert (
        "group advantages, every episode of a group weighing the same"
        in (run / "summary.md").read_text()
    )
    iteration = json.loads((run / rundir.CHECKPOINT / "state.json").read_text())["iteration"]

    trainer_mod.train(None, run, resume=True, progress=False)  # the same code: nothing added
    assert "resumed_with" not in json.loads((run / "config.json").read_text())
    other = {**software_record(), "rlid": "9.9.9"}
    monkeypatch.setattr(log_mod, "software_record", lambda: other)
    trainer_mod.train(None, run, resume=True, progress=False)
    trainer_mod.train(None, run, resume=True, progress=False)  # again by it: one entry
    raw = json.loads((run / "config.json").read_text())
    assert raw["software"] == software_record()  # the start is kept
    assert raw["resumed_with"] == [{"after_iteration": iteration, "software": other}]
    summary = (run / "summary.md").read_text()
    assert "then rlid 9.9.9" in summary and f"(resumed after iteration {iteration})" in summary


def test_run_software_describes_a_run_config_read_once(tmp_path: Path) -> None:
    from rlid.runs.software import describe_software
    from rlid.runs.summary import run_config, run_software

    assert run_config(tmp_path) == {}  # no config.json: nothing recorded, no error
    assert run_software(run_config(tmp_path)) == ["not recorded"]
    start = {"rlid": "0.3.0", "python": "3.11.7", "torch": "2.13.0"}
    later = {**start, "rlid": "9.9.9"}
    raw = {"software": start, "resumed_with": [{"after_iteration": 4, "software": later}]}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    assert run_config(tmp_path) == raw
    expected = [
        describe_software(start),
        f"{describe_software(later)} (resumed after iteration 4)",
    ]
    assert expected[0].startswith("rlid 0.3.0") and expected[1].startswith("rlid 9.9.9")
    assert run_software(run_config(tmp_path)) == expected
    # it describes the config it is given (read once by the caller), not a file
    assert run_software(raw) == expected


# ------------------------------------------------- SIGTERM / Ctrl-C: checkpoint, then stop
def test_stop_signals_defer_the_first_signal_and_stop_at_once_on_the_second(capsys):
    import signal

    from rlid.runs.stop import StopSignals

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with StopSignals(repeat_after=0.0) as stop:
        assert not stop.requested
        signal.raise_signal(signal.SIGINT)  # the process goes on
        assert stop.requested and stop.signum == signal.SIGINT
        assert "stopping after this iteration" in capsys.readouterr().err
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)  # the second one: at once
    assert {s: signal.getsignal(s) for s in before} == before

    # the same stop delivered twice at once (the terminal's group, then torchrun passing
    # it on): the copy is absorbed, the iteration is not lost
    with StopSignals() as stop:
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGTERM)
        assert stop.signum == signal.SIGINT
    assert {s: signal.getsignal(s) for s in before} == before

    with StopSignals() as stop:
        signal.raise_signal(signal.SIGTERM)
        assert stop.signum == signal.SIGTERM
    assert {s: signal.getsignal(s) for s in before} == before
    capsys.readouterr()

    with StopSignals(announce=False) as stop:  # a rank other than the writer
        signal.raise_signal(signal.SIGTERM)
        assert stop.requested
    assert capsys.readouterr().err == ""


def test_stop_signal_hooks_run_on_the_first_signal_and_before_stopping_at_once(capsys):
    # `rlid compare` passes the first stop on to its training processes and kills them
    # on the second; a copy within the repeat window calls neither again
    import signal

    from rlid.runs.stop import StopSignals

    calls = []
    hooks = dict(on_first=lambda s: calls.append(("first", s)),
                 on_again=lambda s: calls.append(("again", s)))  # fmt: skip
    with StopSignals(announce=False, **hooks):
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)  # the same stop, delivered twice
    assert calls == [("first", signal.SIGTERM)]
    calls.clear()
    with StopSignals(announce=False, repeat_after=0.0, **hooks):
        signal.raise_signal(signal.SIGINT)
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    assert calls == [("first", signal.SIGINT), ("again", signal.SIGINT)]
    assert "Ctrl-C again: stopping at once" in capsys.readouterr().err


def test_a_quiet_run_stopped_exits_with_its_code_and_prints_nothing(monkeypatch, capsys):
    import signal

    from rlid.core import loop
    from rlid.runs.stop import RunStopped

    def stopped(*args, **kwargs):  # as a rank other than the writer stops
        raise RunStopped(Path("runs/x"), 3, signal.SIGTERM, quiet=True)

    monkeypatch.setattr(loop, "run_training", stopped)
    assert cli_main(["train", "--model", "tiny-random", "--out", "runs/x", "--quiet"]) == 143
    assert "stopped" not in capsys.readouterr().err


def test_stop_signals_outside_the_main_thread_leave_the_handlers_alone():
    import signal
    import threading

    from rlid.runs.stop import StopSignals

    seen = []

    def body():
        with StopSignals() as stop:
            seen.append((signal.getsignal(signal.SIGTERM), stop.requested))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [(signal.getsignal(signal.SIGTERM), False)]


def test_sigterm_mid_iteration_checkpoints_that_iteration_and_resumes_to_the_same_run(
    tmp_path, monkeypatch, untimed
):
    import signal

    from rlid.runs.stop import RunStopped

    config = small_config(checkpoint_every=100)  # no checkpoint but the stop's and the last
    straight = trainer_mod.train(config, tmp_path / "straight", progress=False)
    assert len(straight.metrics) >= 3
    real_update, calls = trainer_mod.ppo_update, []

    def signalled(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # in iteration 2's update, as a cluster preempting the job
            signal.raise_signal(signal.SIGTERM)
        return real_update(*args, **kwargs)

    monkeypatch.setattr(trainer_mod, "ppo_update", signalled)
    out = tmp_path / "stopped"
    with pytest.raises(RunStopped) as stopped:
        trainer_mod.train(config, out, progress=False)
    assert stopped.value.iteration == 2 and stopped.value.exit_code == 128 + signal.SIGTERM
    assert "after iteration 2, which is checkpointed" in str(stopped.value)
    assert [r["iteration"] for r in rundir.read_metrics(out)] == [1, 2]
    assert json.loads((out / "checkpoint" / "state.json").read_text())["iteration"] == 2
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # handlers restored
    RunLock(out, "test").acquire().release()  # the stopped run released its directory

    monkeypatch.setattr(trainer_mod, "ppo_update", real_update)
    resumed = trainer_mod.train(None, out, resume=True, progress=False)
    assert untimed(resumed.metrics) == untimed(straight.metrics)
    a = load_policy_model(str(straight.checkpoint_model_dir()))[0].state_dict()
    b = load_policy_model(str(resumed.checkpoint_model_dir()))[0].state_dict()
    assert all(torch.equal(v, b[k]) for k, v in a.items())


def test_rlid_train_stopped_by_sigterm_to_its_process_group_exits_143_with_a_checkpoint(
    tmp_path,
):
    # as `scancel` does: SIGTERM to every process of the job, env workers included
    import signal

    out = tmp_path / "run"
    flags = ["--model", "tiny-random", "--env", "keydoor", "--steps", "400",
             "--groups-per-iter", "2", "--group-size", "2", "--epochs", "1",
             "--eval-episodes", "1", "--threads", "1", "--memory", "none",
             "--checkpoint-every", "1000", "--env-workers", "2", "--quiet"]  # fmt: skip
    for k, v in TINY_ENV.items():
        flags += ["-o", f"{k}={v}"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlid", "train", *flags, "--out", str(out)],
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if len(rundir.read_metrics(out)) >= 1:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 143, err
    assert "stopped by SIGTERM after iteration" in err and "Traceback" not in err, err
    rows = rundir.read_metrics(out)
    state = json.loads((out / "checkpoint" / "state.json").read_text())
    assert rows and state["iteration"] == rows[-1]["iteration"] < 400
