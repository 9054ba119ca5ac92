"""Benchmark: one decision over K = 10..400 legal actions on the three planes, side by side.

For each state the same model decides three ways, interleaved per repetition so that
load on a shared machine hits them alike:

* ``readout``  -- the decision plane (``rlid.decision.policy.DecisionPolicy.act``): a label tree
  when K exceeds the label alphabet, one forward for level 1 and one forward per further
  level on the KV cache of the levels before (``rlid.decision.tree_walk``). The sampling seed is
  chosen so that the path goes down the whole tree (``levels`` = the tree's depth): the
  most a decision over that state costs;
* ``scoring``  -- TWOSOME-style action scoring (``rlid.baselines.scoring.ScoringPolicy.act``,
  KV-shared: the prompt runs once, its K continuations on its cache);
* ``generate`` -- the token plane (``rlid.baselines.token.policy.TokenPolicy.act``): the
  command written token by token (KV-cached decoding) up to ``--max-new-tokens``.

and, for the two menu planes, the update's re-scoring of the stored decision with
gradients plus backward (``update``: the readout reads the whole path in ONE forward,
``DecisionPolicy.score_paths``; scoring re-runs every continuation).

States: real ScienceWorld states from ``--states FILE`` (``tests/data/scienceworld_states.json``
when present: ``{"states": [{"target", "observation", "objective", "legal_actions",
"action_templates"}, ...]}``), else states of the built-in ``lab`` env, whose legal
actions are every ScienceWorld-style template x object command, at the sizes of the
buckets (K = 11, 50, 106, 206, 414). Each state is decided alone (batch 1: the cost of
one decision). All planes see the same interface (the defaults; no memory, and no
afterstates, which ScienceWorld lacks): the token
and scoring prompts list every legal action unless the list does not fit the model's
context, then its label tree's first menu (``legal_list="groups"``).

Times are minima over ``--reps`` (milliseconds per decision). Memory: peak bytes of
tensors alive during one call above those alive before it (the CUDA allocator's peak on
a GPU; on the CPU the torch profiler's allocation events, as ``benchmarks/readout.py``),
measured in an untimed first pass. Scoring's KV-shared path repeats the prompt's cache
(once per legal action up to ``rlid.baselines.engine.SHARED_COPIES`` actions, at most that
many times above: larger menus are packed side by side) and keeps every continuation's
logits over the vocabulary; a
state whose estimate of that (:func:`scoring_bytes`) exceeds ``--scoring-memory-gb`` is
not scored, and its update not run above half of it (the table says "skipped"),
rather than exhausting the machine.

    python benchmarks/large_menus.py --model tiny-random --reps 3
    python benchmarks/random_model.py --shape qwen2-0.5b --tokenizer qwen-bpe --out /tmp/q05
    python benchmarks/large_menus.py --model /tmp/q05 --reps 1
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

from rlid import envs
from rlid.baselines.engine import LOGPROB_BLOCK, SHARED_COPIES
from rlid.baselines.scoring import ScoringPolicy
from rlid.baselines.token.policy import TokenPolicy
from rlid.decision.policy import DecisionPolicy
from rlid.lm.hardware import resolve_device
from rlid.lm.starts import load_policy_model
from rlid.menus import Interface
from rlid.menus.tokens import encode

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "data" / "scienceworld_states.json"
LAB_SIZES = {10: (1, 1), 50: (4, 3), 100: (8, 4), 200: (12, 6), 400: (20, 8)}  # K: lab options
METHODS = ("readout", "scoring", "generate")


def lab_states(buckets: list[int], per_bucket: int) -> list[dict[str, Any]]:
    """``per_bucket`` states of the lab env at each bucket's size."""
    states = []
    for target in buckets:
        objects, containers = LAB_SIZES[min(LAB_SIZES, key=lambda k: abs(k - target))]
        env = envs.make("lab", objects=objects, containers=containers)
        for seed in range(per_bucket):
            obs, info = env.reset(seed=seed)
            states.append({"target": target, "observation": obs, **info})
    return states


def fixture_states(path: Path, buckets: list[int], per_bucket: int) -> list[dict[str, Any]]:
    """The fixture's states closest to each bucket (``per_bucket`` of them)."""
    data = json.loads(path.read_text())
    pool = data["states"] + data.get("twx_states", [])
    states = []
    for target in buckets:
        near = sorted(pool, key=lambda s: abs(len(s["legal_actions"]) - target))[:per_bucket]
        states += [{**s, "target": target, "score": 0, "max_score": 100} for s in near]
    return states


