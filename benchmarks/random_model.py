"""Write a randomly initialised causal LM of a real model's shape, as a local model directory.

Speed and memory depend on a model's shape, not on its weights, so a random model
of Qwen2-0.5B's shape measures what the real one would cost (readout, update, peak
memory) on a machine that cannot download weights. The directory loads like any
local model (``rlid train --model DIR``, ``benchmarks/readout.py --model DIR``,
``benchmarks/hardware.py --model DIR``). It knows nothing: use it for timings and
memory, never for learning.

The tokenizer comes from ``--tokenizer DIR`` (any local Hugging Face tokenizer whose
vocabulary fits the shape's), or ``--tokenizer qwen-bpe``: Qwen's byte-level BPE
ranks shipped inside the ``dashscope`` wheel (installed by the test extra), wrapped
as a fast tokenizer with Qwen's ChatML template. ``--tokenizer-only`` writes just the
tokenizer (small; a machine without ``dashscope`` can take it from there).

    python benchmarks/random_model.py --tokenizer qwen-bpe --tokenizer-only --out /tmp/qwen-tok
    python benchmarks/random_model.py --shape qwen2-0.5b --tokenizer /tmp/qwen-tok \\
        --out /tmp/qwen2-0.5b-random
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from rlid.lm.tokenizer import CHATML_TEMPLATE, qwen_bpe_tokenizer

# the published configs' shapes (hidden sizes, layers, heads, vocabulary), and a tiny
# one with Qwen2's vocabulary for checking scripts on a CPU (gpu_check.sh's dry run)
SHAPES: dict[str, dict[str, Any]] = {
    "qwen2-tiny": dict(
        model_type="qwen2", vocab_size=151936, hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=4096, rope_theta=1e6, rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
    "qwen2-0.5b": dict(
        model_type="qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864,
        num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
        max_position_embeddings=32768, rope_theta=1e6, rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
    "qwen2.5-1.5b": dict(
        model_type="qwen2", vocab_size=151936, hidden_size=1536, intermediate_size=8960,
        num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
        max_position_embeddings=32768, rope_theta=1e6, rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
    "llama-3.2-1b": dict(
        model_type="llama", vocab_size=128256, hidden_size=2048, intermediate_size=8192,
        num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
        max_position_embeddings=131072, rope_theta=5e5, rms_norm_eps=1e-5,
        tie_word_embeddings=True,
    ),
}  # fmt: skip


def load_tokenizer(source: str) -> PreTrainedTokenizerBase:
    if source == "qwen-bpe":
        try:
            return qwen_bpe_tokenizer(chat_template=CHATML_TEMPLATE)
        except ImportError as err:
            sys.exit(f"--tokenizer qwen-bpe: {err}")
    path = Path(source)
    if not path.is_dir():
        sys.exit(f"--tokenizer {source!r}: not 'qwen-bpe' and not a directory")
    return AutoTokenizer.from_pretrained(path)


def write_model(
    shape: str, tokenizer: PreTrainedTokenizerBase, out: Path, *, seed: int, dtype: torch.dtype
) -> int:
    """Save a random model of ``shape`` with ``tokenizer`` to ``out``; return its size."""
    from transformers import AutoConfig

    fields = dict(SHAPES[shape])
    if len(tokenizer) > fields["vocab_size"]:
        sys.exit(f"the tokenizer has {len(tokenizer)} tokens; {shape} holds {fields['vocab_size']}")
    special = {
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
    }
    config = AutoConfig.for_model(fields.pop("model_type"), **fields, **special)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return sum(p.numel() for p in model.parameters())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen2-0.5b")
    parser.add_argument("--tokenizer", required=True, help="'qwen-bpe' or a tokenizer directory")
    parser.add_argument("--out", type=Path, required=True, help="directory to create")
    parser.add_argument("--tokenizer-only", action="store_true", help="write the tokenizer alone")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="bfloat16",
                        help="dtype of the saved weights")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.out.exists():
        parser.error(f"--out {args.out} exists; choose a new directory")
    tokenizer = load_tokenizer(args.tokenizer)
    start = time.perf_counter()
    tmp = args.out.with_name(args.out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    if args.tokenizer_only:
        tokenizer.save_pretrained(tmp)
        what = f"tokenizer ({len(tokenizer)} tokens)"
    else:
        params = write_model(
            args.shape, tokenizer, tmp, seed=args.seed, dtype=getattr(torch, args.dtype)
        )
        what = f"random {args.shape} ({params / 1e6:.0f}M parameters, {args.dtype})"
    tmp.rename(args.out)  # a crash leaves only the .partial directory
    print(f"wrote {what} to {args.out} in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
