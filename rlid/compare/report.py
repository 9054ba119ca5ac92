"""Collect a comparison's run directories into ``results.json``, ``report.md`` and plots.

Everything here reads finished run directories (config, metrics rows with their
budget counters and wall-time split, eval.json) and summarises across seeds; no
model is loaded. Intervals are percentile bootstraps over seeds (``rlid.compare.stats``),
seeded, so the report is reproducible from the run directories.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rlid.compare.aggregates import arm_aggregates
from rlid.compare.config import CompareConfig, RunSpec
from rlid.compare.curves import curves_for, plot_currency, plot_heldout
from rlid.compare.stats import bootstrap_mean
from rlid.compare.text import format_report
from rlid.config.budget import CURRENCIES, Budget
from rlid.runs import dir as rundir
from rlid.runs.summary import run_config, run_software

HELDOUT_METRICS = ("success", "return", "normalized_score", "episode_length", "invalid_rate")
BOOTSTRAP_SEED = 0


def heldout_path(out: Path, run: RunSpec) -> Path:
    """Where a run's held-out evaluation is kept when the held-out games' options differ
    from training's (else the run's own ``eval.json`` holds it)."""
    return out / "heldout" / f"{run.name}.json"


def load_run(out: Path, run: RunSpec) -> dict[str, Any]:
    """Metrics rows, final budget and held-out before/after of one finished run."""
    run_dir = out / "runs" / run.name
    rows = rundir.read_metrics(run_dir)
    evals = rundir.read_json(run_dir / "eval.json")
    heldout = {"before": evals.get("before"), "after": evals.get("after")}
    separate = heldout_path(out, run)
    if separate.exists():  # held-out options differ from training: evaluated separately
        heldout = {"before": None, **rundir.read_json(separate)}
    final = rows[-1]["budget"] if rows else Budget().to_dict()
    config = run_config(run_dir)
    return {
        "name": run.name,
        "arm": run.arm,
        "env": run.env,
        "seed": run.seed,
        "dir": str(Path("runs") / run.name),
        "model_origin": evals.get("model_origin"),
        "software": run_software(config),
        "start_model": config.get("start_model"),
        "iterations": len(rows),
        "final_budget": final,
        "heldout": heldout,
        "rows": rows,
    }


def software_groups(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs grouped by the code that trained them (one group when all agree)."""
    groups: dict[str, list[str]] = {}
    for run in runs:
        groups.setdefault("; then ".join(run["software"]), []).append(run["name"])
    return [{"software": k, "runs": v} for k, v in sorted(groups.items())]


