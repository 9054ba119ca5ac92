"""The records every plane shares: one decision as the update needs it, the value head.

A menu policy (the decision and scoring planes) stores a :class:`Decision` per env step;
the token plane its own record (:mod:`rlid.baselines.token.policy`). A label tree's
decision keeps one :class:`PathStep` per level.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from rlid.menus import Menu
from rlid.menus.tree import LabelTree


@dataclass(frozen=True)
class PathStep:
    """One level of a label-tree decision, as the update re-scores it.

    Attributes:
        segment: tokens appended before this level was read: the label chosen at the
            level before, then this menu's text (empty for level 1: its prompt is the
            decision's ``prompt_ids``).
        label_ids: the token id of each row's label at this level, row order.
        row: the row chosen.
        logp: log pi_old(row | s, path so far) at the behaviour temperature.
        entropy: exact entropy of this level's rows.
        label_mass: probability the vocabulary put on this level's labels.
    """

    segment: tuple[int, ...]
    label_ids: tuple[int, ...]
    row: int
    logp: float
    entropy: float
    label_mass: float


@dataclass
class Decision:
    """One decision of a menu policy, as stored for the update."""

    action: str  # the command sent to the env
    chosen: int  # row index in the menu
    logp: float  # log pi_old(chosen | s) of the behaviour policy (at ``temperature``)
    entropy: float  # exact entropy of the behaviour policy pi_old(. | s) over the menu
    label_mass: float  # probability the full vocabulary puts on the legal labels
    value: float  # V(s) from the value head (0.0 without one)
    prompt_ids: list[int]
    label_ids: list[int]  # token id of each row's label, row order
    menu: Menu
    extra: dict[str, Any] = field(default_factory=dict)  # policy-specific (scoring plane)
    temperature: float = 1.0  # sampling temperature: the update re-scores softmax(logits / T)
    # label trees: one step per level (empty: a flat menu; then ``tree`` is None too)
    path: tuple[PathStep, ...] = ()
    tree: LabelTree | None = None

    @property
    def num_rows(self) -> int:
        """Rows of the decision's (flat) menu: every legal action of a label tree."""
        return len(self.menu.rows) if self.path else len(self.label_ids)


class ValueHead(torch.nn.Module):
    """V(s) from the last-position hidden state (PPO with GAE)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.linear.weight)
        torch.nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # (B, d) -> (B,)
        return self.linear(hidden.float()).squeeze(-1)


def decision_temperatures(decisions: list[Decision]) -> float | torch.Tensor:
    """One float when all decisions share it (the usual case), else (B,) per decision."""
    temps = {d.temperature for d in decisions}
    if len(temps) == 1:
        return temps.pop()
    return torch.tensor([d.temperature for d in decisions], dtype=torch.float32)
