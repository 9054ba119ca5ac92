"""``rlid compare``: arms x environments x seeds under one budget, with a report.

Evaluates the untrained reference arms (random floor, walkthrough ceiling, the
afterstate-mark reader: ``rlid.compare.reference``) into ``OUT/reference/``, then runs every (arm, env,
seed) of a comparison config (``rlid.compare.config``) sequentially, each a normal
run directory ``OUT/runs/ARM-seedN`` trained by ``run_training`` until the shared budget in the chosen currency is spent; then
evaluates held-out games and writes ``OUT/report.md``, ``OUT/results.json`` and
the plots (``rlid.compare.report``).

Resumable at run granularity: a run whose ``eval.json`` has its "after"
evaluation is reused as it is, a started one is resumed from its last checkpoint
(``resume=True``), and a run directory written by a different config is refused
before anything trains. So a killed comparison continues where it stopped.

Several ``rlid compare`` processes may work on one ``OUT`` at once (on one machine
or several sharing a filesystem) and share its runs and references: each is
claimed with its own lock (``OUT/.claims/RUN``, ``OUT/.claims/reference/...``) by
the first process to reach it, the others pass it by; ``OUT``'s own lock is held
only while shared files are written (the checks, ``comparison.json``, the ledger,
the report). The report is written by the process that finds every run and
reference finished and unclaimed at its end.

    rlid compare --config examples/compare_small.toml --out runs/compare_small
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rlid.agents.agent import EvalRequest, evaluate_run
from rlid.compare.config import STOCHASTIC_REFERENCES, CompareConfig, RunSpec
from rlid.compare.reference import evaluate_reference
from rlid.compare.report import heldout_path, summarise_references, write_report
from rlid.config.limits import check_machine_limits
from rlid.core.loop import run_training
from rlid.lm.start_files import TINY_NAME, TINY_RANDOM_NAME
from rlid.lm.starts import model_pin
from rlid.runs import dir as rundir
from rlid.runs.files import LinkRefusedError, link_message
from rlid.runs.lock import LOCK_NAME, RunLock, RunLockedError, is_empty_dir
from rlid.runs.log import read_run_config
from rlid.runs.outdir import claim_output_dir
from rlid.runs.pin import describe
from rlid.runs.stop import RunStopped, StopSignals, signal_name

LEDGER = "runs.json"  # per-run status and accumulated seconds, across invocations
CLAIMS = ".claims"  # OUT/.claims/RUN: the lock of the process training RUN
# OUT/.claims/reference/ENV-REFERENCE-seedN: the process evaluating that reference
REFERENCE_CLAIMS = "reference"
SHARED_WAIT: float | None = None  # how long to wait for OUT's lock (None: as long as it takes)


def run_state(run_dir: Path) -> str:
    """``"finished"`` (held-out "after" evaluated), ``"started"`` or ``"new"``."""
    eval_path = run_dir / "eval.json"
    if eval_path.exists() and "after" in rundir.read_json(eval_path):
        return "finished"
    if (run_dir / "config.json").exists():
        return "started"
    if not is_empty_dir(run_dir):
        raise ValueError(
            f"{run_dir} holds files but no config.json; it is not a run of this comparison "
            "(delete it or choose another --out)"
        )
    return "new"


_OVERFLOW_FIELDS = ("overflow", "tree_grouping", "tree_fanout")


def check_existing_run(run: RunSpec, run_dir: Path, state: str) -> None:
    """Refuse to reuse or resume a run directory trained with another config.

    ``state`` is the directory's :func:`run_state`.

    One difference is immaterial: a run that *finished* under
    ``interface.overflow="error"`` never met a menu larger than its label alphabet
    (one would have stopped it), so it is exactly the run ``"truncate"`` would have
    made, or ``"tree"`` with a menu as wide as the alphabet (``tree_fanout=0``), and is
    reused under a config that says so.
    """
    if not (run_dir / "config.json").exists():
        return
    saved, raw = read_run_config(run_dir)
    check_start_weights(run, run_dir, raw.get("start_model") or {})
    planned, found = run.config.to_dict(), saved.to_dict()
    differing = sorted(k for k in planned.keys() | found.keys() if planned.get(k) != found.get(k))
    if differing == ["interface"] and state == "finished":
        wanted = planned["interface"]
        same = {k: v for k, v in wanted.items() if k in _OVERFLOW_FIELDS}
        overflow = {**found["interface"], **same}
        full_width = wanted.get("tree_fanout", 0) == 0
        if overflow == wanted and found["interface"].get("overflow") == "error" and full_width:
            return
    if differing:
        moved = ""
        if differing == ["model"]:  # e.g. a warm start copied elsewhere since
            moved = (
                f" (it was trained from model {found['model']!r}, the config names "
                f"{planned['model']!r}: if that is the same model moved, name its former "
                "path in the config to reuse the run)"
            )
        raise ValueError(
            f"{run_dir} was trained with a different config (differs in: "
            f"{', '.join(differing)}){moved}; use another --out, or delete that run to "
            "retrain it"
        )


def check_start_weights(run: RunSpec, run_dir: Path, recorded: dict[str, Any]) -> None:
    """Refuse a run trained from other starting weights than its model name gives now
    (e.g. ``tiny`` from before it became the shipped start): the same config would
    otherwise stand in for another start's run. A start not built yet (``tiny-play``
    before its first use) is not compared."""
    if not recorded.get("sha256"):
        return  # tiny-random, or a run from before the pins
    now = model_pin(str(run.config.model))
    if now.get("sha256") and (now.get("origin"), now["sha256"]) != (
        recorded.get("origin"), recorded["sha256"]
    ):  # fmt: skip
        raise ValueError(
            f"{run_dir} was trained from other starting weights: {describe(recorded)}, but "
            f"{run.config.model!r} now resolves to {describe(now)}; use another --out, or "
            "delete that run to retrain it"
        )


def check_model_available(run: RunSpec, *, instead: str = "leave the arm out with --arms") -> None:
    """A run still to train needs its starting model now, not hours into the comparison.

    ``instead``: the other way out the error offers (`rlid eval` offers --model)."""

    model = run.config.model
    if model in (TINY_NAME, TINY_RANDOM_NAME) or Path(model).expanduser().is_dir():
        return
    how = (
        f"Build it first, from the current directory: {run.build}"
        if run.build
        else "Build or copy it first (a warm start of your own: `rlid pretrain ... --out DIR`)"
    )
    raise FileNotFoundError(
        f"{run.name}: its model directory {model!r} does not exist (relative paths are read "
        f"from the current directory). {how}; or {instead}"
    )


def evaluate_heldout(compare: CompareConfig, run: RunSpec, out: Path) -> None:
    """Held-out games with options other than training's: evaluate the final checkpoint.

    When the held-out options equal the training options, the trainer's own
    before/after evaluation (split="heldout") already is this evaluation.
    """

    env = next(e for e in compare.envs if e.name == run.env)
    path = heldout_path(out, run)
    if env.heldout_matches_train or path.exists():
        return
    request = EvalRequest(
        env=env.env_id, env_options=dict(env.heldout_options), split="heldout",
        episodes=compare.heldout_episodes,
    )  # fmt: skip
    stats = evaluate_run(out / "runs" / run.name, request)
    rundir.write_json(path, {"after": stats})


def reference_path(out: Path, env: str, reference: str, seed: int) -> Path:
    return out / "reference" / env / f"{reference}-seed{seed}.json"


def evaluate_references(
    compare: CompareConfig, out: Path, *, say: Callable[[str], None] = print
) -> list[str]:
    """Floor / ceiling arms (``rlid.compare.reference``) on every env's held-out games;
    cheap (no model), done before training so a missing walkthrough fails first.
    Finished ones are reused. The random and afterstate arms run once per seed (they
    draw); the walkthrough is deterministic (the same games, the same commands), so it
    runs for the first seed.

    Each one is claimed like a run (``OUT/.claims/reference/ENV-REFERENCE-seedN``), not
    under OUT's lock, so processes sharing ``OUT`` evaluate different ones and go on
    to their runs without waiting (compiling a setting's games can take minutes).
    Returns those another process is evaluating now."""

    elsewhere = []
    for env in compare.envs:
        for reference in compare.references:
            seeds = compare.seeds if reference in STOCHASTIC_REFERENCES else compare.seeds[:1]
            mine = 0
            for seed in seeds:
                path = reference_path(out, env.name, reference, seed)
                if path.exists():
                    continue
                name = f"{env.name}-{reference}-seed{seed}"
                with _claimed(out, f"{REFERENCE_CLAIMS}/{name}") as holder:
                    if holder is not None:
                        elsewhere.append(f"reference {name} (being evaluated by {holder})")
                        continue
                    if path.exists():  # written by the holder we just followed
                        continue
                    stats = evaluate_reference(
                        reference, env.env_id, dict(env.heldout_options),
                        episodes=compare.heldout_episodes, seed=seed,
                        interface=compare.interface,
                    )  # fmt: skip
                    rundir.write_json(path, {"reference": reference, "seed": seed, "after": stats})
                    mine += 1
            if mine:
                say(f"reference {reference} on {env.name}: evaluated")
    return elsewhere


def run_references(
    compare: CompareConfig, out: Path, *, say: Callable[[str], None] = print
) -> dict[str, dict[str, Any]] | None:
    """Only the reference arms (no model, no training): evaluate those not done yet into
    ``OUT/reference/`` and return ``{env: summarise_references(...)}``, or ``None`` when
    another process is still evaluating some (``say`` names them). A later full
    ``rlid compare`` with the same ``--out`` reuses them."""

    out = Path(out)
    check_output_dir(out)
    out.mkdir(parents=True, exist_ok=True)
    with _shared(out):
        _prepare(compare, [], out, say=say)  # no run to check: the checks and comparison.json
    elsewhere = evaluate_references(compare, out, say=say)
    if elsewhere:
        say("still being evaluated: " + ", ".join(elsewhere))
        return None
    return {env.name: summarise_references(compare, out, env.name) for env in compare.envs}


def run_comparison(
    compare: CompareConfig,
    out: Path,
    *,
    progress: bool = True,
    say: Callable[[str], None] = print,
) -> dict[str, Any] | None:
    """Train and evaluate every run not yet done, then write the report.

    Returns the results dictionary that is also written to ``OUT/results.json``, or
    ``None`` when some runs are still being trained by other processes (the last of
    them writes the report) or were left unfinished by one that stopped.
    ``OUT``'s lock (:mod:`rlid.runs.lock`) is held only while shared files are
    written; each run is trained by the one process holding its claim.
    """
    out = Path(out)
    check_output_dir(out)
    out.mkdir(parents=True, exist_ok=True)
    runs = compare.runs()
    with _shared(out):
        _prepare(compare, runs, out, say=say)
    evaluate_references(compare, out, say=say)  # each claimed: no wait for OUT's lock
    for i, run in enumerate(runs, 1):
        with _claimed(out, run.name) as holder:
            if holder is not None:
                say(f"[{i}/{len(runs)}] {run.name}: being trained by {holder}; left to it")
                continue
            _train_or_reuse(compare, run, out, f"[{i}/{len(runs)}]", progress=progress, say=say)
    with _shared(out):
        return _finish(compare, runs, out, say=say)


@contextlib.contextmanager
def _shared(out: Path) -> Iterator[None]:
    """``OUT``'s own lock, held while shared files are read and written (not nested)."""
    lock = RunLock(out, "rlid compare").acquire(wait=SHARED_WAIT)
    try:
        yield
    finally:
        lock.release()


@contextlib.contextmanager
def _claimed(out: Path, name: str) -> Iterator[str | None]:
    """Hold the claim on ``name`` (a run, or a reference) inside the block (yields
    ``None``); or yield who holds it (another process working on it) and hold nothing."""
    try:
        claim = RunLock(out / CLAIMS / name, f"rlid compare: {name}").acquire(create=True)
    except RunLockedError as error:
        yield error.holder
        return
    try:
        yield None
    finally:
        claim.release()


def read_ledger(out: Path) -> dict[str, Any]:
    """``OUT/runs.json``: per run, its accumulated seconds and history (empty at first)."""
    path = out / LEDGER
    return rundir.read_json(path) if path.exists() else {}


def _prepare(
    compare: CompareConfig, runs: list[RunSpec], out: Path, *, say: Callable[[str], None]
) -> None:
    """Every check before any training, then ``comparison.json`` (under OUT's lock)."""
    check_output_dir(out)  # again, now that OUT's lock is held
    for run in runs:
        with _claimed(out, run.name) as holder:
            if holder is not None:
                continue  # another process is training it: checked by that one
            run_dir = out / "runs" / run.name
            state = run_state(run_dir)
            check_existing_run(run, run_dir, state)
            if state != "finished":
                check_model_available(run)
                check_machine_limits(run.config)  # threads, workers, batch memory
    check_same_comparison(compare, out)  # one --out, one comparison: one writer's settings
    rundir.write_json(out / "comparison.json", compare.to_dict())


_SHARED_SETTINGS = ("name", "budget", "heldout_episodes", "interface", "interface_differences",
                    "defaults", "references")  # fmt: skip


def check_same_comparison(compare: CompareConfig, out: Path) -> None:
    """A second ``rlid compare`` on an ``--out`` that holds a comparison with other
    settings (another budget, held-out episodes, interface, or an arm or env of the same
    name defined otherwise) is refused: its runs would be reported as one comparison's.
    Selecting arms, envs or seeds (``--arms`` ...) is fine."""
    path = out / "comparison.json"
    if not path.is_file():
        return
    try:
        theirs = rundir.read_json(path)
    except ValueError:
        theirs = None
    if not isinstance(theirs, dict):
        raise ValueError(f"{path} is not a comparison record; choose another --out")
    ours = compare.to_dict()
    differing = [k for k in _SHARED_SETTINGS if json.dumps(theirs.get(k), sort_keys=True)
                 != json.dumps(ours.get(k), sort_keys=True)]  # fmt: skip
    for key in ("arms", "envs"):
        known = {e.get("name"): e for e in theirs.get(key) or [] if isinstance(e, dict)}
        for entry in ours[key]:
            if entry["name"] in known and known[entry["name"]] != json.loads(json.dumps(entry)):
                differing.append(f"{key[:-1]} {entry['name']}")
    if differing:
        budget = theirs.get("budget") or {}
        raise ValueError(
            f"--out {out} holds a comparison with other settings (differs in: "
            f"{', '.join(differing)}; its budget is {budget.get('amount')} "
            f"{budget.get('currency')}); its runs would be reported with this one's. Use "
            "another --out, or the config that comparison was started with"
        )


def _train_or_reuse(
    compare: CompareConfig,
    run: RunSpec,
    out: Path,
    counter: str,
    *,
    progress: bool,
    say: Callable[[str], None],
) -> None:
    """Train, resume or reuse one claimed run, then evaluate it on held-out games."""
    run_dir = out / "runs" / run.name
    state = run_state(run_dir)  # again: another process may have trained it meanwhile
    check_existing_run(run, run_dir, state)
    if state == "finished":
        say(f"{counter} {run.name}: finished earlier, reused")
        _add_to_ledger(out, run.name, "reused", 0.0)
    else:
        verb = "resuming" if state == "started" else "training"
        say(f"{counter} {run.name}: {verb} ({run.config.plane}, seed {run.seed})")
        start = time.perf_counter()
        try:
            if run.nproc > 1:
                launch_processes(run, out, resume=state == "started", progress=progress)
            elif state == "started":
                run_training(None, run_dir, resume=True, progress=progress)
            else:
                run_training(run.config, run_dir, resume=False, progress=progress)
        except RunStopped as stopped:  # SIGTERM / Ctrl-C, after a checkpoint
            stopped.resume_with = "the same `rlid compare` command"
            raise
        finally:
            event = "resumed" if state == "started" else "trained"
            seconds = _add_to_ledger(out, run.name, event, time.perf_counter() - start)
        say(f"    {run.name}: done in {seconds:.1f}s")
    evaluate_heldout(compare, run, out)


def _add_to_ledger(out: Path, name: str, event: str, seconds: float) -> float:
    """Record one event of a run in ``OUT/runs.json``; returns the run's total seconds."""
    with _shared(out):
        ledger = read_ledger(out)
        entry = ledger.setdefault(name, {"seconds": 0.0, "history": []})
        entry["seconds"] += seconds
        entry["history"].append(event)
        rundir.write_json(out / LEDGER, ledger)
        return float(entry["seconds"])


def _finish(
    compare: CompareConfig, runs: list[RunSpec], out: Path, *, say: Callable[[str], None]
) -> dict[str, Any] | None:
    """Write the report if every run and reference is finished and no process still
    holds one (a reference left by a process that stopped is evaluated here)."""

    references = evaluate_references(compare, out, say=say)
    waiting = []
    for run in runs:
        with _claimed(out, run.name) as holder:
            if holder is not None:
                waiting.append(f"{run.name} (being trained by {holder})")
            elif run_state(out / "runs" / run.name) != "finished":
                waiting.append(f"{run.name} (unfinished: a process training it stopped)")
            else:
                evaluate_heldout(compare, run, out)
    if waiting or references:
        also = f" and {len(references)} reference evaluation(s)" if references else ""
        say(
            f"no report yet: {len(waiting)} of {len(runs)} runs{also} are not done: "
            + ", ".join(waiting + references)
            + ". The process that finishes the last one writes it; or rerun this command"
        )
        return None
    results = write_report(compare, out, ledger=read_ledger(out))
    say(f"report: {out / 'report.md'}")
    return results


STOP_GRACE_S = 600
"""Seconds torchrun waits for its workers to finish the iteration after it is itself
signalled, before SIGKILL (its own default is 30 s); ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``
in the environment says otherwise."""
PIDS_ENV = "RLID_LAUNCH_PIDS"  # the directory each launched process writes its pid into
STOPPED = "stopped.json"  # in it: {"signum", "iteration"} when the processes stopped on a signal


def launch_processes(run: RunSpec, out: Path, *, resume: bool, progress: bool) -> None:
    """Train one run with ``run.nproc`` processes under torchrun (one machine, gloo on
    CPU / nccl on CUDA): the same run directory, budget and groups as one process
    would use (``rlid.lm.distributed``). The config travels as JSON in ``OUT/launch/``.

    torchrun runs in a session of its own, so a terminal's Ctrl-C reaches this process
    alone; the first SIGTERM / Ctrl-C here is passed on to every training process (each
    wrote its pid into ``OUT/launch/RUN.pids/``), which finish the iteration, checkpoint
    it and exit; then :class:`RunStopped` says to rerun the comparison. A second signal
    (:data:`rlid.runs.stop.REPEAT_AFTER` or more later) kills them at once.
    """

    spec = "resume"
    if not resume:
        path = out / "launch" / f"{run.name}.json"
        rundir.write_json(path, run.config.to_dict())
        spec = str(path)
    pids = out / "launch" / f"{run.name}.pids"
    shutil.rmtree(pids, ignore_errors=True)
    pids.mkdir(parents=True)
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc-per-node={run.nproc}", "-m", "rlid.compare.launch",
        str(out / "runs" / run.name), spec, json.dumps(progress),
    ]  # fmt: skip
    env = {**os.environ, PIDS_ENV: str(pids)}
    env.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(STOP_GRACE_S))
    try:
        with subprocess.Popen(command, env=env, start_new_session=True) as proc:
            signum = _wait_passing_signals_on(proc, pids, run.nproc)
        # written by rank 0 when the processes stopped on a signal (ours or a cluster's)
        stopped = rundir.read_json(pids / STOPPED) if (pids / STOPPED).exists() else None
    finally:
        shutil.rmtree(pids, ignore_errors=True)
    if stopped is not None:
        signum, iteration = int(stopped["signum"]), int(stopped["iteration"])
    elif signum is not None:  # they stopped before rank 0 could say at which iteration
        iteration = _checkpointed_iteration(out / "runs" / run.name)
    if signum is not None:
        raise RunStopped(
            out / "runs" / run.name, iteration, signum,
            resume_with="the same `rlid compare` command",
        )  # fmt: skip
    if proc.returncode:
        raise RuntimeError(
            f"{run.name}: the {run.nproc} training processes exited with code "
            f"{proc.returncode} (their errors are printed above); the run directory keeps "
            "its last checkpoint, so the same `rlid compare` command resumes it"
        )


