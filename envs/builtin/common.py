"""Shared machinery of the built-in games: rules, maps, the planner and the env class.

A built-in game is a *rules* object (an immutable layout generated from one game
seed) over immutable, hashable *states*. Everything an env reports is a pure
function of ``(rules, state)``:

* ``rules.apply(state, action) -> (next_state, feedback)`` never mutates
  ``state``, so the afterstate of a legal action is
  ``describe_outcome(rules, state, rules.apply(state, action)[0])`` -- the same
  function the tests apply to the states an env actually visits.
* :func:`shortest_plan` is a breadth-first search over these states; its result
  is the game's optimal walkthrough.

Example::

    >>> from rlid.envs.builtin.keydoor import KeyDoorRules
    >>> rules = KeyDoorRules(0, size=3, keys=1, distractors=1)
    >>> state = rules.initial_state()
    >>> plan = shortest_plan(rules)
    >>> for action in plan:
    ...     state, _ = rules.apply(state, action)
    >>> rules.won(state), rules.score(state) == rules.max_score
    (True, True)
"""

from __future__ import annotations

import functools
import random
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Hashable, Sequence
from typing import Any, ClassVar

from rlid.envs.base import TextGameEnv, split_game_seed
from rlid.envs.registry import COMMON_OPTIONS, Option

DIRECTIONS = ("north", "south", "east", "west")
OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east"}
_OFFSET = {"north": (0, 1), "south": (0, -1), "east": (1, 0), "west": (-1, 0)}

# Default truncation: at least this many steps (and twice the optimal length).
MIN_STEP_LIMIT = 20
# Per room: ((direction, neighbour room index), ...) in DIRECTIONS order.
Exits = tuple[tuple[tuple[str, int], ...], ...]


class GameRules(ABC):
    """One generated game: layout plus the rules over its immutable states.

    Subclasses set ``objective`` (one sentence) and ``max_score`` and implement the
    abstract methods. ``score``/``won``/``lost`` are functions of the state, so
    rewards and afterstates follow from states alone.
    """

    objective: str
    max_score: int

    @abstractmethod
    def initial_state(self) -> Hashable: ...

    @abstractmethod
    def legal_actions(self, state: Any) -> list[str]:
        """Distinct action strings in a stable order."""

    @abstractmethod
    def apply(self, state: Any, action: str) -> tuple[Any, str]:
        """``(next_state, feedback sentence)`` for a legal action; ``state`` is untouched."""

    @abstractmethod
    def observe(self, state: Any, feedback: str) -> str:
        """The short observation shown in ``state`` after ``feedback``."""

    @abstractmethod
    def describe_change(self, before: Any, after: Any) -> str:
        """One clause: what differs between two states, or ``"nothing changes"``."""

    @abstractmethod
    def score(self, state: Any) -> int: ...

    @abstractmethod
    def won(self, state: Any) -> bool: ...

    @abstractmethod
    def lost(self, state: Any) -> bool: ...

    def plan_actions(self, state: Any) -> list[str]:
        """Actions the planner tries (may prune ones that never help); default: all legal."""
        return self.legal_actions(state)

    @abstractmethod
    def layout_key(self) -> Hashable:
        """A value identifying the generated layout (used to compare games)."""


def describe_outcome(rules: GameRules, before: Any, after: Any) -> str:
    """The afterstate sentence for ``before -> after``: change clause plus outcome.

    The outcome note lists the points gained and a win or loss, e.g. ``"you will be
    in the garden (+1 point, you win)"``; an action that changes nothing reads
    ``"nothing changes"``.
    """
    text = rules.describe_change(before, after)
    notes = []
    points = rules.score(after) - rules.score(before)
    if points:
        notes.append(f"{points:+d} point{'' if abs(points) == 1 else 's'}")
    if rules.won(after):
        notes.append("you win")
    if rules.lost(after):
        notes.append("you lose")
    return f"{text} ({', '.join(notes)})" if notes else text


