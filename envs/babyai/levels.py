"""BabyAI levels on minigrid: minigrid's own, and GLAM's mixture tasks rebuilt on its API.

``GoToLocal``, ``PutNextLocal`` and ``UnlockLocal`` are minigrid's classes as they are.
``PickupLocal`` is GLAM's variant of BabyAI's (the colour is always named), and the
five tasks of GLAM's mixtures (:mod:`rlid.envs.babyai.catalog`) are :class:`MixedTask`,
written here on minigrid's ``RoomGridLevel`` from the rules of GLAM's level code: where
GLAM regenerates the room until a mission passes its word filter and every object is
reachable, this raises minigrid's ``RejectSampling``, which regenerates the whole grid
(the same distribution, another random stream).

Importing this module imports minigrid (and pygame, which minigrid imports for its
renderer; its greeting is silenced).

    >>> level = make_level("MixedTrainLocal", "goto", max_steps=None)
    >>> _ = level.reset(seed=0)
    >>> level.mission.startswith("go to")
    True
"""

from __future__ import annotations

import os

os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")

from minigrid.core.constants import COLOR_NAMES  # noqa: E402
from minigrid.core.roomgrid import Room  # noqa: E402
from minigrid.envs.babyai import GoToLocal, PutNextLocal, UnlockLocal  # noqa: E402
from minigrid.envs.babyai.core.roomgrid_level import RejectSampling, RoomGridLevel  # noqa: E402
from minigrid.envs.babyai.core.verifier import (  # noqa: E402
    AfterInstr,
    BeforeInstr,
    GoToInstr,
    ObjDesc,
    OpenInstr,
    PickupInstr,
    PutNextInstr,
)

from rlid.envs.babyai.catalog import DOOR_COLOR_NAMED, DOOR_COLORS, EXCLUDED_WORDS  # noqa: E402

ROOM_SIZE = 8
NUM_DISTRACTORS = 8
PORTABLE = ("key", "ball", "box")


class PickupLocal(RoomGridLevel):
    """Pick up an object named by colour and type, in one room with 8 objects.

    BabyAI's ``PickupLocal`` as GLAM's fork defines it (``force_colors``): the mission is
    drawn as a random (colour, type) until one object in the room matches it.
    """

    def __init__(self, room_size: int = ROOM_SIZE, num_dists: int = NUM_DISTRACTORS, **kwargs):
        self.num_dists = num_dists
        super().__init__(num_rows=1, num_cols=1, room_size=room_size, **kwargs)

    def gen_mission(self) -> None:
        self.add_distractors(num_distractors=self.num_dists, all_unique=False)
        self.place_agent()
        self.check_objs_reachable()  # raises RejectSampling
        for _ in range(100):
            desc = ObjDesc(self._rand_elem(PORTABLE), self._rand_elem(COLOR_NAMES))
            if desc.find_matching_objs(self)[0]:
                self.instrs = PickupInstr(desc)
                return
        raise RejectSampling("no described object found")


