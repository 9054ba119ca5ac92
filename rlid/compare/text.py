"""The markdown of a comparison report, from the results dictionary alone.

Order follows docs/design.md §8: what differed between arms (interface) first, then
the shared budget and seeds, held-out results with intervals, the budget spent in
every currency, who leads on each currency's axis, and the cost tables.
"""

from __future__ import annotations

from typing import Any

from rlid.compare.config import STOCHASTIC_REFERENCES
from rlid.config.budget import CURRENCIES


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines + [""]


def _num(value: Any, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.{digits}f}"  # 9,426,670.3 like the integers' 6,619,270
    return f"{int(value):,}" if abs(value) >= 1 else f"{value:.{digits}f}"


ONE_SEED = "n/a (1 seed)"


def _iv(entry: dict[str, float] | None, *, single: str | None = ONE_SEED) -> str:
    """``mean [low, high]``; an interval over one seed (``n`` or ``runs`` per env = 1) is
    none: ``mean [n/a (1 seed)]``, or the mean alone where ``single`` is None (a
    deterministic reference, evaluated once)."""
    if not entry:
        return "n/a"
    if entry.get("n", entry.get("runs")) == 1:
        return f"{entry['mean']:.2f}" + (f" [{single}]" if single else "")
    return f"{entry['mean']:.2f} [{entry['low']:.2f}, {entry['high']:.2f}]"


def _single(reference: str) -> str | None:
    """How a one-value interval of ``reference`` reads: a deterministic one has none."""
    return ONE_SEED if reference in STOCHASTIC_REFERENCES else None


def _names(arms: list[str] | None) -> str:
    if not arms:
        return "n/a"
    return " = ".join(arms) + (" (tie)" if len(arms) > 1 else "")


def _some_runs(names: list[str]) -> str:
    """``N run(s): a, b, ...``, naming the first six."""
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    return f"{len(names)} run(s): {shown}"


def _software_section(groups: list[dict[str, Any]]) -> list[str]:
    """Which code trained the runs; a warning when it was not the same for all."""
    if len(groups) == 1:
        return [f"Trained by: {groups[0]['software']} (every run).", ""]
    if not groups:
        return []
    lines = [f"**The runs were trained by {len(groups)} different versions of the code** "
             "(or libraries, or CPU float paths: the same seed then gives another run); "
             "compare them with care:", ""]  # fmt: skip
    for group in groups:
        lines.append(f"- {group['software']}: {_some_runs(group['runs'])}")
    return [*lines, ""]


def _start_weights_section(groups: list[dict[str, Any]]) -> list[str]:
    """A warning when one starting model name resolved to different weights across runs."""
    hashes: dict[str, list[dict[str, Any]]] = {}
    for group in groups:
        hashes.setdefault(group["model"], []).append(group)
    lines: list[str] = []
    for model, found in hashes.items():
        if len(found) < 2:
            continue
        lines += [f"**The starting model `{model}` was not the same in every run**: it resolved "
                  f"to {len(found)} different sets of weights (a warm start rebuilt elsewhere "
                  "gives other weights), so their runs start from different policies:", ""]  # fmt: skip
        for group in found:
            lines.append(f"- weights sha256 {group['sha256'][:12]}: {_some_runs(group['runs'])}")
        lines.append("")
    return lines


def format_report(results: dict[str, Any]) -> str:
    comp = results["comparison"]
    budget = comp["budget"]
    unit = " s of training" if budget["currency"] == "wall_time" else ""
    lines = [
        f"# Comparison: {comp['name']}",
        "",
        f"Budget: **{budget['amount']:,}{unit} {budget['currency']}** per run, the same for "
        f"every arm (a run stops at the first iteration that reaches it). "
        f"Seeds: {', '.join(map(str, comp['seeds']))}. Held-out: "
        f"{comp['heldout_episodes']} greedy episodes per run on split='heldout'. "
        f"Model origin: {', '.join(results['model_origins'])}.",
        "",
    ]
    lines += _software_section(results.get("software") or [])
    lines += _start_weights_section(results.get("start_weights") or [])
    lines += _interface_section(results)
    lines += _arms_section(comp)
    lines += _suite_section(results)
    for env_name, env in results["envs"].items():
        lines += _env_sections(env_name, env, comp, results["plots"].get(env_name, {}))
    lines += _aggregates_section(results.get("aggregates") or {}, comp)
    lines += _runs_section(results["runs"])
    return "\n".join(lines)


