"""Shared test settings."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# CI machines are shared and slow: no per-example deadline, and a fixed derivation of
# examples so a failure reproduces.
settings.register_profile("rlid", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("rlid")


@pytest.fixture(autouse=True, scope="session")
def _small_play_start_recipe():
    """``--model tiny-play`` builds its start on first use; in tests, from a tiny recipe.

    A non-default recipe has its own cache directory (``rlid.lm.starts.play_cache_dir``),
    so this never replaces a real random-play start in the user's cache. (``tiny``, the
    default, is the shipped start: nothing to build.)
    """
    from rlid.lm import start_files as starts
    from rlid.lm.pretrain import PretrainConfig

    saved = starts.PLAY_RECIPE
    starts.PLAY_RECIPE = PretrainConfig(
        envs=("keydoor",), episodes_per_env=2, max_episode_steps=4, steps=2, batch_size=2,
        threads=1,
    )  # fmt: skip
    yield
    starts.PLAY_RECIPE = saved


MAX_TEST_BUILD_STEPS = 50


@pytest.fixture(autouse=True, scope="session")
def _no_real_warm_start_builds():
    """No test builds a real warm start: the default start is shipped, and the tests of
    the build itself use a tiny recipe. A build of more than MAX_TEST_BUILD_STEPS
    optimizer steps, in this process, fails the test that asked for it."""
    from rlid.lm import starts
    from rlid.lm.pretrain import build

    real = build.pretrain

    def small_only(config, *args, **kwargs):
        assert config.steps <= MAX_TEST_BUILD_STEPS, (
            f"a test started a warm-start build of {config.steps} steps; use the shipped "
            "start (tiny), tiny-random, or a recipe of a few steps"
        )
        return real(config, *args, **kwargs)

    build.pretrain, starts.pretrain = small_only, small_only
    yield
    build.pretrain, starts.pretrain = real, real


@contextlib.contextmanager
def _locked_by_another_process(directory: Path, purpose: str) -> Iterator[int]:
    """Hold ``directory``'s run lock in a child process; yield its pid."""
    root = Path(__file__).resolve().parents[1]
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\nfrom rlid.runs.lock import RunLock\n"
         "RunLock(sys.argv[1], sys.argv[2]).acquire(create=True)\n"
         "print('held', flush=True)\ntime.sleep(120)\n", str(directory), purpose],
        env={**os.environ, "PYTHONPATH": str(root)}, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()


def _untimed_rows(rows: list[dict]) -> list[dict]:
    return [
        {**{k: v for k, v in r.items() if k != "time"},
         "budget": {k: v for k, v in r["budget"].items() if k != "wall_time"}}
        for r in rows
    ]  # fmt: skip


@pytest.fixture
def untimed():
    """``untimed(rows)``: metrics rows less their clocks (the time split, ``wall_time``)."""
    return _untimed_rows


@pytest.fixture
def interrupt_update(monkeypatch):
    """``interrupt_update(n)``: the n-th decision-plane ``ppo_update`` call from now on
    raises ``KeyboardInterrupt`` (a kill in the middle of that iteration);
    ``interrupt_update(0)``: the real update again."""
    from rlid.core import train as trainer

    real = trainer.ppo_update

    def arm(n: int) -> None:
        calls = {"n": 0}

        def dying(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == n:
                raise KeyboardInterrupt
            return real(*args, **kwargs)

        monkeypatch.setattr(trainer, "ppo_update", dying if n else real)

    return arm


@pytest.fixture
def hold_lock():
    """``with hold_lock(DIR, PURPOSE) as pid:`` DIR's run lock is held by process ``pid``."""
    return _locked_by_another_process
