"""One line per group of runs: held-out success before/after (mean and per seed), and
the mean over seeds of training success (first/last 5 iterations), position bias
(``label_marginal_kl_uniform``; and ``position_bias`` where logged) and row entropy
(first/last 3 iterations), from each run's eval.json and metrics.jsonl.

    python summarise.py "NAME=runs/step/runs/*" ...

A run without an "after" evaluation (unfinished) is skipped.
"""

import glob
import json
import statistics
import sys
from pathlib import Path


def finished_runs(pattern):
    runs = []
    for run in sorted(Path(p) for p in glob.glob(pattern)):
        evaluation = run / "eval.json"
        if not evaluation.exists():
            continue
        result = json.loads(evaluation.read_text())
        if "after" not in result:
            continue
        rows = [json.loads(line) for line in (run / "metrics.jsonl").open()]
        rows = [row for row in rows if "success" in row and "entropy" in row]
        runs.append((result["before"]["success"], result["after"]["success"], rows))
    return runs


def first_last(runs, key, n):
    first = statistics.mean(statistics.mean(r[key] for r in rows[:n]) for _, _, rows in runs)
    last = statistics.mean(statistics.mean(r[key] for r in rows[-n:]) for _, _, rows in runs)
    return first, last


def line(name, pattern):
    runs = finished_runs(pattern)
    if not runs:
        return f"{name} none"
    before = statistics.mean(r[0] for r in runs)
    after = [r[1] for r in runs]
    train = first_last(runs, "success", 5)
    bias = first_last(runs, "label_marginal_kl_uniform", 3)
    entropy = first_last(runs, "entropy", 3)
    seeds = " ".join(f"{x:.2f}" for x in after)
    text = (
        f"{name:28s} n={len(runs)} before {before:.2f} after {statistics.mean(after):.2f} "
        f"seeds {seeds} | train succ first5 {train[0]:.2f} last5 {train[1]:.2f} | "
        f"posbias {bias[0]:.2f}->{bias[1]:.2f} | ent {entropy[0]:.2f}->{entropy[1]:.2f}"
    )
    if all("position_bias" in row for _, _, rows in runs for row in rows):
        # the unbiased, size-pooled estimate (logged by runs made after it existed)
        unbiased = first_last(runs, "position_bias", 3)
        text += f" | position_bias {unbiased[0]:.3f}->{unbiased[1]:.3f}"
    return text


if __name__ == "__main__":
    for argument in sys.argv[1:]:
        print(line(*argument.split("=", 1)))