def _aggregates_section(aggregates: dict[str, Any], comp: dict[str, Any]) -> list[str]:
    if not aggregates:
        return []
    n_envs = len(comp.get("envs", [])) or 1
    lines = ["## Aggregates across seeds and envs (rliable-style)", ""]
    rows = []
    arms = list(next(iter(aggregates.values()))["iqm"])
    for arm in arms:
        row = [arm]
        for metric in aggregates:
            row += [_iv(aggregates[metric]["mean"][arm]), _iv(aggregates[metric]["iqm"][arm])]
        rows.append(row)
    header = ["arm"]
    for metric in aggregates:
        name = metric.replace("_", " ")
        header += [f"{name}: mean", f"{name}: IQM"]
    lines += _table(header, rows)
    for metric, agg in aggregates.items():
        poi = agg["probability_of_improvement"]
        if len(arms) < 2:
            break
        lines += [f"Probability of improvement P(row > column), held-out {metric}:", ""]
        lines += _table(
            ["arm"] + arms,
            [[a] + ["-" if a == b else _iv(poi[a][b]) for b in arms] for a in arms],
        )
    lines.append(
        f"IQM: interquartile mean over all {len(comp['seeds'])} seed(s) x {n_envs} env(s) "
        "(with fewer than 4 runs it equals the mean); intervals: 95% stratified bootstrap "
        "(runs resampled within each env); P(X > Y): per-env Mann-Whitney statistic averaged "
        "over envs, 0.5 = no difference (Agarwal et al., 2021)."
    )
    return lines + [""]


def _interface_section(results: dict[str, Any]) -> list[str]:
    comp = results["comparison"]
    diffs = results["interface_differences"]
    lines = ["## Interface differences", ""]
    if diffs:
        lines.append(
            "These arms saw something other than the shared interface (declared in "
            f"`interface_differences = {comp['interface_differences']}`):"
        )
        lines.append("")
        rows = [[arm, f"`{field}`", repr(v[0]), repr(v[1])]
                for arm, diff in diffs.items() for field, v in diff.items()]  # fmt: skip
        lines += _table(["arm", "field", "shared", "this arm"], rows)
    else:
        lines += ["None: every arm saw the same interface.", ""]
    shared = ", ".join(f"{k}={v!r}" for k, v in comp["interface"].items())
    return lines + [f"Shared interface: {shared}.", ""]


def _arms_section(comp: dict[str, Any]) -> list[str]:
    lines = ["## Arms", ""]
    defaults = ", ".join(f"{k}={v!r}" for k, v in comp["defaults"].items()) or "none"
    rows = []
    for arm in comp["arms"]:
        shown = {**arm["options"], **({"nproc": arm["nproc"]} if "nproc" in arm else {})}
        opts = ", ".join(f"{k}={v!r}" for k, v in shown.items()) or "-"
        rows.append([arm["name"], arm["plane"], arm["algorithm"], opts])
    lines += _table(["arm", "plane", "algorithm", "options (over the defaults)"], rows)
    lines.append(f"Defaults of every arm: {defaults}.")
    for env in comp["envs"]:
        same = env["train_options"] == env["heldout_options"]
        held = "the same options" if same else f"options {env['heldout_options']}"
        lines.append(
            f"Env `{env['name']}`: {env['id']} with options {env['train_options']}; "
            f"held-out games: split='heldout', {held}."
        )
    return lines + [""]


def _reference_success(env: dict[str, Any], reference: str) -> str:
    entry = (env.get("references") or {}).get(reference)
    return _iv(entry["heldout"]["success"], single=_single(reference)) if entry else "n/a"


def _suite_section(results: dict[str, Any]) -> list[str]:
    """Per env and arm: floor (random) / before / after / ceiling (walkthrough) success;
    the ceiling and afterstate columns only where the comparison measured them."""
    if not any(env.get("references") for env in results["envs"].values()):
        return []
    measured = {r for env in results["envs"].values() for r in env.get("references") or {}}
    marks, ceilings = "afterstate" in measured, "walkthrough" in measured
    title = "floor / before / after" + (" / ceiling" if ceilings else "")
    lines = [f"## Held-out success: {title}", ""]
    rows = []
    for env_name, env in results["envs"].items():
        floor = _reference_success(env, "random")
        extra = [_reference_success(env, "afterstate")] if marks else []
        extra += [_reference_success(env, "walkthrough")] if ceilings else []
        for arm, s in env["arms"].items():
            before, after = s["heldout"]["before"], s["heldout"]["after"]
            rows.append(
                [env_name, arm, floor, _iv(before["success"]), _iv(after["success"])] + extra
            )
    lines += _table(
        ["env", "arm", "floor (random)", "before", "after"]
        + (["afterstate marks"] if marks else [])
        + (["ceiling (walkthrough)"] if ceilings else []), rows,
    )  # fmt: skip
    lines.append(
        (
            "Floor and ceiling are untrained reference arms (uniform over legal actions; the "
            "env's walkthrough) measured by the same held-out evaluation; the random one once "
            "per seed, the deterministic walkthrough once."
            if ceilings
            else "The floor is an untrained reference arm (uniform over legal actions) "
            "measured by the same held-out evaluation, once per seed; no ceiling was asked "
            'for (`references = ["random", "walkthrough"]` adds the walkthrough\'s).'
        )
        + (
            " \"afterstate marks\" is another, once per seed: the row whose afterstate the "
            "menu marks as winning, else scoring the most, else any row not marked as losing "
            "(what reading the menu one step ahead gives)."
            if marks else ""
        )
    )  # fmt: skip
    return lines + [""]


