"""Data-parallel scaling: env steps per second, 1 process vs N processes (torchrun).

Trains the same config twice -- one process without a launcher, then N processes
under ``torchrun --nproc-per-node N`` (gloo on CPU, nccl on CUDA) -- each process
with one thread, and prints the training throughput side by side. Throughput is
env steps / wall time of the training iterations, both read from the run's own
budget (start-up, model loading and held-out evaluation are left out; the budget's
wall time of an iteration is the slowest rank's). Efficiency = (rate_N / rate_1) / N.

    python benchmarks/scaling.py [--nproc 2] [--steps 480] [--out /tmp/rlid-scaling]
        [-- extra `rlid train` flags]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rlid.runs.dir import read_metrics

ROOT = Path(__file__).resolve().parents[1]
TRAIN_FLAGS = [
    "--env", "keydoor", "--budget-currency", "env_steps", "--groups-per-iter", "8",
    "--group-size", "4", "--epochs", "1", "--minibatch-size", "32", "--eval-episodes", "0",
    "--threads", "1", "--checkpoint-every", "1000", "--quiet",
]  # fmt: skip


def train(nproc: int, out: Path, steps: int, extra: list[str]) -> dict[str, float]:
    shutil.rmtree(out, ignore_errors=True)
    launcher = [sys.executable, "-m", "rlid"]
    if nproc > 1:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
                    str(nproc), "-m", "rlid"]  # fmt: skip
    cmd = [*launcher, "train", *TRAIN_FLAGS, "--steps", str(steps), "--out", str(out), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    total = time.perf_counter() - start
    budget = read_metrics(out)[-1]["budget"]
    return {
        "env_steps": budget["env_steps"],
        "train_s": budget["wall_time"],
        "rate": budget["env_steps"] / budget["wall_time"],
        "total_s": total,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2, help="processes of the parallel run")
    parser.add_argument("--steps", type=int, default=480, help="env-step budget of each run")
    parser.add_argument("--out", type=Path, default=Path("/tmp/rlid-scaling"))
    parser.add_argument("extra", nargs="*", help="extra `rlid train` flags (after --)")
    args = parser.parse_args()
    one = train(1, args.out / "nproc1", args.steps, args.extra)
    many = train(args.nproc, args.out / f"nproc{args.nproc}", args.steps, args.extra)
    print(f"config: {' '.join(TRAIN_FLAGS + args.extra)} --steps {args.steps}")
    print(f"{'processes x threads':>20} {'env steps':>10} {'train s':>9} {'steps/s':>9} "
          f"{'total s':>9}")  # fmt: skip
    for n, r in ((1, one), (args.nproc, many)):
        print(f"{f'{n} x 1':>20} {r['env_steps']:>10.0f} {r['train_s']:>9.1f} "
              f"{r['rate']:>9.1f} {r['total_s']:>9.1f}")  # fmt: skip
    speedup = many["rate"] / one["rate"]
    print(f"speed-up {speedup:.2f}x with {args.nproc} processes; "
          f"efficiency {speedup / args.nproc:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
