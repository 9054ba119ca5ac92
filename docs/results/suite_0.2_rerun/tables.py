"""The tables of this page, from the run files beside it.

    python docs/results/suite_0.2_rerun/tables.py

* float paths: per seed, held-out success recorded by the suite (docs/results/suite_0.2),
  re-run today with torch's AVX512 kernels (runs/) and with its AVX2 kernels
  (avx2/runs/, ATEN_CPU_CAPABILITY=avx2), and the first iteration where the two
  re-runs differ (env steps or training success);
* pooled: per setting, the mean and 95% percentile-bootstrap interval over seeds of
  each set, and over the six re-runs together (3 seeds x 2 float paths);
* weighting: the default arm (runs/) against episode_weight = "equal" (equal/runs/),
  and both arms over both float paths where the AVX2 runs exist (avx2/runs/,
  avx2/equal/runs/).
"""

from __future__ import annotations

import json
from pathlib import Path

from rlid.compare.stats import bootstrap_mean

HERE = Path(__file__).resolve().parent
RECORDED = HERE.parent / "suite_0.2" / "results.json"
SEEDS = (0, 1, 2)


def after(run_dir: Path) -> float | None:
    path = run_dir / "eval.json"
    if not path.exists():
        return None
    return json.loads(path.read_text()).get("after", {}).get("success")


def rows(run_dir: Path) -> list[dict]:
    text = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in text if line.strip()]


def first_difference(a: Path, b: Path) -> tuple[int | None, int]:
    ra, rb = rows(a), rows(b)
    for x, y in zip(ra, rb):
        if x["budget"]["env_steps"] != y["budget"]["env_steps"] or x["success"] != y["success"]:
            return x["iteration"], len(ra)
    return None, len(ra)


def interval(values: list[float]) -> str:
    m = bootstrap_mean(values, seed=0)
    return f"{m.mean:.2f} [{m.low:.2f}, {m.high:.2f}]"


def main() -> None:
    recorded = json.loads(RECORDED.read_text())
    rec = {(r["env"], r["seed"]): r["heldout"]["after"]["success"] for r in recorded["runs"]}
    envs = list(dict.fromkeys(r["env"] for r in recorded["runs"]))
    name = "decision-ppo-{env}-seed{seed}"

    print("## Float paths, per seed\n")
    print(
        "| setting | seed | recorded | AVX512 (today) | AVX2 (today) | first differing iteration / iterations |"
    )
    print("|---|---|---|---|---|---|")
    for env in envs:
        for seed in SEEDS:
            a = HERE / "runs" / name.format(env=env, seed=seed)
            b = HERE / "avx2" / "runs" / name.format(env=env, seed=seed)
            if not b.exists():
                continue
            split, n = first_difference(b, a)
            print(
                f"| {env} | {seed} | {rec[(env, seed)]:.2f} | {after(a):.2f} | {after(b):.2f} "
                f"| {split or 'none'} / {n} |"
            )

    print("\n## Pooled\n")
    print("| setting | recorded | AVX512 (today) | AVX2 (today) | both re-runs (6) |")
    print("|---|---|---|---|---|")
    for env in envs:
        r = [rec[(env, s)] for s in SEEDS]
        a = [after(HERE / "runs" / name.format(env=env, seed=s)) for s in SEEDS]
        b = [after(HERE / "avx2" / "runs" / name.format(env=env, seed=s)) for s in SEEDS]
        a = [x for x in a if x is not None]
        b = [x for x in b if x is not None]
        cells = [
            interval(r),
            interval(a) if a else "-",
            interval(b) if b else "-",
            interval(a + b) if b else "-",
        ]
        print(f"| {env} | " + " | ".join(cells) + " |")

    print("\n## Episode weighting\n")
    print("| setting | length (0.2 default) | equal (0.3 default) | seeds: length / equal |")
    print("|---|---|---|---|")
    for env in envs:
        a = [after(HERE / "runs" / name.format(env=env, seed=s)) for s in SEEDS]
        e = [after(HERE / "equal" / "runs" / f"decision-ppo-equal-{env}-seed{s}") for s in SEEDS]
        if None in e or None in a:
            continue
        seeds = ", ".join(f"{x:.2f}" for x in a) + " / " + ", ".join(f"{x:.2f}" for x in e)
        print(f"| {env} | {interval(a)} | {interval(e)} | {seeds} |")

    print("\n## Episode weighting, both float paths (6 runs per arm)\n")
    print("| setting | length: AVX512, AVX2 | equal: AVX512, AVX2 | length (6) | equal (6) |")
    print("|---|---|---|---|---|")
    for env in envs:
        la = [after(HERE / "runs" / name.format(env=env, seed=s)) for s in SEEDS]
        lb = [after(HERE / "avx2" / "runs" / name.format(env=env, seed=s)) for s in SEEDS]
        eq = "decision-ppo-equal-{env}-seed{seed}"
        ea = [after(HERE / "equal" / "runs" / eq.format(env=env, seed=s)) for s in SEEDS]
        eb = [after(HERE / "avx2" / "equal" / "runs" / eq.format(env=env, seed=s)) for s in SEEDS]
        if None in la + lb + ea + eb:
            continue
        fmt = lambda xs: ", ".join(f"{x:.2f}" for x in xs)  # noqa: E731
        print(
            f"| {env} | {fmt(la)}; {fmt(lb)} | {fmt(ea)}; {fmt(eb)} | {interval(la + lb)} "
            f"| {interval(ea + eb)} |"
        )


if __name__ == "__main__":
    main()
