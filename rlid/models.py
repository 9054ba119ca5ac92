"""Policy models: the embedded tiny causal LM, its warm-start cache, and local HF directories.

Nothing is ever downloaded. ``load_policy_model`` accepts either ``"tiny"`` or
the path of a local Hugging Face causal-LM directory (``config.json``, weights
and tokenizer files, as ``save_pretrained`` writes them).

``"tiny"`` is a standard ``LlamaForCausalLM`` built from a config (hidden 128,
3 layers, 4 heads, tied embeddings, ~0.95M parameters with the ~2.4k-token tiny
tokenizer, 1024 positions), **always warm-started** by language-model pretraining on
random-play transcripts (DESIGN §9, :mod:`rlid.pretrain`). The warm model is built on
first use -- a one-time cost announced in one line, with a progress bar -- and cached
in ``tiny_cache_dir()``; ``rlid pretrain`` builds it ahead of time. A fresh random
initialisation is only returned on explicit request: ``"tiny-random"`` (or
``warm=False``). Which one was loaded is never silent: the returned model carries
``model.rlid_origin``, one of

* ``"warm"``  -- the warm-started tiny model from ``tiny_cache_dir()``;
* ``"fresh"`` -- a fresh random initialisation of the tiny model (``"tiny-random"``);
* ``"local"`` -- a model loaded from a directory the caller named;

and a log line (logger ``rlid.models``) says the same with the directory.

The ``"large"`` preset (hidden 512, 8 layers, ~28.5M parameters, same
tokenizer) exists for tests and benchmarks that need a bigger random model.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Iterator
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
from rlid.model_folder import check_finite_weights, check_model_folder, first_line
from rlid.runs.files import resolve_link, staged_dir, write_errors_as_os_errors
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
TINY_RANDOM_NAME = "tiny-random"

WARM_START_RECIPE: Any = None
"""The :class:`rlid.pretrain.PretrainConfig` a first-use warm build runs (``None``: its
defaults, what ``rlid pretrain`` runs). Tests put a tiny recipe here; a non-default
recipe gets its own cache directory, so it never stands in for the real warm model."""


def warm_start_recipe() -> Any:
    from rlid.pretrain import PretrainConfig

    return WARM_START_RECIPE if WARM_START_RECIPE is not None else PretrainConfig()


def tiny_cache_dir() -> Path:
    """Where the warm-started tiny model lives: ``<cache_root>/models/tiny-warm``.

    ``cache_root()`` honours ``$RLID_CACHE_DIR``. The directory is written by the
    tiny-model pretraining step with :func:`save_policy_model`. A non-default
    :data:`WARM_START_RECIPE` lives in ``tiny-warm-<hash of the recipe>`` instead.
    """
    from dataclasses import asdict

    from rlid.pretrain import PretrainConfig

    recipe = warm_start_recipe()
    if recipe == PretrainConfig():
        return cache_root() / "models" / "tiny-warm"
    import hashlib
    import json

    digest = hashlib.sha256(json.dumps(asdict(recipe), sort_keys=True).encode()).hexdigest()
    return cache_root() / "models" / f"tiny-warm-{digest[:12]}"


def build_warm_tiny(*, progress: bool = True) -> Path:
    """Build the warm-started tiny model into ``tiny_cache_dir()`` unless it is there.

    One process builds, others wait on a file lock and then load it. Prints one line
    announcing the one-time cost; ``progress`` shows the pretraining progress bar.
    """
    from filelock import FileLock

    from rlid.pretrain import pretrain

    cache = tiny_cache_dir()
    cache.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache.parent / f".{cache.name}.lock")):
        if _warm_usable(cache):
            return cache
        recipe = warm_start_recipe()
        print(
            f"rlid: building the warm-started tiny model once ({recipe.steps} steps of "
            "language-model pretraining on random-play transcripts, minutes on a small CPU; "
            f"cached in {cache}; `rlid pretrain` does this ahead of time)",
            file=sys.stderr,
            flush=True,
        )
        threads = torch.get_num_threads()
        try:
            pretrain(recipe, out=cache, progress=progress)
        finally:
            torch.set_num_threads(threads)  # pretraining sets its own; give the caller's back
    return cache


def _warm_usable(cache: Path) -> bool:
    """The cache holds a model built with today's tiny tokenizer."""
    if not (cache / "config.json").is_file():
        return False
    try:
        cached = AutoTokenizer.from_pretrained(
            cache, local_files_only=True, trust_remote_code=False
        )
    except (OSError, ValueError, TypeError):
        return False
    if cached.get_vocab() == build_tiny_tokenizer().get_vocab():
        return True
    logger.warning(
        "the warm-start cache %s was built with a different tiny tokenizer; building it again",
        cache,
    )
    return False


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


def load_policy_model(
    name_or_path: str | os.PathLike[str] = TINY_NAME,
    *,
    dtype: torch.dtype = torch.float32,
    warm: bool = True,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a policy model and its tokenizer (left padding, pad token set), in eval mode.

    Args:
        name_or_path: ``"tiny"`` (the embedded model, warm-started; built and cached
            on first use), ``"tiny-random"`` (its fresh random initialisation, seed 0)
            or a local Hugging Face model directory. To load a directory literally
            named ``tiny``, pass ``"./tiny"``.
        dtype: parameter dtype.
        warm: ``False`` turns ``"tiny"`` into ``"tiny-random"``.

    Returns:
        ``(model, tokenizer)``; ``model.rlid_origin`` is ``"warm"``, ``"fresh"``
        or ``"local"`` (see the module docstring).

    Raises:
        FileNotFoundError: the path does not exist (models are never downloaded).
        ValueError: the path is not a loadable Hugging Face model directory.

    Example::

        >>> model, tok = load_policy_model("tiny-random")
        >>> model.rlid_origin
        'fresh'
    """
    if isinstance(name_or_path, str) and name_or_path in (TINY_NAME, TINY_RANDOM_NAME):
        return _load_tiny(dtype=dtype, warm=warm and name_or_path == TINY_NAME)
    path = _check_model_dir(name_or_path)
    model, tokenizer = _load_dir(path, dtype=dtype)
    model.rlid_origin = "local"  # type: ignore[assignment]
    logger.info("loaded policy model from %s", path)
    return model, tokenizer


def _load_tiny(
    *, dtype: torch.dtype, warm: bool
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The warm-started tiny model (built on first use), or the fresh one when not ``warm``."""
    if warm:
        cache = build_warm_tiny(progress=True)
        model, tokenizer = _load_dir(cache, dtype=dtype)
        model.rlid_origin = "warm"  # type: ignore[assignment]
        logger.info("loaded the warm-started tiny model from %s", cache)
        return model, tokenizer
    logger.info("using the fresh random tiny model (%s)", TINY_RANDOM_NAME)
    tokenizer = build_tiny_tokenizer()
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
    check_model_folder(path)  # no custom code, no pickles: one line each
    return path


@contextlib.contextmanager
def _no_weight_loading_bar() -> Iterator[None]:
    """transformers' "Loading weights" bar off for one load, whatever was imported first.

    ``import rlid`` turns the bars off through the environment, but transformers reads
    it once, when it is first imported: a program that imported transformers before
    rlid would otherwise get the bar on stderr, in front of our own output and errors.
    """
    from transformers.utils import logging as hf_logging

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
