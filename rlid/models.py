"""Policy models: the embedded tiny causal LM, its warm-start cache, and local HF directories.

Nothing is ever downloaded. ``load_policy_model`` accepts either ``"tiny"`` or
the path of a local Hugging Face causal-LM directory (``config.json``, weights
and tokenizer files, as ``save_pretrained`` writes them).

``"tiny"`` is a standard ``LlamaForCausalLM`` built from a config (hidden 128,
3 layers, 4 heads, tied embeddings, ~0.95M parameters with the ~2.4k-token tiny
tokenizer, 1024 positions), initialised deterministically from a seed. When the
tiny-model pretraining step has filled ``tiny_cache_dir()``, ``"tiny"`` loads
that warm-started model instead (DESIGN §9). Which one was loaded is never
silent: the returned model carries ``model.rlid_origin``, one of

* ``"warm"``  -- the warm-started tiny model from ``tiny_cache_dir()``;
* ``"fresh"`` -- a fresh random initialisation of the tiny model (no cache, a
  stale cache, or ``warm=False``); logged as a warning when a warm start was
  asked for but none was usable;
* ``"local"`` -- a model loaded from a directory the caller named;

and a log line (logger ``rlid.models``) says the same with the directory.

The ``"large"`` preset (hidden 512, 8 layers, ~28.5M parameters, same
tokenizer) exists for tests and benchmarks that need a bigger random model.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Literal

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from envs.paths import cache_root
from rlid.tokenizer import TINY_MAX_LENGTH, build_tiny_tokenizer

logger = logging.getLogger(__name__)

ModelSize = Literal["tiny", "large"]
Origin = Literal["warm", "fresh", "local"]

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

TINY_NAME = "tiny"


def tiny_cache_dir() -> Path:
    """Where the warm-started tiny model lives: ``<cache_root>/models/tiny-warm``.

    ``cache_root()`` honours ``$RLID_CACHE_DIR``. The directory is written by the
    tiny-model pretraining step with :func:`save_policy_model`.
    """
    return cache_root() / "models" / "tiny-warm"


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

    Everything is written to a temporary sibling directory which is then renamed
    to ``path``, so a reader never sees a half-written model. An existing
    ``path`` is first renamed aside and removed after the swap (between those
    two renames ``path`` briefly does not exist: a concurrent ``"tiny"`` load
    then falls back to a fresh model and says so).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex}"
    tmp.mkdir()  # not mkdtemp: that would leave the final directory private (0700)
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if path.exists():
            old = path.parent / f".{path.name}.old-{uuid.uuid4().hex}"
            path.rename(old)
            tmp.rename(path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def load_policy_model(
    name_or_path: str | os.PathLike[str] = TINY_NAME,
    *,
    dtype: torch.dtype = torch.float32,
    warm: bool = True,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a policy model and its tokenizer (left padding, pad token set), in eval mode.

    Args:
        name_or_path: ``"tiny"`` (the embedded model; warm-started when cached) or
            a local Hugging Face model directory. To load a directory literally
            named ``tiny``, pass ``"./tiny"``.
        dtype: parameter dtype.
        warm: for ``"tiny"``, use the warm-start cache when present; ``False``
            always returns the fresh initialisation (seed 0).

    Returns:
        ``(model, tokenizer)``; ``model.rlid_origin`` is ``"warm"``, ``"fresh"``
        or ``"local"`` (see the module docstring).

    Raises:
        FileNotFoundError: the path does not exist (models are never downloaded).
        ValueError: the path is not a loadable Hugging Face model directory.

    Example::

        >>> model, tok = load_policy_model("tiny", warm=False)
        >>> model.rlid_origin
        'fresh'
    """
    if isinstance(name_or_path, str) and name_or_path == TINY_NAME:
        return _load_tiny(dtype=dtype, warm=warm)
    path = _check_model_dir(name_or_path)
    model, tokenizer = _load_dir(path, dtype=dtype)
    model.rlid_origin = "local"  # type: ignore[assignment]
    logger.info("loaded policy model from %s", path)
    return model, tokenizer


def _load_tiny(
    *, dtype: torch.dtype, warm: bool
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The warm-started tiny model when usable, else the fresh one (and say which)."""
    tokenizer = build_tiny_tokenizer()
    cache = tiny_cache_dir()
    if warm and (cache / "config.json").is_file():
        model, cached_tokenizer = _load_dir(cache, dtype=dtype)
        if cached_tokenizer.get_vocab() == tokenizer.get_vocab():
            model.rlid_origin = "warm"  # type: ignore[assignment]
            logger.info("loaded the warm-started tiny model from %s", cache)
            return model, cached_tokenizer
        logger.warning(
            "the warm-start cache %s was built with a different tiny tokenizer; ignoring it "
            "and using a fresh random initialisation (delete it and pretrain again)",
            cache,
        )
    elif warm:
        logger.warning(
            "no warm-started tiny model at %s; using a fresh random initialisation "
            "(the tiny-model pretraining step fills that directory)",
            cache,
        )
    else:
        logger.info("using the fresh tiny model (warm start disabled)")
    model = build_model_from_config(model_config(tokenizer, "tiny"), seed=0, dtype=dtype)
    model.rlid_origin = "fresh"  # type: ignore[assignment]
    return model, tokenizer


def _check_model_dir(name_or_path: str | os.PathLike[str]) -> Path:
    """Resolve a local model directory or fail with a message naming it."""
    path = Path(name_or_path).expanduser()
    if not path.exists():
        raise FileNotFoundError(
            f"model directory {str(name_or_path)!r} does not exist. rlid never downloads "
            f"models: pass {TINY_NAME!r} or the path of a local Hugging Face model directory"
        )
    if not path.is_dir():
        raise ValueError(f"{str(path)!r} is a file, not a Hugging Face model directory")
    if not (path / "config.json").is_file():
        raise ValueError(f"{str(path)!r} is not a Hugging Face model directory (no config.json)")
    return path


def _load_dir(path: Path, *, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load model and tokenizer from a checked directory; errors name the directory."""
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, TypeError) as err:
        raise ValueError(f"could not load a tokenizer from {str(path)!r}: {err}") from err
    try:
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype)
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise ValueError(f"could not load a causal LM from {str(path)!r}: {err}") from err
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
