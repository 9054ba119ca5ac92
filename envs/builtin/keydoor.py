"""``keydoor``: find the keys, unlock the doors on the way, reach the goal room.

Layout (all drawn from the game seed): ``size`` rooms form a random spanning tree
on a compass grid; the player starts in room 0 and must reach the room farthest
from it. ``keys`` locked doors sit on the (unique) path to the goal; the key of
each door lies somewhere reachable before that door (which key opens which door
is random: a wrong key simply does not fit). ``distractors`` portable objects
are scattered around; at most two objects share a room.

Actions: ``go <dir>`` (through open passages only), ``take <object>``,
``unlock <door> with <key>`` (any held key at any adjacent locked door),
``open <door>`` (unlocked doors), ``examine <object>``, ``look``, ``inventory``.

Reward (= score delta): +1 per key taken, +1 per door unlocked, +1 on reaching
the goal (won, terminal). ``max_score = 2 * keys + 1`` and the optimal return
equals it: every locked door is on the only path to the goal, so every winning
episode takes every key and unlocks every door. There is no way to lose.

Legal actions per state are at most ``4 + 4 + keys * min(keys, 4) + min(keys, 4)
+ 2`` (exits, take/examine of <= 2 objects, unlock pairs, open, look/inventory):
10 / 12 / 16 / 22 for keys = 0 / 1 / 2 / 3; at the defaults mean 4.3, max 8.

Optimal solutions (``walkthrough``) at the defaults (size=3, keys=1,
distractors=2) are 5-6 commands (mean 5.4); size=8, keys=3 gives 13-20.
Steps take ~0.05 ms with afterstates on.

Example::

    >>> from rlid import envs
    >>> env = envs.make("keydoor", size=3, keys=1, game_seed=0)
    >>> obs, info = env.reset(seed=0)
    >>> for command in info["walkthrough"]:
    ...     obs, reward, terminated, truncated, info = env.step(command)
    >>> info["won"], info["score"] == info["max_score"]
    (True, True)
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from rlid.envs.builtin.common import (
    BuiltinGameEnv,
    GameRules,
    grow_tree_map,
    join_words,
    room_distances,
    room_path,
    with_article,
)
from rlid.envs.registry import Option

ROOM_NAMES = (
    "kitchen", "studio", "hallway", "library", "cellar", "attic", "bedroom", "pantry",
    "garden", "office", "parlor", "bathroom", "workshop", "gallery", "nursery", "laundry",
)  # fmt: skip
KEY_NAMES = ("brass key", "iron key", "silver key", "copper key", "bone key", "glass key")
DOOR_NAMES = ("oak door", "pine door", "red door", "blue door", "green door", "stone door")
DISTRACTOR_NAMES = (
    "old lamp", "wooden chair", "torn map", "red apple", "silk scarf", "clay pot",
    "tin cup", "rubber ball", "blue vase", "wool hat", "paper fan", "stone idol",
)  # fmt: skip
MAX_OBJECTS_PER_ROOM = 2

OPTIONS = {
    "size": Option(int, 3, "number of rooms (a random tree on a compass grid)", min=2, max=12),
    "keys": Option(int, 1, "locked doors on the path to the goal (one key each)", min=0, max=3),
    "distractors": Option(int, 2, "portable objects that do not help", min=0, max=8),
}


@dataclass(frozen=True)
class Door:
    """A locked door between two adjacent rooms, opened by ``key``."""

    name: str
    rooms: frozenset[int]
    key: str


@dataclass(frozen=True)
class KeyDoorState:
    """Where the player is, what they hold, which doors are unlocked / open (door indices)."""

    room: int
    held: frozenset[str] = frozenset()
    unlocked: frozenset[int] = frozenset()
    opened: frozenset[int] = frozenset()


class KeyDoorRules(GameRules):
    """One generated key-and-door game (see the module docstring)."""

    def __init__(self, seed: int, *, size: int, keys: int, distractors: int) -> None:
        KeyDoorEnv.check_options(size=size, keys=keys, distractors=distractors)
        rng = random.Random(seed)
        for _ in range(100):  # a tree deep enough for `keys` doors on the goal path
            exits = grow_tree_map(rng, size)
            dist = room_distances(exits, 0)
            if max(dist.values()) >= max(keys, 1):
                break
        else:  # pragma: no cover - practically unreachable for size <= 12
            raise RuntimeError("could not generate a deep enough map")
        self.exits = exits
        self.rooms = tuple(rng.sample(ROOM_NAMES, size))
        self.start = 0
        far = max(dist.values())
        self.goal = rng.choice(sorted(r for r, d in dist.items() if d == far))
        path = room_path(exits, self.start, self.goal)
        edges = [frozenset(path[i : i + 2]) for i in range(len(path) - 1)]
        door_edges = [edges[i] for i in sorted(rng.sample(range(len(edges)), keys))]
        door_names = rng.sample(DOOR_NAMES, keys)
        key_names = rng.sample(KEY_NAMES, keys)
        self.doors = tuple(
            Door(name, edge, key) for name, edge, key in zip(door_names, door_edges, key_names)
        )
        contents: list[list[str]] = [[] for _ in range(size)]
        for j, door in enumerate(self.doors):
            # the key of door j lies before door j: reachable through doors 0..j-1 only
            region = room_distances(exits, self.start, frozenset(door_edges[j:]))
            spots = [r for r in sorted(region) if len(contents[r]) < MAX_OBJECTS_PER_ROOM]
            away = [r for r in spots if r != self.start]
            contents[rng.choice(away or spots)].append(door.key)
        for name in rng.sample(DISTRACTOR_NAMES, distractors):
            spots = [r for r in range(size) if len(contents[r]) < MAX_OBJECTS_PER_ROOM]
            contents[rng.choice(spots)].append(name)
        self.objects = tuple(tuple(sorted(c)) for c in contents)
        self.key_names = frozenset(key_names)
        self.door_at = {
            (room, direction): j
            for j, door in enumerate(self.doors)
            for room in door.rooms
            for direction, nxt in exits[room]
            if frozenset((room, nxt)) == door.rooms
        }
        self.max_score = 2 * keys + 1
        goal = self.rooms[self.goal]
        self.objective = (
            f"Reach the {goal}; locked doors open with the right key."
            if keys
            else f"Reach the {goal}."
        )

    # ------------------------------------------------------------ queries
    def initial_state(self) -> KeyDoorState:
        return KeyDoorState(room=self.start)

    def layout_key(self) -> tuple:
        return (self.exits, self.rooms, self.goal, self.doors, self.objects)

    def score(self, state: KeyDoorState) -> int:
        taken = len(state.held & self.key_names)
        return taken + len(state.unlocked) + int(state.room == self.goal)

    def won(self, state: KeyDoorState) -> bool:
        return state.room == self.goal

    def lost(self, state: KeyDoorState) -> bool:
        return False

    def _visible(self, state: KeyDoorState) -> list[str]:
        return [o for o in self.objects[state.room] if o not in state.held]

    def _moves(self, state: KeyDoorState) -> dict[str, tuple]:
        """Legal action -> effect, in the stable action order."""
        moves: dict[str, tuple] = {}
        adjacent = []
        for direction, nxt in self.exits[state.room]:
            door = self.door_at.get((state.room, direction))
            if door is not None:
                adjacent.append(door)
            if door is None or door in state.opened:
                moves[f"go {direction}"] = ("go", nxt)
        visible = self._visible(state)
        for obj in visible:
            moves[f"take {obj}"] = ("take", obj)
        held_keys = sorted(state.held & self.key_names)
        for door in sorted(adjacent, key=lambda j: self.doors[j].name):
            if door not in state.unlocked:
                for key in held_keys:
                    moves[f"unlock {self.doors[door].name} with {key}"] = ("unlock", door, key)
        for door in sorted(adjacent, key=lambda j: self.doors[j].name):
            if door in state.unlocked and door not in state.opened:
                moves[f"open {self.doors[door].name}"] = ("open", door)
        for obj in visible:
            moves[f"examine {obj}"] = ("examine", obj)
        moves["look"] = ("look",)
        moves["inventory"] = ("inventory",)
        return moves

    def legal_actions(self, state: KeyDoorState) -> list[str]:
        return list(self._moves(state))

    def plan_actions(self, state: KeyDoorState) -> list[str]:
        moves = self._moves(state)
        useful = {"go", "unlock", "open"}
        return [
            a
            for a, m in moves.items()
            if m[0] in useful or (m[0] == "take" and m[1] in self.key_names)
        ]

    # ------------------------------------------------------------ dynamics
    def apply(self, state: KeyDoorState, action: str) -> tuple[KeyDoorState, str]:
        move = self._moves(state).get(action)
        if move is None:
            raise ValueError(f"keydoor: {action!r} is not legal here")
        kind = move[0]
        if kind == "go":
            after = replace(state, room=move[1])
            reached = f"You made it to the {self.rooms[self.goal]}!"
            return after, reached if self.won(after) else ""
        if kind == "take":
            return replace(state, held=state.held | {move[1]}), f"You take the {move[1]}."
        if kind == "unlock":
            door, key = self.doors[move[1]], move[2]
            if door.key != key:
                return state, f"The {key} does not fit the {door.name}."
            unlocked = state.unlocked | {move[1]}
            return replace(state, unlocked=unlocked), f"You unlock the {door.name}."
        if kind == "open":
            opened = state.opened | {move[1]}
            return replace(state, opened=opened), f"You open the {self.doors[move[1]].name}."
        if kind == "examine":
            obj = move[1]
            if obj in self.key_names:
                return state, f"A small {obj}; it must open some door."
            return state, f"Just {with_article(obj)}, nothing special."
        if kind == "inventory":
            held = [f"the {o}" for o in sorted(state.held)]
            return state, f"You carry {join_words(held)}." if held else "You carry nothing."
        return state, "You look around."

    def observe(self, state: KeyDoorState, feedback: str) -> str:
        parts = [feedback] if feedback else []
        parts.append(f"You are in the {self.rooms[state.room]}.")
        visible = self._visible(state)
        if visible:
            parts.append(f"You see {join_words([with_article(o) for o in visible])}.")
        exits = []
        for direction, _ in self.exits[state.room]:
            door = self.door_at.get((state.room, direction))
            if door is None or door in state.opened:
                exits.append(direction)
            else:
                status = "closed" if door in state.unlocked else "locked"
                exits.append(f"{direction} ({status} {self.doors[door].name})")
        parts.append(f"Exits: {', '.join(exits)}.")
        return " ".join(parts)

    def describe_change(self, before: KeyDoorState, after: KeyDoorState) -> str:
        clauses = []
        if after.room != before.room:
            clauses.append(f"you will be in the {self.rooms[after.room]}")
        clauses += [f"you will hold the {o}" for o in sorted(after.held - before.held)]
        for door in sorted(after.unlocked - before.unlocked):
            clauses.append(f"the {self.doors[door].name} will be unlocked")
        for door in sorted(after.opened - before.opened):
            clauses.append(f"the {self.doors[door].name} will be open")
        return "; ".join(clauses) or "nothing changes"


class KeyDoorEnv(BuiltinGameEnv):
    """The ``keydoor`` env (options: see ``OPTIONS`` and the module docstring)."""

    env_id = "keydoor"
    rules_class = KeyDoorRules
    OPTIONS = OPTIONS

    @classmethod
    def check_options(cls, **options: int) -> None:
        size, keys, distractors = options["size"], options["keys"], options["distractors"]
        if keys > size - 1:
            raise ValueError(
                f"keydoor: keys={keys} needs size >= {keys + 1} (each locked door sits "
                f"between two rooms on the goal path); got size={size}"
            )
        if keys + distractors > MAX_OBJECTS_PER_ROOM * size:
            raise ValueError(
                f"keydoor: keys + distractors = {keys + distractors} objects do not fit in "
                f"{size} rooms (at most {MAX_OBJECTS_PER_ROOM} per room); "
                f"lower distractors or raise size"
            )
