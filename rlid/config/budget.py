"""Budget counters in several currencies, and a wall-time split by phase.

A comparison between planes is honest only if it states what each arm spent
(docs/design.md §8): env steps, episodes, decisions, forward passes, tokens processed,
generated samples (filtered ones included), optimizer steps and wall time.
Counters are plain integers so they reduce across processes by summation.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Literal, get_args

BudgetCurrency = Literal[
    "env_steps",
    "episodes",
    "decisions",
    "forward_passes",
    "tokens_processed",
    "generated_samples",
    "generated_tokens",
    "optimizer_steps",
    "wall_time",
]
"""The counters a run's budget can be stated (and stopped) in."""
CURRENCIES: tuple[str, ...] = get_args(BudgetCurrency)


@dataclass
class Budget:
    """Cumulative counters of one run (all monotone)."""

    env_steps: int = 0
    episodes: int = 0
    decisions: int = 0
    forward_passes: int = 0
    tokens_processed: int = 0
    generated_samples: int = 0
    generated_tokens: int = 0
    filtered_samples: int = 0
    invalid_actions: int = 0
    shortened_prompts: int = 0  # steps rendered without memory to fit the model's context
    truncated_menus: int = 0  # decision menus cut to the label alphabet (overflow='truncate')
    grouped_lists: int = 0  # token/scoring prompts whose legal list was shown as groups
    groups_skipped: int = 0  # groups an iteration did not start: the budget was reached
    optimizer_steps: int = 0
    wall_time: float = 0.0

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, float]) -> Budget:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})  # type: ignore[arg-type]

    def get(self, currency: str) -> float:
        if currency not in self.__dataclass_fields__:
            raise ValueError(
                f"unknown budget currency {currency!r}; valid: {', '.join(CURRENCIES)}"
            )
        return getattr(self, currency)


class Timers:
    """Accumulated wall time per phase (``env``, ``menu``, ``forward``, ``backward``, ...)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def time(self, phase: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - start

    def pop(self) -> dict[str, float]:
        """Return the accumulated seconds and reset."""
        out = dict(self.seconds)
        self.seconds.clear()
        return out
