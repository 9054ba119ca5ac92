"""rlid's random agent under ``scienceworld-paper`` against the ScienceWorld paper's random agent.

The external check of the ScienceWorld protocol (docs/benchmark-envs.md): the random
agent needs no model, so its mean score must match the published one within sampling
noise if rlid plays the benchmark as the paper did (the easy preset, the 100-tick limit
and 101-command cap, the test variations, the upstream valid-action list with
``reset task`` and the numbered answers to ambiguity questions, failures clipped to 0).

The published column is "Random-Valid" of Table 2, Wang et al., "ScienceWorld: Is your
Agent Smarter than a 5th Grader?", EMNLP 2022, p. 11285 (scores 0-1, rounded to 2
decimals; an action drawn uniformly from the valid actions at every step). Per task it
prints rlid's clipped mean / 100 with a 95% percentile-bootstrap interval, the raw mean
(failures at -100, unclipped), and whether the published number lies in the interval
widened by the paper's rounding (0.005).

    .venv/bin/python benchmarks/sw_random_check.py --episodes 40 --out /tmp/sw_random.jsonl

Episodes already in ``--out`` (same task, same episode index) are read back, not played
again, so an interrupted check resumes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from rlid import envs
from rlid.config.benchmark_protocols import get_protocol

# Table 2, column "Random-Valid" (read from the source; task name: scienceworld tasks.json)
PAPER_RANDOM = {
    "boil": ("1-1", 0.00),
    "grow-plant": ("5-1", 0.07),
    "grow-fruit": ("5-2", 0.02),
    "find-living-thing": ("4-1", 0.03),
    "find-non-living-thing": ("4-2", 0.63),
    "find-plant": ("4-3", 0.01),
    "find-animal": ("4-4", 0.01),
    "lifespan-longest-lived": ("7-1", 0.02),
    "lifespan-shortest-lived": ("7-2", 0.03),
    "chemistry-mix": ("6-1", 0.01),
}
DEFAULT_TASKS = (
    "find-non-living-thing",
    "grow-plant",
    "find-living-thing",
    "lifespan-shortest-lived",
    "lifespan-longest-lived",
    "grow-fruit",
)
ROUNDING = 0.005  # the paper prints two decimals


def play_random_episode(env, seed: int) -> dict:
    """One episode of uniform draws over the legal actions: the final score (raw), its
    length in commands and ticks, and how it ended."""
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    steps, terminated, truncated = 0, False, False
    while not (terminated or truncated):
        legal = info["legal_actions"]
        obs, _, terminated, truncated, info = env.step(legal[int(rng.integers(len(legal)))])
        steps += 1
    return {
        "score": int(info["score"]),
        "won": bool(info["won"]),
        "lost": bool(info["lost"]),
        "steps": steps,
        "ticks": int(info["ticks"]),
        "variation": int(info["variation"]),
    }


def bootstrap_interval(values: np.ndarray, *, draws: int = 10_000, seed: int = 0) -> tuple:
    """The 95% percentile-bootstrap interval of the mean of ``values`` (scores in [0, 1]).

    When every score is 0 the bootstrap interval collapses to [0, 0]; the mean of scores
    in [0, 1] is then bounded by the chance of a score above 0, whose exact (Clopper-
    Pearson) 97.5% upper bound after ``n`` zeros is ``1 - 0.025 ** (1 / n)``.

        >>> bootstrap_interval(np.zeros(30))[1] > 0.11
        True
    """
    if not values.any():
        return 0.0, float(1 - 0.025 ** (1 / len(values)))
    rng = np.random.default_rng(seed)
    means = rng.choice(values, size=(draws, len(values)), replace=True).mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def summarise(task: str, rows: list[dict]) -> dict:
    """Clipped and raw means (0-1) of one task's episodes, and the paper's number."""
    raw = np.array([r["score"] for r in rows], dtype=float) / 100.0
    clipped = np.maximum(raw, 0.0)
    low, high = bootstrap_interval(clipped)
    task_id, paper = PAPER_RANDOM[task]
    return {
        "task": task,
        "id": task_id,
        "paper": paper,
        "episodes": len(rows),
        "clipped_mean": float(clipped.mean()),
        "low": low,
        "high": high,
        "raw_mean": float(raw.mean()),
        "failed": sum(r["lost"] for r in rows),
        "consistent": low - ROUNDING <= paper <= high + ROUNDING,
    }


def read_done(path: Path | None) -> dict[tuple[str, int], dict]:
    if path is None or not path.exists():
        return {}
    done = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        done[(row["task"], row["episode"])] = row
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default=",".join(DEFAULT_TASKS), help="comma-separated")
    parser.add_argument("--episodes", type=int, default=40, help="episodes per task")
    parser.add_argument("--seed", type=int, default=0, help="first reset seed")
    parser.add_argument("--out", type=Path, default=None, help="episodes as JSON lines")
    args = parser.parse_args(argv)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in PAPER_RANDOM]
    if unknown:
        parser.error(f"no published random number here for {', '.join(unknown)}")
    if args.episodes < 2:
        parser.error("--episodes must be >= 2 (an interval needs two)")
    protocol = get_protocol("scienceworld-paper")
    done = read_done(args.out)
    results = []
    for task in tasks:
        options = protocol.env_options_for(
            "scienceworld", {"task": task, "split": "heldout", "walkthrough": False}
        )
        env = envs.make("scienceworld", **options)
        rows, start = [], time.monotonic()
        for episode in range(args.episodes):
            row = done.get((task, episode))
            if row is None:
                row = {"task": task, "episode": episode,
                       **play_random_episode(env, args.seed + episode)}  # fmt: skip
                if args.out is not None:
                    with args.out.open("a") as out:
                        out.write(json.dumps(row) + "\n")
            rows.append(row)
            print(f"\r{task}: {episode + 1}/{args.episodes} episodes, "
                  f"{time.monotonic() - start:.0f} s", end="", file=sys.stderr)  # fmt: skip
        print(file=sys.stderr)
        env.close()
        results.append(summarise(task, rows))
    print("rlid random agent under scienceworld-paper vs ScienceWorld Table 2 (Random-Valid)")
    print("scores 0-1; clipped: a failure counts 0 (the paper's); raw: a failure counts -1")
    print(f"{'id':<5} {'task':<26} {'paper':>5} {'rlid clipped [95% CI]':>24} "
          f"{'raw':>6} {'n':>4} {'fail':>4}  within")  # fmt: skip
    for r in results:
        interval = f"{r['clipped_mean']:.3f} [{r['low']:.3f}, {r['high']:.3f}]"
        print(f"{r['id']:<5} {r['task']:<26} {r['paper']:>5.2f} {interval:>24} "
              f"{r['raw_mean']:>6.3f} {r['episodes']:>4} {r['failed']:>4}  "
              f"{'yes' if r['consistent'] else 'NO'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