def _env_sections(
    env_name: str, env: dict[str, Any], comp: dict[str, Any], plots: dict[str, str]
) -> list[str]:
    arms = env["arms"]
    currency = comp["budget"]["currency"]
    n_seeds = len(comp["seeds"])
    lines = [f"## Held-out results: {env_name}", ""]
    rows = []
    for arm, s in arms.items():
        after, before = s["heldout"]["after"], s["heldout"]["before"]
        rows.append([
            arm, _iv(after["success"]), _iv(after["return"]), _iv(after["normalized_score"]),
            _num((after["episode_length"] or {}).get("mean")),
            _num((before["success"] or {}).get("mean")), _num((before["return"] or {}).get("mean")),
        ])  # fmt: skip
    for reference, r in (env.get("references") or {}).items():
        held, single = r["heldout"], _single(reference)
        rows.append([
            f"({reference})", _iv(held["success"], single=single),
            _iv(held["return"], single=single), _iv(held["normalized_score"], single=single),
            _num((held["episode_length"] or {}).get("mean")),
            "-", "-",
        ])  # fmt: skip
    lines += _table(
        ["arm", "success", "return", "normalized score", "episode length",
         "success before", "return before"], rows,
    )  # fmt: skip
    lines.append(
        f"Mean over {n_seeds} seed(s) with a 95% percentile-bootstrap interval over seeds "
        "(with few seeds the interval is rough and cannot exceed the observed range)."
    )
    if "heldout" in plots:
        lines += ["", f"![held-out]({plots['heldout']})"]
    lines += ["", f"## Budget spent: {env_name}", ""]
    rows = [[arm] + [_num(s["final_budget"][c], 1) for c in CURRENCIES] for arm, s in arms.items()]
    lines += _table(["arm"] + list(CURRENCIES), rows)
    spans = ", ".join(
        f"{arm} {_num(s['final_budget_range'][currency][0])}-"
        f"{_num(s['final_budget_range'][currency][1])}"
        for arm, s in arms.items()
    )
    lines += [
        f"Mean final counters over seeds. In the budget currency ({currency}, amount "
        f"{comp['budget']['amount']:,}) the runs ended at: {spans} (each overshoots by at "
        "most its last iteration).",
        "",
    ]
    lines += _leader_section(env_name, env, plots, currency)
    lines += _cost_sections(env_name, arms)
    return lines


def _leader_section(
    env_name: str, env: dict[str, Any], plots: dict[str, str], budget_currency: str
) -> list[str]:
    arm_names = list(env["arms"])
    lines = [
        f"## Learning curves against every currency: {env_name}",
        "",
        "Training-rollout success per iteration against the cumulative spend in each "
        "currency (mean over seeds of step curves). Arms are compared on the window every "
        "arm reached: value at its end (success / return) and AUC (mean success over the "
        "window). The leader can change with the currency.",
        "",
    ]
    rows = []
    for currency, entry in env["curves"].items():
        lead = entry["leaders"]
        window = lead["window"]
        cells = []
        for arm in arm_names:
            stats = lead["arms"].get(arm)
            if entry["curves"]["success"][arm] is None:
                cells.append("spends none")
            elif stats is None:
                cells.append("n/a")
            else:
                cells.append(
                    f"{_num(stats['success']['at_end'])} / {_num(stats['return']['at_end'])} "
                    f"(AUC {_num(stats['success']['auc'])})"
                )
        if window is None:
            span = "fewer than two arms spend it"
        elif window[0] > window[1]:
            span = "no common window"
        else:
            span = f"{_num(window[0])}-{_num(window[1])}"
        name = f"**{currency}**" if currency == budget_currency else currency
        rows.append(
            [name, span] + cells + [_names(lead["leader_at_end"]), _names(lead["leader_auc"])]
        )
    lines += _table(
        ["currency", "common window"] + arm_names + ["leader at end", "leader by AUC"], rows
    )
    for currency in CURRENCIES:
        if currency in plots:
            lines.append(f"![{currency}]({plots[currency]})")
    return lines + [""]