class MixedTask(RoomGridLevel):
    """One task of GLAM's mixtures (``goto``, ``pickup``, ``open``, ``putnext``,
    ``pickup-seq-goto``) under one mixture's word filter (``mixture``: a key of
    :data:`rlid.envs.babyai.catalog.EXCLUDED_WORDS`)."""

    def __init__(
        self,
        task: str,
        mixture: str,
        room_size: int = ROOM_SIZE,
        num_dists: int = NUM_DISTRACTORS,
        **kwargs,
    ):
        self.task = task
        self.mixture = mixture
        self.num_dists = num_dists
        self.locked_room: Room | None = None
        cols = 2 if task == "open" else 1
        super().__init__(num_rows=1, num_cols=cols, room_size=room_size, **kwargs)

    # ------------------------------------------------------------ generation
    def gen_mission(self) -> None:
        self.locked_room = None
        make = {
            "goto": self._goto,
            "pickup": self._pickup,
            "open": self._open,
            "putnext": self._putnext,
            "pickup-seq-goto": self._pickup_seq_goto,
        }[self.task]
        instrs = make()
        if not self.check_objs_reachable(raise_exc=False):
            raise RejectSampling("an object is not reachable")
        surface = instrs.surface(self)
        if any(words in surface for words in EXCLUDED_WORDS[self.mixture]):
            raise RejectSampling(f"{surface!r} names a held-back object")
        self.instrs = instrs

    def _objects(self, extra: int) -> list:
        self.place_agent()
        return self.add_distractors(num_distractors=self.num_dists + extra, all_unique=False)

    def _other(self, objs: list, first) -> ObjDesc:
        """A second object; another description than ``first``'s when only one object
        in the room fits ``first``'s description (GLAM's rule)."""
        second = self._rand_elem(objs)
        same = (second.type, second.color) == (first.type, first.color)
        if same and len(ObjDesc(first.type, first.color).find_matching_objs(self)[0]) < 2:
            while (second.type, second.color) == (first.type, first.color):
                second = self._rand_elem(objs)
        return ObjDesc(second.type, second.color)

    def _goto(self):
        obj = self._rand_elem(self._objects(1))
        return GoToInstr(ObjDesc(obj.type, obj.color))

    def _pickup(self):
        obj = self._rand_elem(self._objects(1))
        return PickupInstr(ObjDesc(obj.type, obj.color))

    def _putnext(self):
        objs = self._objects(2)
        first = self._rand_elem(objs)
        return PutNextInstr(ObjDesc(first.type, first.color), self._other(objs, first))

    def _pickup_seq_goto(self):
        objs = self._objects(2)
        first = self._rand_elem(objs)
        pick = PickupInstr(ObjDesc(first.type, first.color))
        go = GoToInstr(self._other(objs, first))
        if self._rand_elem(["before", "after"]) == "before":
            return BeforeInstr(pick, go)  # "pick up A, then go to B"
        return AfterInstr(go, pick)  # "go to B after you pick up A"

    def _open(self):
        color = self._rand_elem(DOOR_COLORS[self.mixture])
        door = self._add_locked_door(color)
        self.connect_all()
        for i in range(self.num_cols):
            if self.get_room(i, 0) is not self.locked_room:
                self.add_distractors(i, 0, num_distractors=self.num_dists, all_unique=False)
        while True:  # the agent starts outside the locked room
            self.place_agent()
            if self.room_from_pos(*self.agent_pos) is not self.locked_room:
                break
        named = color if DOOR_COLOR_NAMED[self.mixture] == "always" else None
        if named is None:
            named = self._rand_elem([None, color])
        return OpenInstr(ObjDesc(door.type, named))

    def _add_locked_door(self, color: str):
        """A locked door of ``color`` into a random room, its key in another room."""
        while True:
            i, j = self._rand_int(0, self.num_cols), self._rand_int(0, self.num_rows)
            door_idx = self._rand_int(0, 4)
            room = self.get_room(i, j)
            if room.neighbors[door_idx] is not None:
                break
        door, _ = self.add_door(i, j, door_idx, color=color, locked=True)
        self.locked_room = room
        while True:
            i, j = self._rand_int(0, self.num_cols), self._rand_int(0, self.num_rows)
            if self.get_room(i, j) is not self.locked_room:
                self.add_object(i, j, "key", door.color)
                return door


def make_level(level: str, task: str, *, max_steps: int | None) -> RoomGridLevel:
    """A fresh minigrid level env for ``level`` playing ``task`` (see
    :func:`rlid.envs.babyai.catalog.game_task`); ``max_steps=None`` keeps BabyAI's limit
    (room size squared, times rooms, times the navigations the mission needs)."""
    if level in EXCLUDED_WORDS:
        return MixedTask(task, level, max_steps=max_steps)
    if level == "PickUpSeqGoToLocal":
        return MixedTask("pickup-seq-goto", "MixedTrainLocal", max_steps=max_steps)
    if level == "PickupLocal":
        return PickupLocal(max_steps=max_steps)
    single = {"GoToLocal": GoToLocal, "PutNextLocal": PutNextLocal, "UnlockLocal": UnlockLocal}
    return single[level](max_steps=max_steps)