def shortest_plan(rules: GameRules) -> list[str]:
    """The shortest winning command list (breadth-first search over game states).

    Lost states are dead ends; states already seen are skipped, so actions that
    change nothing are never part of a plan. Raises ``RuntimeError`` if no plan
    exists (a generator bug: every generated game is solvable).
    """
    start = rules.initial_state()
    if rules.won(start):
        return []
    parent: dict[Any, tuple[Any, str] | None] = {start: None}
    frontier = deque([start])
    while frontier:
        state = frontier.popleft()
        for action in rules.plan_actions(state):
            nxt, _ = rules.apply(state, action)
            if nxt in parent or rules.lost(nxt):
                continue
            parent[nxt] = (state, action)
            if rules.won(nxt):
                plan = []
                link = parent[nxt]
                while link is not None:
                    node, step = link
                    plan.append(step)
                    link = parent[node]
                return plan[::-1]
            frontier.append(nxt)
    raise RuntimeError("generated game has no winning plan")


# ------------------------------------------------------------------ maps
def grow_tree_map(rng: random.Random, n_rooms: int) -> Exits:
    """A random spanning tree of ``n_rooms`` rooms laid out on a compass grid.

    Room 0 is placed first; each new room is attached to a random existing room
    through a random free compass direction, so exits are geometrically
    consistent (north then south returns).
    """
    coords = [(0, 0)]
    taken = {(0, 0): 0}
    exits: list[dict[str, int]] = [{}]
    while len(coords) < n_rooms:
        room = rng.randrange(len(coords))
        x, y = coords[room]
        free = [d for d in DIRECTIONS if (x + _OFFSET[d][0], y + _OFFSET[d][1]) not in taken]
        if not free:
            continue
        direction = rng.choice(free)
        dx, dy = _OFFSET[direction]
        new = len(coords)
        coords.append((x + dx, y + dy))
        taken[coords[-1]] = new
        exits.append({OPPOSITE[direction]: room})
        exits[room][direction] = new
    return tuple(tuple((d, ex[d]) for d in DIRECTIONS if d in ex) for ex in exits)


def room_distances(exits: Exits, start: int, blocked: frozenset = frozenset()) -> dict[int, int]:
    """Breadth-first distances from ``start``; ``blocked`` holds unordered room pairs."""
    dist = {start: 0}
    frontier = deque([start])
    while frontier:
        room = frontier.popleft()
        for _, nxt in exits[room]:
            if nxt not in dist and frozenset((room, nxt)) not in blocked:
                dist[nxt] = dist[room] + 1
                frontier.append(nxt)
    return dist


def room_path(exits: Exits, start: int, goal: int) -> list[int]:
    """The rooms from ``start`` to ``goal`` (inclusive) along the tree."""
    parent = {start: start}
    frontier = deque([start])
    while frontier:
        room = frontier.popleft()
        for _, nxt in exits[room]:
            if nxt not in parent:
                parent[nxt] = room
                frontier.append(nxt)
    path = [goal]
    while path[-1] != start:
        path.append(parent[path[-1]])
    return path[::-1]


# ------------------------------------------------------------------ text
def with_article(noun: str) -> str:
    """``"apple" -> "an apple"``, ``"brass key" -> "a brass key"``."""
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def join_words(words: Sequence[str]) -> str:
    """``["a", "b", "c"] -> "a, b and c"``."""
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


# ------------------------------------------------------------------ env
@functools.lru_cache(maxsize=4096)
def load_game(
    rules_class: type[GameRules], seed: int, options: tuple[tuple[str, int], ...]
) -> tuple[GameRules, tuple[str, ...]]:
    """Generate (and cache) one game and its optimal walkthrough."""
    rules = rules_class(seed, **dict(options))  # type: ignore[call-arg]  # subclass options
    return rules, tuple(shortest_plan(rules))


