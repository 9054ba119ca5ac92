"""A run's ``curves.png``: what moved, against env steps, in one figure.

The top row is the outcome: success, return and episode length of the training
rollouts (thin, per iteration) beside the held-out evaluation (thick, with markers:
before training at the run's start, every ``eval_every`` iterations, after training;
each panel's title gives its held-out values before -> after), and the label mass.
The row below holds the update's diagnostics. The figure's title names the run, its
env and options, plane, seed and budget. Rates are drawn on a fixed 0-1 axis, episode
length and a non-negative return from 0, and other quantities on an axis no narrower
than a tenth of their size, so noise in the third decimal does not look like a trend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlid.runs import dir as rundir
from rlid.runs.files import new_figure, save_figure

OUTCOME_PANELS = (
    ("success", "success rate"),
    ("return", "episode return"),
    ("episode_length", "episode length (steps)"),
)
CURVE_PANELS = (
    ("rollout_label_mass", "label mass (1 - leakage)"),
    ("rollout_entropy", "row entropy H(pi(.|s))"),
    ("label_marginal_kl_uniform", "label-marginal KL to uniform"),
    ("position_bias", "position bias (unbiased, sizes pooled)"),
    ("clip_frac", "clip fraction"),
    ("approx_kl", "approx KL to rollout policy"),
    ("invalid_rate", "invalid-action rate"),
)
RATES = {"success", "rollout_label_mass", "clip_frac", "invalid_rate"}
TRAIN_COLOUR, HELD_OUT_COLOUR = "#7f9fbf", "#d95f02"


def _series(metrics: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for row in metrics:
        value = row.get(key)
        if isinstance(value, int | float):
            xs.append(row["budget"]["env_steps"])
            ys.append(float(value))
    return xs, ys


def held_out_series(
    metrics: list[dict[str, Any]], evals: dict[str, Any], key: str
) -> tuple[list[float], list[float]]:
    """Held-out ``key`` against env steps: the evaluation before training (at the first
    iteration's start), each periodic one (``eval`` of a metrics row), the one after."""
    points: list[tuple[float, float]] = []
    before = (evals.get("before") or {}).get(key)
    if isinstance(before, int | float):  # the starting model, no env step spent
        points.append((0.0, float(before)))
    for row in metrics:
        value = (row.get("eval") or {}).get(key)
        if isinstance(value, int | float):
            points.append((float(row["budget"]["env_steps"]), float(value)))
    after = (evals.get("after") or {}).get(key)
    if isinstance(after, int | float) and metrics:
        points.append((float(metrics[-1]["budget"]["env_steps"]), float(after)))
    points = list(dict.fromkeys(points))  # a periodic evaluation at the end, once
    return [x for x, _ in points], [y for _, y in points]


def _limits(ax: Any, key: str, values: list[float], cap: float | None) -> None:
    """Rates on 0-1; episode length from 0 to the step limit ``cap`` (truncation on
    top); a return that is never negative from 0; anything else no narrower than a
    tenth of its size."""
    if key in RATES:
        ax.set_ylim(-0.04, 1.04)
        return
    if not values:
        return
    low, high = min(values), max(values)
    if key == "episode_length":
        ax.set_ylim(0, 1.05 * max(high, cap or 0.0))
        return
    if key == "return" and low >= 0 and high > 0:  # from 0: a small gain looks small
        ax.set_ylim(0, 1.08 * high)
        return
    span = max(high - low, 0.1 * max(abs(low), abs(high)), 1e-3)
    middle = (low + high) / 2
    ax.set_ylim(middle - 0.6 * span, middle + 0.6 * span)


def _title(run_dir: Path, config: dict[str, Any], metrics: list[dict[str, Any]]) -> str:
    """``run: env (options), plane plane, algo, budget, seed``."""
    options = ", ".join(f"{k}={v}" for k, v in (config.get("env_options") or {}).items())
    algo = config.get("algo") or "ppo"
    steps = metrics[-1]["budget"].get("env_steps", 0)
    return (
        f"{Path(run_dir).name}: {config.get('env', '?')}" + (f" ({options})" if options else "")
        + f", {config.get('plane', '?')} plane, {algo}, seed {config.get('seed', '?')}, "
        f"{len(metrics)} iterations, {steps:,} env steps"
    )  # fmt: skip


def _panel_grid(fig: Any, top: int, rest: int) -> list[Any]:
    """The outcome row (``top`` wide panels) above the diagnostics (``rest`` narrower
    ones, up to 6 a row) on a 12-column grid."""
    per_row = min(rest, 6) if rest else 0
    rows = 1 + (-(-rest // per_row) if rest else 0)
    grid = fig.add_gridspec(rows, 12, height_ratios=[1.25] + [1] * (rows - 1))
    axes = [fig.add_subplot(grid[0, i * (12 // top) : (i + 1) * (12 // top)]) for i in range(top)]
    for j in range(rest):
        row, col = 1 + j // per_row, j % per_row
        width = 12 // per_row
        axes.append(fig.add_subplot(grid[row, col * width : (col + 1) * width]))
    return axes


def write_curves(run_dir: Path, metrics: list[dict[str, Any]]) -> Path | None:
    """``curves.png`` of the run directory ``run_dir`` (its ``eval.json`` and
    ``config.json`` read for the held-out points and the title).

    Uses matplotlib's object API (:func:`rlid.runs.files.new_figure`): the caller's
    pyplot backend is left alone (training inside a notebook does not switch it).
    """
    if not metrics:
        return None
    run_dir = Path(run_dir)
    evals = rundir.read_json(run_dir / "eval.json") if (run_dir / "eval.json").exists() else {}
    raw = rundir.read_json(run_dir / "config.json") if (run_dir / "config.json").exists() else {}
    config = (raw or {}).get("config") or {}
    cap = (config.get("env_options") or {}).get("max_episode_steps")
    cap = float(cap) if isinstance(cap, int | float) else None
    top = [(k, t) for k, t in OUTCOME_PANELS if _series(metrics, k)[0]]
    top += [p for p in CURVE_PANELS[:1] if _series(metrics, p[0])[0]]
    rest = [p for p in CURVE_PANELS[1:] if _series(metrics, p[0])[0]]
    rows = 1 + (-(-len(rest) // 6) if rest else 0)
    fig = new_figure(figsize=(17, 3.9 + 3.0 * (rows - 1)))
    axes = _panel_grid(fig, max(len(top), 1), len(rest))
    panels = list(zip(axes, top + rest))
    right = max(float(row["budget"]["env_steps"]) for row in metrics)
    for ax, (key, title) in panels:
        xs, ys = _series(metrics, key)
        shown = list(ys)
        outcome = key in dict(OUTCOME_PANELS)
        ax.plot(xs, ys, marker=".", lw=1, color=TRAIN_COLOUR, label="training rollouts")
        if outcome:
            hx, hy = held_out_series(metrics, evals, key)
            if hx:
                ax.plot(
                    hx, hy, marker="o", lw=2.2, color=HELD_OUT_COLOUR, label="held-out (greedy)"
                )
                title += f"\nheld-out {hy[0]:.2f} -> {hy[-1]:.2f}" if len(hy) > 1 else ""
                shown += hy
        if key == "episode_length" and cap is not None:
            ax.axhline(cap, color="grey", lw=0.8, ls="--")
            ax.annotate("step limit", (0, cap), xytext=(2, -10), textcoords="offset points",
                        fontsize=7, color="grey")  # fmt: skip
        _limits(ax, key, shown, cap)
        ax.set_xlim(-0.02 * right, 1.02 * right)  # every panel on the same axis, from 0
        ax.set_title(title, fontsize=10 if outcome else 9, fontweight="bold" if outcome else None)
        ax.set_xlabel("env steps", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="upper right", fontsize=9, ncol=2, frameon=False)
    fig.suptitle(_title(run_dir, config, metrics), fontsize=11, x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return save_figure(fig, run_dir / "curves.png", dpi=90)