def peak_bytes(fn: Callable[[], object], device: torch.device) -> int:
    """Peak bytes of tensors alive during ``fn()`` above those alive before it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    steps = []
    for event in prof.events():
        amount = event.cpu_memory_usage if event.name == "[memory]" else event.self_cpu_memory_usage
        if amount:
            steps.append((event.time_range.start, amount))
    live = peak = 0
    for _, amount in sorted(steps):
        live += amount
        peak = max(peak, live)
    return peak


def kv_bytes_per_token(model: Any) -> int:
    """Bytes of keys and values one token leaves in the cache (every layer)."""
    config = model.config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dtype_bytes = next(model.parameters()).element_size()
    return 2 * config.num_hidden_layers * heads * head_dim * dtype_bytes


def scoring_bytes(model: Any, k: int, prompt: int, continuation: int) -> int:
    """About the peak bytes of KV-shared scoring of one state: the prompt's cache
    repeated min(``k``, SHARED_COPIES) times, the ``k`` actions' ``continuation``
    positions' logits over the vocabulary in the model's dtype, and one float32 block
    of them normalised at a time (:func:`rlid.baselines.engine.token_logprobs`)."""
    vocab = model.get_output_embeddings().weight.shape[0]
    dtype_bytes = next(model.parameters()).element_size()
    cache = min(k, SHARED_COPIES) * prompt * kv_bytes_per_token(model)
    block = min(LOGPROB_BLOCK, k * continuation * vocab) * 4
    return cache + k * continuation * vocab * dtype_bytes + block


def run(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    device = resolve_device(args.device)
    model, tokenizer = load_policy_model(args.model, dtype=getattr(torch, args.dtype))
    model.to(device).eval()
    source = Path(args.states) if args.states else (FIXTURE if FIXTURE.exists() else None)
    if source is not None:
        states, origin = fixture_states(source, args.buckets, args.per_bucket), str(source)
    else:
        states, origin = lab_states(args.buckets, args.per_bucket), "lab env (synthetic)"
    interface = Interface(memory="none", afterstates=False)  # ScienceWorld has none
    readout = DecisionPolicy(model, tokenizer, interface)
    scoring = ScoringPolicy(model, tokenizer, interface)
    token = TokenPolicy(model, tokenizer, interface, max_new_tokens=args.max_new_tokens)
    params = sum(p.numel() for p in model.parameters()) / 1e6
    print(
        f"model={args.model} ({type(model).__name__}, {params:.1f}M params, vocab "
        f"{len(tokenizer)}, context {model.config.max_position_embeddings}, {model.dtype}) "
        f"device={device} "
        f"threads={torch.get_num_threads()} states={origin} reps={args.reps} "
        f"labels={len(readout.labels.labels)}"
    )

    rows = [measure(s, model, readout, scoring, token, args, device) for s in states]
    report(rows, args)


def sampling(seed: int = 0) -> dict[str, Any]:
    """The same draws for every call (shuffle rng, sampling generator)."""
    return {"rng": np.random.default_rng(seed), "generator": torch.Generator().manual_seed(seed)}


def measure(
    state: dict[str, Any],
    model: Any,
    readout: DecisionPolicy,
    scoring: ScoringPolicy,
    token: TokenPolicy,
    args: argparse.Namespace,
    device: torch.device,
) -> dict[str, Any]:
    """Times and peak memory of one state's decision on every plane."""
    info = {**state, "afterstates": None}
    obs = [state["observation"]]
    with torch.no_grad():
        for seed in range(64):  # a draw whose path goes down the whole tree: the most work
            decision = readout.act(obs, [info], [None], **sampling(seed))[0]
            if decision.tree is None or len(decision.path) == decision.tree.depth:
                break
        token_prompt = len(token.prompt_ids(obs, [info], [None])[0])
    k = len(info["legal_actions"])
    continuation = max(len(encode(token.tokenizer, f" {a}\n")) for a in info["legal_actions"])
    scoring_gb = scoring_bytes(model, k, token_prompt, continuation) / 2**30
    calls: dict[str, Callable[[], object]] = {
        "readout": lambda: readout.act(obs, [info], [None], **sampling(seed)),
        "generate": lambda: token.act(obs, [info], [None], **sampling()),
    }
    updates: dict[str, Callable[[], object]] = {}

    def update_readout() -> None:
        model.zero_grad(set_to_none=True)
        read = readout.score_paths([decision])
        rows = [st.row for st in decision.path] if decision.path else [decision.chosen]
        sum(read.logp[0, level, r] for level, r in enumerate(rows)).backward()

    updates["readout"] = update_readout
    if scoring_gb <= args.scoring_memory_gb:  # its update keeps about twice as much
        calls["scoring"] = lambda: scoring.act(obs, [info], [None], **sampling())
        with torch.no_grad():
            scored = scoring.act(obs, [info], [None], **sampling())[0]

        def update_scoring() -> None:
            model.zero_grad(set_to_none=True)
            logp, _, _ = scoring.score([scored])
            logp[0, scored.chosen].backward()

        if 2 * scoring_gb <= args.scoring_memory_gb:
            updates["scoring"] = update_scoring
    with torch.no_grad():
        memory = {name: peak_bytes(call, device) for name, call in calls.items()}
    times: dict[str, list[float]] = {name: [] for name in [*calls, *(f"u_{n}" for n in updates)]}
    for _ in range(args.reps):
        for name, call in calls.items():
            with torch.no_grad():
                times[name].append(_timed(call, device))
        for name, call in updates.items():
            times[f"u_{name}"].append(_timed(call, device))
    with torch.no_grad():
        generated = token.act(obs, [info], [None], **sampling())[0]
    return {
        "target": state["target"], "K": k, "levels": max(len(decision.path), 1),
        "prompt": len(decision.prompt_ids), "token_prompt": token_prompt,
        "new_tokens": generated.num_tokens, "scoring_gb": scoring_gb,
        **{f"ms_{n}": 1000 * min(v) for n, v in times.items()},
        **{f"mib_{n}": m / 2**20 for n, m in memory.items()},
    }  # fmt: skip


