"""Policy models: the tiny causal LM's architecture, fresh builds, and local HF directories.

Nothing is ever downloaded. A model is a local Hugging Face causal-LM directory
(``config.json``, safetensors weights and tokenizer files, as ``save_pretrained``
writes them), loaded by :func:`load_model_dir`, or a fresh random initialisation of
the tiny architecture (:func:`build_tiny_model`). The named starts (``tiny``, the
shipped warm start; ``tiny-play``; ``tiny-random``) are resolved in
:mod:`rlid.lm.starts`.

The ``"tiny"`` architecture is a standard ``LlamaForCausalLM`` built from a config
(hidden 128, 3 layers, 4 heads, tied embeddings, ~0.95M parameters with the ~2.4k-token
tiny tokenizer, 1024 positions). The ``"large"`` preset (hidden 512, 8 layers, ~28.5M
parameters, same tokenizer) exists for tests and benchmarks that need a bigger
random model.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.utils import logging as hf_logging

from rlid.config.names import ModelSize
from rlid.lm.model_folder import check_finite_weights, check_model_folder, first_line
from rlid.lm.tokenizer import TINY_MAX_LENGTH, build_tiny_tokenizer
from rlid.runs.files import resolve_link, staged_dir, write_errors_as_os_errors

logger = logging.getLogger(__name__)


CausalLM = Any
"""A Hugging Face causal LM (``PreTrainedModel``) or a wrapper with the same surface
(``.config``, ``get_output_embeddings()``, ``forward(input_ids=..., ...)``), e.g. a peft
model. ``Any`` because ``torch.nn.Module.__getattr__`` hides those attributes from mypy."""

MODEL_SIZES: dict[str, dict[str, Any]] = {
    "tiny": {
        "hidden_size": 128,
        "intermediate_size": 384,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
    },
    "large": {
        "hidden_size": 512,
        "intermediate_size": 1536,
        "num_hidden_layers": 8,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
    },
}
"""Architecture presets; everything else (vocabulary, positions, tying) is shared."""


def model_config(
    tokenizer: PreTrainedTokenizerBase, size: ModelSize = "tiny", **overrides: Any
) -> LlamaConfig:
    """A ``LlamaConfig`` for ``size`` sized to ``tokenizer``, with field ``overrides``.

    Overrides must name existing ``LlamaConfig`` fields (a typo is an error, not
    a silently ignored attribute).
    """
    if size not in MODEL_SIZES:
        raise ValueError(f"unknown model size {size!r}; valid sizes: {sorted(MODEL_SIZES)}")
    defaults = LlamaConfig()
    unknown = sorted(k for k in overrides if not hasattr(defaults, k))
    if unknown:
        raise ValueError(f"unknown LlamaConfig field(s) {unknown} in overrides")
    fields: dict[str, Any] = {
        "vocab_size": len(tokenizer),
        "max_position_embeddings": TINY_MAX_LENGTH,
        "tie_word_embeddings": True,
        "rms_norm_eps": 1e-6,
        "bos_token_id": None,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        **MODEL_SIZES[size],
        **overrides,
    }
    return LlamaConfig(**fields)


def build_model_from_config(
    config: LlamaConfig, *, seed: int = 0, dtype: torch.dtype = torch.float32
) -> PreTrainedModel:
    """A randomly initialised causal LM for ``config``; the same ``seed`` gives the same weights.

    The global torch RNG is left untouched (the init runs in a forked RNG
    state). The model is returned in eval mode, like ``from_pretrained``.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    return model.to(dtype).eval()


def build_tiny_model(
    tokenizer: PreTrainedTokenizerBase, *, seed: int = 0, **overrides: Any
) -> PreTrainedModel:
    """A fresh tiny model for ``tokenizer`` (see :data:`MODEL_SIZES`), deterministic in ``seed``."""
    return build_model_from_config(model_config(tokenizer, "tiny", **overrides), seed=seed)


