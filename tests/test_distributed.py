"""Data-parallel training: N processes (gloo, CPU) train exactly like one process.

Each multi-process run starts real processes (tests/dist_worker.py, with the
environment torchrun would give them) under a timeout, so a deadlock fails the
test instead of hanging it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import test_token_trainer
import torch
from safetensors.torch import load_file

from rlid.config.run import TrainConfig, add_config_arguments, config_from_args
from rlid.lm.starts import load_policy_model
from rlid.menus import Interface
from rlid.runs.dir import load_trainer_state, read_metrics

ROOT = Path(__file__).resolve().parents[1]
GAME = test_token_trainer.GAME
commanding_model = test_token_trainer.commanding_model  # a fixture: a model that writes commands
WORKER = Path(__file__).with_name("dist_worker.py")
TINY_ENV = {"size": 2, "keys": 0, "distractors": 1, "max_episode_steps": 6}
TIMEOUT = 240  # seconds for one whole multi-process run on a busy 2-core machine


def config(**changes) -> TrainConfig:
    base = dict(
        env="keydoor",
        env_options=dict(TINY_ENV),
        # the worker processes do not see the tests' small warm-start recipe: a random
        # tiny model keeps them from building the full warm start
        model="tiny-random",
        budget_currency="episodes",
        steps=16,  # 2 iterations of 4 groups x 2 episodes
        groups_per_iter=4,
        group_size=2,
        epochs=1,
        minibatch_size=8,
        eval_episodes=0,
        threads=1,
        dist_timeout=30.0,
        checkpoint_every=1,
        interface=Interface(memory="none"),
    )
    base.update(changes)
    return TrainConfig.from_dict(base)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    # One private model cache, filled before any worker starts (no race between ranks).
    path = tmp_path_factory.mktemp("cache")
    os.environ["RLID_CACHE_DIR"] = str(path)
    load_policy_model("tiny-random")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(
    nproc: int, run_dir: Path, record: Path, spec: str, cache: Path, **extra_env: str
) -> list[subprocess.Popen]:
    port = free_port()
    procs = []
    for rank in range(nproc):
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "OMP_NUM_THREADS": "1",
            "RLID_CACHE_DIR": str(cache),
            **extra_env,
        }
        if nproc > 1:
            env.update(
                RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc),
                MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
            )  # fmt: skip
        procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKER), str(run_dir), str(record), spec],
                env=env,
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
        )
    return procs


def wait(procs: list[subprocess.Popen], timeout: float = TIMEOUT) -> list[str]:
    """Wait for every process (killing all on timeout); return their stderr."""
    deadline = time.monotonic() + timeout
    errs = []
    try:
        for p in procs:
            _, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            errs.append(err)
    except subprocess.TimeoutExpired:
        for p in procs:  # each stuck process prints its threads' stacks (dist_worker.py)
            if p.poll() is None:
                p.send_signal(signal.SIGUSR1)
        time.sleep(2.0)
        stacks = []
        for rank, p in enumerate(procs):
            p.kill()
            err = errs[rank] if rank < len(errs) else p.communicate()[1]  # once per process
            stacks.append(f"--- rank {rank} (exit code {p.returncode}):\n{(err or '')[-4000:]}")
        pytest.fail(
            f"multi-process run did not finish within {timeout:.0f} s (deadlock?)\n"
            + "\n".join(stacks)
        )
    return errs


def run(
    nproc: int, run_dir: Path, cfg: TrainConfig | None, cache: Path, record: Path | None = None
) -> Path:
    record = record or run_dir.with_name(run_dir.name + "-record")
    spec = "resume" if cfg is None else json.dumps(cfg.to_dict())
    procs = start(nproc, run_dir, record, spec, cache)
    errs = wait(procs)
    failed = [
        f"rank {r} failed (exit code {p.returncode}; negative: killed by that signal):\n{e[-3000:]}"
        for r, (p, e) in enumerate(zip(procs, errs))
        if p.returncode
    ]
    assert not failed, "\n".join(failed)
    for rank in range(nproc):  # each process let go of its group before it ended
        left = json.loads((record / f"group_after_rank{rank}.json").read_text())
        assert left == {"initialized": False}, rank
    return record


def episodes(record: Path) -> list[dict]:
    rows = [
        r for f in sorted(record.glob("episodes_rank*.json")) for r in json.loads(f.read_text())
    ]
    return sorted(rows, key=lambda r: (r["group"], r["seed"], r["actions"]))


def params(run_dir: Path) -> dict[str, torch.Tensor]:
    """The checkpoint's trained tensors: the model, or a LoRA run's adapters."""
    adapters = run_dir / "checkpoint" / "model" / "adapter_model.safetensors"
    if adapters.exists():
        return load_file(str(adapters))
    model, _ = load_policy_model(str(run_dir / "checkpoint" / "model"))
    return dict(model.state_dict())


def assert_equivalent(
    one: Path, two: Path, rec_one: Path, rec_two: Path, *, grad_rtol=1e-5, param_atol=1e-4
) -> None:
    # iteration 1: the same games and the same chosen actions
    assert episodes(rec_one) == episodes(rec_two)
    assert len({r["group"] for r in episodes(rec_two)}) == 4
    # each rank played its own groups (g mod 2)
    for rank in (0, 1):
        groups = {
            r["group"] for r in json.loads((rec_two / f"episodes_rank{rank}.json").read_text())
        }
        assert groups == {rank, rank + 2}
    # the first update's gradient
    g1, g2 = torch.load(rec_one / "grad.pt"), torch.load(rec_two / "grad.pt")
    flat1, flat2 = torch.cat([g.flatten() for g in g1]), torch.cat([g.flatten() for g in g2])
    assert flat1.norm() > 0
    assert (flat1 - flat2).norm() <= grad_rtol * flat1.norm()
    # parameters after 2 iterations
    p1, p2 = params(one), params(two)
    assert len(read_metrics(one)) == len(read_metrics(two)) == 2
    for key in p1:
        assert torch.allclose(p1[key], p2[key], rtol=0, atol=param_atol), key
    saved = json.loads((one / "config.json").read_text())["config"]
    if saved.get("lora_rank", 0):  # adapters start with B = 0
        assert any(p.abs().max() > 0 for k, p in p1.items() if "lora_B" in k)
        return
    start, _ = load_policy_model(saved["model"])
    assert any(not torch.equal(p1[k], v) for k, v in start.state_dict().items())


def test_two_processes_train_like_one_decision_plane(tmp_path, cache):
    # blocks of 16 and 4 episodes: one per rank; the position penalty's sums over each
    # minibatch are summed over the ranks; step-level groups stay within a rank's groups
    cfg = config(eval_episodes=20, position_coef=0.5, step_group_coef=1.0)
    rec1 = run(1, tmp_path / "one", cfg, cache)
    rec2 = run(2, tmp_path / "two", cfg, cache)
    assert_equivalent(tmp_path / "one", tmp_path / "two", rec1, rec2)
    # one run directory, written once: budgets are the sums over ranks
    rows1, rows2 = read_metrics(tmp_path / "one"), read_metrics(tmp_path / "two")
    for a, b in zip(rows1, rows2):
        for key in ("env_steps", "episodes", "decisions", "optimizer_steps"):
            assert a["budget"][key] == b["budget"][key], key
        assert a["return"] == pytest.approx(b["return"])
    assert rows2[-1]["budget"]["episodes"] == 16
    assert rows2[-1]["budget"]["env_steps"] == sum(r["episode_length"] * 8 for r in rows2)
    names = sorted(p.name for p in (tmp_path / "two").iterdir())
    assert names == [".rlid.lock", "checkpoint", "config.json", "curves.png", "eval.json",
                     "metrics.jsonl", "summary.md"]  # fmt: skip
    state = load_trainer_state(tmp_path / "two" / "checkpoint")
    assert len(state["rng_ranks"]) == 2
    # held-out evaluation split over the ranks (episodes 0-15 / 16-19) and gathered
    eval1 = json.loads((tmp_path / "one" / "eval.json").read_text())
    eval2 = json.loads((tmp_path / "two" / "eval.json").read_text())
    assert eval2["before"]["episodes"] == 20
    assert eval1["before"] == pytest.approx(eval2["before"])


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_processes_train_like_one_token_plane_dapo(tmp_path, cache, commanding_model, parallel):
    # DAPO: token-mean aggregation, so the normaliser is all ranks' tokens of a minibatch
    cfg = config(
        plane="token", model=commanding_model, env_options=dict(GAME), algo="dapo",
        # DAPO keeps a group only if its task outcomes vary: groups of 4, up to 3 rounds
        group_size=4, steps=64, max_gen_batches=3, max_new_tokens=4, invalid_penalty=-0.5,
        lr=1e-3, parallel=parallel,
    )  # fmt: skip
    rec1 = run(1, tmp_path / "one", cfg, cache)
    rec2 = run(2, tmp_path / "two", cfg, cache)
    assert_equivalent(tmp_path / "one", tmp_path / "two", rec1, rec2)
    rows1, rows2 = read_metrics(tmp_path / "one"), read_metrics(tmp_path / "two")
    for a, b in zip(rows1, rows2):
        for key in ("generated_samples", "used_samples", "filtered_samples", "kept_episodes"):
            assert a[key] == b[key], key
        # the same spend, except forward passes: a minibatch split over 2 ranks is 2 passes
        same = {k: v for k, v in b["budget"].items() if k not in ("wall_time", "forward_passes")}
        assert same == {k: a["budget"][k] for k in same}


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_processes_train_like_one_scoring_plane(tmp_path, cache, parallel):
    # the scoring plane runs each prompt once and its actions on the prompt's KV cache:
    # two forwards of the wrapped model before each backward
    cfg = config(plane="scoring", norm="token", parallel=parallel)
    rec1 = run(1, tmp_path / "one", cfg, cache)
    rec2 = run(2, tmp_path / "two", cfg, cache)
    assert_equivalent(tmp_path / "one", tmp_path / "two", rec1, rec2)


def test_two_processes_train_like_one_fsdp_with_value_head(tmp_path, cache):
    # FSDP2: sharded update (SUM reduce-scatters), gathered rollouts and evaluation, a
    # full checkpoint gathered on rank 0; the value head (advantage="gae") is reduced
    # explicitly beside the sharded model and clipped with it. The position penalty's
    # no-grad pass runs the sharded model too.
    cfg = config(parallel="fsdp", advantage="gae", eval_episodes=4, position_coef=0.5)
    rec1 = run(1, tmp_path / "one", cfg, cache)
    rec2 = run(2, tmp_path / "two", cfg, cache)
    assert_equivalent(tmp_path / "one", tmp_path / "two", rec1, rec2)
    # rank 0 alone holds the gathered checkpoint (model and optimizer state)
    held = [json.loads((rec2 / f"full_state_rank{r}.json").read_text()) for r in (0, 1)]
    assert held[0]["model"] > 0 and held[0]["optimizer"] is True
    assert held[1] == {"model": 0, "optimizer": False}
    ckpt1, ckpt2 = (tmp_path / name / "checkpoint" for name in ("one", "two"))
    assert sorted(p.name for p in (ckpt2 / "model").iterdir()) == sorted(
        p.name for p in (ckpt1 / "model").iterdir()
    )  # the same checkpoint format as one process
    v1, v2 = (load_file(str(c / "value_head.safetensors")) for c in (ckpt1, ckpt2))
    for key in v1:
        assert torch.allclose(v1[key], v2[key], rtol=0, atol=1e-4), key
    eval1 = json.loads((tmp_path / "one" / "eval.json").read_text())
    eval2 = json.loads((tmp_path / "two" / "eval.json").read_text())
    assert eval1["after"] == pytest.approx(eval2["after"])


def test_two_processes_train_like_one_fsdp_bf16_checkpointing_kl(tmp_path, cache):
    # what a GPU run of a real model combines: FSDP2, bf16 autocast (float32 master
    # weights), activation checkpointing, a frozen KL reference and micro-batches. A
    # rank's share of a minibatch is a bf16 batch of another shape than one process's,
    # so the gradient agrees to bf16 rounding (measured: 4e-3 relative), not float32's
    cfg = config(
        parallel="fsdp", mixed_precision="bf16", gradient_checkpointing=True, kl_coef=0.1,
        micro_batch_size=3,
    )  # fmt: skip
    rec1 = run(1, tmp_path / "one", cfg, cache)
    rec2 = run(2, tmp_path / "two", cfg, cache)
    assert_equivalent(
        tmp_path / "one", tmp_path / "two", rec1, rec2, grad_rtol=1e-2, param_atol=1e-3
    )
    saved = json.loads((tmp_path / "two" / "config.json").read_text())["config"]
    assert (saved["mixed_precision"], saved["gradient_checkpointing"]) == ("bf16", True)
    assert all(row["kl_ref"] >= 0 for row in read_metrics(tmp_path / "two"))


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_processes_train_like_one_lora(tmp_path, cache, parallel):
    # only the adapters require grad: the wrapper reduces those alone; micro-batches of 3
    # (a rank's share of a minibatch of 8 is 2 micro-batches: DDP's no_sync, then one
    # synchronised backward; FSDP2: the same number of steps on every rank)
    cfg = config(parallel=parallel, lora_rank=2, micro_batch_size=3, lr=1e-3)
    rec1 = run(1, tmp_path / "one", cfg, cache)
    rec2 = run(2, tmp_path / "two", cfg, cache)
    assert_equivalent(tmp_path / "one", tmp_path / "two", rec1, rec2)
    assert all("lora_" in key for key in params(tmp_path / "two"))


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_no_deadlock_with_empty_minibatch_shares_and_target_kl(tmp_path, cache, parallel):
    # minibatch_size=1: every minibatch is held by one rank, the other has an empty share
    # (a filler step keeps DDP's / FSDP2's collectives matched); a tiny target_kl stops
    # the epoch loop after the second step (all ranks together). The position penalty's
    # no-grad pass before each step takes the same fillers.
    cfg = config(
        minibatch_size=1, epochs=2, target_kl=1e-9, lr=1e-3, parallel=parallel, position_coef=0.5
    )
    run(2, tmp_path / "run", cfg, cache)
    rows = read_metrics(tmp_path / "run")
    assert len(rows) == 2
    total = [r["budget"]["optimizer_steps"] for r in rows]
    steps = [total[0], total[1] - total[0]]
    updated = [(r, n) for r, n in zip(rows, steps) if "skipped_update" not in r]
    assert updated, "no iteration had a learning signal: the test would prove nothing"
    for row, n in updated:
        # the KL after the first step stops the loop at the second, on both ranks at once
        assert row["early_stop"] == 1.0
        assert n == 2


def test_a_failed_collective_inside_a_wrapped_forward_or_backward_says_a_peer_died():
    # FSDP2's reduce-scatters and all-gathers run inside torch's hooks: their failure
    # reaches us as a RuntimeError from backward(), and must carry the "resume" message
    from rlid.lm.distributed import PeerLost, wrapper_collectives

    def fails(err: BaseException) -> None:
        with wrapper_collectives("a reduce-scatter"):
            raise err

    with pytest.raises(
        PeerLost, match="rank .: a reduce-scatter failed: another process .*--resume"
    ):
        fails(RuntimeError("[gloo/transport/tcp/pair.cc:534] Connection closed by peer [::1]:1"))
    with pytest.raises(PeerLost, match="a reduce-scatter failed"):
        fails(torch.distributed.DistBackendError("NCCL communicator was aborted"))
    # DDP's all-reduce fails inside its hook's future callback; torch re-raises it from
    # backward() inside its own words, which still carry the transport's
    with pytest.raises(PeerLost) as caught:
        fails(
            RuntimeError(
                "Got the following error when running the callback: RuntimeError: "
                "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer"
            )
        )
    assert "callback" not in str(caught.value)  # torch's words dropped, the cause kept
    assert "died or stopped answering (RuntimeError: [../third_party/gloo" in str(caught.value)
    # anything else is the user's or torch's error, unchanged
    for other in (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), ValueError("x")):
        with pytest.raises(type(other)) as caught:
            fails(other)
        assert caught.value is other
    with wrapper_collectives("nothing"):
        pass


def test_a_cuda_machine_joins_with_nccl_for_cuda_tensors_and_gloo_for_cpu_ones(monkeypatch):
    # every iteration all-reduces float64 counts held on the CPU (budget, group sizes,
    # position sums) and gathers pickled objects: nccl alone cannot reduce a CPU
    # tensor, so the group pairs gloo (CPU) with nccl (CUDA)
    import torch.distributed as dist

    from rlid.lm import distributed as dist_

    calls: dict = {}
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(dist_, "_MADE_HERE", False)
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: calls.update(device=index))
    monkeypatch.setattr(
        dist, "init_process_group", lambda backend, timeout: calls.update(backend=backend)
    )
    monkeypatch.setattr(dist, "get_rank", lambda: 1)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    world = dist_.init(30.0)
    assert calls == {"device": 1, "backend": "cpu:gloo,cuda:nccl"}
    assert (world.rank, world.size) == (1, 2)


def test_an_indexed_cuda_device_is_refused_with_several_processes():
    from rlid.lm.distributed import World

    with pytest.raises(ValueError, match="all 2 processes on one GPU.*--device cuda"):
        World(rank=1, size=2).check_device("cuda:0")
    for device in ("cuda", "auto", "cpu"):
        World(rank=1, size=2).check_device(device)
    World().check_device("cuda:1")  # one process: any GPU


def test_a_process_of_a_multi_process_run_ends_without_teardown_keeping_its_output():
    # native threads left to the interpreter's teardown once aborted a finished rank
    # (SIGABRT): such a process flushes what it wrote and leaves with os._exit
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    script = (
        "import atexit\natexit.register(lambda: print('teardown ran'))\n"
        "print('written', end='')\nfrom rlid.lm.distributed import exit_process\nexit_process(7)"
    )
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (7, "written")  # flushed, no teardown
    # `python -m rlid` as one of two processes: the whole output, the command's code
    one = subprocess.run([sys.executable, "-m", "rlid", "envs"], env=env, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    two = subprocess.run([sys.executable, "-m", "rlid", "envs"], env={**env, "WORLD_SIZE": "2"},
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert one.returncode == two.returncode == 0 and two.stdout == one.stdout != ""


def test_parallel_option_is_recorded_only_when_changed():
    # runs written before --parallel existed keep their config (and fingerprint)
    assert "parallel" not in config().to_dict()
    assert config(parallel="fsdp").to_dict()["parallel"] == "fsdp"
    assert TrainConfig.from_dict(config(parallel="fsdp").to_dict()).parallel == "fsdp"
    with pytest.raises(ValueError, match="choose one of 'ddp', 'fsdp'"):
        config(parallel="zero3")
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    assert config_from_args(parser.parse_args(["--parallel", "fsdp"])).parallel == "fsdp"
    with pytest.raises(ValueError, match="only this process's gradient shard"):
        config(parallel="fsdp", mixed_precision="fp16", device="cpu")


def test_groups_must_divide_among_processes(tmp_path, cache):
    procs = start(
        2,
        tmp_path / "run",
        tmp_path / "rec",
        json.dumps(config(groups_per_iter=3).to_dict()),
        cache,
    )
    errs = wait(procs)
    assert all(p.returncode != 0 for p in procs)
    assert "must be divisible by the number of processes (2)" in errs[0]


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_killed_rank_fails_the_others_and_resume_matches(tmp_path, cache, parallel):
    # fsdp: the checkpoint's model and optimizer state were gathered from the shards
    # and are cut into shards again on resume
    cfg = config(steps=24, parallel=parallel)  # 3 iterations
    run(2, tmp_path / "full", cfg, cache)

    procs = start(2, tmp_path / "killed", tmp_path / "rec", json.dumps(cfg.to_dict()), cache)
    deadline = time.monotonic() + TIMEOUT
    while len(read_metrics(tmp_path / "killed")) < 2:
        assert time.monotonic() < deadline and procs[0].poll() is None, "run never got going"
        time.sleep(0.2)
    procs[1].send_signal(signal.SIGKILL)
    start_wait = time.monotonic()
    errs = wait(procs, timeout=90)
    assert procs[0].returncode != 0
    assert time.monotonic() - start_wait < 90
    assert "another process of this run died" in errs[0]
    assert "--resume" in errs[0]

    resumed = run(2, tmp_path / "killed", None, cache, record=tmp_path / "resumed")
    for rank in (0, 1):  # the optimizer state came still on disk, read a tensor at a time;
        # fsdp: each rank's state tensors are its shards, not views of full tensors
        held = json.loads((resumed / f"resumed_optimizer_rank{rank}.json").read_text())
        assert held["lazy"], rank
        if parallel == "fsdp":
            assert held["storage"] and max(held["storage"]) == 1.0, (rank, held["storage"])
    a, b = params(tmp_path / "full"), params(tmp_path / "killed")
    for key in a:
        assert torch.equal(a[key], b[key]), key
    strip = lambda rows: [{k: v for k, v in r.items() if k not in ("time", "budget")} for r in rows]  # noqa: E731
    assert strip(read_metrics(tmp_path / "full")) == strip(read_metrics(tmp_path / "killed"))


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_a_rank_dying_before_its_backward_fails_the_other_in_its_backward_with_peer_lost(
    tmp_path, cache, parallel
):
    # rank 1 exits at its first backward: rank 0's next collective is the wrapper's own
    # (DDP's all-reduce hook, FSDP2's reduce-scatter), inside backward()
    procs = start(2, tmp_path / "run", tmp_path / "rec", json.dumps(config(parallel=parallel).to_dict()),
                  cache, RLID_TEST_DIE_IN_BACKWARD="1")  # fmt: skip
    errs = wait(procs, timeout=TIMEOUT)
    assert procs[1].returncode == 9
    assert procs[0].returncode != 0
    last = errs[0].strip().splitlines()[-1]  # what rank 0 stopped with
    assert "PeerLost: rank 0: " in last and "callback" not in last, errs[0][-3000:]
    assert "another process of this run died" in last and "--resume" in last
    assert ("backward (DDP)" if parallel == "ddp" else "FSDP2") in last


def test_resume_with_another_number_of_processes_is_refused(tmp_path, cache):
    run(1, tmp_path / "run", config(steps=8), cache)
    procs = start(2, tmp_path / "run", tmp_path / "rec2", "resume", cache)
    errs = wait(procs)
    assert all(p.returncode != 0 for p in procs)
    assert "written by a run of 1 process(es) and this one has 2" in errs[0]


def test_sigterm_to_one_rank_stops_every_rank_after_the_same_checkpointed_iteration(
    tmp_path, cache
):
    # a preemption notice may reach one process first (and twice: from the cluster and
    # from torchrun): the flag is all-reduced at each iteration's end, so both ranks
    # checkpoint the same iteration, leave their group and exit 143; the resume then
    # ends where an uninterrupted run does
    cfg = config(steps=32, checkpoint_every=100)  # 4 iterations; no periodic checkpoint
    run(2, tmp_path / "full", cfg, cache)

    record = tmp_path / "rec"
    procs = start(2, tmp_path / "stopped", record, json.dumps(cfg.to_dict()), cache)
    deadline = time.monotonic() + TIMEOUT
    while len(read_metrics(tmp_path / "stopped")) < 1:
        assert time.monotonic() < deadline and procs[0].poll() is None, "run never got going"
        time.sleep(0.05)
    procs[1].send_signal(signal.SIGTERM)
    procs[1].send_signal(signal.SIGTERM)  # delivered twice (the cluster, then torchrun): one stop
    errs = wait(procs)
    assert [p.returncode for p in procs] == [143, 143], errs
    rows = read_metrics(tmp_path / "stopped")
    iteration = json.loads((tmp_path / "stopped" / "checkpoint" / "state.json").read_text())[
        "iteration"
    ]
    assert iteration == rows[-1]["iteration"] < 4
    assert "stopping after this iteration" not in errs[1]  # announced by the writer only
    for rank in range(2):
        assert f"rank {rank}: " in errs[rank] and "stopped by SIGTERM after iteration" in errs[rank]
        left = json.loads((record / f"group_after_rank{rank}.json").read_text())
        assert left == {"initialized": False}, rank

    run(2, tmp_path / "stopped", None, cache)
    a, b = params(tmp_path / "full"), params(tmp_path / "stopped")
    for key in a:
        assert torch.equal(a[key], b[key]), key
