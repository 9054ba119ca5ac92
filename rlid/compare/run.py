"""``rlid compare``: arms x environments x seeds under one budget, with a report.

Evaluates the untrained reference arms (random floor, walkthrough ceiling:
``rlid.compare.reference``) into ``OUT/reference/``, then runs every (arm, env,
seed) of a comparison config (``rlid.compare.config``) sequentially, each a normal
run directory ``OUT/runs/ARM-seedN`` trained by ``run_training`` until the shared budget in the chosen currency is spent; then
evaluates held-out games and writes ``OUT/report.md``, ``OUT/results.json`` and
the plots (``rlid.compare.report``).

Resumable at run granularity: a run whose ``eval.json`` has its "after"
evaluation is reused as it is, a started one is resumed from its last checkpoint
(``resume=True``), and a run directory written by a different config is refused
before anything trains. So a killed comparison continues where it stopped.

    rlid compare --config examples/compare_small.toml --out runs/compare_small
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlid.compare.config import CompareConfig, RunSpec
from rlid.planes import run_training
from rlid.runs import dir as rundir
from rlid.runs.lock import RunLock
from rlid.runs.log import read_run_config

LEDGER = "runs.json"  # per-run status and accumulated seconds, across invocations


def run_state(run_dir: Path) -> str:
    """``"finished"`` (held-out "after" evaluated), ``"started"`` or ``"new"``."""
    eval_path = run_dir / "eval.json"
    if eval_path.exists() and "after" in rundir.read_json(eval_path):
        return "finished"
    if (run_dir / "config.json").exists():
        return "started"
    if not rundir.is_empty_dir(run_dir):
        raise ValueError(
            f"{run_dir} holds files but no config.json; it is not a run of this comparison "
            "(delete it or choose another --out)"
        )
    return "new"


def check_existing_run(run: RunSpec, run_dir: Path, state: str) -> None:
    """Refuse to reuse or resume a run directory trained with another config.

    ``state`` is the directory's :func:`run_state`.

    One difference is immaterial: a run that *finished* under
    ``interface.overflow="error"`` never met a menu larger than its label alphabet
    (one would have stopped it), so it is exactly the run ``"truncate"`` would have
    made, and is reused under a config that says ``"truncate"``.
    """
    if not (run_dir / "config.json").exists():
        return
    saved, _ = read_run_config(run_dir)
    planned, found = run.config.to_dict(), saved.to_dict()
    differing = sorted(k for k in planned.keys() | found.keys() if planned.get(k) != found.get(k))
    if differing == ["interface"] and state == "finished":
        overflow = {**found["interface"], "overflow": planned["interface"].get("overflow")}
        if overflow == planned["interface"] and found["interface"].get("overflow") == "error":
            return
    if differing:
        raise ValueError(
            f"{run_dir} was trained with a different config (differs in: "
            f"{', '.join(differing)}); use another --out, or delete that run to retrain it"
        )


def check_model_available(run: RunSpec) -> None:
    """A run still to train needs its starting model now, not hours into the comparison."""
    from rlid.models import TINY_NAME, TINY_RANDOM_NAME

    model = run.config.model
    if model in (TINY_NAME, TINY_RANDOM_NAME) or Path(model).expanduser().is_dir():
        return
    raise FileNotFoundError(
        f"{run.name}: its model directory {model!r} does not exist (relative paths are read "
        "from the current directory). Build or copy it first (a warm start of your own: "
        "`rlid pretrain ... --out DIR`), or leave the arm out with --arms"
    )


def heldout_path(out: Path, run: RunSpec) -> Path:
    return out / "heldout" / f"{run.name}.json"


def evaluate_heldout(compare: CompareConfig, run: RunSpec, out: Path) -> None:
    """Held-out games with options other than training's: evaluate the final checkpoint.

    When the held-out options equal the training options, the trainer's own
    before/after evaluation (split="heldout") already is this evaluation.
    """
    from rlid.runs.evaluate import evaluate_run

    env = next(e for e in compare.envs if e.name == run.env)
    path = heldout_path(out, run)
    if env.heldout_matches_train or path.exists():
        return
    stats = evaluate_run(
        out / "runs" / run.name, env=env.env_id, env_options=dict(env.heldout_options),
        split="heldout", episodes=compare.heldout_episodes,
    )  # fmt: skip
    rundir.write_json(path, {"after": stats})


def reference_path(out: Path, env: str, reference: str, seed: int) -> Path:
    return out / "reference" / env / f"{reference}-seed{seed}.json"


def evaluate_references(
    compare: CompareConfig, out: Path, *, say: Callable[[str], None] = print
) -> None:
    """Floor / ceiling arms (``rlid.compare.reference``) on every env's held-out games;
    cheap (no model), done before training so a missing walkthrough fails first.
    Finished ones are reused. The random arm runs once per seed; the walkthrough is
    deterministic (the same games, the same commands), so it runs for the first seed."""
    from rlid.compare.reference import evaluate_reference

    for env in compare.envs:
        for reference in compare.references:
            seeds = compare.seeds if reference == "random" else compare.seeds[:1]
            for seed in seeds:
                path = reference_path(out, env.name, reference, seed)
                if path.exists():
                    continue
                stats = evaluate_reference(
                    reference, env.env_id, dict(env.heldout_options),
                    episodes=compare.heldout_episodes, seed=seed, interface=compare.interface,
                )  # fmt: skip
                rundir.write_json(path, {"reference": reference, "seed": seed, "after": stats})
            say(f"reference {reference} on {env.name}: evaluated")


def run_comparison(
    compare: CompareConfig,
    out: Path,
    *,
    progress: bool = True,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Train and evaluate every run (reusing finished ones), then write the report.

    Returns the results dictionary that is also written to ``OUT/results.json``.
    ``OUT`` is locked for the whole comparison (:mod:`rlid.runs.lock`): a second
    ``rlid compare`` into it fails at once, naming the first.
    """
    out = Path(out)
    check_output_dir(out)
    out.mkdir(parents=True, exist_ok=True)
    with RunLock(out, "rlid compare"):
        return _run_locked(compare, out, progress=progress, say=say)