def save_policy_model(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, path: str | os.PathLike[str]
) -> Path:
    """Write ``model`` and ``tokenizer`` to the directory ``path`` atomically; return the path.

    Everything is written to a temporary sibling directory, synced to disk, which then
    takes ``path``'s place (:func:`rlid.runs.files.staged_dir`), so a reader never sees a
    half-written model. An existing ``path`` is swapped out in one atomic step where the
    OS can (Linux); elsewhere it is renamed aside first and, between those two renames,
    briefly does not exist (a concurrent ``"tiny"`` load then falls back to a fresh
    model and says so). A symbolic link ``path`` stays: the model is written where it
    points (returned), created if it does not exist yet.
    """
    path = resolve_link(path)
    with write_errors_as_os_errors(path), staged_dir(path) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return path


def check_model_dir(name_or_path: str | os.PathLike[str]) -> Path:
    """Resolve a local model directory or fail with a message naming it."""
    path = Path(name_or_path).expanduser()
    if not path.exists():
        raise FileNotFoundError(
            f"model directory {str(name_or_path)!r} does not exist. rlid never downloads "
            "models: pass 'tiny' or the path of a local Hugging Face model directory"
        )
    if not path.is_dir():
        raise ValueError(f"{str(path)!r} is a file, not a Hugging Face model directory")
    if not (path / "config.json").is_file():
        raise ValueError(f"{str(path)!r} is not a Hugging Face model directory (no config.json)")
    check_model_folder(path)  # no custom code, no pickles: one line each
    return path


@contextlib.contextmanager
def _no_weight_loading_bar() -> Iterator[None]:
    """transformers' "Loading weights" bar off for one load, whatever was imported first.

    ``import rlid`` turns the bars off through the environment, but transformers reads
    it once, when it is first imported: a program that imported transformers before
    rlid would otherwise get the bar on stderr, in front of our own output and errors.
    """

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            with warnings.catch_warnings():  # a hub setting may refuse, quietly
                warnings.simplefilter("ignore")
                hf_logging.enable_progress_bar()


def _load_dir(path: Path, *, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load model and tokenizer from a checked directory; errors name the directory."""
    # never code from the folder (auto_map), never pickle weights: refused up front too
    safe: dict[str, Any] = {"local_files_only": True, "trust_remote_code": False}
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, **safe)
    except (OSError, ValueError, TypeError) as err:
        raise ValueError(
            f"could not load a tokenizer from {str(path)!r}: {first_line(err)}"
        ) from err
    try:
        with _no_weight_loading_bar():
            model = AutoModelForCausalLM.from_pretrained(
                path, dtype=dtype, use_safetensors=True, **safe
            )
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise ValueError(
            f"could not load a causal LM from {str(path)!r}: {first_line(err)}"
        ) from err
    check_finite_weights(model, path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(
                f"the tokenizer in {str(path)!r} has neither a pad nor an eos token; "
                "set one in its tokenizer_config.json"
            )
        tokenizer.pad_token = tokenizer.eos_token
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    return model.eval(), tokenizer


def load_model_dir(
    name_or_path: str | os.PathLike[str], *, dtype: torch.dtype = torch.float32
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Model and tokenizer (left padding, pad token set) of a local directory, in eval mode.

    Raises:
        FileNotFoundError: the path does not exist (models are never downloaded).
        ValueError: the path is not a loadable Hugging Face model directory.
    """
    return _load_dir(check_model_dir(name_or_path), dtype=dtype)


def fresh_tiny_model(
    *, dtype: torch.dtype = torch.float32
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The tiny architecture's random initialisation (seed 0) and the tiny tokenizer."""
    tokenizer = build_tiny_tokenizer()
    return build_model_from_config(model_config(tokenizer, "tiny"), seed=0, dtype=dtype), tokenizer


def own_memory(model: torch.nn.Module) -> torch.nn.Module:
    """Give every parameter and buffer memory of its own, aligned like a fresh allocation.

    safetensors maps the file, so loaded tensors start at arbitrary offsets; CPU matmul
    kernels then take other code paths and differ in the last bit from a run that never
    reloaded, which breaks exact resume (and N-process = 1-process equivalence).
    """
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if tensor.data_ptr() % 64:
                tensor.data = tensor.data.clone()
    return model
