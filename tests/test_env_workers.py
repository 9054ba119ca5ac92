"""Envs in worker processes: same episodes as in-process, loud failures, clean shutdown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from rlid import envs
from rlid.core.env_workers import WorkerEnvs
from rlid.core.rollout import Sampling, collect_episodes
from rlid.menus import Interface

OPTIONS = {"size": 2}


class _RandomPolicy:
    """A seeded policy over legal actions (no model: the test is about the envs)."""

    def act(self, observations, infos, memory_texts, *, rng, generator, greedy, temperature):
        from types import SimpleNamespace

        return [
            SimpleNamespace(
                action=info["legal_actions"][int(rng.integers(len(info["legal_actions"])))]
            )
            for info in infos
        ]


def _episodes(env_batch):
    seeds = [11, 11, 12, 12, 13, 13]
    episodes = collect_episodes(
        env_batch, _RandomPolicy(), seeds, [0, 0, 1, 1, 2, 2], interface=Interface(),
        sampling=Sampling(np.random.default_rng(0), torch.Generator().manual_seed(0)),
    )  # fmt: skip
    return [
        ([d.action for d in e.decisions], e.rewards, e.won, e.max_score, e.states) for e in episodes
    ]


def test_workers_play_the_same_episodes_as_in_process():
    in_process = _episodes([envs.make("keydoor", **OPTIONS) for _ in range(6)])
    with WorkerEnvs("keydoor", OPTIONS, count=6, workers=2) as pool:
        assert len(set(pool.pids)) == 2
        in_workers = _episodes(pool)
        # list-like use: a slice is a view of the same workers, [i] one env
        assert len(pool[:3]) == 3
        obs, info = pool[1].reset(seed=11)
        assert obs == envs.make("keydoor", **OPTIONS).reset(seed=11)[0]
    assert in_workers == in_process
    assert sum(len(actions) for actions, *_ in in_process) > 6  # the episodes had steps
    # a state key per decision; a group's episodes (one game, one reset seed) start in
    # one state, other games elsewhere
    assert all(len(states) == len(actions) for actions, *_, states in in_process)
    firsts = [states[0] for *_, states in in_process]
    assert firsts[0] == firsts[1] and firsts[2] == firsts[3] and firsts[0] != firsts[2]


def test_an_env_error_in_a_worker_names_env_and_seed():
    with WorkerEnvs("keydoor", OPTIONS, count=2, workers=2) as pool:
        pool.reset_many([0, 1], [5, 6])
        with pytest.raises(RuntimeError, match=r"#1 \(keydoor.*reset seed 6\)"):
            pool.step_many([0, 1], ["look", 123])  # type: ignore[list-item]
        # the pool still works after a reported error
        assert len(pool.step_many([0], [pool.reset_many([0], [5])[0][1]["legal_actions"][0]])) == 1


def test_a_dead_worker_is_a_clear_error():
    with WorkerEnvs("keydoor", OPTIONS, count=2, workers=2) as pool:
        pool.reset_many([0, 1], [5, 6])
        os.kill(pool.pids[1], signal.SIGKILL)
        time.sleep(0.2)
        with pytest.raises(RuntimeError, match=r"worker 1 .* died .*reset seed 6"):
            pool.step_many([0, 1], ["look", "look"])


def test_bad_env_options_fail_at_start():
    with pytest.raises(RuntimeError, match="could not make keydoor(.|\n)*no_such_option"):
        WorkerEnvs("keydoor", {"no_such_option": 1}, count=1, workers=1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    # a zombie (exited, not yet reaped) is not running
    return not (status.exists() and "State:\tZ" in status.read_text())


def test_ctrl_c_leaves_no_worker_processes(tmp_path):
    script = textwrap.dedent(
        """
        import sys, time
        from rlid.core.env_workers import WorkerEnvs
        pool = WorkerEnvs("keydoor", {"size": 2}, count=4, workers=2)
        pool.reset_many([0, 1, 2, 3], [1, 2, 3, 4])
        print(" ".join(map(str, pool.pids)), flush=True)
        while True:  # stepping when Ctrl-C arrives
            pool.reset_many([0, 1, 2, 3], [1, 2, 3, 4])
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    # The child gets the default Ctrl-C disposition whatever the test runner's process
    # has (an ignored SIGINT would be inherited across exec and the child would never see it).
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        line = proc.stdout.readline()
        pids = [int(p) for p in line.split()]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "KeyboardInterrupt" in err
    deadline = time.time() + 10
    while time.time() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)


def test_training_with_env_workers_matches_in_process(tmp_path):
    from rlid.config import TrainConfig
    from rlid.core.train import train

    common = dict(env="keydoor", env_options=OPTIONS, steps=40, groups_per_iter=2,
                  group_size=2, eval_episodes=2, minibatch_size=8)  # fmt: skip
    plain = train(TrainConfig(**common), tmp_path / "plain", progress=False)
    workers = train(TrainConfig(**common, env_workers=2), tmp_path / "workers", progress=False)
    keys = ("return", "episode_length", "loss", "entropy", "rollout_entropy")
    assert [[r.get(k) for k in keys] for r in workers.metrics] == [
        [r.get(k) for k in keys] for r in plain.metrics
    ]
