"""The names of every variant, defined once (``Literal`` types) and imported where needed.

A config field, a loss argument and a CLI choice that name the same thing use the
same type from here, so adding a variant in one place and not another is a type
error (``make test`` runs mypy), and ``typing.get_args`` lists the valid names for
error messages. This module imports nothing but ``typing``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, get_args

PlaneName = Literal["decision", "token", "scoring"]
"""decision: menu + label readout; token: free text (GRPO family); scoring: TWOSOME-style."""

AdvantageKind = Literal["group", "gae"]
"""group: critic-free group-relative advantages; gae: value head + GAE."""

AdvantageScale = Literal["std", "none"]
"""Group advantages divided by the group's std (GRPO) or not (Dr. GRPO)."""

EpisodeWeight = Literal["auto", "length", "equal"]
"""Group advantages on the menu planes: an episode weighs its length (every decision
alike) or every episode of a group weighs the same (its decisions share its weight);
auto: equal where advantages are group-relative on the decision or scoring plane,
length elsewhere."""

TokenAlgo = Literal["grpo", "dr_grpo", "dapo", "gspo", "cispo"]
"""The token-plane loss variants (``rlid.losses.token``)."""

Mismatch = Literal["none", "tis", "icepop"]
"""Train-inference correction on rho = pi_old / mu (``rlid.losses.mismatch``)."""

ScoreNorm = Literal["sum", "token", "word"]
"""Action scoring: sum, token-mean or word-mean log-likelihood of an action's tokens."""

EngineName = Literal["trainer", "perturbed", "bf16", "vllm"]
"""Who plays a run's rollouts: the trainer's own model; the simulated engines of the
token plane (``rlid.baselines.engine``; the protocol is ``RolloutEngine``); or vLLM, for
every plane (``rlid.engines``)."""

WeightDtype = Literal["float32", "bfloat16", "float16"]
"""Storage dtype of the model weights (``rlid.lm.hardware``)."""

MixedPrecision = Literal["none", "bf16", "fp16"]
"""Autocast of the model forwards, float32 master weights (``rlid.lm.hardware``)."""

ParallelName = Literal["ddp", "fsdp"]
"""How a multi-process run wraps the model for its update (``rlid.lm.distributed.Parallel``)."""


TrackerName = Literal["tensorboard", "wandb", "mlflow"]


TRACKERS: tuple[str, ...] = get_args(TrackerName)


def parse_report_to(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """``"tensorboard,wandb"`` / ``["tensorboard"]`` / ``"none"`` -> validated names."""
    if value is None:
        return ()
    items = [part for item in ([value] if isinstance(value, str) else value)
             for part in str(item).split(",")]  # fmt: skip
    names: list[str] = []
    for item in items:
        name = str(item).strip().lower()
        if name in ("", "none"):
            continue
        if name == "all":
            names += [n for n in TRACKERS if n not in names]
            continue
        if name not in TRACKERS:
            raise ValueError(
                f"report_to: unknown tracker {name!r}; choose from {', '.join(TRACKERS)} "
                "(comma-separated) or none"
            )
        if name not in names:
            names.append(name)
    return tuple(names)


WarningKind = Literal["label_mass", "shortened_prompts", "zero_advantages", "non_finite", "clipped"]
"""What a run warns of at the iteration it happens (``rlid.runs.health``); ``--stop-on``
names those that stop it."""
WARNING_KINDS: tuple[str, ...] = get_args(WarningKind)


def parse_stop_on(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """``"label_mass,clipped"`` / ``["non_finite"]`` / ``"any"`` / ``"none"`` -> validated
    warning kinds, in :data:`WARNING_KINDS` order."""
    if value is None:
        return ()
    items = [part for item in ([value] if isinstance(value, str) else value)
             for part in str(item).split(",")]  # fmt: skip
    names: set[str] = set()
    for item in items:
        name = str(item).strip().lower().replace("-", "_")
        if name in ("", "none"):
            continue
        if name in ("any", "all"):
            names.update(WARNING_KINDS)
        elif name in WARNING_KINDS:
            names.add(name)
        else:
            raise ValueError(
                f"stop_on: unknown warning {str(item)[:40]!r}; choose from "
                f"{', '.join(WARNING_KINDS)} (comma-separated), any or none"
            )
    return tuple(k for k in WARNING_KINDS if k in names)


ModelSize = Literal["tiny", "large"]
"""Architecture presets of the tiny model family (``rlid.lm.models.MODEL_SIZES``)."""
MODEL_SIZE_NAMES: tuple[str, ...] = get_args(ModelSize)