def _cost_sections(env_name: str, arms: dict[str, Any]) -> list[str]:
    lines = [f"## Invalid actions: {env_name}", ""]
    rows = [[arm, _num(s["invalid"]["train_invalid_rate"], 3),
             _num(s["invalid"]["train_unparsed_rate"], 3),
             _iv(s["invalid"]["heldout_invalid_rate"]),
             _num(s["invalid"].get("train_shortened_rate"), 3),
             _num(s["invalid"].get("train_truncated_rate"), 3)]
            for arm, s in arms.items()]  # fmt: skip
    lines += _table(
        ["arm", "training invalid-action rate", "training unparsed rate", "held-out invalid rate",
         "training prompts shortened", "training menus truncated"],
        rows,
    )  # fmt: skip
    lines.append(
        "Menu arms choose among legal rows, so their rate is 0 by construction; a token-plane "
        "command that does not parse to a legal action is a no-op step. Shortened: the share "
        "of training steps whose prompt lost its memory (or observation, or afterstates) to "
        "fit the model's context (`Interface.long_prompts`). Truncated: the share of training "
        "steps whose menu had more legal actions than labels and kept a shuffled subset "
        '(`Interface.overflow="truncate"`).'
    )
    lines += ["", f"## Generated vs used samples: {env_name}", ""]
    rows = [[arm, _num(s["samples"]["generated_samples"], 1), _num(s["samples"]["used_samples"], 1),
             _num(s["samples"]["filtered_samples"], 1),
             _num(s["samples"]["generation_rounds_per_iteration"])]
            for arm, s in arms.items() if s["samples"]]  # fmt: skip
    if rows:
        lines += _table(
            ["arm", "generated", "used in updates", "filtered", "generation rounds / iteration"],
            rows,
        )
        lines.append(
            "Per run (mean over seeds); DAPO's dynamic sampling drops zero-variance groups, "
            "and every dropped sample is still counted in the budget."
        )
    else:
        lines.append("No token-plane arm: no generated samples.")
    lines += ["", f"## Cost per decision: {env_name}", ""]
    rows = [[arm, _num(c["forward_passes_per_decision"], 3), _num(c["tokens_per_decision"], 1),
             _num(c["generated_tokens_per_decision"], 2), _num(c["forward_passes_per_env_step"], 3)]
            for arm, c in ((a, s["costs"]) for a, s in arms.items())]  # fmt: skip
    lines += _table(
        ["arm", "forward passes / decision", "tokens processed / decision",
         "generated tokens / decision", "forward passes / env step"], rows,
    )  # fmt: skip
    lines.append(
        "Forward passes are batched calls (rollout and update); tokens processed count "
        "every prompt and completion token they read."
    )
    lines += ["", f"## Wall-time split: {env_name}", ""]
    phases = sorted({p for s in arms.values() for p in s["time_split"]})
    rows = []
    for arm, s in arms.items():
        split = s["time_split"]
        rows.append(
            [arm]
            + [_num(split.get(p, 0.0), 1) for p in phases]
            + [_num(s["final_budget"]["wall_time"], 1), _num(s["run_seconds"], 1)]
        )
    lines += _table(["arm"] + phases + ["training total", "whole run"], rows)
    lines.append(
        "Seconds per run, mean over seeds. Training total = the wall_time counter (training "
        "iterations); whole run adds model loading, held-out evaluation, checkpoints and "
        "plots (reused runs keep the time measured when they were trained)."
    )
    return lines + [""]


def _runs_section(runs: list[dict[str, Any]]) -> list[str]:
    lines = ["## Runs", ""]
    rows = [[f"`{r['dir']}`", r["arm"], str(r["seed"]), str(r["iterations"]),
             _num(r.get("seconds"), 1)] for r in runs]  # fmt: skip
    return lines + _table(["run directory", "arm", "seed", "iterations", "seconds"], rows)


def references_table(compare: Any, refs: dict[str, dict[str, Any]]) -> str:
    """``rlid compare --references``: per env, each reference's held-out success and
    return (mean over the seeds evaluated, 95% bootstrap interval over seeds)."""
    header = ["env"] + [f"{r}: success" for r in compare.references]
    header += [f"{r}: return" for r in compare.references]
    rows = []
    for env in compare.envs:
        got = refs.get(env.name, {})
        held = [(got.get(r) or {}).get("heldout", {}) for r in compare.references]
        rows.append(
            [env.name]
            + [_iv(h.get("success"), single=_single(r)) for r, h in zip(compare.references, held)]
            + [_iv(h.get("return"), single=_single(r)) for r, h in zip(compare.references, held)]
        )

    seeds = ", ".join(str(s) for s in compare.seeds)
    drawn = [r for r in compare.references if r in STOCHASTIC_REFERENCES]
    fixed = [r for r in compare.references if r not in STOCHASTIC_REFERENCES]
    note = f"{compare.heldout_episodes} held-out episodes per evaluation"
    note += f"; {', '.join(drawn)} once per seed ({seeds})" if drawn else ""
    note += f"; {', '.join(fixed)} once (deterministic)." if fixed else "."
    return "\n".join(_table(header, rows) + [note])