class BuiltinGameEnv(TextGameEnv):
    """A :class:`TextGameEnv` playing one generated game of a :class:`GameRules` class.

    Each ``reset`` picks a game seed of the split (``rlid.envs.base.split_game_seed``),
    generates that game (cached) and starts it. The current game and state are
    exposed as ``env.rules`` and ``env.state`` (immutable; handy for tests and
    planners).

    Args:
        split: ``"train"`` or ``"heldout"``.
        game_seed: play exactly this game index of the split (``None``: sample).
        num_games: the size of the split's game pool resets sample from.
        max_episode_steps: truncation limit; ``None`` (default) = per game
            ``max(20, 2 * len(walkthrough))`` (20 for every game at the default sizes).
        afterstates, render_mode: see :class:`TextGameEnv`.
        **game_options: the game's own options, validated against ``OPTIONS``.
    """

    env_id: ClassVar[str]
    rules_class: ClassVar[type[GameRules]]
    OPTIONS: ClassVar[dict[str, Option]]

    def __init__(
        self,
        *,
        split: str = "train",
        game_seed: int | None = None,
        num_games: int = 16,
        max_episode_steps: int | None = None,
        afterstates: bool = True,
        render_mode: str | None = None,
        **game_options: int,
    ) -> None:
        super().__init__(
            max_episode_steps=MIN_STEP_LIMIT if max_episode_steps is None else max_episode_steps,
            afterstates=afterstates,
            render_mode=render_mode,
        )
        self.auto_step_limit = max_episode_steps is None
        unknown = sorted(set(game_options) - set(self.OPTIONS))
        if unknown:
            raise ValueError(
                f"{self.env_id}: unknown option(s) {', '.join(unknown)}; "
                f"game options: {', '.join(sorted(self.OPTIONS))}"
            )
        common = {"split": split, "game_seed": game_seed, "num_games": num_games}
        for name, value in common.items():
            COMMON_OPTIONS[name].check(self.env_id, name, value)
        self.split = split
        self.game_seed = game_seed
        self.num_games = num_games
        self.game_options = {
            name: opt.check(self.env_id, name, game_options.get(name, opt.default))
            for name, opt in self.OPTIONS.items()
        }
        self.check_options(**self.game_options)
        self.rules: GameRules | None = None
        self.state: Any = None
        self.current_game_seed: int | None = None
        self._walkthrough: tuple[str, ...] = ()

    @classmethod
    def check_options(cls, **options: int) -> None:
        """Cross-option checks (subclasses raise ``ValueError`` saying how to fix)."""

    def _game_reset(self) -> str:
        seed = split_game_seed(
            self.np_random, split=self.split, game_seed=self.game_seed, num_games=self.num_games
        )
        options = tuple(sorted(self.game_options.items()))
        rules, self._walkthrough = load_game(self.rules_class, seed, options)
        self.rules = rules
        self.current_game_seed = seed
        if self.auto_step_limit:
            self.max_episode_steps = max(MIN_STEP_LIMIT, 2 * len(self._walkthrough))
        self.state = rules.initial_state()
        return rules.observe(self.state, "")

    def _loaded(self) -> GameRules:
        if self.rules is None:
            raise RuntimeError("call reset() before step()")
        return self.rules

    def _game_step(self, action: str) -> tuple[str, int, bool, bool]:
        rules = self._loaded()
        self.state, feedback = rules.apply(self.state, action)
        obs = rules.observe(self.state, feedback)
        return obs, rules.score(self.state), rules.won(self.state), rules.lost(self.state)

    def _game_legal_actions(self) -> list[str]:
        return self._loaded().legal_actions(self.state)

    def _game_afterstates(self, legal_actions: list[str]) -> list[str]:
        rules, state = self._loaded(), self.state
        return [describe_outcome(rules, state, rules.apply(state, a)[0]) for a in legal_actions]

    def _game_objective(self) -> str:
        return self.rules.objective if self.rules is not None else ""

    def _game_max_score(self) -> int:
        return self.rules.max_score if self.rules is not None else 0

    def _game_walkthrough(self) -> list[str] | None:
        return list(self._walkthrough)

    def _game_extra_info(self) -> dict[str, Any]:
        return {"game_seed": self.current_game_seed}