def _wait_passing_signals_on(proc: Any, pids: Path, nproc: int) -> int | None:
    """Wait for torchrun inside :class:`StopSignals`: the first SIGTERM / SIGINT is
    passed on to the training processes (to torchrun until they have all written their
    pids), a second one kills them all before stopping this process. Returns the first
    signal's number, or None if none came."""

    def targets() -> list[int]:
        found = [int(f.read_text()) for f in pids.glob("rank[0-9]*")]  # written atomically
        return found if len(found) == nproc else [proc.pid]  # not all started: torchrun

    def send(signum: int, to: list[int]) -> None:
        for pid in to:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)

    def pass_on(signum: int) -> None:
        name = signal_name(signum)
        print(
            f"\nrlid: {name}: passed on to the {nproc} training processes, which stop after "
            f"this iteration with a checkpoint ({name} again stops them at once)",
            file=sys.stderr, flush=True,
        )  # fmt: skip
        send(signum, targets())

    def kill_all(signum: int) -> None:
        send(signal.SIGKILL, [*targets(), proc.pid])

    with StopSignals(announce=False, on_first=pass_on, on_again=kill_all) as stop:
        proc.wait()
    return stop.signum


def _checkpointed_iteration(run_dir: Path) -> int:
    """The iteration of the run's checkpoint (0: none yet)."""
    ckpt = rundir.recover_checkpoint_dir(run_dir)
    if ckpt is None:
        return 0
    return int(rundir.read_json(ckpt / "state.json").get("iteration", 0))


