"""Counts, sizes and scales are bounded before any work (rlid.config.limits): one line naming
the flag, exit 2, nothing written."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rlid.cli import main as cli_main
from rlid.config import TrainConfig, limits

TRAIN = ["--model", "tiny-random", "--env", "keydoor", "-o", "size=2", "--steps", "8",
         "--groups-per-iter", "2", "--group-size", "2", "--threads", "1", "--eval-episodes",
         "1", "--memory", "none", "--quiet"]  # fmt: skip


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.delenv("RLID_DEBUG", raising=False)


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith(("note:", "WARN"))]
    assert len(lines) == 1, err
    return lines[0]


def refused(capsys, tmp_path: Path, *flags: str) -> str:
    """Train with ``flags`` on top of a tiny run: refused at once, nothing written."""
    out = tmp_path / "run"
    start = time.perf_counter()
    assert cli_main(["train", *TRAIN, *flags, "--out", str(out)]) == 2
    assert time.perf_counter() - start < 30
    assert not out.exists()
    return one_line(capsys)


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--groups-per-iter", "1000000000"], "--groups-per-iter 1000000000 is out of range"),
        (["--groups-per-iter", "40000"], "--groups-per-iter 40000 x --group-size 2"),
        (["--group-size", "1000000"], "--group-size 1000000 is out of range: from 1 to 1,024"),
        (["--threads", "100000"], "--threads 100000 is out of range: from 1 to 4,096"),
        (["--temperature", "1e308"], "--temperature 1e+308 is outside [0.001, 1000.0]"),
        (["--seed", "-1"], "--seed -1 is out of range"),
        (["--seed", "1180591620717411303424"], "--seed 1180591620717411303424 is out of range"),
        (["--dist-timeout", "1e300"], "--dist-timeout 1e+300 is more than 604800 seconds"),
        (["--steps", str(10**30)], f"--steps {10**30} is out of range"),
        (
            ["--memory-size", str(10**9)],
            "--memory-size 1000000000 is out of range: from 0 to 1,024",
        ),
        (["--env-workers", "100000"], "--env-workers 100000 is out of range"),
        (["--env-workers", "4000"], "--env-workers 4000 is more than this machine can use"),
    ],
)
def test_a_count_or_scale_past_its_limit_is_refused_naming_the_flag(capsys, tmp_path, flags, named):
    line = refused(capsys, tmp_path, *flags)
    assert named in line, line


def test_threads_are_bounded_by_this_machines_cores(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "usable_cores", lambda: 2)
    line = refused(capsys, tmp_path, "--threads", "9")
    assert "at most 4 x its 2 usable CPU core(s) = 8" in line, line


def test_the_collected_batch_is_estimated_against_available_memory(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "available_memory", lambda: 4 * 1024**3)
    # 2 x 2 episodes of up to 10000 steps, 64 KiB a decision: 2.4 GiB > half of 4 GiB
    line = refused(capsys, tmp_path, "-o", "max_episode_steps=10000")
    assert "about 2.4 GiB of decisions per iteration" in line and "4.0 GiB" in line, line
    capsys.readouterr()
    assert cli_main(["train", *TRAIN, "-o", "max_episode_steps=6", "--out",
                     str(tmp_path / "fits")]) == 0  # fmt: skip


def test_eval_seed_is_checked(capsys):
    assert cli_main(["eval", "--model", "tiny-random", "--seed", "-1"]) == 2
    assert "--seed -1 is out of range" in one_line(capsys)


def test_a_recorded_thread_count_too_large_here_is_refused_on_resume(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    monkeypatch.setattr(limits, "usable_cores", lambda: 2)
    assert cli_main(["train", *TRAIN, "--threads", "5", "--out", str(out)]) == 0
    monkeypatch.setattr(limits, "usable_cores", lambda: 1)  # resumed on a smaller machine
    capsys.readouterr()
    assert cli_main(["train", "--resume", str(out), "--steps", "16", "--quiet"]) == 2
    assert "--threads 5 is more than this machine can use" in one_line(capsys)
    assert cli_main(["train", "--resume", str(out), "--steps", "16", "--threads", "1",
                     "--quiet"]) == 0  # fmt: skip


def test_limits_hold_for_configs_built_in_code():
    base = dict(model="tiny-random", env="keydoor")
    with pytest.raises(ValueError, match="seed"):
        TrainConfig(**base, seed=2**32)
    TrainConfig(**base, seed=2**32 - 1)
    with pytest.raises(ValueError, match="episodes per iteration"):
        TrainConfig(**base, groups_per_iter=65_537, group_size=2)
    TrainConfig(**base, groups_per_iter=32_768, group_size=2)
    with pytest.raises(ValueError, match="temperature"):
        TrainConfig(**base, temperature=1e-4)


@pytest.mark.parametrize(
    ("flags", "named"),
    [(["--threads", "4000"], "--threads 4000 is more than this machine can use"),
     (["--threads", "100000"], "--threads 100000 is out of range"),
     (["--seed", "-1"], "--seed -1 is out of range")],
)  # fmt: skip
def test_pretrain_checks_its_threads_and_seed_before_any_work(tmp_path, capsys, flags, named):
    out = tmp_path / "model"
    argv = ["pretrain", "--envs", "keydoor", "--episodes", "1", "--steps", "1", "--quiet"]
    assert cli_main([*argv, *flags, "--out", str(out)]) == 2
    assert named in one_line(capsys)
    assert not out.exists() and list(tmp_path.iterdir()) == []
