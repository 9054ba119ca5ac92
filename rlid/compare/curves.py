"""Learning curves against every budget currency, and who leads on each axis.

A curve point is one training iteration: x = the run's cumulative counter in a
currency after that iteration, y = the iteration's rollout success (or return).
Curves are *step functions*: the value at spend x is the last iteration that had
spent at most x ("the best known performance for x"), undefined before the first
iteration. The mean over seeds starts where every seed is defined; a seed that
stopped spending earlier keeps its last value there (what it reached with at most
that spend). Arms spend currencies at different rates (a token arm
runs max_new_tokens forward passes per decision, the decision arm one), so the arm
that leads on the env-step axis may trail on the forward-pass axis; each currency
gets its own figure, and the leader table compares arms on the window every arm
reached ("common window").
"""

from __future__ import annotations

import bisect
from pathlib import Path
from typing import Any

import numpy as np

from rlid.config.budget import CURRENCIES
from rlid.runs.files import new_figure, save_figure

METRICS = ("success", "return")


def run_series(rows: list[dict[str, Any]], currency: str, metric: str) -> tuple[list, list]:
    """``(x, y)`` of one run: cumulative spend in ``currency`` and the metric per iteration."""
    xs, ys = [], []
    for row in rows:
        value = row.get(metric)
        if isinstance(value, int | float):
            xs.append(float(row["budget"][currency]))
            ys.append(float(value))
    return xs, ys


def step_value(xs: list[float], ys: list[float], at: float) -> float | None:
    """The last ``y`` whose ``x <= at``; None before the first point."""
    i = bisect.bisect_right(xs, at)
    return ys[i - 1] if i else None


def mean_curve(series: list[tuple[list, list]]) -> dict[str, list[float]] | None:
    """Mean, min and max over seeds of step curves, on the union of their x values.

    None when the arm never spends this currency (all x are zero).
    """
    series = [(x, y) for x, y in series if x]
    if not series or all(x[-1] == 0 for x, _ in series):
        return None
    start = max(x[0] for x, _ in series)
    end = max(x[-1] for x, _ in series)
    grid = sorted({v for x, _ in series for v in x if start <= v <= end})
    values = np.array([[step_value(x, y, g) for g in grid] for x, y in series], dtype=float)
    return {
        "x": grid,
        "mean": values.mean(axis=0).tolist(),
        "min": values.min(axis=0).tolist(),
        "max": values.max(axis=0).tolist(),
        "seeds": len(series),
    }


def window_stats(curve: dict[str, list[float]], start: float, end: float) -> dict[str, float]:
    """Value at ``end`` and the step curve's average over ``[start, end]`` (its AUC / width)."""
    xs, ys = curve["x"], curve["mean"]

    def value(at: float) -> float:
        y = step_value(xs, ys, at)
        if y is None:
            raise ValueError(f"window start {start} lies before the curve's first point {xs[0]}")
        return y

    at_end = value(end)
    if end <= start:
        return {"at_end": at_end, "auc": at_end}
    cuts = [start] + [x for x in xs if start < x < end] + [end]
    area = sum(value(a) * (b - a) for a, b in zip(cuts[:-1], cuts[1:]))
    return {"at_end": at_end, "auc": area / (end - start)}


def _spent(curve: dict[str, Any] | None) -> dict[str, Any]:
    if curve is None:  # every metric of an arm is spent on the same x values
        raise ValueError("an arm has a curve for one metric but not another")
    return curve


def leaders(curves: dict[str, dict[str, dict[str, Any] | None]]) -> dict[str, Any]:
    """Per metric: the common window of the arms' mean curves, each arm's value, the leader.

    ``curves[metric][arm]`` is a :func:`mean_curve`. Ties in the first metric are broken
    by the second (success, then return). Only arms that spend the currency take part,
    and with fewer than two of them there is no window and no leader.
    """
    spent = {a: c for a, c in curves[METRICS[0]].items() if c is not None}
    arms = list(spent)
    if len(arms) < 2:  # nothing to compare on an axis only one arm spends
        return {"window": None, "arms": {}, "leader_at_end": None, "leader_auc": None}
    start = max(spent[a]["x"][0] for a in arms)
    end = min(spent[a]["x"][-1] for a in arms)
    if start > end:
        return {"window": [start, end], "arms": {}, "leader_at_end": None, "leader_auc": None}
    table = {a: {m: window_stats(_spent(curves[m][a]), start, end) for m in METRICS} for a in arms}
    out: dict[str, Any] = {"window": [start, end], "arms": table}
    for key, stat in (("leader_at_end", "at_end"), ("leader_auc", "auc")):
        scores = {a: tuple(table[a][m][stat] for m in METRICS) for a in arms}
        best = max(scores.values())
        out[key] = [a for a in arms if scores[a] == best]
    return out


