"""Registers the token and scoring planes in :mod:`rlid.planes`.

Loaded through the ``rlid.planes`` entry point (``pyproject.toml``), so the ``rlid``
core finds these planes without importing ``baselines``. Call :func:`register`
yourself when using an uninstalled checkout.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from rlid.budget import Budget, Timers
from rlid.config import TrainConfig
from rlid.planes import Plane, register_plane
from rlid.policy import ValueHead
from rlid.protocols import Policy
from rlid.runs.log import RunLog


def _scoring_policy(
    config: TrainConfig,
    model: Any,
    tokenizer: Any,
    *,
    value_head: ValueHead | None = None,
    budget: Budget | None = None,
    timers: Timers | None = None,
    autocast: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> Policy:
    from baselines.scoring import ScoringPolicy

    return ScoringPolicy(
        model, tokenizer, config.interface, norm=config.norm, value_head=value_head,
        budget=budget, timers=timers, autocast=autocast,
        micro_batch_size=config.micro_batch_size,
    )  # fmt: skip


def _scoring_train(
    config: TrainConfig | None, out: Path, *, resume: bool = False, progress: bool = True
) -> RunLog:
    from rlid.trainer import train  # the decision-level PPO trainer, with the scoring policy

    return train(config, out, resume=resume, progress=progress)


def _token_policy(
    config: TrainConfig,
    model: Any,
    tokenizer: Any,
    *,
    value_head: ValueHead | None = None,
    budget: Budget | None = None,
    timers: Timers | None = None,
    autocast: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> Policy:
    from baselines.token_policy import TokenPolicy

    if value_head is not None:
        raise ValueError("the token plane is critic-free: it takes no value head")
    return TokenPolicy(
        model, tokenizer, config.interface, max_new_tokens=config.max_new_tokens,
        budget=budget, timers=timers, autocast=autocast,
    )  # fmt: skip


def _token_train(
    config: TrainConfig | None, out: Path, *, resume: bool = False, progress: bool = True
) -> RunLog:
    from baselines.token_trainer import train_token

    if config is None and not resume:
        raise ValueError("a config is required to start a new run")

    return train_token(config, out, resume=resume, progress=progress)


SCORING = Plane(
    name="scoring",
    summary="TWOSOME-style action scoring (log-likelihood of each legal action), same PPO",
    make_policy=_scoring_policy,
    train=_scoring_train,
)
TOKEN = Plane(
    name="token",
    summary="free-text commands, the GRPO family (GRPO, Dr. GRPO, DAPO, GSPO, CISPO)",
    make_policy=_token_policy,
    train=_token_train,
)


def register() -> None:
    """Add the scoring and token planes to :mod:`rlid.planes`."""
    register_plane(SCORING)
    register_plane(TOKEN)
