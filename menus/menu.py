"""Compile a state's legal actions into a labelled, immutable menu (docs/design.md §4).

Row ``i`` of a menu shows ``labels[i]``, the legal action
``legal_actions[permutation[i]]`` and its predicted afterstate. With an ``rng``
the rows are shuffled every step (so no action keeps a favourite label position);
the permutation is stored, so a recorded decision can be re-scored exactly.

Menus larger than the label alphabet are an explicit policy: ``overflow="tree"``
makes a label tree of them (:mod:`rlid.menus.tree`; a flat menu cannot hold them, so
``compile_menu`` raises and says so), ``overflow="error"`` raises,
``overflow="truncate"`` keeps the first ``K`` rows (after shuffling) and records the
others in :attr:`Menu.dropped`.

Example::

    >>> menu = compile_menu(["go east", "take key"], ["you will be in the studio",
    ...                     "you will carry the key"], labels=["A", "B", "C"])
    >>> print(menu.render())
    A) go east -> you will be in the studio
    B) take key -> you will carry the key
    >>> menu.action("B")
    'take key'
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from rlid.menus.labels import LabelSet, parse_alphabet
from rlid.menus.memory import MemoryProvider, one_line

Overflow = Literal["tree", "error", "truncate"]
OVERFLOW_POLICIES: tuple[str, ...] = ("tree", "error", "truncate")
AFTERSTATE_ARROW = " -> "


@dataclass(frozen=True)
class MenuRow:
    """One labelled legal action."""

    label: str
    """The label shown before the action (a single token of the model's tokenizer)."""
    action: str
    """The exact legal action text passed to ``env.step``."""
    afterstate: str | None = None
    """One-line predicted outcome of the action, or ``None`` when not available. The
    empty string is an afterstate that says nothing (envs that cannot predict outcomes,
    e.g. ScienceWorld, give those) and is not shown."""

    def render(self, afterstate: bool = True) -> str:
        """``"A) go east -> you will be in the studio"`` (arrow part only with a non-empty
        afterstate)."""
        line = f"{self.label}) {self.action}"
        if afterstate and self.afterstate:
            line += AFTERSTATE_ARROW + self.afterstate
        return line


@dataclass(frozen=True)
class Menu:
    """A compiled menu: rows in display order and how they map to the legal list."""

    rows: tuple[MenuRow, ...]
    """Rows in display order; labels are the label set's first ``len(rows)`` labels."""
    permutation: tuple[int, ...]
    """Row ``i`` shows ``legal_actions[permutation[i]]`` of the list the menu came from."""
    num_legal: int
    """How many legal actions the state had (``len(rows) + len(dropped)``)."""
    memory: str | None = None
    """The rendered memory line shown with this menu, or ``None`` for no memory."""
    dropped: tuple[str, ...] = ()
    """Legal actions left out by ``overflow="truncate"``, in shuffled order."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "rows", tuple(self.rows))
        object.__setattr__(self, "permutation", tuple(int(i) for i in self.permutation))
        object.__setattr__(self, "dropped", tuple(self.dropped))
        labels = [row.label for row in self.rows]
        actions = [row.action for row in self.rows] + list(self.dropped)
        if not self.rows:
            raise ValueError("a menu needs at least one row")
        if len(set(labels)) != len(labels):
            raise ValueError(f"menu labels must be distinct, got {labels}")
        if len(set(actions)) != len(actions):
            raise ValueError("menu actions (shown and dropped) must be distinct")
        if len(self.permutation) != len(self.rows) or len(actions) != self.num_legal:
            raise ValueError(
                f"inconsistent menu: {len(self.rows)} rows, {len(self.permutation)} permutation "
                f"entries, {len(self.dropped)} dropped, num_legal={self.num_legal}"
            )
        if len(set(self.permutation)) != len(self.permutation) or not all(
            0 <= i < self.num_legal for i in self.permutation
        ):
            raise ValueError(
                f"permutation {self.permutation} must hold distinct indices in [0, {self.num_legal})"
            )

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def labels(self) -> tuple[str, ...]:
        """Labels in display order."""
        return tuple(row.label for row in self.rows)

    @property
    def actions(self) -> tuple[str, ...]:
        """Actions in display order."""
        return tuple(row.action for row in self.rows)

    @property
    def afterstates(self) -> tuple[str | None, ...]:
        """Afterstates in display order (``None`` entries when not given)."""
        return tuple(row.afterstate for row in self.rows)

    @property
    def has_afterstates(self) -> bool:
        return all(row.afterstate is not None for row in self.rows)

    def index(self, label: str) -> int:
        """Display position of ``label``; ``KeyError`` naming the valid labels if absent."""
        for i, row in enumerate(self.rows):
            if row.label == label:
                return i
        raise KeyError(f"label {label!r} is not in this menu; its labels are {list(self.labels)}")

    def action(self, label: str) -> str:
        """The action text behind ``label``."""
        return self.rows[self.index(label)].action

    def label_for(self, action: str) -> str:
        """The label of a shown ``action``; ``KeyError`` if not shown (or dropped)."""
        for row in self.rows:
            if row.action == action:
                return row.label
        where = " (dropped by truncation)" if action in self.dropped else ""
        raise KeyError(f"action {action!r} is not a row of this menu{where}")

    def render(self, afterstates: bool | None = None) -> str:
        """The menu block, one ``"A) action -> afterstate"`` line per row.

        Args:
            afterstates: show afterstates (``True`` requires them), hide them
                (``False``), or show them when present (``None``).
        """
        if afterstates and not self.has_afterstates:
            raise ValueError(
                "afterstates requested but this menu was compiled without them; "
                "pass afterstates= to compile_menu (env built with afterstates=True)"
            )
        show = self.has_afterstates if afterstates is None else afterstates
        return "\n".join(row.render(afterstate=show) for row in self.rows)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form; :meth:`from_dict` restores an equal menu."""
        return {
            "rows": [
                {"label": row.label, "action": row.action, "afterstate": row.afterstate}
                for row in self.rows
            ],
            "permutation": list(self.permutation),
            "num_legal": self.num_legal,
            "memory": self.memory,
            "dropped": list(self.dropped),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Menu:
        return cls(
            rows=tuple(MenuRow(**row) for row in data["rows"]),
            permutation=tuple(data["permutation"]),
            num_legal=int(data["num_legal"]),
            memory=data.get("memory"),
            dropped=tuple(data.get("dropped", ())),
        )


def label_strings_of(labels: LabelSet | str | Sequence[str]) -> tuple[str, ...]:
    """The label strings of a :class:`LabelSet`, an alphabet spec (``"A-Z"``) or a list."""
    if isinstance(labels, LabelSet):
        return labels.labels
    if isinstance(labels, str):
        return parse_alphabet(labels)
    return tuple(labels)


def compile_menu(
    legal_actions: Sequence[str],
    afterstates: Sequence[str] | None = None,
    memory: str | MemoryProvider | None = None,
    *,
    labels: LabelSet | str | Sequence[str],
    rng: np.random.Generator | None = None,
    overflow: Overflow = "error",
) -> Menu:
    """Label the legal actions of one state.

    Args:
        legal_actions: distinct, non-empty, single-line action strings.
        afterstates: one predicted outcome per legal action (same order), or ``None``.
            Whitespace is collapsed so each row stays on one line.
        memory: the memory line (a string), a provider (rendered now), or ``None``.
        labels: a :class:`LabelSet`, an alphabet spec (``"A-Z"``, not checked against
            any tokenizer), or label strings; rows use them in order.
        rng: shuffle the rows with this generator (one permutation per call);
            ``None`` keeps the legal order.
        overflow: ``"error"`` (default) raises when there are more legal actions than
            labels; ``"truncate"`` keeps the first ``len(labels)`` rows after shuffling
            and records the rest in ``Menu.dropped``; ``"tree"`` also raises there,
            naming :func:`rlid.menus.tree.build_label_tree`, which holds menus of any size.
    """
    legal = list(legal_actions)
    check_actions(legal)
    label_strings = label_strings_of(labels)
    if not label_strings:
        raise ValueError("labels is empty")
    if afterstates is not None:
        afterstates = [one_line(str(text)) for text in afterstates]
        if len(afterstates) != len(legal):
            raise ValueError(
                f"afterstates must align with legal_actions: {len(afterstates)} afterstates "
                f"for {len(legal)} legal actions"
            )
    if overflow not in OVERFLOW_POLICIES:
        raise ValueError(f"overflow must be one of {OVERFLOW_POLICIES}, got {overflow!r}")
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"rng must be a numpy.random.Generator (numpy.random.default_rng(seed)), "
            f"got {type(rng).__name__}"
        )

    order = (
        list(range(len(legal))) if rng is None else [int(i) for i in rng.permutation(len(legal))]
    )
    capacity = len(label_strings)
    if len(legal) > capacity and overflow == "tree":
        raise ValueError(
            f"menu has {len(legal)} legal actions but the label alphabet has only {capacity} "
            "labels: a flat menu cannot show them all; build a label tree "
            "(rlid.menus.build_label_tree, or menus.menu_for_step with overflow='tree')"
        )
    if len(legal) > capacity and overflow == "error":
        raise ValueError(
            f"menu has {len(legal)} legal actions but the label alphabet has only {capacity} "
            f"labels; use a larger alphabet (e.g. labels='A-Za-z' or 'auto') or "
            f"overflow='truncate' to keep {capacity} rows and record the dropped actions"
        )
    shown, hidden = order[:capacity], order[capacity:]
    rows = tuple(
        MenuRow(label, legal[i], None if afterstates is None else afterstates[i])
        for label, i in zip(label_strings, shown)
    )
    memory_text = memory.render() if isinstance(memory, MemoryProvider) else memory
    return Menu(
        rows=rows,
        permutation=tuple(shown),
        num_legal=len(legal),
        memory=memory_text,
        dropped=tuple(legal[i] for i in hidden),
    )


def check_actions(legal: list[str]) -> None:
    """Legal actions must be distinct, non-empty, single-line strings (a clear error)."""
    if not legal:
        raise ValueError("no legal actions to compile into a menu (is the episode over?)")
    bad = [a for a in legal if not isinstance(a, str) or not a.strip() or "\n" in a]
    if bad:
        raise ValueError(f"legal actions must be non-empty single-line strings, got {bad!r}")
    repeated = sorted(action for action, count in Counter(legal).items() if count > 1)
    if repeated:
        raise ValueError(f"legal actions must be distinct; repeated: {repeated!r}")
