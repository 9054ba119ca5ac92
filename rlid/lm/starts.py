"""Named starting models, and the model a run starts or resumes from.

``--model`` takes a local Hugging Face directory or one of three names:

* ``"tiny"`` -- **the default: the shipped warm start.** The tiny model taught by the
  menus' marks, shipped inside the package (``rlid/data/start/``, a few MB of
  safetensors) with a manifest that says how it was built, what its corpus saw (training
  games only) and the sha256 of its weights, checked on every load. Loading it takes no
  pretraining. ``rlid pretrain`` with the manifest's command rebuilds a start of the same
  recipe (not bit-identical on another CPU: float kernels differ).
* ``"tiny-play"`` -- the random-play warm start: the tiny model pretrained on
  transcripts of uniformly random play, which can read a menu and write a command but
  knows no task. Built on first use (minutes) into the cache (:func:`play_cache_dir`),
  or ahead of time by ``rlid pretrain``.
* ``"tiny-random"`` -- the tiny architecture's random initialisation (seed 0).

Which one was loaded is never silent: the model carries ``model.rlid_origin``, one of
``"shipped"``, ``"warm"`` (``tiny-play``), ``"fresh"`` or ``"local"``, and a log line
(logger ``rlid.lm.starts``) says the same with the directory. A run pins its starting
model (:func:`model_pin`), so a resume that reloads it checks it is unchanged.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock
from transformers import AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from rlid.lm.hardware import DTYPES
from rlid.lm.lora import apply_lora, attach_adapters
from rlid.lm.models import fresh_tiny_model, load_model_dir, own_memory
from rlid.lm.pretrain.build import pretrain
from rlid.lm.start_files import (
    TINY_NAME,
    TINY_PLAY_NAME,
    TINY_RANDOM_NAME,
    check_shipped,
    play_cache_dir,
    play_recipe,
    start_dir,
)
from rlid.lm.tokenizer import build_tiny_tokenizer
from rlid.runs.pin import weights_hash

logger = logging.getLogger(__name__)


def build_play_start(*, progress: bool = True) -> Path:
    """Build ``tiny-play`` into :func:`play_cache_dir` unless it is there.

    One process builds, others wait on a file lock and then load it. Prints one line
    announcing the one-time cost; ``progress`` shows the pretraining progress bar.
    """
    cache = play_cache_dir()
    cache.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache.parent / f".{cache.name}.lock")):
        if _play_start_usable(cache):
            return cache
        recipe = play_recipe()
        print(
            f"rlid: building the random-play start {TINY_PLAY_NAME!r} once ({recipe.steps} "
            "steps of language-model pretraining on random-play transcripts, minutes on a "
            f"small CPU; cached in {cache}; `rlid pretrain` does this ahead of time)",
            file=sys.stderr,
            flush=True,
        )
        threads = torch.get_num_threads()
        try:
            pretrain(recipe, out=cache, progress=progress)
        finally:
            torch.set_num_threads(threads)  # pretraining sets its own; give the caller's back
    return cache


def _play_start_usable(cache: Path) -> bool:
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
        "the start cache %s was built with a different tiny tokenizer; building it again",
        cache,
    )
    return False


# --------------------------------------------------------------------------- loading
def load_policy_model(
    name_or_path: str | os.PathLike[str] = TINY_NAME,
    *,
    dtype: torch.dtype = torch.float32,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a policy model and its tokenizer (left padding, pad token set), in eval mode.

    Args:
        name_or_path: ``"tiny"`` (the shipped warm start), ``"tiny-play"`` (the
            random-play start, built and cached on first use), ``"tiny-random"`` (the
            random initialisation) or a local Hugging Face model directory. To load a
            directory literally named ``tiny``, pass ``"./tiny"``.
        dtype: parameter dtype.

    Returns:
        ``(model, tokenizer)``; ``model.rlid_origin`` says which (module docstring).

    Raises:
        FileNotFoundError: the path does not exist (models are never downloaded).
        ValueError: the path is not a loadable Hugging Face model directory, or the
            shipped start's weights do not match its manifest.

    Example::

        >>> model, tok = load_policy_model("tiny-random")
        >>> model.rlid_origin
        'fresh'
    """
    name = name_or_path if isinstance(name_or_path, str) else None
    if name == TINY_RANDOM_NAME:
        logger.info("using the random tiny model (%s)", TINY_RANDOM_NAME)
        model, tokenizer = fresh_tiny_model(dtype=dtype)
        origin = "fresh"
    elif name == TINY_NAME:
        path = check_shipped()
        model, tokenizer = load_model_dir(path, dtype=dtype)
        origin = "shipped"
        logger.info("loaded the shipped warm start from %s", path)
    elif name == TINY_PLAY_NAME:
        path = build_play_start(progress=True)
        model, tokenizer = load_model_dir(path, dtype=dtype)
        origin = "warm"
        logger.info("loaded the random-play start from %s", path)
    else:
        model, tokenizer = load_model_dir(name_or_path, dtype=dtype)
        origin = "local"
        logger.info("loaded policy model from %s", name_or_path)
    model.rlid_origin = origin  # type: ignore[assignment]
    return model, tokenizer


def model_pin(name_or_path: str) -> dict[str, Any]:
    """``{"model", "origin", "path", "sha256"}`` of what ``name_or_path`` loads now
    (recorded by a run when it starts: :mod:`rlid.runs.pin`)."""
    if name_or_path == TINY_RANDOM_NAME:
        return {"model": name_or_path, "origin": "fresh", "path": None, "sha256": None}
    path = start_dir(name_or_path)
    assert path is not None
    origin = {TINY_NAME: "shipped", TINY_PLAY_NAME: "warm"}.get(name_or_path, "local")
    if origin == "warm" and not (path / "config.json").is_file():
        return {"model": name_or_path, "origin": "warm", "path": None, "sha256": None}
    return {"model": name_or_path, "origin": origin, "path": str(path.resolve()),
            "sha256": weights_hash(path)}  # fmt: skip


def base_model_path(config: Any) -> str:
    """Where a LoRA run's base weights live: the model directory, or a named start's.

    Recorded as ``base_model_name_or_path`` in the adapters' config, so that
    ``peft.AutoPeftModelForCausalLM.from_pretrained(checkpoint)`` finds them.
    """
    path = start_dir(str(config.model))
    return TINY_RANDOM_NAME if path is None else str(path.resolve())


def load_dtype(config: Any) -> torch.dtype:
    """The dtype to load weights in: the run's weight dtype, except float32 for a fully
    trained model under mixed precision (its master weights); loading in the final dtype
    avoids a transient float32 copy of a large model."""
    dtype_name = getattr(config, "dtype", "float32")
    if getattr(config, "mixed_precision", "none") != "none" and config.lora_rank == 0:
        return torch.float32
    return DTYPES[dtype_name]


def load_run_model(config: Any, log: Any) -> tuple[Any, Any]:
    """The model a run starts or resumes from: base (+ adapters when ``lora_rank > 0``)."""
    dtype = load_dtype(config)
    model: torch.nn.Module
    if config.lora_rank == 0:
        source = log.checkpoint_model_dir() if log.resuming else config.model
        model, tokenizer = load_policy_model(str(source), dtype=dtype)
    else:
        base, tokenizer = load_policy_model(str(config.model), dtype=dtype)
        if not log.resuming:
            model = apply_lora(base, config, base_model_path(config))
        else:
            model = attach_adapters(base, log.checkpoint_model_dir())
    return own_memory(model), tokenizer
