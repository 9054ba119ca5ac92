"""Benchmark: training throughput of the three planes, against an older checkout in the same run.

One fixed short decision-PPO run per setting (BabyAI-Text GoToLocal, TextWorldExpress
coin, ScienceWorld find-plant under "easy"; the suite's options, examples/suite.toml),
one thread, one iteration of 2 games x 4 episodes (the suite's epochs, minibatch and
learning rate). ``--planes`` runs the same fixed run on the other planes too (the
default is the decision plane alone): ``scoring`` (``--plane scoring``: each menu
action's tokens scored after the prompt) and ``token`` (``--plane token --algo grpo``:
free text, generated and parsed), each a row of its own (``babyai/scoring``). The
scoring plane trains with a value head (``--advantage gae``), so its update runs even
where every episode of a group scores the same; the token plane gets the token study's
``--invalid-penalty -0.2``, but a row whose update found no advantage signal is named
under the table (rollout only). An older checkout's planes are registered by hand
(0.4.0 declared them by an entry point of its own install). A run
that takes more than ``--cell-timeout`` seconds (default 300) is stopped and its cell
left out, with a line in the table that says so. Each arm runs every setting in a
child process of its own:

* ``now``: this checkout;
* ``old``: the checkout at ``--old DIR`` (e.g. a worktree of rlid 0.4.0, ``9cfa87c``),
  run with this environment's packages (its ``PYTHONPATH`` entry comes first);
* lever arms (``--levers``), each this checkout with ONE thing changed, to measure
  each lever alone: ``padded`` (packed forwards off: ``RLID_PACKING=0``, the 0.4.0
  layout), ``threads2`` (``--threads 2``), and the prompt-text options, off by
  default: ``afterstate-changes`` (``--afterstate-text change``).

Printed side by side, per setting and arm:

* ``steps/s``: env steps per second of the training iterations' wall time, and
  ``steps/cpu-s`` per CPU-second of the child process (less sensitive to a machine
  shared with other jobs: compare ratios measured in the same invocation);
* ``tok/dec``: prompt tokens the model reads per decision (real tokens of every forward,
  the update's re-scoring included, over the decisions) and ``pos/dec``: the token
  positions it computes (padding included);
* ``fwd/dec``: forward passes per decision;
* the phase split from the run's own metrics (``env / menu / forward / backward``, and
  ``other``: the rest of the iterations' wall time, the update's host work; the token
  plane's ``generate`` and the update's ``rescore`` count as ``forward``);
* ``limit``: the share of the compute limit reached. The model FLOPs of the run are
  counted at every forward (2 x non-embedding parameters per real token, the causal
  attention's 4 x hidden x position per token and layer, the LM head where logits are
  kept; x3 for a forward that is back-propagated) and divided by the GEMM throughput
  this CPU measures in the same child process, one thread, on the model's own shapes
  (the best of a few timed matmuls before and after the run). ``limit`` = that ideal
  time / the iterations' wall time; ``ms/dec@limit`` is the ideal time per decision.

    python benchmarks/train_throughput.py --old /work/old
    python benchmarks/train_throughput.py --old /work/old --levers padded,threads2,afterstate-changes
    python benchmarks/train_throughput.py --settings babyai --arms now --levers padded
    python benchmarks/train_throughput.py --old /work/old --settings babyai,twx-coin \
        --planes decision,scoring,token

The numbers of rlid's own measurement are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SETTINGS: dict[str, list[str]] = {
    "babyai": [
        "--env", "babyai-text", "-o", "level=GoToLocal", "-o", "max_episode_steps=20",
    ],
    "twx-coin": [
        "--env", "twx-coin", "-o", "numLocations=6", "-o", "includeDoors=true",
        "-o", "max_episode_steps=50",
    ],
    "sw-find-plant": [
        "--env", "scienceworld", "-o", "task=find-plant", "-o", "simplifications=easy",
        "-o", "max_episode_steps=18",
    ],
}  # fmt: skip
"""The suite's options for these settings (examples/suite.toml), labels "auto"."""

RUN = [
    "--groups-per-iter", "2", "--group-size", "4",
    "--epochs", "2", "--minibatch-size", "32", "--lr", "1e-4", "--seed", "0",
    "--eval-episodes", "0", "--quiet", "--budget-currency", "episodes", "--steps", "8",
]  # fmt: skip
"""One iteration of 8 episodes (whole episodes: the same work under every code path)."""

PLANES: dict[str, list[str]] = {
    "decision": ["--plane", "decision", "--labels", "auto"],
    "scoring": ["--plane", "scoring", "--labels", "auto", "--advantage", "gae"],
    "token": [
        "--plane",
        "token",
        "--labels",
        "auto",
        "--algo",
        "grpo",
        "--invalid-penalty",
        "-0.2",
    ],
}
"""Plane -> its train flags (the rest of the run is :data:`RUN`, the same on every plane)."""

