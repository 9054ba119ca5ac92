"""A short markdown summary of a run directory, with its setup (what ``rlid train``
prints as a run starts); its curves are :mod:`rlid.runs.curves`."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

import torch

from rlid.config.registry import get_plane
from rlid.runs import dir as rundir
from rlid.runs import health
from rlid.runs.curves import write_curves
from rlid.runs.pin import WEIGHT_SUFFIXES
from rlid.runs.software import describe_software

__all__ = ["setup_lines", "write_curves", "write_summary"]


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


def resolved_hardware(config: Any) -> tuple[int, str]:
    """(torch threads, device) this process runs ``config`` with: ``threads`` unset is
    torch's default, ``device="auto"`` the first CUDA device where there is one."""
    device = str(getattr(config, "device", "cpu"))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    threads = getattr(config, "threads", None)
    return (torch.get_num_threads() if threads is None else int(threads)), device


def _options(options: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in options.items()) or "defaults"


@functools.lru_cache(maxsize=8)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _weights_sha256(pin: dict[str, Any]) -> str:
    """``model.safetensors sha256 ...`` (what ``sha256sum`` prints) of a start with one
    weight file; of several, the run's pin digest over them (:mod:`rlid.runs.pin`)."""
    folder = Path(pin["path"]) if pin.get("path") else None
    files = []
    if folder is not None and folder.is_dir():
        files = sorted(p for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES)
    if len(files) == 1:
        stat = files[0].stat()
        digest = _file_sha256(str(files[0]), stat.st_size, stat.st_mtime_ns)
        return f"{files[0].name} sha256 {digest}"
    if pin.get("sha256"):
        return f"weights digest {pin['sha256']} (sha256 over its weight files)"
    return ""


def _start_model(config: Any, pin: dict[str, Any] | None) -> str:
    pin = pin or {}
    origin = pin.get("origin")
    if origin == "fresh":
        return f"{config.model} (fresh random initialisation: no weights file)"
    where = f" {pin['path']}" if pin.get("path") else ""
    sha = _weights_sha256(pin)
    return f"{config.model} ({origin or 'origin unknown'}){where}" + (f", {sha}" if sha else "")


def setup_lines(run_dir: Path, config: Any) -> list[str]:
    """The run's resolved configuration, one item a line: starting model (with its
    sha256), env and options, plane and algorithm, budget, evaluation, output directory,
    threads and device. ``rlid train`` prints it as a run starts; ``summary.md`` holds it."""
    threads, device = resolved_hardware(config)
    pin = run_config(run_dir).get("start_model")
    plane = get_plane(config.plane)
    if plane.generates_text:
        algorithm = f"{getattr(config, 'algo', '?')} ({config.plane} plane)"
    else:
        algorithm = f"PPO, {config.advantage} advantages{_episode_weight(config)}"
        if getattr(config, "norm", None) is not None:  # the scoring plane's normalisation
            algorithm += f", action scoring ({config.norm}-normalised)"
    evals = f"{config.eval_episodes} held-out episodes (greedy) before and after training"
    if config.eval_every:
        evals += f" and every {config.eval_every} iterations"
    threads_text = f"{threads}" + ("" if config.threads is not None else " (torch's default)")
    return [
        f"- model: {_start_model(config, pin)}",
        f"- env: {config.env} ({_options(config.env_options)}), seed {config.seed}",
        f"- plane: {config.plane}; algorithm: {algorithm}; lr {config.lr:g}",
        f"- budget: {config.steps:,} {config.budget_currency}, {config.groups_per_iter} games x "
        f"{config.group_size} episodes an iteration; checkpoint every "
        f"{config.checkpoint_every} iterations",
        f"- evaluation: {evals}",
        f"- output: {Path(run_dir)}",
        f"- threads: {threads_text}; device: {device} ({getattr(config, 'dtype', 'float32')}, "
        f"mixed precision {getattr(config, 'mixed_precision', 'none')})",
    ]


def budget_stop_lines(config: Any, budget: dict[str, Any]) -> list[str]:
    """Where the budget was reached inside an iteration: what that iteration played."""
    skipped = int(budget.get("groups_skipped", 0))
    if not skipped:
        return []
    currency = config.budget_currency
    spent = budget.get(currency, 0)
    return [
        "",
        f"The budget ({_fmt(config.steps)} {currency}) was reached during the last "
        f"iteration: it finished the episodes in flight ({_fmt(spent)} {currency} in all) "
        f"and did not start {skipped} more group(s) of episodes; it updated on the "
        "groups it played.",
    ]


def write_summary(run_dir: Path, config: Any, metrics: list[dict[str, Any]]) -> Path:
    """``summary.md``: setting, held-out before/after, last iteration, budget."""
    run_dir = Path(run_dir)
    evals = rundir.read_json(run_dir / "eval.json") if (run_dir / "eval.json").exists() else {}
    lines = [f"# Run `{run_dir.name}`", ""]
    lines.append(f"**Model:** {describe_model_origin(config.model, evals.get('model_origin'))}")
    lines += ["", "## Setup", "", *setup_lines(run_dir, config), ""]
    seen = []
    if evals.get("prompt_template"):
        seen.append(f"prompt template {evals['prompt_template']}")
    peaks = [r["gpu_memory"]["peak_allocated_gib"] for r in metrics if r.get("gpu_memory")]
    if peaks:
        seen.append(f"peak GPU memory {max(peaks):.2f} GiB allocated (largest iteration)")
    if seen:
        lines += [", ".join(seen), ""]
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
        lines += ["", *health.summary_lines(config, metrics, run_dir)]
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
        lines += budget_stop_lines(config, last["budget"])
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
