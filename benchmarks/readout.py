"""Benchmark: label readout vs. a plain forward, TWOSOME-style action scoring, and generation.

One run measures all four methods side by side on the same model and the same
synthetic text-game decisions (menus of K = 4, 8, 16, 32 rows, ``--batch``
decisions per call), interleaving the methods within each repetition so that
load on a shared machine hits them alike:

* ``readout``  -- :func:`rlid.lm.readout.readout_from_ids`: one forward of the
  labelled prompt (ending ``Answer:``), logits for the last position only,
  log-softmax over the K label tokens. Goal (a): <= 1.05x a plain forward.
* ``plain``    -- ``model(input_ids, attention_mask, position_ids).logits[:, -1]``:
  the same prompt through an ordinary full forward ((B, T, V) logits).
* ``twosome``  -- action scoring: the prompt ending ``Command:`` followed by
  each of the K legal commands, B*K sequences in one batched forward, the
  commands' token log-likelihoods summed and normalised over the menu (no
  prefix KV sharing; logits kept only for the command positions). Goal (b):
  >= 0.8*K times slower than the readout.
* ``twosome_kv`` -- the same scores with the prompt's KV cache computed once
  per decision and shared by its K commands
  (:func:`rlid.baselines.engine.shared_prompt_logprobs`, what the scoring plane runs
  by default; no goal, shown so that the (b) ratio is not read as the cost of
  action scoring at its best).
* ``generate`` -- ``model.generate`` on the ``Command:`` prompt, greedy, up to
  ``--max-new-tokens`` tokens, stopping at any token that contains a newline.
  Goal (c): >= 3x slower than the readout. A random or fresh model seldom
  writes a newline, so it usually runs all its new tokens; the mean number
  generated is printed next to the time.

All prompts are tokenized before timing; times are wall-clock minima over
``--reps`` per call (one call = ``--batch`` decisions) under
``torch.inference_mode``. The minimum, as ``timeit`` advises: on a shared
machine other jobs only ever add time.

Memory: peak bytes of torch tensors alive at once during one call, above what
was alive before it (weights excluded), summed from the torch profiler's
allocation/free events at operator granularity; it counts activations, logits
and KV caches, not Python objects or allocator caching. It is measured in a
separate untimed first pass that also serves as warm-up.

Usage::

    python benchmarks/readout.py --model tiny --batch 8 --reps 3
    python benchmarks/readout.py --model large --batch 2 --reps 2
    python benchmarks/readout.py --model /path/to/hf-model-dir
    python benchmarks/readout.py --model /path/to/hf-model-dir --device cuda --dtype bfloat16

On a GPU, times are taken after ``torch.cuda.synchronize()`` and memory is the CUDA
allocator's peak during the call above what was allocated before it.
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import string
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from rlid.baselines.engine import shared_prompt_logprobs
from rlid.lm.hardware import resolve_device
from rlid.lm.models import build_model_from_config, model_config
from rlid.lm.readout import left_pad_ids, pad_label_ids, readout_from_ids
from rlid.lm.starts import load_policy_model
from rlid.lm.tokenizer import build_tiny_tokenizer

METHODS = ("readout", "plain", "twosome", "twosome_kv", "generate")
LABELS = list(string.ascii_uppercase + string.ascii_lowercase)
ROOMS = ["kitchen", "studio", "bureau", "bedroom", "pantry", "cellar", "garden", "attic"]
OBJECTS = ["key", "chest", "apple", "lamp", "coin", "book", "knife", "box", "bottle", "map"]
HOLDERS = ["table", "counter", "shelf", "fridge", "cabinet", "drawer", "toolbox", "locker"]
ADJ = ["red", "old", "wooden", "rusty", "small", "golden", "iron", "dusty"]


@dataclass(frozen=True)
class Decisions:
    """A batch of synthetic decisions for one menu size, pre-tokenized for every method."""

    menu_size: int
    answer_ids: list[list[int]]  # labelled prompts ending "Answer:"
    command_ids: list[list[int]]  # the same prompts ending "Command:"
    label_ids: list[list[int]]  # K label token ids per decision
    action_ids: list[list[list[int]]]  # K commands per decision, each " <command>" tokenized


@dataclass
class CallStats:
    """Sizes of one menu size's inputs, and what generation produced."""

    answer_tokens: float  # mean tokens per labelled prompt
    scored_tokens: int  # tokens in one TWOSOME call (B*K sequences)
    generated: list[float]  # mean new tokens per generate call


