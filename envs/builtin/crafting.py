"""``crafting``: gather ingredients, process them in order, combine at the workbench.

Layout (all drawn from the game seed): ``rooms`` rooms form a random tree on a
compass grid. The recipe has ``steps`` processing steps spread over 1-4
ingredients (each needs one step, or two: a cut then a heat, in that order).
Ingredients, ``distractors`` extra ingredients the recipe does not use, and the
fixtures (cutting board: ``slice``; stove: ``fry``; oven: ``roast``; workbench:
``make``) are placed in random rooms.

Actions: ``go <dir>``, ``take <item>``, ``slice|fry|roast <item>`` (a held item,
with the fixture in the room, a process not yet applied to it),
``make <dish>`` (at the workbench, holding every recipe ingredient), ``look``,
``inventory``.

Losing (terminal, ``lost=True``): processing a recipe ingredient with anything
but its next required step (wrong tool, wrong order, or one step too many ruins
it), or making the dish before every step is done. Processing a distractor is
harmless but useless. These traps are what make afterstates informative.

Reward (= score delta): +1 per recipe ingredient taken, +1 per correct step, +1
for making the dish (won, terminal). ``max_score = ingredients + steps + 1``;
the optimal return equals it (making the dish needs every ingredient taken and
every step done).

Legal actions per state are at most ``min(rooms - 1, 4) + 3 * items + 3``
where ``items = ingredients + distractors`` and ``ingredients <= min(steps, 4)``:
15 at the defaults (measured: mean 7.5, max 15), 16 for rooms=2, <= 25 for
steps <= 4 with distractors <= 2 (any rooms), 37 at the largest settings.

Optimal solutions (``walkthrough``) at the defaults (rooms=1, steps=2,
distractors=2) are 4-5 commands (mean 4.6); rooms=2 gives 4-8 (mean 6.3);
rooms=4, steps=6 gives 12-23. Steps take ~0.1 ms with afterstates on.

Example::

    >>> from rlid import envs
    >>> env = envs.make("crafting", game_seed=3)
    >>> obs, info = env.reset(seed=0)
    >>> for command in info["walkthrough"]:
    ...     obs, reward, terminated, truncated, info = env.step(command)
    >>> info["won"], info["score"] == info["max_score"]
    (True, True)
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from rlid.envs.builtin.common import (
    BuiltinGameEnv,
    GameRules,
    grow_tree_map,
    join_words,
    with_article,
)
from rlid.envs.registry import Option

ROOM_NAMES = ("kitchen", "pantry", "garden", "cellar", "shed", "porch", "larder", "yard")
INGREDIENTS = (
    "carrot", "potato", "onion", "tomato", "pepper", "mushroom", "apple", "egg",
    "fish", "cheese", "turnip", "garlic", "leek", "pear", "beet", "squash",
)  # fmt: skip
DISHES = ("stew", "soup", "pie", "salad", "omelette", "curry", "casserole", "gratin")
# process verb -> (fixture that allows it, past participle)
PROCESSES = {"slice": ("cutting board", "sliced"), "fry": ("stove", "fried"),
             "roast": ("oven", "roasted")}  # fmt: skip
CUTS, HEATS = ("slice",), ("fry", "roast")
WORKBENCH = "workbench"
MAX_INGREDIENTS = 4

OPTIONS = {
    "rooms": Option(int, 1, "number of rooms (a random tree on a compass grid)", min=1, max=6),
    "steps": Option(int, 2, "processing steps in the recipe (over 1-4 ingredients)", min=1, max=6),
    "distractors": Option(int, 2, "extra ingredients the recipe does not use", min=0, max=6),
}


@dataclass(frozen=True)
class CraftingState:
    """Player room, held items, processes applied per item (aligned with ``rules.items``)."""

    room: int
    held: frozenset[str]
    done: tuple[tuple[str, ...], ...]
    made: bool = False
    failed: bool = False


class CraftingRules(GameRules):
    """One generated crafting game (see the module docstring)."""

    def __init__(self, seed: int, *, rooms: int, steps: int, distractors: int) -> None:
        rng = random.Random(seed)
        self.exits = grow_tree_map(rng, rooms)
        self.rooms = tuple(rng.sample(ROOM_NAMES, rooms))
        self.dish = rng.choice(DISHES)
        n_ingredients = rng.randint(math.ceil(steps / 2), min(steps, MAX_INGREDIENTS))
        names = rng.sample(INGREDIENTS, n_ingredients + distractors)
        doubled = set(rng.sample(range(n_ingredients), steps - n_ingredients))
        recipe: list[tuple[str, ...]] = []
        for i in range(n_ingredients):
            if i in doubled:
                recipe.append((rng.choice(CUTS), rng.choice(HEATS)))
            else:
                recipe.append((rng.choice(CUTS + HEATS),))
        # items: recipe ingredients first, then distractors; recipe[i] for i < n_ingredients
        self.items = tuple(names)
        self.item_index = {name: i for i, name in enumerate(names)}
        self.recipe = {names[i]: recipe[i] for i in range(n_ingredients)}
        self.item_room = {name: rng.randrange(rooms) for name in names}
        fixtures = [PROCESSES[v][0] for v in PROCESSES] + [WORKBENCH]
        self.fixture_room = {name: rng.randrange(rooms) for name in fixtures}
        self.max_score = n_ingredients + steps + 1
        parts = [f"{' then '.join(self.recipe[name])} the {name}" for name in names[:n_ingredients]]
        self.objective = (
            f"Make the {self.dish}: {join_words(parts)}, then make it at the {WORKBENCH}."
        )

    # ------------------------------------------------------------ queries
    def initial_state(self) -> CraftingState:
        return CraftingState(room=0, held=frozenset(), done=((),) * len(self.items))

    def layout_key(self) -> tuple:
        recipe = tuple(sorted(self.recipe.items()))
        return (self.exits, self.rooms, self.dish, recipe, tuple(sorted(self.item_room.items())),
                tuple(sorted(self.fixture_room.items())))  # fmt: skip

    def _progress(self, name: str, done: tuple[str, ...]) -> int:
        """How many leading steps of ``name``'s recipe ``done`` matches."""
        need = self.recipe[name]
        k = 0
        while k < len(done) and k < len(need) and done[k] == need[k]:
            k += 1
        return k

    def _ruined(self, name: str, done: tuple[str, ...]) -> bool:
        return name in self.recipe and self._progress(name, done) < len(done)

    def score(self, state: CraftingState) -> int:
        taken = sum(name in state.held for name in self.recipe)
        steps = sum(
            self._progress(name, state.done[i])
            for i, name in enumerate(self.items)
            if name in self.recipe
        )
        return taken + steps + int(state.made)

    def won(self, state: CraftingState) -> bool:
        return state.made

    def lost(self, state: CraftingState) -> bool:
        if state.failed:
            return True
        return any(self._ruined(name, state.done[i]) for i, name in enumerate(self.items))

    def _fixtures_here(self, room: int) -> list[str]:
        return [f for f, r in self.fixture_room.items() if r == room]

    def _moves(self, state: CraftingState) -> dict[str, tuple]:
        """Legal action -> effect, in the stable action order."""
        moves: dict[str, tuple] = {}
        for direction, nxt in self.exits[state.room]:
            moves[f"go {direction}"] = ("go", nxt)
        for name in sorted(self.items):
            if self.item_room[name] == state.room and name not in state.held:
                moves[f"take {name}"] = ("take", name)
        here = set(self._fixtures_here(state.room))
        for name in sorted(state.held):
            i = self.item_index[name]
            for verb, (fixture, _) in PROCESSES.items():
                if fixture in here and verb not in state.done[i]:
                    moves[f"{verb} {name}"] = ("process", i, verb)
        if WORKBENCH in here and all(name in state.held for name in self.recipe):
            moves[f"make {self.dish}"] = ("make",)
        moves["look"] = ("look",)
        moves["inventory"] = ("inventory",)
        return moves

    def legal_actions(self, state: CraftingState) -> list[str]:
        return list(self._moves(state))

    def plan_actions(self, state: CraftingState) -> list[str]:
        return [
            a
            for a, m in self._moves(state).items()
            if m[0] in ("go", "make")
            or (m[0] == "take" and m[1] in self.recipe)
            or (m[0] == "process" and self.items[m[1]] in self.recipe)
        ]

    # ------------------------------------------------------------ dynamics
    def apply(self, state: CraftingState, action: str) -> tuple[CraftingState, str]:
        move = self._moves(state).get(action)
        if move is None:
            raise ValueError(f"crafting: {action!r} is not legal here")
        kind = move[0]
        if kind == "go":
            return replace(state, room=move[1]), ""
        if kind == "take":
            return replace(state, held=state.held | {move[1]}), f"You take the {move[1]}."
        if kind == "process":
            i, verb = move[1], move[2]
            name = self.items[i]
            done = state.done[:i] + (state.done[i] + (verb,),) + state.done[i + 1 :]
            after = replace(state, done=done)
            if self._ruined(name, done[i]):
                return after, f"You {verb} the {name}, but that is not the recipe: it is ruined."
            return after, f"You {verb} the {name}."
        if kind == "make":
            ready = all(
                self._progress(name, state.done[self.item_index[name]]) == len(need)
                for name, need in self.recipe.items()
            )
            if ready:
                return replace(state, made=True), f"You make the {self.dish}. Delicious!"
            return replace(state, failed=True), f"The {self.dish} is a failure: a step was missed."
        if kind == "inventory":
            held = [f"the {self._label(state, n)}" for n in sorted(state.held)]
            return state, f"You carry {join_words(held)}." if held else "You carry nothing."
        return state, "You look around."

    def _label(self, state: CraftingState, name: str) -> str:
        """``"sliced fried carrot"``: the item with the processes applied to it."""
        done = state.done[self.item_index[name]]
        return " ".join([PROCESSES[v][1] for v in done] + [name])

    def observe(self, state: CraftingState, feedback: str) -> str:
        parts = [feedback] if feedback else []
        parts.append(f"You are in the {self.rooms[state.room]}.")
        things = [
            with_article(name)
            for name in sorted(self.items)
            if self.item_room[name] == state.room and name not in state.held
        ]
        things += [with_article(f) for f in self._fixtures_here(state.room)]
        if things:
            parts.append(f"You see {join_words(things)}.")
        exits = [direction for direction, _ in self.exits[state.room]]
        if exits:
            parts.append(f"Exits: {', '.join(exits)}.")
        return " ".join(parts)

    def describe_change(self, before: CraftingState, after: CraftingState) -> str:
        clauses = []
        if after.room != before.room:
            clauses.append(f"you will be in the {self.rooms[after.room]}")
        clauses += [f"you will hold the {name}" for name in sorted(after.held - before.held)]
        for i, name in enumerate(self.items):
            if after.done[i] != before.done[i]:
                if self._ruined(name, after.done[i]):
                    clauses.append(f"the {name} will be ruined")
                else:
                    clauses.append(f"the {name} will be {PROCESSES[after.done[i][-1]][1]}")
        if after.made and not before.made:
            clauses.append(f"the {self.dish} will be ready")
        if after.failed and not before.failed:
            clauses.append(f"the {self.dish} will be spoiled")
        return "; ".join(clauses) or "nothing changes"


class CraftingEnv(BuiltinGameEnv):
    """The ``crafting`` env (options: see ``OPTIONS`` and the module docstring)."""

    env_id = "crafting"
    rules_class = CraftingRules
    OPTIONS = OPTIONS
