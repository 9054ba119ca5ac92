"""Per arm and setting of the recipe pilots: held-out success before -> after (mean over
seeds, and each seed), and what each run's last iteration says about the policy
(position_bias, label mass, row entropy, shared_states), from the runs' own files.

    python docs/results/recipe_pilots/summarise.py docs/results/recipe_pilots/runs
"""

from __future__ import annotations

import functools
import json
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

from rlid.compare.stats import bootstrap_mean

ARMS = sorted(  # the pilot config's arms, longest name first (a run name starts with one)
    tomllib.loads((Path(__file__).parent / "suite.toml").read_text())["arms"], key=len, reverse=True
)


def split(name: str) -> tuple[str, str, int]:
    for arm in ARMS:
        if name.startswith(arm + "-"):
            rest, seed = name[len(arm) + 1 :].rsplit("-seed", 1)
            return arm, rest, int(seed)
    raise ValueError(name)


def _mean(runs: list[dict], key: str) -> float:
    return sum(r[key] for r in runs) / len(runs)


def main(root: Path) -> None:
    table: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for run in sorted(root.iterdir()):
        if not (run / "eval.json").is_file() or "after" not in json.loads(
            (run / "eval.json").read_text()
        ):
            continue
        arm, setting, seed = split(run.name)
        ev = json.loads((run / "eval.json").read_text())
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x]
        rows = [r for r in rows if "iteration" in r and "rollout_entropy" in r]
        last = rows[-1]
        table[(setting, arm)].append(
            dict(
                seed=seed,
                before=ev["before"]["success"],
                after=ev["after"]["success"],
                ret_before=ev["before"]["return"],
                ret_after=ev["after"]["return"],
                position_bias=last.get("position_bias", float("nan")),
                label_mass=last["rollout_label_mass"],
                entropy=last["rollout_entropy"],
                shared=sum(r.get("shared_states", 0.0) for r in rows) / len(rows),
                train_success=sum(r["success"] for r in rows) / len(rows),
                steps=last["budget"]["optimizer_steps"],
            )
        )
    print("| setting | arm | before | after (mean [95% interval]; seeds) | held-out return before -> after "
          "| training success (mean over iterations) | last position_bias | last label mass "
          "| last row entropy | shared_states (mean) | optimizer steps |")  # fmt: skip
    print("|" + "---|" * 11)
    for (setting, arm), runs in sorted(table.items()):
        runs.sort(key=lambda r: r["seed"])
        mean = functools.partial(_mean, runs)
        seeds = ", ".join(f"{r['after']:.2f}" for r in runs)
        ci = bootstrap_mean([r["after"] for r in runs])  # 95% percentile bootstrap over seeds
        print(
            f"| {setting} | {arm} | {mean('before'):.2f} | {mean('after'):.2f} "
            f"[{ci.low:.2f}, {ci.high:.2f}] ({seeds}) "
            f"| {mean('ret_before'):.2f} -> {mean('ret_after'):.2f} | {mean('train_success'):.2f} "
            f"| {mean('position_bias'):.2f} | {mean('label_mass'):.2f} | {mean('entropy'):.2f} "
            f"| {mean('shared'):.2f} | {', '.join(str(r['steps']) for r in runs)} |"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "runs"))