def menu_actions(k: int, rng: random.Random) -> list[tuple[str, str]]:
    """K distinct (command, afterstate) rows."""
    rows: dict[str, str] = {}
    while len(rows) < k:
        kind = rng.randrange(5)
        obj, adj, holder = rng.choice(OBJECTS), rng.choice(ADJ), rng.choice(HOLDERS)
        if kind == 0:
            d = rng.choice(["north", "south", "east", "west"])
            rows[f"go {d}"] = f"you will be in the {rng.choice(ROOMS)}"
        elif kind == 1:
            rows[f"take {adj} {obj} from {holder}"] = f"you will carry the {adj} {obj}"
        elif kind == 2:
            rows[f"open {adj} {holder}"] = f"the {adj} {holder} will be open"
        elif kind == 3:
            rows[f"put {adj} {obj} on {holder}"] = f"the {adj} {obj} will be on the {holder}"
        else:
            rows[f"examine {adj} {obj}"] = "nothing changes"
    return list(rows.items())


def make_decisions(tokenizer: PreTrainedTokenizerBase, k: int, batch: int, seed: int) -> Decisions:
    """Build ``batch`` menu prompts with ``k`` rows in the project's plain prompt format."""
    rng = random.Random(seed * 1000 + k)
    label_ids = []
    for label in LABELS[:k]:
        ids = tokenizer.encode(" " + label, add_special_tokens=False)
        if len(ids) != 1:
            raise ValueError(f"label ' {label}' is {len(ids)} tokens for this tokenizer")
        label_ids.append(ids[0])
    answer_ids, command_ids, action_ids = [], [], []
    for _ in range(batch):
        rows = menu_actions(k, rng)
        room, obj = rng.choice(ROOMS), rng.choice(OBJECTS)
        head = (
            f"Goal: find the {obj} and open the chest\n"
            f"Memory: go north -> you are in the {rng.choice(ROOMS)}\n"
            f"Now: You are in the {room}. There is a {obj} here. Exits: north, east.\n"
            "Actions:\n" + "".join(f"{LABELS[i]}) {a} -> {s}\n" for i, (a, s) in enumerate(rows))
        )
        answer_ids.append(tokenizer.encode(head + "Answer:", add_special_tokens=False))
        command_ids.append(tokenizer.encode(head + "Command:", add_special_tokens=False))
        action_ids.append([tokenizer.encode(" " + a, add_special_tokens=False) for a, _ in rows])
    return Decisions(k, answer_ids, command_ids, [label_ids] * batch, action_ids)


def position_ids_for(attention_mask: torch.Tensor) -> torch.Tensor:
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (B, T)