def curves_for(runs_rows: dict[str, list[list[dict]]]) -> dict[str, Any]:
    """``{currency: {"curves": {metric: {arm: mean_curve}}, "leaders": ...}}``.

    ``runs_rows[arm]`` holds the metrics rows of each of the arm's seeds.
    """
    out = {}
    for currency in CURRENCIES:
        curves = {
            m: {arm: mean_curve([run_series(r, currency, m) for r in rows])
                for arm, rows in runs_rows.items()}
            for m in METRICS
        }  # fmt: skip
        out[currency] = {"curves": curves, "leaders": leaders(curves)}
    return out


# ---------------------------------------------------------------------------- plots
def plot_currency(
    entry: dict[str, Any], currency: str, title: str, path: Path, *, budget: float | None
) -> Path:
    """Success and return against one currency: every arm's seed mean, min-max band."""

    fig = new_figure(figsize=(11, 3.8))
    axes = fig.subplots(1, len(METRICS))
    window = entry["leaders"]["window"]
    for ax, metric in zip(axes, METRICS):
        for i, (arm, curve) in enumerate(entry["curves"][metric].items()):
            color = f"C{i}"
            if curve is None:
                ax.plot([], [], color=color, label=f"{arm} (spends none)")
                continue
            label = f"{arm} ({curve['seeds']} seeds)"
            ax.step(
                curve["x"], curve["mean"], where="post", color=color, label=label,
                marker="o", markersize=3,
            )  # fmt: skip
            ax.fill_between(
                curve["x"], curve["min"], curve["max"], step="post", color=color, alpha=0.15
            )
        if window and window[0] <= window[1]:
            ax.axvline(window[1], color="gray", linestyle="--", linewidth=1)
        if budget is not None:
            ax.axvline(budget, color="black", linestyle=":", linewidth=1)
        ax.set_xlabel(currency + (" (s)" if currency == "wall_time" else ""))
        ax.set_ylabel(f"training {metric}")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{title}: mean over seeds (band: min-max); dashed: end of common window")
    fig.tight_layout()
    return save_figure(fig, path, dpi=100)


# (reference arm, legend label, line style) drawn across the held-out plot
_REFERENCE_LINES = (
    ("random", "random floor", "--"),
    ("afterstate", "afterstate marks", "-."),
    ("walkthrough", "walkthrough ceiling", ":"),
)


def plot_heldout(
    table: dict[str, dict[str, Any]],
    title: str,
    path: Path,
    references: dict[str, dict[str, Any]] | None = None,
) -> Path:
    """Held-out success and return per arm: seed mean with the bootstrap interval.

    Horizontal bars (one row per arm, so long arm names stay readable however many
    arms there are), a black diamond at the arm's held-out value before training,
    and the reference arms (``random`` floor, ``afterstate`` marks, ``walkthrough``
    ceiling) as vertical lines where ``references`` has them.
    """

    arms = [a for a in table if table[a]["heldout"]["after"]["success"] is not None]
    height = max(2.6, 1.4 + 0.38 * len(arms))
    fig = new_figure(figsize=(10, height + 0.4))
    axes = fig.subplots(1, len(METRICS), sharey=True)
    rows = list(range(len(arms)))[::-1]  # first arm on top
    for ax, metric in zip(axes, METRICS):
        iv = [table[a]["heldout"]["after"][metric] for a in arms]
        means = [v["mean"] for v in iv]
        err = [
            [m - v["low"] for m, v in zip(means, iv)],
            [v["high"] - m for m, v in zip(means, iv)],
        ]
        ax.barh(rows, means, xerr=err, capsize=3, color=[f"C{i}" for i in range(len(arms))])
        before = [(table[a]["heldout"].get("before") or {}).get(metric) for a in arms]
        marks = [(b["mean"], y) for b, y in zip(before, rows) if b is not None]
        if marks:
            ax.scatter([m for m, _ in marks], [y for _, y in marks], marker="D", s=18,
                       color="black", zorder=3, label="before training")  # fmt: skip
        for key, label, style in _REFERENCE_LINES:
            ref = ((references or {}).get(key) or {}).get("heldout", {}).get(metric)
            if ref is not None:
                ax.axvline(ref["mean"], color="grey", linestyle=style, linewidth=1, label=label)
        ax.set_yticks(rows, arms)
        ax.set_xlabel(f"held-out {metric}")
        ax.grid(axis="x", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:  # one legend under the plots, clear of the bars
        fig.legend(handles, labels, loc="lower center", ncol=len(handles), fontsize=8,
                   frameon=False)  # fmt: skip
    fig.suptitle(f"{title}: held-out after training, seed mean, 95% bootstrap interval")
    fig.tight_layout(rect=(0, 0.4 / (height + 0.4) if handles else 0, 1, 1))
    return save_figure(fig, path, dpi=100)
