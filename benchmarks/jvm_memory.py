"""Benchmark: a ScienceWorld JVM's resident memory with and without rlid's heap options.

A JVM left to its defaults may commit up to a quarter of the machine's memory for its
heap and keeps what it committed; ``rlid.envs.jvm.HEAP_OPTIONS`` ask G1 for a collection at
least every minute and to keep at most 30% of the heap free, so a JVM that has been
busy gives memory back while it waits (a training run's JVM waits through every
update). For each variant, in turn (each in a JVM of its own): ``--envs`` envs of one
task play ``--steps`` uniformly random steps each (new episodes as they end), then
wait ``--idle`` seconds, as a run's JVM waits through an update. The JVM's resident
memory (``VmRSS``) is read after the play and after the wait.

    python benchmarks/jvm_memory.py --envs 16 --steps 200 --idle 75
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any

import numpy as np

from rlid import envs
from rlid.envs.jvm import HEAP_OPTIONS, SCIENCEWORLD


def resident_mib(pid: int) -> float:
    """The process's resident memory in MiB (Linux ``/proc``)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def play(kind: Any, args: argparse.Namespace) -> tuple[float, float]:
    """(MiB after the play, MiB after the wait) of one JVM started with ``kind``."""
    rng = np.random.default_rng(0)
    games = [
        envs.make("scienceworld", task=args.task, simplifications="easy") for _ in range(args.envs)
    ]
    for game in games:
        game._lease.kind = kind  # this variant's JVM options (a JVM per distinct kind)
    infos = [game.reset(seed=i)[1] for i, game in enumerate(games)]
    for _ in range(args.steps):
        for i, game in enumerate(games):
            legal = infos[i]["legal_actions"]
            _, _, done, cut, infos[i] = game.step(legal[int(rng.integers(len(legal)))])
            if done or cut:
                infos[i] = game.reset(seed=int(rng.integers(1000)))[1]
    pid = games[0]._lease.engine.process.pid
    busy = resident_mib(pid)
    time.sleep(args.idle)
    idle = resident_mib(pid)
    for game in games:
        game.close()
    return busy, idle


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="find-plant", help="ScienceWorld task (easy preset)")
    parser.add_argument("--envs", type=int, default=16, help="envs in the JVM (a run's batch)")
    parser.add_argument("--steps", type=int, default=200, help="random steps per env")
    parser.add_argument("--idle", type=float, default=75.0, help="seconds of waiting after")
    args = parser.parse_args(argv)
    base = tuple(o for o in SCIENCEWORLD.javaopts if o not in HEAP_OPTIONS)
    variants = {
        "JVM defaults": dataclasses.replace(SCIENCEWORLD, javaopts=base),
        "rlid's heap options": SCIENCEWORLD,
    }
    print(f"task={args.task} envs={args.envs} steps={args.steps} idle={args.idle:.0f} s")
    print(f"{'variant':>20} {'after play MiB':>15} {'after wait MiB':>15}")
    rows = {}
    for name, kind in variants.items():
        rows[name] = play(kind, args)
        print(f"{name:>20} {rows[name][0]:>15.0f} {rows[name][1]:>15.0f}")
    (busy_a, idle_a), (busy_b, idle_b) = rows.values()
    print(
        f"defaults / rlid: {busy_a / busy_b:.2f} after play, {idle_a / idle_b:.2f} after the wait"
    )


if __name__ == "__main__":
    main()
