"""Warm-start pretraining: seconds per step with one padded batch against the same batch
in length-sorted pieces (``rlid pretrain --max-batch-tokens N``), side by side.

The corpus is a real one (``--envs`` as ``rlid pretrain``; walkthrough and random play),
the batches the same for both ways, drawn as the build draws them. Also printed: the
padded tokens per step of each way and the largest difference of the summed gradient.
Mixed lengths are where pieces pay: a batch padded to its longest sequence costs that
length for every row.

    python benchmarks/pretrain_batches.py                      # keydoor + crafting (fast)
    python benchmarks/pretrain_batches.py --envs "tw-cooking[recipe=1,take=1,go=1]" keydoor \\
        --labels auto --max-tokens 1024                         # longer prompts beside short
"""

from __future__ import annotations

import argparse
import time

import torch

from rlid.lm.models import build_tiny_model
from rlid.lm.pretrain import PretrainConfig, training_sequences
from rlid.lm.pretrain.lm import batch_backward, length_pieces
from rlid.lm.tokenizer import build_tiny_tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", nargs="+", default=["keydoor", "crafting"])
    parser.add_argument("--labels", default="A-Z")
    parser.add_argument("--max-tokens", type=int, default=640)
    parser.add_argument("--max-batch-tokens", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=5, help="batches timed per way")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tokenizer = build_tiny_tokenizer()
    config = PretrainConfig(
        envs=tuple(args.envs), walkthrough_episodes=16, random_answers=False,
        answer_weight=20.0, max_tokens=args.max_tokens, labels=args.labels,
    )  # fmt: skip
    seqs = training_sequences(config, tokenizer)
    gen = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(args.steps):
        idx = torch.randint(len(seqs), (args.batch_size,), generator=gen).tolist()
        batches.append([seqs[i] for i in idx])
    lengths = sorted(len(ids) for ids, _ in seqs)
    print(
        f"corpus: {len(seqs)} sequences, length median {lengths[len(lengths) // 2]}, "
        f"max {lengths[-1]}; {args.steps} batches of {args.batch_size}, {args.threads} thread(s)"
    )
    pad = tokenizer.pad_token_id
    results = {}
    for budget in (0, args.max_batch_tokens):
        model = build_tiny_model(tokenizer, seed=0)
        padded, seconds, grads = 0, [], None
        for batch in batches:
            pieces = length_pieces([len(ids) for ids, _ in batch], budget)
            padded += sum(len(p) * max(len(batch[b][0]) for b in p) for p in pieces)
            model.zero_grad(set_to_none=True)
            start = time.perf_counter()
            batch_backward(model, batch, pad, config.answer_weight, budget)
            seconds.append(time.perf_counter() - start)
            grads = [p.grad.clone() for p in model.parameters()]
        results[budget] = (sum(seconds) / len(seconds), padded / len(batches), grads)
        name = "one padded batch" if budget == 0 else f"pieces of <= {budget} tokens"
        print(
            f"{name:>28}: {results[budget][0]:.2f} s/step, {results[budget][1]:.0f} padded tokens/step"
        )
    (one, one_tokens, g0), (split, split_tokens, g1) = results[0], results[args.max_batch_tokens]
    diff = max(float((a - b).abs().max()) for a, b in zip(g0 or [], g1 or []))
    print(
        f"speed-up {one / split:.2f}x, padded tokens {one_tokens / split_tokens:.2f}x fewer; "
        f"largest gradient difference (last batch) {diff:.2e}"
    )


if __name__ == "__main__":
    main()
