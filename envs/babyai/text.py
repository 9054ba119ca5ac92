"""BabyAI-Text's observation text: GLAM's sentences for minigrid's egocentric view.

GLAM (Carta et al. 2023, "Grounding Large Language Models in Interactive Environments
with Online Reinforcement Learning") describes what the agent sees in a list of short
sentences, built from minigrid's partial view: the ``(V, V, 3)`` encoding of the
``V x V`` cells in front of the agent (``V = 7``), each cell ``(type, colour, state)``;
column ``i`` runs left to right, row ``j`` far to near, and the agent stands at
``(V // 2, V - 1)`` facing up the columns. The sentences, in this order:

1. ``"You carry a {colour} {type}"`` when the agent holds an object;
2. walls straight ahead, to the left and to the right, each only when the first cell
   that is neither empty nor unseen along that line is a wall
   (``"You see a wall 2 steps forward"``, ``"You see a wall 1 step left"``);
3. every other visible object, column by column (left to right), far to near within a
   column: ``"You see a {colour} {type} {where}"`` where ``where`` is ``"N steps
   forward"`` in the agent's own column, ``"N steps left|right"`` in its own row, and
   ``"N steps left|right and M steps forward"`` elsewhere (``step`` for 1). A door
   names its state first: ``"You see a locked red door 3 steps forward"``.

Two of GLAM's quirks are kept on purpose, so the text is the one its agents read:
an open door reads ``"You see a open blue door ..."`` (GLAM means to write "an open"
but its test compares a string with ``0``, so the "a" branch always runs), and a
carried object is not listed among the objects seen (it sits on the agent's cell).

The observation is the sentences joined by ``", "`` (GLAM's prompt writes each one
followed by ``", "``). This module needs numpy only (not minigrid), so the rendering is
testable on hand-built encodings::

    >>> import numpy as np
    >>> view = np.ones((7, 7, 3), dtype=np.uint8)      # every cell empty
    >>> view[3, 3] = (2, 5, 0)                           # a wall 3 steps ahead
    >>> view[1, 4] = (6, 0, 0)                           # a red ball, 2 left, 2 ahead
    >>> observation_text(describe_view(view, carrying=("blue", "key")))
    'You carry a blue key, You see a wall 3 steps forward, You see a red ball 2 steps left and 2 steps forward'
"""

from __future__ import annotations

import numpy as np

# minigrid's encodings (minigrid.core.constants; tests/test_envs_babyai.py checks them)
OBJECT_NAMES = (
    "unseen", "empty", "wall", "floor", "door", "key", "ball", "box", "goal", "lava", "agent",
)  # fmt: skip
COLOR_NAMES = ("red", "green", "blue", "purple", "yellow", "grey")
DOOR_STATES = ("open", "closed", "locked")
UNSEEN, EMPTY, WALL, DOOR = 0, 1, 2, 4


def _steps(count: int, direction: str) -> str:
    return f"{count} step{'s' if count > 1 else ''} {direction}"


def _wall_distance(line: list[int]) -> int | None:
    """Distance (1-based) to the first cell along ``line`` that is neither empty nor unseen,
    when that cell is a wall; ``None`` otherwise (an object or a door hides the wall)."""
    for distance, kind in enumerate(line, start=1):
        if kind not in (UNSEEN, EMPTY):
            return distance if kind == WALL else None
    return None


def describe_view(image: np.ndarray, carrying: tuple[str, str] | None = None) -> list[str]:
    """GLAM's sentences for one partial view.

    Args:
        image: minigrid's view encoding, ``(V, V, 3)`` integers ``(type, colour, state)``
            indexed ``[column, row]`` (``env.gen_obs()["image"]``).
        carrying: ``(colour, type)`` of the carried object, or ``None``.

    Returns:
        The sentences in GLAM's order (carrying, walls ahead / left / right, objects).
    """
    width, height = image.shape[0], image.shape[1]
    ax, ay = width // 2, height - 1  # the agent's cell in the view
    kinds = image[:, :, 0].astype(np.int64)  # (V, V)
    sentences = []
    if carrying is not None:
        sentences.append(f"You carry a {carrying[0]} {carrying[1]}")
    lines = (
        ("forward", kinds[ax, ay - 1 :: -1].tolist() if ay else []),
        ("left", kinds[ax - 1 :: -1, ay].tolist() if ax else []),
        ("right", kinds[ax + 1 :, ay].tolist()),
    )
    for direction, line in lines:
        distance = _wall_distance(line)
        if distance is not None:
            sentences.append(f"You see a wall {_steps(distance, direction)}")
    # objects: cells other than unseen / empty / wall, in (column, row) order
    for i, j in zip(*np.nonzero(kinds > WALL)):
        i, j = int(i), int(j)
        if (i, j) == (ax, ay):
            continue
        kind, color, state = (int(v) for v in image[i, j])
        name = f"{COLOR_NAMES[color]} {OBJECT_NAMES[kind]}"
        if kind == DOOR:
            name = f"{DOOR_STATES[state]} {name}"
        side = "right" if i > ax else "left"
        forward = ay - j
        if i == ax:
            where = _steps(forward, "forward")
        elif forward == 0:
            where = _steps(abs(i - ax), side)
        else:
            where = f"{_steps(abs(i - ax), side)} and {_steps(forward, 'forward')}"
        sentences.append(f"You see a {name} {where}")
    return sentences


def observation_text(sentences: list[str]) -> str:
    """The observation string: GLAM's sentences joined by ``", "``."""
    return ", ".join(sentences)