LEVERS: dict[str, tuple[list[str], dict[str, str]]] = {
    "padded": ([], {"RLID_PACKING": "0"}),
    "threads2": (["--threads", "2"], {}),
    "afterstate-changes": (["--afterstate-text", "change"], {}),
}
"""Lever arm -> (extra train flags, environment): this checkout with one thing changed."""

PHASES = ("env", "menu", "forward", "backward")
FORWARD_TIMERS = ("forward", "generate", "rescore")
"""Timers counted as ``forward``: the no-gradient forwards of acting and re-scoring."""


def cell(setting: str, plane: str, arm: str) -> str:
    """The file name of one run (the decision plane's names are those of earlier --keep)."""
    return f"{setting}-{arm}" if plane == "decision" else f"{setting}-{plane}-{arm}"


def row_name(setting: str, plane: str) -> str:
    return setting if plane == "decision" else f"{setting}/{plane}"


# ---------------------------------------------------------------- the child process
def _install_counter(record: dict[str, float]) -> None:
    """Count every forward of a Hugging Face Llama model: calls, real tokens, computed
    positions and model FLOPs (x3 where gradients are on: the update back-propagates
    every forward it runs with gradients)."""
    import torch
    from transformers.models.llama.modeling_llama import LlamaForCausalLM

    forward = LlamaForCausalLM.forward

    def counted(self: Any, *args: Any, **kw: Any) -> Any:
        ids = kw.get("input_ids")
        if ids is None and args:
            ids = args[0]
        out = forward(self, *args, **kw)
        cfg = self.config
        d, layers, vocab = cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size
        per_token = 2 * layers * (4 * d * d + 3 * d * cfg.intermediate_size)
        mask = kw.get("attention_mask")
        lengths = kw.get("rlid_packed_lengths")
        new = ids.shape[1]
        if lengths is not None:  # packed: each sequence from its own start
            spans = [(0, int(n)) for n in lengths]
        elif mask is not None and mask.dim() == 2:
            rows = mask.sum(-1).tolist()
            fresh = mask[:, -new:].sum(-1).tolist()
            spans = [(int(r - f), int(f)) for r, f in zip(rows, fresh)]
        else:
            spans = [(0, new)] * ids.shape[0]
        tokens = sum(n for _, n in spans)
        # causal attention: a token at position t reads t + 1 keys (QK and AV: 4 d per key)
        attention = sum(4 * d * layers * (n * c + n * (n + 1) // 2) for c, n in spans)
        kept = out.logits.shape[0] * out.logits.shape[1]
        flops = per_token * tokens + attention + 2 * d * vocab * kept
        grad = torch.is_grad_enabled()
        record["forwards"] += 1
        record["tokens"] += tokens
        record["positions"] += ids.numel()
        record["flops"] += flops * (3 if grad else 1)
        record["grad_tokens" if grad else "nograd_tokens"] += tokens
        return out

    LlamaForCausalLM.forward = counted  # type: ignore[method-assign]


def _gemm_flops_per_s(hidden: int, inner: int, threads: int) -> float:
    """GEMM throughput on the model's shapes: the best of a few timed matmuls, timed in
    this process's CPU time per thread (a machine shared with other jobs slows the wall
    clock, not the work a core does while it runs this process)."""
    import torch

    torch.set_num_threads(threads)
    best = 0.0
    for rows in (2048, 8192):
        x = torch.randn(rows, hidden)
        shapes = [(hidden, hidden), (hidden, inner), (inner, hidden)]
        ws = [torch.randn(a, b) for a, b in shapes]
        xs = {hidden: x, inner: torch.randn(rows, inner)}
        flops = sum(2 * rows * a * b for a, b in shapes)
        for _ in range(5):
            t0 = time.process_time()
            for (a, _), w in zip(shapes, ws):
                xs[a] @ w
            best = max(best, flops * threads / max(time.process_time() - t0, 1e-9))
    return best


def _time_iterations(record: dict[str, float]) -> None:
    """Add the process CPU time spent in the run's iterations (``run_iterations``, in
    whichever module of this checkout's trainer holds it) to ``train_cpu_s``."""
    import importlib

    names = ("rlid.core.loop", "rlid.core.train", "rlid.loop", "rlid.trainer")
    modules = []
    for name in names:
        try:
            modules.append(importlib.import_module(name))
        except ImportError:
            continue
    original = next(m.run_iterations for m in modules if hasattr(m, "run_iterations"))

    def timed(*args: Any, **kw: Any) -> Any:
        t0 = time.process_time()
        try:
            return original(*args, **kw)
        finally:
            record["train_cpu_s"] += time.process_time() - t0

    for module in modules:
        if getattr(module, "run_iterations", None) is original:
            module.run_iterations = timed


def _register_old_planes() -> None:
    """rlid 0.4.0 registers its scoring and token planes through an entry point of its own
    install (``baselines.planes:register``), which this environment's install does not
    declare: an older checkout run from ``PYTHONPATH`` gets them registered here."""
    import importlib

    try:
        importlib.import_module("rlid.planes")  # 0.4.0's layout (now rlid.config.planes)
        register = importlib.import_module("baselines.planes").register
    except ImportError:
        return
    register()


def child(out_json: Path, train_args: list[str]) -> None:
    """Run ``rlid train`` in this process, counting the model's work; write the record."""
    import runpy

    record: dict[str, float] = dict.fromkeys(
        ("forwards", "tokens", "positions", "flops", "grad_tokens", "nograd_tokens", "train_cpu_s"),
        0.0,
    )
    _install_counter(record)
    _time_iterations(record)
    _register_old_planes()
    threads = int(train_args[train_args.index("--threads") + 1])
    gemm = [_gemm_flops_per_s(128, 384, threads)]
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    sys.argv = ["rlid", "train", *train_args]
    try:
        runpy.run_module("rlid", run_name="__main__")
    except SystemExit as stop:
        if stop.code not in (0, None):
            raise
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    gemm.append(_gemm_flops_per_s(128, 384, threads))
    record["cpu_s"] = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    record["gemm_flops_per_s"] = max(gemm)
    out_json.write_text(json.dumps(record))


# ---------------------------------------------------------------- the parent
def run_arm(
    setting: str,
    arm: str,
    old: Path | None,
    threads: int,
    work: Path,
    plane: str = "decision",
    timeout: float | None = None,
) -> bool:
    """Run one setting under one arm on one plane in a child process, into ``work``.
    False when it ran past ``timeout`` seconds (the child is stopped, the cell left out)."""
    flags, env_add = LEVERS.get(arm, ([], {}))
    out = work / cell(setting, plane, arm)
    record = work / f"{cell(setting, plane, arm)}.json"
    args = [*SETTINGS[setting], *PLANES[plane], *RUN, "--threads", str(threads), *flags]
    args += ["--out", str(out)]
    if "--threads" in flags:  # the lever's thread count wins
        i = args.index("--threads")
        del args[i : i + 2]
    env = {**os.environ, **env_add, "OMP_NUM_THREADS": str(threads)}
    if arm == "old":
        assert old is not None
        env["PYTHONPATH"] = os.pathsep.join([str(old), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        )
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(record), "--", *args]
    # a session of its own: a run stopped at the timeout takes its env's processes with it
    child_ = subprocess.Popen(
        cmd, env=env, cwd=work, text=True, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        _, stderr = child_.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child_.pid, signal.SIGKILL)
        child_.communicate()
        return False
    if child_.returncode != 0:
        raise SystemExit(f"{row_name(setting, plane)}/{arm} failed:\n{stderr[-3000:]}")
    return True


def summarise(work: Path, setting: str, arm: str, plane: str = "decision") -> dict[str, Any]:
    """One arm's figures from its run directory and its child's record."""
    out = work / cell(setting, plane, arm)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    counted = json.loads((work / f"{cell(setting, plane, arm)}.json").read_text())
    budget = rows[-1]["budget"]
    names = dict(zip(PHASES, [("env",), ("menu",), FORWARD_TIMERS, ("backward",)]))
    phases = {p: sum(r.get("time", {}).get(t, 0.0) for r in rows for t in names[p]) for p in PHASES}
    wall = float(budget["wall_time"])
    phases["other"] = max(wall - sum(phases.values()), 0.0)
    decisions = max(int(budget["decisions"]), 1)
    cpu = counted.get("train_cpu_s") or counted["cpu_s"]
    ideal = counted["flops"] / counted["gemm_flops_per_s"]
    return {
        "updated": not any(r.get("skipped_update") for r in rows),
        "env_steps": int(budget["env_steps"]),
        "decisions": decisions,
        "wall_s": wall,
        "cpu_s": cpu,
        "steps_per_s": budget["env_steps"] / wall,
        "steps_per_cpu_s": budget["env_steps"] / cpu,
        "tokens_per_decision": counted["tokens"] / decisions,
        "positions_per_decision": counted["positions"] / decisions,
        "forwards_per_decision": counted["forwards"] / decisions,
        "rollout_tokens_per_decision": counted["nograd_tokens"] / decisions,
        "phases": {p: sec / wall for p, sec in phases.items()},
        "gemm_gflops": counted["gemm_flops_per_s"] / 1e9,
        "ms_per_decision_at_limit": 1e3 * ideal / decisions,
        "limit_share": ideal / cpu,
    }


def table(results: dict[str, dict[str, dict[str, Any]]], base: str) -> str:
    """The markdown table; a cell left out (``{"left_out": reason}``) gets a row saying so."""
    head = (
        "| setting | arm | env steps | steps/s | x | steps/cpu-s | x | tok/dec | pos/dec "
        "| fwd/dec | env / menu / fwd / bwd / other | GEMM GF/s | ms/dec at limit | limit |"
    )
    lines = [head, "|" + "---|" * 14]
    for setting, arms in results.items():
        ref = arms.get(base)
        ref = None if ref is None or "left_out" in ref else ref
        for arm, r in arms.items():
            if "left_out" in r:
                lines.append(f"| {setting} | {arm} | left out: {r['left_out']} |" + " |" * 11)
                continue
            speed = r["steps_per_s"] / ref["steps_per_s"] if ref else float("nan")
            cpu = r["steps_per_cpu_s"] / ref["steps_per_cpu_s"] if ref else float("nan")
            ph = r["phases"]
            split = " / ".join(f"{100 * ph[p]:.0f}%" for p in (*PHASES, "other"))
            lines.append(
                f"| {setting} | {arm} | {r['env_steps']} | {r['steps_per_s']:.2f} | {speed:.2f} "
                f"| {r['steps_per_cpu_s']:.2f} | {cpu:.2f} | {r['tokens_per_decision']:.0f} "
                f"| {r['positions_per_decision']:.0f} | {r['forwards_per_decision']:.2f} | {split} "
                f"| {r['gemm_gflops']:.0f} | {r['ms_per_decision_at_limit']:.0f} "
                f"| {100 * r['limit_share']:.0f}% |"
            )
    skipped = [f"{setting}/{arm}" for setting, arms in results.items()
               for arm, r in arms.items() if r.get("updated") is False]  # fmt: skip
    if skipped:  # group advantages all zero: the iteration was rollout only
        lines += ["", f"No update (no advantage signal, rollout only): {', '.join(skipped)}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(Path(argv[1]), argv[3:])  # --child OUT -- train args
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, help="an older checkout to run as the 'old' arm")
    parser.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated")
    parser.add_argument("--arms", default="old,now", help="old and/or now, comma-separated")
    parser.add_argument("--levers", default="", help=f"lever arms: {', '.join(LEVERS)}")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--planes", default="decision",
        help=f"comma-separated: {', '.join(PLANES)} (the same run on each; default: decision)",
    )  # fmt: skip
    parser.add_argument(
        "--cell-timeout", type=float, default=300.0,
        help="seconds one run (setting x plane x arm) may take before its cell is left out",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--keep", type=Path, help="keep the run directories here")
    parser.add_argument(
        "--from", dest="from_dir", type=Path,
        help="print the table of the runs kept in this directory (--keep) instead of running",
    )  # fmt: skip
    args = parser.parse_args(argv)
    settings = [s for s in args.settings.split(",") if s]
    planes = [p for p in args.planes.split(",") if p]
    arms = [a for a in args.arms.split(",") if a] + [a for a in args.levers.split(",") if a]
    for name in settings:
        if name not in SETTINGS:
            parser.error(f"unknown setting {name!r}; known: {', '.join(SETTINGS)}")
    for plane in planes:
        if plane not in PLANES:
            parser.error(f"unknown plane {plane!r}; known: {', '.join(PLANES)}")
    for arm in arms:
        if arm not in ("old", "now", *LEVERS):
            parser.error(f"unknown arm {arm!r}; known: old, now, {', '.join(LEVERS)}")
    if "old" in arms and args.old is None and args.from_dir is None:
        parser.error("the 'old' arm needs --old DIR (a checkout of the older code)")
    cells = [(s, p) for p in planes for s in settings]
    results: dict[str, dict[str, dict[str, Any]]] = {}
    if args.from_dir is not None:  # the table of runs kept before (--keep)
        for setting, plane in cells:
            found = {a: summarise(args.from_dir, setting, a, plane) for a in arms
                     if (args.from_dir / f"{cell(setting, plane, a)}.json").exists()}  # fmt: skip
            if found:
                results[row_name(setting, plane)] = found
    else:
        with tempfile.TemporaryDirectory() as tmp:
            work = args.keep or Path(tmp)
            work.mkdir(parents=True, exist_ok=True)
            for setting, plane in cells:
                name = row_name(setting, plane)
                results[name] = {}
                for arm in arms:
                    t0 = time.perf_counter()
                    ran = run_arm(
                        setting, arm, args.old, args.threads, work, plane, args.cell_timeout
                    )
                    took = time.perf_counter() - t0
                    if ran:
                        results[name][arm] = summarise(work, setting, arm, plane)
                    else:
                        results[name][arm] = {"left_out": f"over {args.cell_timeout:.0f} s"}
                    print(f"{name}/{arm}: {took:.0f} s", file=sys.stderr)
    base = "old" if "old" in arms else arms[0]
    print(table(results, base))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
