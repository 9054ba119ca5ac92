"""Held-out success along training (the runs' eval_every rows), one line per seed,
with the random floor and the suite's 3,000-step budget marked; runs stopped before
their budget (stopped/) end at their last evaluation.

Usage: python docs/results/suite_0.3_budget/plot_heldout.py  (writes heldout_along_training.png)
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent
FLOORS = {
    "treasure-level1": 0.48,
    "keydoor-large": 0.01,
    "crafting-small": 0.01,
    "coin-level10": 0.01,
    "simple-dense": 0.00,
    "treasure-level11": 0.21,
    "crafting-large": 0.00,
    "simple-sparse": 0.00,
}
# runs trained later on a machine without AVX512, from the warm start rebuilt there
LATER = {"coin-level10", "simple-dense", "treasure-level11", "crafting-large", "simple-sparse"}
MIXED = {"crafting-small": "seed 2: AVX2, rebuilt start"}


def main() -> None:
    cols = 4
    rows_ = -(-len(FLOORS) // cols)
    fig, grid = plt.subplots(rows_, cols, figsize=(4.2 * cols, 3.4 * rows_), sharey=True)
    axes = list(grid.flat)
    for ax in axes[len(FLOORS) :]:
        ax.set_visible(False)
    for ax, (setting, floor) in zip(axes, FLOORS.items()):
        runs = sorted((HERE / "runs").glob(f"decision-ppo-{setting}-seed*"))
        runs += sorted((HERE / "stopped").glob(f"decision-ppo-{setting}-seed*"))  # unfinished
        for run in runs:
            lines = (run / "metrics.jsonl").read_text().splitlines()
            rows = [json.loads(line) for line in lines]
            evals = json.loads((run / "eval.json").read_text())
            xs = [0] + [r["budget"]["env_steps"] for r in rows if "eval" in r]
            ys = [evals["before"]["success"]] + [r["eval"]["success"] for r in rows if "eval" in r]
            if "after" in evals:  # its final evaluation
                xs.append(rows[-1]["budget"]["env_steps"])
                ys.append(evals["after"]["success"])
            name = run.name.rsplit("-", 1)[1] + (
                " (stopped)" if run.parent.name == "stopped" else ""
            )
            ax.plot(xs, ys, marker=".", label=name)
        if any(run.parent.name == "stopped" for run in runs):
            ax.legend(loc="upper right", fontsize=7)
        ax.axhline(floor, color="grey", linestyle="--", label="random floor")
        ax.axvline(3000, color="black", linestyle=":", label="suite budget (3,000)")
        note = "AVX2, rebuilt start" if setting in LATER else MIXED.get(setting)
        ax.set_title(setting + (f" ({note})" if note else ""), fontsize=9)
        ax.set_xlabel("env steps")
        ax.set_ylim(-0.02, 1.02)
    for ax in axes[::cols]:
        ax.set_ylabel("held-out success (32 greedy episodes)")
    axes[0].legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(HERE / "heldout_along_training.png", dpi=110)


if __name__ == "__main__":
    main()
