"""Benchmark: the chosen tokens' log-probabilities over a real vocabulary, written out vs in blocks.

Every plane that reads a completion token by token (action scoring's continuations,
the token plane's commands) turns the model's logits (positions x vocabulary) into
``log_softmax(logits / T)[target]`` and back-propagates through it. Written out
(``log_softmax(logits.float()).gather(...)``, as rlid did before
:func:`rlid.baselines.engine.token_logprobs`) that keeps a float32 copy of every logit and
its log-softmax until the backward pass; in blocks only the chosen entries are kept
(the backward pass recomputes each block's softmax from the logits). Both run here side by side on the same random
logits, forward and backward, for each ``--dtype``: the peak bytes of tensors alive
during the call above the logits themselves (CUDA allocator peak on a GPU; on the CPU
the torch profiler's allocation events, as ``benchmarks/large_menus.py``), the time
(minimum over ``--reps``), and the largest differences of the values and gradients.

The default shape is one scoring decision of a ScienceWorld state with 404 legal
actions at about 8 tokens each, over Qwen2's vocabulary (151,936).

    python benchmarks/logprob_memory.py
    python benchmarks/logprob_memory.py --positions 512 --vocab 32000 --dtype float32
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rlid.baselines.engine import token_logprobs  # noqa: E402
from rlid.lm.hardware import resolve_device  # noqa: E402


def written_out(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The log-softmax over the whole vocabulary in float32, then the chosen entries."""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, targets[..., None]).squeeze(-1)


METHODS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "written out": written_out,
    "in blocks": token_logprobs,
}


def step(method: Callable, logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor):
    """Forward and backward of one weighted sum of the chosen log-probabilities."""
    leaf = logits.detach().requires_grad_()
    logp = method(leaf, targets)
    (logp * weights).sum().backward()
    return logp.detach(), leaf.grad


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--positions", type=int, default=404 * 8, help="token positions scored")
    parser.add_argument("--vocab", type=int, default=151_936, help="vocabulary size")
    parser.add_argument("--dtype", default="bfloat16,float32", help="comma-separated logit dtypes")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    args = parser.parse_args(argv)
    if args.positions < 1 or args.vocab < 2 or args.reps < 1:
        parser.error("--positions and --reps must be at least 1, --vocab at least 2")
    dtypes = []
    for name in args.dtype.split(","):
        if not isinstance(getattr(torch, name.strip(), None), torch.dtype):
            parser.error(f"--dtype: unknown dtype {name.strip()!r} (e.g. bfloat16, float32)")
        dtypes.append(getattr(torch, name.strip()))
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    g = torch.Generator().manual_seed(0)
    print(f"{args.positions:,} positions x {args.vocab:,} vocabulary, forward and backward, "
          f"device={device}, threads={args.threads}, reps={args.reps}")  # fmt: skip
    print("\n| logits | logits MiB | written out: peak above them MiB, s | in blocks: peak MiB, s "
          "| peak ratio | max abs diff (values, gradients) |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for dtype in dtypes:
        print(row(dtype, args, device, g))


def row(
    dtype: torch.dtype, args: argparse.Namespace, device: torch.device, g: torch.Generator
) -> str:
    """One dtype's line of the table: peaks, times, differences of the two methods."""
    from large_menus import peak_bytes

    logits = (3 * torch.randn(args.positions, args.vocab, generator=g)).to(device, dtype)
    targets = torch.randint(0, args.vocab, (args.positions,), generator=g).to(device)
    weights = torch.randn(args.positions, generator=g).to(device)
    peaks, seconds, results = {}, {}, {}
    for name, method in METHODS.items():
        peaks[name] = peak_bytes(lambda m=method: step(m, logits, targets, weights), device)
    for _ in range(args.reps):  # interleaved, so load on a shared machine hits both alike
        for name, method in METHODS.items():
            start = time.perf_counter()
            results[name] = step(method, logits, targets, weights)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            seconds[name] = min(seconds.get(name, float("inf")), time.perf_counter() - start)
    (v0, g0), (v1, g1) = results.values()
    mib = logits.numel() * logits.element_size() / 2**20
    a, b = peaks["written out"] / 2**20, peaks["in blocks"] / 2**20
    return (
        f"| {str(dtype).removeprefix('torch.')} | {mib:,.0f} | {a:,.0f}, {seconds['written out']:.2f} "
        f"| {b:,.0f}, {seconds['in blocks']:.2f} | {a / max(b, 1e-9):.1f}x "
        f"| {float((v0 - v1).abs().max()):.1e}, {float((g0.float() - g1.float()).abs().max()):.1e} |"
    )


if __name__ == "__main__":
    main()
