"""What every plane's policy provides, as ``Protocol`` types (checked by mypy, not at run time).

The rollout code (:func:`rlid.core.rollout.collect_episodes`) needs only :class:`Policy`:
one batched ``act`` over the still-running envs, returning one record with an
``action`` string per env. The decision-PPO update (:func:`rlid.core.train.ppo_update`)
needs a :class:`MenuPolicy`, which can also *re-score* its stored decisions with
gradients. :class:`rlid.decision.policy.DecisionPolicy` and ``rlid.baselines.scoring.ScoringPolicy``
are menu policies; ``rlid.baselines.token.policy.TokenPolicy`` is a plain policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import torch

from rlid.config.budget import Budget, Timers
from rlid.core.records import Decision, ValueHead


class ActionRecord(Protocol):
    """What ``act`` returns per env: at least the command sent to the env."""

    @property
    def action(self) -> str: ...


class Policy(Protocol):
    """Acts in a batch of envs with one batched model call per step."""

    budget: Budget
    timers: Timers

    def act(
        self,
        observations: list[str],
        infos: list[dict[str, Any]],
        memory_texts: list[str | None],
        *,
        rng: np.random.Generator,
        generator: torch.Generator,
        greedy: bool = False,
        temperature: float = 1.0,
    ) -> Sequence[ActionRecord]:
        """One record per env, in order; ``rng`` shuffles menus, ``generator`` samples."""
        ...


class MenuPolicy(Policy, Protocol):
    """A policy over a menu of legal rows whose stored decisions can be re-scored exactly."""

    value_head: ValueHead | None

    @property
    def max_menu_size(self) -> int:
        """The most rows a menu can have (the size of the label alphabet)."""
        ...

    def act(
        self,
        observations: list[str],
        infos: list[dict[str, Any]],
        memory_texts: list[str | None],
        *,
        rng: np.random.Generator,
        generator: torch.Generator,
        greedy: bool = False,
        temperature: float = 1.0,
    ) -> list[Decision]: ...

    def score(
        self, decisions: Sequence[Decision]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """With gradients: logp_all (B, K) with -inf padding, label_mass (B,), hidden (B, d)."""
        ...
