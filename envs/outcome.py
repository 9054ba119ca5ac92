"""The outcome an afterstate predicts, read back from its text.

Every env writes the predicted outcome of a legal action into its afterstate text
(``info["afterstates"]``), each family in its own words:

* built-in games: trailing notes, ``"the fish will be sliced (+1 point)"``,
  ``"you will be in the garden (+1 point, you win)"``, ``"... (you lose)"``
  (:func:`rlid.envs.builtin.common.describe_outcome`);
* TextWorld: ``"; "``-joined clauses, ``"you will carry the onion; this scores a
  point"``, ``"this scores 2 points"``, ``"this wins the game"``, ``"this loses the
  game"`` (:func:`rlid.envs.textworld.afterstate.describe_outcome`). A command that stands
  for several game actions reads ``"either A, or B (2 game actions share this
  command)"``; its marks are those of any alternative (points: the largest).

:func:`read_outcome` inverts both, so a policy or a diagnostic can use the marks a
menu shows (e.g. ``rlid.compare.reference``'s ``afterstate`` arm) without knowing
which family wrote them. Text with no marks predicts nothing: ``Outcome()``.
:func:`best_rows` is the one-step reading of a whole menu.

    >>> read_outcome("the fish will be sliced (+1 point)")
    Outcome(points=1, won=False, lost=False)
    >>> read_outcome("you will carry the onion; this scores a point; this wins the game")
    Outcome(points=1, won=True, lost=False)
    >>> read_outcome("you will be in the kitchen")
    Outcome(points=0, won=False, lost=False)
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    """Predicted outcome of one action: points gained, game won, game lost."""

    points: int = 0
    won: bool = False
    lost: bool = False


# built-in: the last parenthesis holds ", "-joined notes, each one of these
_NOTES = re.compile(r"\(([^()]*)\)\s*$")
_NOTE_POINTS = re.compile(r"([+-]\d+) points?")
# TextWorld: clauses anywhere after a "; " (several when "either ..., or ...")
_TW_POINTS = re.compile(r"(?:^|; )this scores (a|-?\d+) points?\b")
_TW_WON = re.compile(r"(?:^|; )this wins the game\b")
_TW_LOST = re.compile(r"(?:^|; )this loses the game\b")


def _builtin_notes(text: str) -> Outcome | None:
    """The trailing notes, or None when the last parenthesis is not made of them only."""
    found = _NOTES.search(text)
    if found is None:
        return None
    points, won, lost = 0, False, False
    for note in found.group(1).split(", "):
        match = _NOTE_POINTS.fullmatch(note)
        if match:
            points += int(match.group(1))
        elif note == "you win":
            won = True
        elif note == "you lose":
            lost = True
        else:  # another parenthesis, e.g. TextWorld's "(2 game actions share ...)"
            return None
    return Outcome(points, won, lost)


def read_outcome(afterstate: str) -> Outcome:
    """The points, win and loss an afterstate text predicts (``Outcome()`` if none)."""
    notes = _builtin_notes(afterstate)
    if notes is not None:
        return notes
    scores = [1 if s == "a" else int(s) for s in _TW_POINTS.findall(afterstate)]
    return Outcome(
        points=max(scores) if scores else 0,
        won=_TW_WON.search(afterstate) is not None,
        lost=_TW_LOST.search(afterstate) is not None,
    )


def best_rows(afterstates: list[str]) -> list[int]:
    """The rows whose afterstates predict the best outcome: those predicted to win (and
    not to lose), else the most points among the rows not predicted to lose, else every
    row (each one loses). Rows without marks count as 0 points, so with no marks at all
    this is every row.

        >>> best_rows(["go north", "take key (+1 point)", "eat key (you lose)"])
        [1]
        >>> best_rows(["go north", "go south", "eat key (you lose)"])
        [0, 1]
    """
    outcomes = [read_outcome(text) for text in afterstates]
    won = [i for i, o in enumerate(outcomes) if o.won and not o.lost]
    if won:
        return won
    alive = [i for i, o in enumerate(outcomes) if not o.lost]
    if not alive:
        return list(range(len(outcomes)))
    most = max(outcomes[i].points for i in alive)
    return [i for i in alive if outcomes[i].points == most]