def check_output_dir(out: Path) -> None:
    """``--out`` must be new, empty, or an earlier output of ``rlid compare``."""
    # the rule every writing command follows (rlid.runs.outdir), then compare's own
    claim_output_dir(
        out, flag="--out", is_own=lambda p: (p / "comparison.json").is_file(),
        ignore=(LOCK_NAME, CLAIMS), occupied=lambda p, _: (
            f"--out {p} already holds files and is not the output of `rlid compare` (no "
            "comparison.json); choose a new or empty directory so nothing there is overwritten"
        ),
    )  # fmt: skip
    if out.is_dir():
        refuse_output_links(out)


def refuse_output_links(out: Path) -> None:
    """No symbolic link where a comparison reads or writes in ``out`` (``out`` itself may
    be one): its files, claims, references, held-out results and run directories."""

    for path in sorted(out.iterdir()):
        if path.is_symlink():
            raise LinkRefusedError(link_message(path))
        if path.name == "runs" and path.is_dir():
            for run_dir in sorted(path.iterdir()):
                if run_dir.is_symlink():
                    raise LinkRefusedError(link_message(run_dir))
                rundir.refuse_run_links(run_dir)
        elif path.is_dir():
            for inner in sorted(path.rglob("*")):  # rglob lists links, never enters them
                if inner.is_symlink():
                    raise LinkRefusedError(link_message(inner))
