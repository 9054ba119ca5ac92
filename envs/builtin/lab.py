"""``lab``: a ScienceWorld-like bench with every template x object command legal.

One room holds ``objects`` portable things (solids lie on the table, liquids sit in a
container) and ``containers`` containers, each open or closed (all drawn from the game
seed). As in ScienceWorld, the legal actions are every template filled with every
object, whether or not it would do anything, and ``info["action_templates"]`` gives
each action's template (aligned with ``info["legal_actions"]``):

    look around | inventory | look at OBJ | focus on OBJ | pick up OBJ | open OBJ |
    close OBJ | move OBJ to OBJ | pour OBJ into OBJ

so the menu grows with the product of objects and containers: 16 legal actions at the
defaults (objects=2, containers=1), 414 at objects=20, containers=8 (the size of a
large ScienceWorld state). It is the small built-in game for label trees
(docs/large-menus.md); its text is nothing like ScienceWorld's.

Task: "Put the <solid> in the <container>, then focus on the <solid>." Score: +1 while
the solid is in that container, +1 on the right focus (won, terminal). Focusing on
anything else, or too early, loses (terminal), as a wrong focus does in ScienceWorld.
``max_score = 2``. Liquids move only by ``pour``, solids only by ``move``; nothing goes
into or out of a closed container. Optimal solutions are 2-3 commands (open the
container if it is closed, move, focus).

Example::

    >>> from rlid import envs
    >>> env = envs.make("lab", objects=20, containers=8, game_seed=0)
    >>> obs, info = env.reset(seed=0)
    >>> len(info["legal_actions"]), info["action_templates"][-1]
    (414, 'pour OBJ into OBJ')
    >>> for command in info["walkthrough"]:
    ...     obs, reward, terminated, truncated, info = env.step(command)
    >>> info["won"], info["score"]
    (True, 2)
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

from rlid.envs.builtin.common import BuiltinGameEnv, GameRules, join_words, with_article
from rlid.envs.registry import Option

SOLIDS = (
    "red apple", "glass marble", "iron nail", "wooden block", "steel spoon", "brass coin",
    "chalk stick", "clay ball", "copper wire", "paper clip", "rubber band", "stone pebble",
    "plastic bead", "cork plug",
)  # fmt: skip
LIQUIDS = ("water", "orange juice", "olive oil", "vinegar", "milk", "salt water")
CONTAINERS = ("cup", "beaker", "bowl", "jar", "flask", "box", "tray", "bottle")
TABLE, HELD = -1, -2

OPTIONS = {
    "objects": Option(
        int, 2, "portable objects (solids and liquids)", min=1, max=len(SOLIDS) + len(LIQUIDS)
    ),
    "containers": Option(int, 1, "containers (open or closed)", min=1, max=len(CONTAINERS)),
}

# template of each command kind, in the order ScienceWorld-style tools list them
TEMPLATES = {
    "look around": "look around",
    "inventory": "inventory",
    "look at": "look at OBJ",
    "focus on": "focus on OBJ",
    "pick up": "pick up OBJ",
    "open": "open OBJ",
    "close": "close OBJ",
    "move": "move OBJ to OBJ",
    "pour": "pour OBJ into OBJ",
}


@dataclass(frozen=True)
class LabState:
    """Where each portable object is (container index, TABLE or HELD), which
    containers are open, and the task's outcome (0 running, 1 won, -1 lost)."""

    where: tuple[int, ...]
    opened: tuple[bool, ...]
    outcome: int = 0


