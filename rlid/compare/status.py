"""``rlid compare --status``: where every run of a comparison stands, read-only.

Reads what the runs and their claims have written (``metrics.jsonl``, ``eval.json``,
the ledger, the claim records) without taking any lock, so it is safe to call while
``rlid compare`` processes train into the same ``--out``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlid.compare.config import CompareConfig
from rlid.compare.report import load_run
from rlid.compare.run import CLAIMS, check_model_available, read_ledger, run_state
from rlid.runs import dir as rundir
from rlid.runs.lock import recorded_holder


def comparison_status(compare: CompareConfig, out: Path) -> list[dict[str, Any]]:
    """One row per run: name, state, holder, budget spent, iterations, success, seconds.

    ``success`` is a finished run's held-out success after training; ``last_eval``, for
    a run not finished yet, its latest held-out evaluation along training (``eval_every``
    rows of ``metrics.jsonl``: ``{"success", "at"}``, ``at`` in the budget's currency),
    else None.

    ``left_s``, for a started run not finished: the seconds of training its budget
    still needs at its pace so far (the iterations' wall time per unit of the budget
    spent, from ``metrics.jsonl``; evaluations and start-up not counted), else None.

    ``state`` is ``finished`` (held-out "after" evaluated), ``training`` (a live
    process holds its claim), ``stopped`` (started, unfinished, unclaimed: the
    next ``rlid compare`` resumes it) or ``new``. ``missing_model`` names the model
    directory a stopped or new run starts from when it does not exist (the next
    ``rlid compare`` would refuse to start until it does), else ``""``.
    """
    out = Path(out)
    ledger = read_ledger(out)
    rows = []
    for run in compare.runs():
        run_dir = out / "runs" / run.name
        state = run_state(run_dir)
        # the claim's holder; or the run directory's own (a run resumed with `rlid train`)
        holder = recorded_holder(out / CLAIMS / run.name) or recorded_holder(run_dir)
        success = None
        if state == "finished":  # as the report reads it (held-out games' own file first)
            loaded = load_run(out, run)
            metrics, success = loaded["rows"], loaded["heldout"]["after"].get("success")
        else:
            metrics = rundir.read_metrics(run_dir)
            if holder is not None:
                state = "training"
            elif state == "started":
                state = "stopped"
        spent = metrics[-1]["budget"].get(compare.currency, 0) if metrics else 0
        last_eval = None  # an unfinished run's latest held-out evaluation (eval_every)
        if state != "finished":
            row = next((m for m in reversed(metrics) if "eval" in m), None)
            if row is not None:
                at = row["budget"].get(compare.currency, 0)
                last_eval = {"success": row["eval"].get("success"), "at": at}
        left_s = None  # a started run's training time left, at its pace so far
        pace = metrics[-1]["budget"].get("wall_time", 0.0) if metrics else 0.0
        if state in ("training", "stopped") and spent > 0 and pace > 0:
            left_s = max(compare.amount - spent, 0) * pace / spent
        missing_model = ""
        if state in ("stopped", "new"):
            try:
                check_model_available(run)
            except FileNotFoundError:
                missing_model = run.config.model
        rows.append(
            {
                "run": run.name,
                "state": state,
                "holder": holder["text"] if holder is not None and state == "training" else "",
                "spent": spent,
                "budget": compare.amount,
                "iterations": len(metrics),
                "success": success,
                "last_eval": last_eval,
                "seconds": float(ledger.get(run.name, {}).get("seconds", 0.0)),
                "left_s": left_s,
                "missing_model": missing_model,
                "build": run.build if missing_model else "",
            }
        )
    return rows


def format_status(rows: list[dict[str, Any]], currency: str) -> str:
    """A text table of :func:`comparison_status` and a line of totals."""
    header = ["run", "state", currency, "iterations", "success after", "seconds", "left",
              "trained by"]  # fmt: skip
    table = [header]
    for r in rows:
        shown = "" if r["success"] is None else f"{r['success']:.2f}"
        last = r.get("last_eval")
        if last is not None and last["success"] is not None:  # not finished: the latest so far
            shown = f"({last['success']:.2f} at {_number(last['at'])})"
        table.append(
            [
                r["run"],
                r["state"] + (" (no model)" if r["missing_model"] else ""),
                f"{_number(r['spent'])} / {_number(r['budget'])}",
                str(r["iterations"]),
                shown,
                f"{r['seconds']:.0f}" if r["seconds"] else "",
                _duration(r["left_s"]) if r.get("left_s") is not None else "",
                r["holder"],
            ]
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in table]
    counts = {s: sum(r["state"] == s for r in rows) for s in ("finished", "training", "stopped")}
    lines.append(
        f"{counts['finished']} of {len(rows)} runs finished, {counts['training']} training, "
        f"{counts['stopped']} stopped (the next `rlid compare` resumes them), "
        f"{len(rows) - sum(counts.values())} not started"
    )
    missing = sorted({r["missing_model"] for r in rows if r["missing_model"]})
    if missing:
        waiting = sum(bool(r["missing_model"]) for r in rows)
        lines.append(
            f"{waiting} of them cannot start yet: their model directory does not exist "
            f"({', '.join(missing)}; relative paths are read from the current directory)"
        )
        builds = {r["missing_model"]: r.get("build", "") for r in rows if r["missing_model"]}
        lines += [f"build {model} with: {cmd}" for model, cmd in sorted(builds.items()) if cmd]
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    """``~40 s``, ``~12 min``, ``~2.5 h``: an estimate, shown as one."""
    if seconds < 90:
        return f"~{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"~{seconds / 60:.0f} min"
    return f"~{seconds / 3600:.1f} h"


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() or value >= 100 else f"{value:.1f}"