def launch_processes(run: RunSpec, out: Path, *, resume: bool, progress: bool) -> None:
    """Train one run with ``run.nproc`` processes under torchrun (one machine, gloo on
    CPU / nccl on CUDA): the same run directory, budget and groups as one process
    would use (``rlid.distributed``). The config travels as JSON in ``OUT/launch/``.
    """
    import json
    import subprocess
    import sys

    spec = "resume"
    if not resume:
        path = out / "launch" / f"{run.name}.json"
        rundir.write_json(path, run.config.to_dict())
        spec = str(path)
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc-per-node={run.nproc}", "-m", "rlid.compare.launch",
        str(out / "runs" / run.name), spec, json.dumps(progress),
    ]  # fmt: skip
    code = subprocess.run(command, check=False).returncode
    if code:
        raise RuntimeError(
            f"{run.name}: the {run.nproc} training processes exited with code {code} (their "
            "errors are printed above); the run directory keeps its last checkpoint, so the "
            "same `rlid compare` command resumes it"
        )


def check_output_dir(out: Path) -> None:
    """``--out`` must be new, empty, or an earlier output of ``rlid compare``."""
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out {out} is a file; give a directory")
    if not rundir.is_empty_dir(out) and not (out / "comparison.json").is_file():
        raise ValueError(
            f"--out {out} already holds files and is not the output of `rlid compare` (no "
            "comparison.json); choose a new or empty directory so nothing there is overwritten"
        )


def _run_locked(
    compare: CompareConfig, out: Path, *, progress: bool, say: Callable[[str], None]
) -> dict[str, Any]:
    from rlid.compare.report import write_report

    check_output_dir(out)  # again, now that no other comparison can write here
    runs = compare.runs()
    states = {}
    for run in runs:  # every check before any training
        run_dir = out / "runs" / run.name
        states[run.name] = run_state(run_dir)
        check_existing_run(run, run_dir, states[run.name])
        if states[run.name] != "finished":
            check_model_available(run)
    rundir.write_json(out / "comparison.json", compare.to_dict())
    ledger_path = out / LEDGER
    ledger: dict[str, Any] = rundir.read_json(ledger_path) if ledger_path.exists() else {}
    evaluate_references(compare, out, say=say)

    for i, run in enumerate(runs, 1):
        run_dir = out / "runs" / run.name
        state = states[run.name]
        entry = ledger.setdefault(run.name, {"seconds": 0.0, "history": []})
        if state == "finished":
            say(f"[{i}/{len(runs)}] {run.name}: finished earlier, reused")
            entry["history"].append("reused")
        else:
            verb = "resuming" if state == "started" else "training"
            say(f"[{i}/{len(runs)}] {run.name}: {verb} ({run.config.plane}, seed {run.seed})")
            start = time.perf_counter()
            try:
                if run.nproc > 1:
                    launch_processes(run, out, resume=state == "started", progress=progress)
                elif state == "started":
                    run_training(None, run_dir, resume=True, progress=progress)
                else:
                    run_training(run.config, run_dir, resume=False, progress=progress)
            finally:
                entry["seconds"] += time.perf_counter() - start
                entry["history"].append("resumed" if state == "started" else "trained")
                rundir.write_json(ledger_path, ledger)
            say(f"    {run.name}: done in {entry['seconds']:.1f}s")
        evaluate_heldout(compare, run, out)
    rundir.write_json(ledger_path, ledger)

    results = write_report(compare, out, ledger=ledger)
    say(f"report: {out / 'report.md'}")
    return results
