"""The 30,000-step runs repeat the suite's 3,000-step runs iteration for iteration up to
where those stopped (same seeds, recipe and games; eval_every does not touch the
training randomness). Prints, per run, how many leading iterations match exactly.

Usage: python prefix_check.py LONG_RUNS SHORT_RUNS [SHORT_RUNS ...]
(a short run is found under its own name, or with "decision-ppo-equal-" for
"decision-ppo-", as the explicit-equal runs of docs/results/suite_0.2_rerun/equal are named)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

KEYS = ("success", "return", "rollout_entropy", "entropy", "loss", "approx_kl", "episode_length")


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def short_run(name: str, short_dirs: list[Path]) -> Path | None:
    for where in short_dirs:
        for candidate in (name, name.replace("decision-ppo-", "decision-ppo-equal-")):
            if (where / candidate / "metrics.jsonl").is_file():
                return where / candidate
    return None


def main(long_dir: Path, short_dirs: list[Path]) -> None:
    for run in sorted(long_dir.iterdir()):
        short = short_run(run.name, short_dirs)
        if short is None or not (run / "metrics.jsonl").is_file():
            print(f"{run.name}: no 3,000-step run to compare")
            continue
        long_rows, short_rows = rows(run / "metrics.jsonl"), rows(short / "metrics.jsonl")
        same = 0
        for a, b in zip(long_rows, short_rows):
            if any(a.get(k) != b.get(k) for k in KEYS):
                break
            same += 1
        print(f"{run.name}: {same} of the 3,000-step run's {len(short_rows)} iterations identical")


if __name__ == "__main__":
    main(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]])