def newline_token_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Every token whose text contains a newline (generation stops at any of them)."""
    ids = [i for i in range(len(tokenizer)) if "\n" in tokenizer.decode([i])]
    return ids + ([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else [])


def make_methods(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    decisions: Decisions,
    *,
    max_new_tokens: int,
    stop_ids: list[int],
) -> tuple[dict[str, Callable[[], object]], CallStats]:
    """The methods as zero-argument callables over pre-tokenized inputs, plus stats.

    Every input tensor is placed on the model's device here, before any timing.
    """
    device = model.get_output_embeddings().weight.device
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    vocab_size = model.get_output_embeddings().weight.shape[0]
    batch, k = len(decisions.answer_ids), decisions.menu_size
    answer_ids, answer_mask = (t.to(device) for t in left_pad_ids(decisions.answer_ids, pad_id))
    answer_pos = position_ids_for(answer_mask)  # (B, T)
    label_ids, label_valid = (t.to(device) for t in pad_label_ids(decisions.label_ids, vocab_size))
    command_ids, command_mask = (
        t.to(device) for t in left_pad_ids(decisions.command_ids, pad_id)
    )  # (B, T')

    scored = [p + a for p, acts in zip(decisions.command_ids, decisions.action_ids) for a in acts]
    scored_ids, scored_mask = (t.to(device) for t in left_pad_ids(scored, pad_id))  # (B*K, T'')
    scored_pos = position_ids_for(scored_mask)
    action_len = torch.tensor(
        [len(a) for acts in decisions.action_ids for a in acts], device=device
    )  # (B*K,)
    n_max = int(action_len.max())
    action_tokens = scored_ids[:, -n_max:]  # (B*K, n)
    in_action = torch.arange(n_max, device=device) >= n_max - action_len[:, None]  # (B*K, n)
    stop_tensor = torch.tensor(stop_ids, device=device)
    stats = CallStats(
        answer_tokens=float(answer_mask.sum(-1).float().mean()),
        scored_tokens=int(scored_mask.sum()),
        generated=[],
    )

    def readout() -> object:
        return readout_from_ids(model, answer_ids, answer_mask, label_ids, label_valid).logp

    def plain() -> object:
        return model(
            input_ids=answer_ids,
            attention_mask=answer_mask,
            position_ids=answer_pos,
            use_cache=False,
        ).logits[:, -1]

    def twosome() -> object:
        logits = model(
            input_ids=scored_ids,
            attention_mask=scored_mask,
            position_ids=scored_pos,
            use_cache=False,
            logits_to_keep=n_max + 1,
        ).logits[:, :-1]  # (B*K, n, V): position t predicts token t + 1
        token_logp = torch.log_softmax(logits.float(), -1)
        token_logp = token_logp.gather(-1, action_tokens[..., None]).squeeze(-1)  # (B*K, n)
        seq_logp = (token_logp * in_action).sum(-1).view(batch, k)  # (B, K)
        return torch.log_softmax(seq_logp, -1)

    def twosome_kv() -> object:
        # the scoring plane's default path (ScoringPolicy(share_prompt=True))
        shared = shared_prompt_logprobs(model, decisions.command_ids, decisions.action_ids, pad_id)
        assert shared is not None, "the model returned no KV cache"
        token_logp, _, _ = shared  # (B*K, n), 0 past each command's end
        return torch.log_softmax(token_logp.sum(-1).view(batch, k), -1)

    def generate() -> object:
        out = model.generate(
            input_ids=command_ids,
            attention_mask=command_mask,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=stop_ids,
            pad_token_id=pad_id,
        )
        new = out[:, command_ids.shape[1] :]  # (B, n_new)
        stop = torch.isin(new, stop_tensor)
        # tokens up to and including the first stop token (or all of them)
        first_stop = torch.where(stop.any(-1), stop.int().argmax(-1) + 1, new.shape[1])
        stats.generated.append(float(first_stop.float().mean()))
        return out

    methods = {
        "readout": readout,
        "plain": plain,
        "twosome": twosome,
        "twosome_kv": twosome_kv,
        "generate": generate,
    }
    return methods, stats


def peak_tensor_bytes(fn: Callable[[], object]) -> int:
    """Peak bytes of CPU tensors alive at once during ``fn()``, above those alive before it."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
        del result
    steps = []
    for event in prof.events():
        # allocations are charged to the operator that made them; frees outside
        # any operator appear as standalone "[memory]" events
        amount = event.cpu_memory_usage if event.name == "[memory]" else event.self_cpu_memory_usage
        if amount:
            steps.append((event.time_range.start, amount))
    live = peak = 0
    for _, amount in sorted(steps):
        live += amount
        peak = max(peak, live)
    return peak


