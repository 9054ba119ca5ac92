"""One process of a multi-process test run (started by tests/test_distributed.py).

Usage: python tests/dist_worker.py RUN_DIR RECORD_DIR CONFIG_JSON|resume

Reads RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT like under torchrun, trains
(or resumes) RUN_DIR, and records into RECORD_DIR what the tests compare: the
episodes of iteration 1 (per rank), what each rank holds of a gathered FSDP
checkpoint and how much storage its resumed optimizer state keeps, and the first reduced gradient (rank 0), taken
right before the first optimizer step -- after DDP's / FSDP2's reduction in the
backward or the explicit one, whichever the run uses (sharded gradients gathered).
With RLID_TEST_DIE_IN_BACKWARD=R, rank R exits (code 9) at its first backward. A run
stopped by SIGTERM exits with 143 (after recording that it left its group).
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
from pathlib import Path

import torch

from rlid.baselines.token import train as token_trainer
from rlid.config import TrainConfig
from rlid.core import train as trainer
from rlid.core.loop import run_training
from rlid.lm import distributed, optim
from rlid.runs.stop import RunStopped


def main() -> int:
    faulthandler.enable()  # a native crash (segfault, abort) prints the Python stack
    # a run that hangs: the test sends SIGUSR1 before killing it, for every thread's stack
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    run_dir, record, spec = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    record.mkdir(parents=True, exist_ok=True)
    rank = int(os.environ.get("RANK", "0"))
    real_play, real_step = trainer.play_groups, optim.Stepper.step
    recorded: list[bool] = []

    def play(ctx, env_list, policy, iteration, episodes_of, round_=0):
        episodes = real_play(ctx, env_list, policy, iteration, episodes_of, round_)
        if iteration == 1 and round_ == 0:
            rows = [
                {"group": e.group, "seed": e.reset_seed, "actions": [d.action for d in e.decisions]}
                for e in episodes
            ]
            (record / f"episodes_rank{rank}.json").write_text(json.dumps(rows))
        return episodes

    def step(self):
        if not recorded:  # every rank: gathering a sharded gradient is a collective
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
            grads = [g.full_tensor() if hasattr(g, "full_tensor") else g.clone() for g in grads]
            recorded.append(True)
            if rank == 0:
                torch.save(grads, record / "grad.pt")
        return real_step(self)

    if os.environ.get("RLID_TEST_DIE_IN_BACKWARD") == str(rank):
        # this rank dies at its first backward (the others then fail inside theirs)
        def dying(self, loss, weight=1.0):
            os._exit(9)

        optim.Stepper.backward = dying  # type: ignore[method-assign]
    real_full_state = distributed.Parallel.full_state

    def full_state(self, optimizer):
        # what each rank holds of a gathered FSDP checkpoint (the writer alone keeps it)
        model_state, optimizer_state = real_full_state(self, optimizer)
        held = {"model": len(model_state or {}), "optimizer": optimizer_state is not None}
        (record / f"full_state_rank{rank}.json").write_text(json.dumps(held))
        return model_state, optimizer_state

    distributed.Parallel.full_state = full_state  # type: ignore[method-assign]
    real_load_optimizer = distributed.Parallel.load_optimizer

    def load_optimizer(self, optimizer, state):
        # resumed optimizer state: whether it came still on disk (read one tensor at a
        # time), and how much storage each sharded tensor keeps alive, in units of its
        # own shard (1: it owns just its shard)
        from rlid.runs.state import StoredTensor

        lazy = [isinstance(v, StoredTensor) for e in state["state"].values() for v in e.values()]
        real_load_optimizer(self, optimizer, state)
        ratios = [
            local.untyped_storage().nbytes() / max(local.numel() * local.element_size(), 1)
            for entry in optimizer.state.values()
            for v in entry.values()
            if hasattr(v, "to_local") and (local := v.to_local()).numel()
        ]
        held = {"lazy": bool(lazy) and all(lazy), "storage": ratios}
        (record / f"resumed_optimizer_rank{rank}.json").write_text(json.dumps(held))

    distributed.Parallel.load_optimizer = load_optimizer  # type: ignore[method-assign]
    trainer.play_groups = play
    token_trainer.play_groups = play
    optim.Stepper.step = step  # type: ignore[method-assign]
    code = 0
    try:
        if spec == "resume":
            run_training(None, run_dir, resume=True, progress=False)
        else:
            run_training(
                TrainConfig.from_record(json.loads(spec)), run_dir, resume=False, progress=False
            )
    except RunStopped as stopped:  # SIGTERM / Ctrl-C: as `rlid train` reports it
        print(f"rank {rank}: {stopped}", file=sys.stderr)
        code = stopped.exit_code
    # the group is gone before the process exits (left to the exit, gloo can abort there)
    left = {"initialized": torch.distributed.is_initialized()}
    (record / f"group_after_rank{rank}.json").write_text(json.dumps(left))
    return code


if __name__ == "__main__":
    from rlid.lm.distributed import exit_process, in_multi_process_run

    code = main()
    if in_multi_process_run():  # as `python -m rlid` ends one of several processes
        exit_process(code)
    sys.exit(code)