def _timed(call: Callable[[], object], device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    call()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """One markdown row per bucket: means over its states."""

    def mean(bucket: list[dict[str, Any]], key: str) -> float | None:
        values = [r[key] for r in bucket if key in r]
        return statistics.mean(values) if len(values) == len(bucket) else None

    def cell(value: float | None, fmt: str = ".0f") -> str:
        return "skipped" if value is None else format(value, fmt)

    print(
        "\n| K | levels | prompt tok (menu / list) | readout ms | scoring ms | generate ms "
        "| new tok | scoring / readout | generate / readout | readout MiB | scoring MiB "
        "| generate MiB | update: readout ms | update: scoring ms | scoring est. GiB |"
    )
    print("|" + "---|" * 15)
    for target in args.buckets:
        bucket = [r for r in rows if r["target"] == target]
        r, s, g = (mean(bucket, f"ms_{m}") for m in METHODS)
        print(
            f"| {mean(bucket, 'K'):.0f} | {mean(bucket, 'levels'):.1f} | "
            f"{mean(bucket, 'prompt'):.0f} / {mean(bucket, 'token_prompt'):.0f} | "
            f"{cell(r)} | {cell(s)} | {cell(g)} | {mean(bucket, 'new_tokens'):.1f} | "
            f"{cell(None if s is None or r is None else s / r, '.1f')} | "
            f"{cell(None if g is None or r is None else g / r, '.1f')} | "
            f"{cell(mean(bucket, 'mib_readout'), '.1f')} | {cell(mean(bucket, 'mib_scoring'), '.1f')} | "
            f"{cell(mean(bucket, 'mib_generate'), '.1f')} | {cell(mean(bucket, 'ms_u_readout'))} | "
            f"{cell(mean(bucket, 'ms_u_scoring'))} | {mean(bucket, 'scoring_gb'):.2f} |"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny-random", help="tiny | tiny-random | PATH")
    parser.add_argument(
        "--states", default=None, help="states JSON (default: the fixture, else lab)"
    )
    parser.add_argument("--buckets", type=int, nargs="+", default=[10, 50, 100, 200, 400])
    parser.add_argument("--per-bucket", type=int, default=2, help="states per bucket")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N | auto")
    parser.add_argument(
        "--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
        help="parameter dtype of the model",
    )  # fmt: skip
    parser.add_argument(
        "--scoring-memory-gb", type=float, default=4.0,
        help="skip scoring a state whose prompt cache copies and logits would exceed this",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.reps < 1 or args.per_bucket < 1:
        parser.error("--reps and --per-bucket must be >= 1")
    bad = [b for b in args.buckets if b < 1]
    if bad:
        parser.error(f"buckets must be >= 1, got {bad}")
    run(args)


if __name__ == "__main__":
    main()
