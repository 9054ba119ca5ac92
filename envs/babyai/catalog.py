"""The BabyAI-Text levels and GLAM's task mixture, as data (no minigrid import).

GLAM's training environment, ``BabyAI-MixedTrainLocal``, mixes five tasks in one 8x8
room with 8 distractors (2 rooms for ``open``):

* ``goto``: "go to the red ball" (9 objects in the room);
* ``pickup``: "pick up the blue key" (9 objects);
* ``open``: "open the door" / "open the yellow door": the door between two rooms is
  locked and its key lies in the agent's room (8 distractors there);
* ``putnext``: "put the grey box next to the purple ball" (10 objects);
* ``pickup-seq-goto``: "pick up the green key, then go to the red box" or "go to the
  red box after you pick up the green key" (10 objects).

Its training missions never name a yellow box, a red key, a red door, a green ball or a
grey door; its test mixture, ``BabyAI-MixedTestLocal``, names only those five (and only
red or grey doors, always with their colour). GLAM draws a task once per environment
instance (each of its 32 parallel envs keeps one); rlid draws it per game seed
(:func:`mixture_task`), so a game's task is fixed by its seed and every task is equally
likely. The ``task`` option pins a mixture to one task.

    >>> mixture_task(0) in MIXED_TASKS
    True
"""

from __future__ import annotations

import random

# GLAM's order (its level code draws one of these)
MIXED_TASKS = ("goto", "pickup", "open", "putnext", "pickup-seq-goto")

LEVELS: dict[str, str] = {
    "MixedTrainLocal": "GLAM's training mixture of the five tasks (missions avoid 5 held-back "
    "object words)",
    "MixedTestLocal": "GLAM's test mixture: the same five tasks on the 5 held-back object words",
    "GoToLocal": "BabyAI GoToLocal: go to an object, one 8x8 room, 8 objects",
    "PickupLocal": "BabyAI PickupLocal (GLAM's): pick up an object named with its colour, one "
    "8x8 room, 8 objects",
    "PutNextLocal": "BabyAI PutNextLocal: put an object next to another, one 8x8 room, 8 "
    "distinct objects",
    "PickUpSeqGoToLocal": "GLAM's 'pick up A, then go to B' (either word order), one 8x8 room, "
    "10 objects",
    "UnlockLocal": "BabyAI UnlockLocal: fetch the key in the room and open its locked door",
}
MIXTURES = ("MixedTrainLocal", "MixedTestLocal")

# The task of each single level (``info["babyai_task"]``)
LEVEL_TASK = {
    "GoToLocal": "goto",
    "PickupLocal": "pickup",
    "PutNextLocal": "putnext",
    "PickUpSeqGoToLocal": "pickup-seq-goto",
    "UnlockLocal": "open",
}

# Object words a mixture's missions must not contain (GLAM's exclusion lists)
HELD_BACK = ("yellow box", "red key", "red door", "green ball", "grey door")
EXCLUDED_WORDS = {
    "MixedTrainLocal": HELD_BACK,
    "MixedTestLocal": tuple(
        f"{color} {kind}"
        for color in ("yellow", "red", "green", "grey", "blue", "purple")
        for kind in ("key", "ball", "box", "door")
        if f"{color} {kind}" not in HELD_BACK
    ),
}
# Colours of the locked door in the ``open`` task
DOOR_COLORS = {
    "MixedTrainLocal": ("yellow", "green", "blue", "purple"),
    "MixedTestLocal": ("red", "grey"),
}
# Whether the ``open`` mission names the door's colour: GLAM's training mixture names it
# half the time, its test mixture always.
DOOR_COLOR_NAMED = {"MixedTrainLocal": "half", "MixedTestLocal": "always"}


def mixture_task(seed: int) -> str:
    """The task of mixture game ``seed`` (uniform over :data:`MIXED_TASKS`)."""
    return MIXED_TASKS[random.Random(seed).randrange(len(MIXED_TASKS))]


def game_task(level: str, task: str, seed: int) -> str:
    """The task game ``seed`` of ``level`` plays (``task``: ``"any"`` or a pinned task)."""
    if level in MIXTURES:
        return mixture_task(seed) if task == "any" else task
    return LEVEL_TASK[level]