def start_weight_groups(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs grouped by the weights their starting model resolved to (``config.json``'s
    ``start_model``: a name such as ``tiny`` and the sha256 of its weight files). One
    name with several hashes means the runs did not start from the same model (a warm
    start rebuilt on another machine, a directory replaced). Runs that record no
    starting model (older runs) are left out."""
    groups: dict[tuple[str, str], list[str]] = {}
    for run in runs:
        pin = run.get("start_model")
        if pin:
            key = (str(pin.get("model")), str(pin.get("sha256") or "fresh"))
            groups.setdefault(key, []).append(run["name"])
    return [{"model": m, "sha256": h, "runs": v} for (m, h), v in sorted(groups.items())]


def _interval(values: list[float]) -> dict[str, float] | None:
    return bootstrap_mean(values, seed=BOOTSTRAP_SEED).to_dict() if values else None


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def summarise_arm(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Across-seed summary of one arm on one env."""
    heldout = {}
    for key in ("before", "after"):
        evals = [r["heldout"][key] for r in runs if r["heldout"].get(key)]
        heldout[key] = {m: _interval([e[m] for e in evals if m in e]) for m in HELDOUT_METRICS}
    budgets = [r["final_budget"] for r in runs]
    final = {k: _mean([b.get(k, 0) for b in budgets]) for k in Budget().to_dict()}
    rows = [row for r in runs for row in r["rows"]]
    spent = {k: sum(b.get(k, 0) for b in budgets) for k in Budget().to_dict()}
    per = max(spent["decisions"], 1)
    costs = {
        "forward_passes_per_decision": spent["forward_passes"] / per,
        "tokens_per_decision": spent["tokens_processed"] / per,
        "generated_tokens_per_decision": spent["generated_tokens"] / per,
        "forward_passes_per_env_step": spent["forward_passes"] / max(spent["env_steps"], 1),
    }
    invalid = {
        "train_invalid_rate": spent["invalid_actions"] / max(spent["env_steps"], 1),
        "train_unparsed_rate": _mean(
            [row["unparsed_rate"] for row in rows if "unparsed_rate" in row]
        ),
        "heldout_invalid_rate": heldout["after"]["invalid_rate"],
        # steps whose prompt was shortened to fit the model's context (Interface.long_prompts)
        "train_shortened_rate": spent["shortened_prompts"] / max(spent["env_steps"], 1),
        # decision menus that kept only as many rows as labels (Interface.overflow="truncate")
        "train_truncated_rate": spent["truncated_menus"] / max(spent["env_steps"], 1),
    }
    samples = None
    if any("used_samples" in row for row in rows):
        n = len(runs)
        samples = {
            "generated_samples": sum(row["generated_samples"] for row in rows) / n,
            "used_samples": sum(row["used_samples"] for row in rows) / n,
            "filtered_samples": sum(row["filtered_samples"] for row in rows) / n,
            "generation_rounds_per_iteration": _mean([row["generation_rounds"] for row in rows]),
        }
    phases: dict[str, float] = {}
    for row in rows:
        for phase, seconds in (row.get("time") or {}).items():
            phases[phase] = phases.get(phase, 0.0) + seconds / len(runs)
    return {
        "seeds": [r["seed"] for r in runs],
        "heldout": heldout,
        "final_budget": final,
        "final_budget_range": {k: [min(b.get(k, 0) for b in budgets),
                                   max(b.get(k, 0) for b in budgets)] for k in CURRENCIES},
        "iterations": _mean([r["iterations"] for r in runs]),
        "costs": costs,
        "invalid": invalid,
        "samples": samples,
        "time_split": phases,
    }  # fmt: skip


AGGREGATE_METRICS = ("success", "normalized_score")


def aggregates(compare: CompareConfig, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """rliable-style IQM, mean and probability of improvement over (seeds x envs) per arm.

    A metric is left out when some run has no held-out 'after' value for it.
    """
    out: dict[str, Any] = {}
    index = {(r["arm"], r["env"], r["seed"]): r for r in runs}
    for metric in AGGREGATE_METRICS:
        scores: dict[str, list[list[float]]] = {}
        for arm in compare.arms:
            matrix = []
            for seed in compare.seeds:
                row = []
                for env in compare.envs:
                    after = (index.get((arm.name, env.name, seed)) or {}).get("heldout", {})
                    value = (after.get("after") or {}).get(metric)
                    if value is None:
                        break
                    row.append(float(value))
                else:
                    matrix.append(row)
                    continue
                break
            if len(matrix) == len(compare.seeds):
                scores[arm.name] = matrix
        if scores and len(scores) == len(compare.arms):
            out[metric] = arm_aggregates(scores, seed=BOOTSTRAP_SEED)
    return out


def summarise_references(compare: CompareConfig, out: Path, env: str) -> dict[str, Any]:
    """``{reference: {"seeds", "heldout": {metric: interval}}}`` of one env (those evaluated)."""
    out_refs: dict[str, Any] = {}
    for reference in compare.references:
        paths = [out / "reference" / env / f"{reference}-seed{s}.json" for s in compare.seeds]
        evals = [rundir.read_json(p)["after"] for p in paths if p.exists()]
        if evals:
            out_refs[reference] = {
                "seeds": [s for s, p in zip(compare.seeds, paths) if p.exists()],
                "heldout": {m: _interval([e[m] for e in evals]) for m in HELDOUT_METRICS},
            }
    return out_refs


def collect(compare: CompareConfig, out: Path, ledger: dict[str, Any]) -> dict[str, Any]:
    """The full results dictionary (what ``results.json`` holds), plots not included."""
    runs = [load_run(out, run) for run in compare.runs()]
    for r in runs:
        r["seconds"] = ledger.get(r["name"], {}).get("seconds")
    envs = {}
    for env in compare.envs:
        by_arm = {a.name: [r for r in runs if r["arm"] == a.name and r["env"] == env.name]
                  for a in compare.arms}  # fmt: skip
        arms = {}
        for arm, arm_runs in by_arm.items():
            arms[arm] = summarise_arm(arm_runs)
            arms[arm]["run_seconds"] = _mean([r["seconds"] for r in arm_runs if r["seconds"]])
        curves = curves_for({arm: [r["rows"] for r in rs] for arm, rs in by_arm.items()})
        references = summarise_references(compare, out, env.name)
        envs[env.name] = {"arms": arms, "curves": curves, "references": references}
    return {
        "aggregates": aggregates(compare, runs),
        "comparison": compare.to_dict(),
        "interface_differences": {
            arm: {f: list(v) for f, v in diff.items()}
            for arm, diff in compare.interface_diffs().items()
        },
        "model_origins": sorted({str(r["model_origin"]) for r in runs}),
        "software": software_groups(runs),
        "start_weights": start_weight_groups(runs),
        "runs": [{k: v for k, v in r.items() if k != "rows"} for r in runs],
        "envs": envs,
    }


def write_report(compare: CompareConfig, out: Path, *, ledger: dict[str, Any]) -> dict[str, Any]:
    """Write ``results.json``, ``report.md`` and the PNG plots; return the results."""

    results = collect(compare, out, ledger)
    plots: dict[str, dict[str, str]] = {}
    for env_name, env in results["envs"].items():
        plots[env_name] = {}
        for currency, entry in env["curves"].items():
            if all(c is None for c in entry["curves"]["success"].values()):
                continue  # no arm spends this currency
            budget = compare.amount if currency == compare.currency else None
            path = out / "plots" / f"curves-{env_name}-{currency}.png"
            plot_currency(entry, currency, env_name, path, budget=budget)
            plots[env_name][currency] = str(path.relative_to(out))
        path = out / "plots" / f"heldout-{env_name}.png"
        plot_heldout(env["arms"], env_name, path, env.get("references"))
        plots[env_name]["heldout"] = str(path.relative_to(out))
    results["plots"] = plots
    rundir.write_json(out / "results.json", results)
    rundir.atomic_write_text(out / "report.md", format_report(results))
    return results