class LabRules(GameRules):
    """One generated bench (see the module docstring)."""

    def __init__(self, seed: int, *, objects: int, containers: int) -> None:
        rng = random.Random(seed)
        target = rng.choice(SOLIDS)
        others = rng.sample([n for n in SOLIDS + LIQUIDS if n != target], objects - 1)
        self.portables = tuple(sorted([target, *others]))
        self.containers = tuple(sorted(rng.sample(CONTAINERS, containers)))
        self.liquid = tuple(name in LIQUIDS for name in self.portables)
        self.target = self.portables.index(target)
        self.goal = rng.randrange(containers)
        self.start_open = tuple(rng.random() < 0.5 for _ in self.containers)
        self.start_where = tuple(
            rng.randrange(containers) if liquid else TABLE for liquid in self.liquid
        )
        self.max_score = 2
        self.objective = (
            f"Put the {target} in the {self.containers[self.goal]}, then focus on the {target}."
        )
        names = sorted(self.portables + self.containers)
        moves: dict[str, tuple[Any, ...]] = {"look around": ("look around",)}
        moves["inventory"] = ("inventory",)
        for name in names:
            moves[f"look at {name}"] = ("look at", name)
            moves[f"focus on {name}"] = ("focus on", name)
        for p, name in enumerate(self.portables):
            moves[f"pick up {name}"] = ("pick up", p)
        for c, name in enumerate(self.containers):
            moves[f"open {name}"] = ("open", c)
            moves[f"close {name}"] = ("close", c)
        for p, name in enumerate(self.portables):
            for c, box in enumerate(self.containers):
                moves[f"move {name} to {box}"] = ("move", p, c)
                moves[f"pour {name} into {box}"] = ("pour", p, c)
        self.moves = dict(sorted(moves.items()))
        self.actions = tuple(self.moves)
        self.templates = tuple(TEMPLATES[move[0]] for move in self.moves.values())

    # ------------------------------------------------------------ queries
    def initial_state(self) -> LabState:
        return LabState(self.start_where, self.start_open)

    def layout_key(self) -> tuple:
        return (self.portables, self.containers, self.target, self.goal, self.start_open)

    def score(self, state: LabState) -> int:
        return int(state.where[self.target] == self.goal) + int(state.outcome == 1)

    def won(self, state: LabState) -> bool:
        return state.outcome == 1

    def lost(self, state: LabState) -> bool:
        return state.outcome == -1

    def legal_actions(self, state: LabState) -> list[str]:
        return list(self.actions)

    def plan_actions(self, state: LabState) -> list[str]:
        target, goal = self.portables[self.target], self.containers[self.goal]
        return [f"open {goal}", f"move {target} to {goal}", f"focus on {target}"]

    # ------------------------------------------------------------ dynamics
    def apply(self, state: LabState, action: str) -> tuple[LabState, str]:
        move = self.moves.get(action)
        if move is None:
            raise ValueError(f"lab: {action!r} is not legal here")
        kind = move[0]
        if kind == "focus on":
            right = move[1] == self.portables[self.target] and self.score(state) == 1
            outcome = 1 if right else -1
            verdict = "The task is complete." if right else "That was the wrong focus."
            return replace(state, outcome=outcome), f"You focus on the {move[1]}. {verdict}"
        if kind in ("open", "close"):
            c, want = move[1], kind == "open"
            if state.opened[c] == want:
                return state, f"The {self.containers[c]} is already {kind}{'ed' * (not want)}."
            opened = tuple(want if i == c else o for i, o in enumerate(state.opened))
            return replace(state, opened=opened), f"You {kind} the {self.containers[c]}."
        if kind in ("pick up", "move", "pour"):
            return self._carry(state, kind, move[1], move[2] if len(move) > 2 else HELD)
        if kind == "inventory":
            held = [f"the {self.portables[p]}" for p, w in enumerate(state.where) if w == HELD]
            return state, f"You carry {join_words(held)}." if held else "You carry nothing."
        if kind == "look at":
            return state, f"It is {with_article(move[1])}."
        return state, "You look around."

    def _carry(self, state: LabState, kind: str, p: int, dest: int) -> tuple[LabState, str]:
        name, here = self.portables[p], state.where[p]
        if self.liquid[p] != (kind == "pour"):
            return state, (
                f"The {name} is a liquid: pour it." if self.liquid[p] else "Only liquids pour."
            )
        for c in (here, dest):
            if c >= 0 and not state.opened[c]:
                return state, f"The {self.containers[c]} is closed."
        if here == dest:
            return state, "Nothing happens."
        where = tuple(dest if i == p else w for i, w in enumerate(state.where))
        place = "hold" if dest == HELD else f"put it in the {self.containers[dest]}"
        return replace(state, where=where), f"You {place}: the {name}."

    def observe(self, state: LabState, feedback: str) -> str:
        parts = [feedback] if feedback else []
        parts.append("You are in the lab.")
        table = [with_article(n) for n, w in zip(self.portables, state.where) if w == TABLE]
        parts.append(f"On the table: {join_words(table)}." if table else "The table is bare.")
        for c, box in enumerate(self.containers):
            inside = [n for n, w in zip(self.portables, state.where) if w == c]
            status = "open" if state.opened[c] else "closed"
            holds = f" and holds {join_words(inside)}" if inside else ""
            parts.append(f"The {box} is {status}{holds}.")
        return " ".join(parts)

    def describe_change(self, before: LabState, after: LabState) -> str:
        clauses = []
        for p, (was, now) in enumerate(zip(before.where, after.where)):
            if was != now:
                name = self.portables[p]
                clauses.append(
                    f"you will hold the {name}"
                    if now == HELD
                    else f"the {name} will be in the {self.containers[now]}"
                )
        for c, (was, now) in enumerate(zip(before.opened, after.opened)):
            if was != now:
                clauses.append(f"the {self.containers[c]} will be {'open' if now else 'closed'}")
        if after.outcome != before.outcome:
            clauses.append("the task will end")
        return "; ".join(clauses) or "nothing changes"


class LabEnv(BuiltinGameEnv):
    """The ``lab`` env (options: see ``OPTIONS`` and the module docstring)."""

    env_id = "lab"
    rules_class = LabRules
    OPTIONS = OPTIONS

    def _game_extra_info(self) -> dict[str, Any]:
        rules = self.rules
        templates = [] if self._done or not isinstance(rules, LabRules) else list(rules.templates)
        return {**super()._game_extra_info(), "action_templates": templates}