def cuda_peak_bytes(fn: Callable[[], object]) -> int:
    """Peak bytes the CUDA allocator held during ``fn()``, above what it held before."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    result = fn()
    del result
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def load(
    name: str, seed: int, dtype: torch.dtype = torch.float32
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, str]:
    """``tiny`` (warm if cached), ``large`` (random ~30M), or a local model directory."""
    if name == "large":
        tokenizer = build_tiny_tokenizer()
        model = build_model_from_config(model_config(tokenizer, "large"), seed=seed, dtype=dtype)
        return model, tokenizer, "fresh"
    model, tokenizer = load_policy_model(name, dtype=dtype)
    return model, tokenizer, model.rlid_origin


def run(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    hf_logging.set_verbosity_error()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    device = resolve_device(args.device)
    model, tokenizer, origin = load(args.model, args.seed, getattr(torch, args.dtype))
    model.to(device)
    stop_ids = newline_token_ids(tokenizer)
    params = sum(p.numel() for p in model.parameters())
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(
        f"model={args.model} ({origin}, {type(model).__name__}, {params / 1e6:.2f}M params, "
        f"{model.dtype}) vocab={len(tokenizer)} batch={args.batch} reps={args.reps} "
        f"device={device} ({where}) threads={torch.get_num_threads()} "
        f"max_new_tokens={args.max_new_tokens}"
    )
    measure_peak = cuda_peak_bytes if device.type == "cuda" else peak_tensor_bytes

    def synchronize() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    setups = {}
    for k in args.menu_sizes:
        decisions = make_decisions(tokenizer, k, args.batch, args.seed)
        setups[k] = make_methods(
            model, tokenizer, decisions, max_new_tokens=args.max_new_tokens, stop_ids=stop_ids
        )
    times: dict[tuple[int, str], list[float]] = {(k, m): [] for k in setups for m in METHODS}
    peaks: dict[tuple[int, str], int] = {}
    with torch.inference_mode():
        for k, (methods, _) in setups.items():  # untimed pass: warm-up + memory
            gap = (methods["twosome"]() - methods["twosome_kv"]()).abs().max()  # type: ignore[operator]
            print(f"K={k}: |twosome - twosome_kv| = {float(gap):.1e} (one distribution)")
            for name in METHODS:
                peaks[k, name] = measure_peak(methods[name])
        for _ in range(args.reps):
            for k, (methods, _) in setups.items():
                for name in METHODS:
                    synchronize()
                    start = time.perf_counter()
                    methods[name]()
                    synchronize()
                    times[k, name].append(time.perf_counter() - start)

    ms = {key: 1000 * min(v) for key, v in times.items()}
    print(
        "\nTime per call (min ms over reps) and ratios; goals: (a) <= 1.05, (b) >= 0.8K, (c) >= 3"
    )
    header = (
        f"{'K':>3} {'tok/prompt':>10} {'readout':>9} {'plain':>9} {'(a) r/p':>8} "
        f"{'twosome':>9} {'(b) t/r':>8} {'0.8K':>5} {'tw_kv':>8} {'kv/r':>5} "
        f"{'generate':>9} {'new tok':>7} {'(c) g/r':>8} {'decisions/s':>11}"
    )
    print(header)
    print("-" * len(header))
    verdicts = []
    for k, (_, stats) in setups.items():
        r, p, t, tkv, g = (ms[k, m] for m in METHODS)
        new_tokens = statistics.mean(stats.generated)
        print(
            f"{k:>3} {stats.answer_tokens:>10.0f} {r:>9.1f} {p:>9.1f} {r / p:>8.2f} "
            f"{t:>9.1f} {t / r:>8.1f} {0.8 * k:>5.1f} {tkv:>8.1f} {tkv / r:>5.1f} "
            f"{g:>9.1f} {new_tokens:>7.1f} {g / r:>8.1f} {1000 * args.batch / r:>11.0f}"
        )
        verdicts.append((r / p <= 1.05, t / r >= 0.8 * k, g / r >= 3))
    names = ["(a) readout <= 1.05x plain", "(b) twosome >= 0.8K x readout", "(c) generate >= 3x"]
    for i, name in enumerate(names):
        ok = sum(v[i] for v in verdicts)
        print(f"{name}: met at {ok}/{len(verdicts)} menu sizes")

    how = "CUDA allocator peak" if device.type == "cuda" else "torch profiler allocation events"
    print(f"\nPeak tensor memory per call (MiB above weights; {how})")
    header = f"{'K':>3} " + " ".join(f"{m:>10}" for m in METHODS) + f" {'tokens twosome':>15}"
    print(header)
    print("-" * len(header))
    for k, (_, stats) in setups.items():
        cells = " ".join(f"{peaks[k, m] / 2**20:>10.2f}" for m in METHODS)
        print(f"{k:>3} {cells} {stats.scored_tokens:>15d}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny", help="tiny | large | PATH (local HF dir)")
    parser.add_argument("--batch", type=int, default=8, help="decisions per call")
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions per method")
    parser.add_argument("--menu-sizes", type=int, nargs="+", default=[4, 8, 16, 32])
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N | auto")
    parser.add_argument(
        "--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
        help="parameter dtype of the model",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.batch < 1 or args.reps < 1:
        parser.error("--batch and --reps must be >= 1")
    if max(args.menu_sizes) > len(LABELS) or min(args.menu_sizes) < 1:
        parser.error(f"menu sizes must lie in 1..{len(LABELS)}")
    run(args)


if __name__ == "__main__":
    main()
