"""Curves (PNG) and a short markdown summary of a run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlid.runs import dir as rundir
from rlid.runs.files import new_figure, save_figure
from rlid.runs.software import describe_software

CURVE_PANELS = (
    ("return", "episode return"),
    ("success", "success rate"),
    ("rollout_entropy", "row entropy H(pi(.|s))"),
    ("label_marginal_kl_uniform", "label-marginal KL to uniform"),
    ("position_bias", "position bias (unbiased, sizes pooled)"),
    ("rollout_label_mass", "label mass (1 - leakage)"),
    ("clip_frac", "clip fraction"),
    ("approx_kl", "approx KL to rollout policy"),
    ("invalid_rate", "invalid-action rate"),
)


def _series(metrics: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for row in metrics:
        value = row.get(key)
        if isinstance(value, int | float):
            xs.append(row["budget"]["env_steps"])
            ys.append(float(value))
    return xs, ys


def write_curves(run_dir: Path, metrics: list[dict[str, Any]]) -> Path | None:
    """``curves.png``: one panel per logged quantity against env steps.

    Uses matplotlib's object API (:func:`rlid.runs.files.new_figure`): the caller's pyplot backend is
    left alone (training inside a notebook does not switch it).
    """
    if not metrics:
        return None
    panels = [(k, t) for k, t in CURVE_PANELS if _series(metrics, k)[0]]
    cols = 4
    rows = (len(panels) + cols - 1) // cols
    fig = new_figure(figsize=(4 * cols, 3 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, (key, title) in zip(axes.flat, panels):
        xs, ys = _series(metrics, key)
        ax.plot(xs, ys, marker=".", lw=1)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("env steps", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.tight_layout()
    return save_figure(fig, Path(run_dir) / "curves.png", dpi=90)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


_ORIGINS = {
    "shipped": "the shipped warm start (the tiny model taught by the menus' marks on "
    "training games; rlid/data/start/manifest.json says how it was built)",
    "warm": "the random-play warm start (language-model pretraining on random-play "
    "transcripts: it reads menus and writes commands, but knows no task)",
    "fresh": "**fresh random initialisation** of the tiny model, not warm-started "
    "(expect slow or no learning; `--model tiny` is the shipped warm start)",
    "local": "local Hugging Face model directory",
}


def describe_model_origin(model: str, origin: str | None) -> str:
    """One line saying where the run's starting weights came from."""
    text = _ORIGINS.get(origin or "", f"origin {origin or 'unknown'}")
    return f"`{model}`: {text}"


def run_config(run_dir: Path) -> dict[str, Any]:
    """A run's ``config.json`` as written (empty for a run directory without one)."""
    path = Path(run_dir) / "config.json"
    return (rundir.read_json(path) or {}) if path.exists() else {}


def run_software(raw: dict[str, Any]) -> list[str]:
    """The code that trained a run, as text: at its start, then at each resume by other
    code (``software`` and ``resumed_with`` of its ``config.json``, ``run_config``)."""
    found = [describe_software(raw.get("software"))]
    for resume in raw.get("resumed_with") or []:
        found.append(
            f"{describe_software(resume.get('software'))} "
            f"(resumed after iteration {resume.get('after_iteration')})"
        )
    return found


def software_lines(run_dir: Path) -> list[str]:
    return ["trained by " + "; then ".join(run_software(run_config(run_dir))), ""]


def _episode_weight(config: Any) -> str:
    if not config.weighs_episodes:
        return ""
    step = config.step_group_coef
    step_text = f", plus {step:g} x step-level (same-state) group advantages" if step else ""
    if config.resolved_episode_weight == "equal":
        return ", every episode of a group weighing the same" + step_text
    return ", episodes weighing their length" + step_text


def write_summary(run_dir: Path, config: Any, metrics: list[dict[str, Any]]) -> Path:
    """``summary.md``: setting, held-out before/after, last iteration, budget."""
    run_dir = Path(run_dir)
    evals = rundir.read_json(run_dir / "eval.json") if (run_dir / "eval.json").exists() else {}
    lines = [f"# Run `{run_dir.name}`", ""]
    lines.append(f"**Model:** {describe_model_origin(config.model, evals.get('model_origin'))}")
    lines.append("")
    lines.append(
        f"plane **{config.plane}**, env **{config.env}** {config.env_options or ''}, "
        f"model `{config.model}` ({evals.get('model_origin', '?')}), seed {config.seed}, "
        f"advantage {config.advantage}{_episode_weight(config)}"
    )
    lines.append("")
    hardware = (
        f"device {getattr(config, 'device', 'cpu')}, dtype {getattr(config, 'dtype', 'float32')}, "
        f"mixed precision {getattr(config, 'mixed_precision', 'none')}"
    )
    if evals.get("prompt_template"):
        hardware += f", prompt template {evals['prompt_template']}"
    peaks = [r["gpu_memory"]["peak_allocated_gib"] for r in metrics if r.get("gpu_memory")]
    if peaks:
        hardware += f", peak GPU memory {max(peaks):.2f} GiB allocated (largest iteration)"
    lines.append(hardware)
    lines.append("")
    lines += software_lines(run_dir)
    lines.append("## Held-out evaluation")
    lines.append("")
    keys = ["success", "return", "normalized_score", "episode_length", "invalid_rate", "episodes"]
    lines.append("| | " + " | ".join(keys) + " |")
    lines.append("|---|" + "---|" * len(keys))
    for when in ("before", "after"):
        stats = evals.get(when)
        if stats:
            lines.append(f"| {when} | " + " | ".join(_fmt(stats.get(k, "")) for k in keys) + " |")
    if metrics:
        last = metrics[-1]
        lines += ["", f"## Last iteration ({last['iteration']})", ""]
        shown = ["return", "success", "episode_length", "rollout_entropy", "label_marginal_kl_uniform",
                 "position_bias", "rollout_label_mass", "clip_frac", "approx_kl", "loss"]  # fmt: skip
        for key in shown:
            if key in last:
                lines.append(f"- {key}: {_fmt(last[key])}")
        lines += ["", "## Budget", ""]
        for key, value in last["budget"].items():
            lines.append(f"- {key}: {_fmt(value)}")
        total_time: dict[str, float] = {}
        for row in metrics:
            for phase, sec in row.get("time", {}).items():
                total_time[phase] = total_time.get(phase, 0.0) + sec
        if total_time:
            lines += ["", "## Wall time by phase (s)", ""]
            for phase, sec in sorted(total_time.items()):
                lines.append(f"- {phase}: {sec:.1f}")
    lines += ["", "![curves](curves.png)", ""]
    path = run_dir / "summary.md"
    rundir.atomic_write_text(path, "\n".join(lines))
    return path
