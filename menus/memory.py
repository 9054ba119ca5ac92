"""Memory providers: the short "Memory:" field of a menu prompt (docs/design.md §4).

A provider sees each transition (``update(obs, action, info)`` after every
``env.step``) and renders one short line. The default model is tiny and slow, so
every rendering is a single line capped at ``max_chars`` characters; the oldest
items are dropped first, never cut mid-item where avoidable.

* ``"none"`` (:class:`NoMemory`): nothing; the prompt omits the field.
* ``"last_k"`` (:class:`LastKMemory`): the last ``k`` transitions as
  ``"action -> first sentence of the next observation"``.
* ``"structured"`` (:class:`StructuredMemory`): visited places, inventory, and
  actions that failed.
* ``"glam"`` (:class:`GlamMemory`): GLAM's (Carta et al. 2023) last ``k`` observations
  and the ``k - 1`` actions between them, whole and in GLAM's words, for the ``glam``
  prompt layout (the one provider whose rendering spans several lines and is not capped).

Example::

    >>> memory = make_memory("last_k", 2)
    >>> memory.update("You enter the studio. It is dark.", "go east", {})
    >>> memory.render()
    'go east -> You enter the studio.'
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

MAX_MEMORY_CHARS = 240
MAX_ITEM_CHARS = 60

_SPACES = re.compile(r"\s+")
# Sentence end: . ! ? followed by whitespace or end of text (so "3.5" is not split).
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")
# TextWorld room header, e.g. "-= Kitchen =-".
_TEXTWORLD_ROOM = re.compile(r"-=\s*(.+?)\s*=-")
# "You are in the kitchen." / "You are now at a crossroads," (matched per sentence).
_YOU_ARE_IN = re.compile(
    r"^(?:you are|you're|you find yourself)(?: now)? (?:in|at|inside) (?:the |a |an )?([^.,;!?]+)",
    re.IGNORECASE,
)


def one_line(text: str) -> str:
    """Collapse all whitespace runs (newlines included) into single spaces."""
    return _SPACES.sub(" ", text).strip()


def shorten(text: str, max_chars: int) -> str:
    """``text`` on one line; if longer than ``max_chars``, cut (at a word boundary
    when one is near) so that it fits with a trailing ``"..."``."""
    text = one_line(text)
    if len(text) <= max_chars:
        return text
    cut = text[: max(max_chars - 3, 0)]
    head = cut.rsplit(" ", 1)[0]
    if len(head) >= len(cut) // 2:  # end on a word boundary unless that loses too much
        cut = head
    return cut.rstrip() + "..."


def first_sentence(text: str, max_chars: int = MAX_ITEM_CHARS) -> str:
    """The first sentence of ``text`` (up to and including . ! ?), on one line, capped.

    TextWorld room headers (``-= Kitchen =-``) are skipped.
    """
    text = one_line(_TEXTWORLD_ROOM.sub(" ", text))
    end = _SENTENCE_END.search(text)
    return shorten(text[: end.end()] if end else text, max_chars)


def parse_location(obs: str, info: Mapping[str, Any]) -> str | None:
    """The player's place after a step, or ``None`` when it cannot be told.

    In order: ``info["location"]`` when the env provides it; a TextWorld room header
    ``-= Name =-`` anywhere in the observation; the first sentence that starts
    "You are (now) in/at the X". Any other observation records no place, so a
    failed or non-moving action does not invent one.
    """
    location = info.get("location")
    if isinstance(location, str) and location.strip():
        return shorten(location, MAX_ITEM_CHARS)
    header = _TEXTWORLD_ROOM.search(obs)
    if header:
        return shorten(header.group(1), MAX_ITEM_CHARS)
    for sentence in _SENTENCE_END.split(one_line(obs)):
        match = _YOU_ARE_IN.match(sentence.strip())
        if match:
            return shorten(match.group(1), MAX_ITEM_CHARS)
    return None


def parse_inventory(info: Mapping[str, Any]) -> tuple[str, ...] | None:
    """``info["inventory"]`` as a tuple of item names, or ``None`` when absent.

    Accepts a list of names or a single string (then kept as one item).
    """
    inventory = info.get("inventory")
    if inventory is None:
        return None
    if isinstance(inventory, str):
        text = one_line(inventory)
        return (shorten(text, MAX_ITEM_CHARS),) if text else ()
    return tuple(shorten(str(item), MAX_ITEM_CHARS) for item in inventory)


def _join_capped(items: list[str], max_chars: int, sep: str = "; ") -> str:
    """Join items, dropping the oldest (leftmost) until the line fits ``max_chars``."""
    while len(items) > 1 and len(sep.join(items)) > max_chars:
        items = items[1:]
    return shorten(sep.join(items), max_chars)


class MemoryProvider:
    """Base class: a memory that renders one short line from the transitions seen.

    Args:
        size: how many items the memory keeps (its meaning depends on the kind).
        max_chars: cap on the rendered line.
    """

    kind: ClassVar[str] = ""

    def __init__(self, size: int = 3, *, max_chars: int = MAX_MEMORY_CHARS) -> None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError(f"memory size must be an int >= 0, got {size!r}")
        if not isinstance(max_chars, int) or max_chars < 10:
            raise ValueError(f"max_chars must be an int >= 10, got {max_chars!r}")
        self.size = size
        self.max_chars = max_chars
        self.reset()

    def reset(self, obs: str | None = None, info: Mapping[str, Any] | None = None) -> None:
        """Forget everything; ``obs``/``info`` of the first observation may be given."""

    def update(self, obs: str, action: str, info: Mapping[str, Any]) -> None:
        """Record that ``action`` led to observation ``obs`` with ``info``."""

    def render(self) -> str:
        """One line of at most ``max_chars`` characters (``""`` when empty)."""
        return ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(size={self.size})"


class NoMemory(MemoryProvider):
    """No memory: renders ``""`` and the prompt leaves the field out."""

    kind = "none"


class LastKMemory(MemoryProvider):
    """The last ``k`` transitions, oldest first: ``"go east -> You enter the studio."``.

    The outcome is the first sentence of the next observation (room headers
    skipped); an invalid action is marked ``"(invalid)"``.
    """

    kind = "last_k"

    def __init__(self, k: int = 3, *, max_chars: int = MAX_MEMORY_CHARS) -> None:
        super().__init__(k, max_chars=max_chars)

    @property
    def k(self) -> int:
        return self.size

    def reset(self, obs: str | None = None, info: Mapping[str, Any] | None = None) -> None:
        self._entries: list[str] = []

    def update(self, obs: str, action: str, info: Mapping[str, Any]) -> None:
        if self.size == 0:
            return
        outcome = "(invalid)" if info.get("invalid_action") else first_sentence(obs)
        self._entries.append(f"{shorten(action, MAX_ITEM_CHARS)} -> {outcome}")
        del self._entries[: -self.size]

    def render(self) -> str:
        return _join_capped(list(self._entries), self.max_chars)


class StructuredMemory(MemoryProvider):
    """Visited places, inventory, and failed actions, e.g.
    ``"Visited: kitchen, studio. Carrying: key. Failed: open door."``.

    * Places come from :func:`parse_location` (``info["location"]``, TextWorld
      headers, "You are in ..."), in lower case as the menus' afterstates write them
      (``-= Kitchen =-`` is listed as ``kitchen``, the place of ``go east -> you
      will be in the kitchen``); the ``size`` most recently visited distinct places
      are listed, with a count of older ones.
    * Inventory is shown only when the env provides ``info["inventory"]``.
    * An action failed if ``info["invalid_action"]`` is true or nothing changed
      (same observation, score and legal actions as before it). The ``size`` most
      recent distinct failures are kept; an action that later succeeds is removed.
    """

    kind = "structured"

    def reset(self, obs: str | None = None, info: Mapping[str, Any] | None = None) -> None:
        self._places: list[str] = []
        self._inventory: tuple[str, ...] | None = None
        self._failed: list[str] = []
        self._last_state: tuple[Any, ...] | None = None
        if obs is not None:
            self._observe(obs, info or {})

    def _observe(self, obs: str, info: Mapping[str, Any]) -> tuple[Any, ...]:
        place = parse_location(obs, info)
        if place is not None:
            place = place.lower()  # as afterstates write it ("you will be in the kitchen")
            if place in self._places:
                self._places.remove(place)
            self._places.append(place)
        inventory = parse_inventory(info)
        if inventory is not None:
            self._inventory = inventory
        state = (one_line(obs), info.get("score"), tuple(info.get("legal_actions") or ()))
        self._last_state = state
        return state

    def update(self, obs: str, action: str, info: Mapping[str, Any]) -> None:
        before = self._last_state
        after = self._observe(obs, info)
        action = shorten(action, MAX_ITEM_CHARS)
        if action in self._failed:
            self._failed.remove(action)
        if info.get("invalid_action") or after == before:
            self._failed.append(action)
            if self.size:
                del self._failed[: -self.size]
            else:
                self._failed.clear()

    def render(self) -> str:
        parts: list[str] = []
        if self._places and self.size:
            shown = self._places[-self.size :]
            older = len(self._places) - len(shown)
            parts.append(
                "Visited: " + ", ".join(shown) + (f" (+{older} more)" if older else "") + "."
            )
        if self._inventory is not None:
            parts.append("Carrying: " + (", ".join(self._inventory) or "nothing") + ".")
        if self._failed:
            parts.append("Failed: " + ", ".join(self._failed) + ".")
        return _join_capped(parts, self.max_chars, sep=" ")


# GLAM's separators (flowersteam/Grounding_LLMs_with_online_RL,
# experiments/agents/base_agent.py generate_prompt): " \n " before each observation,
# "\n " before each action, every description followed by ", ".
GLAM_OBSERVATION = " \n Observation {i}: "
GLAM_ACTION = "\n Action {i}: "
GLAM_DESCRIPTION_END = ", "


def glam_descriptions(obs: str) -> str:
    r"""An observation as GLAM writes it: each of its ``", "``-joined descriptions
    followed by ``", "`` (``"".join(f"{d}, " for d in obs_q[i])``); ``""`` for none."""
    return obs + GLAM_DESCRIPTION_END if obs else ""


def glam_history(observations: Sequence[str], actions: Sequence[str]) -> str:
    r"""GLAM's observations-and-actions text: ``" \n Observation i: ...\n Action i: a_i"``
    for each observation, the last one's action left empty (``"\n Action 2: "``) when
    there is one action fewer than observations, as at every decision."""
    return "".join(
        GLAM_OBSERVATION.format(i=i)
        + glam_descriptions(obs)
        + GLAM_ACTION.format(i=i)
        + (actions[i] if i < len(actions) else "")
        for i, obs in enumerate(observations)
    )


class GlamMemory(MemoryProvider):
    r"""GLAM's memory: the last ``k`` observations (the current one last) and the ``k - 1``
    actions between them (``deque(maxlen=nbr_obs)`` / ``deque(maxlen=nbr_obs - 1)``,
    nbr_obs = 3, in GLAM's ``llm_ppo_agent.py``), rendered by :func:`glam_history`.

    Its rendering holds the current observation, so the ``glam`` prompt layout reads the
    observation from here; it is neither one line nor capped (GLAM's is not).

        >>> memory = make_memory("glam", 3)
        >>> memory.reset("You see a wall 1 step forward")
        >>> memory.update("You see a red ball 2 steps left", "turn left", {})
        >>> memory.render()
        ' \n Observation 0: You see a wall 1 step forward, \n Action 0: turn left \n Observation 1: You see a red ball 2 steps left, \n Action 1: '
    """

    kind = "glam"

    def reset(self, obs: str | None = None, info: Mapping[str, Any] | None = None) -> None:
        self._observations: deque[str] = deque(maxlen=max(self.size, 1))
        self._actions: deque[str] = deque(maxlen=max(self.size - 1, 0))
        if obs is not None:
            self._observations.append(obs)

    def update(self, obs: str, action: str, info: Mapping[str, Any]) -> None:
        if self.size == 0:
            return
        self._actions.append(action)
        self._observations.append(obs)

    def render(self) -> str:
        if self.size == 0:
            return ""
        return glam_history(list(self._observations), list(self._actions))


MEMORY_PROVIDERS: dict[str, type[MemoryProvider]] = {
    NoMemory.kind: NoMemory,
    LastKMemory.kind: LastKMemory,
    StructuredMemory.kind: StructuredMemory,
    GlamMemory.kind: GlamMemory,
}


def make_memory(kind: str, size: int = 3, *, max_chars: int = MAX_MEMORY_CHARS) -> MemoryProvider:
    """A fresh provider of ``kind`` (a key of :data:`MEMORY_PROVIDERS`)."""
    try:
        cls = MEMORY_PROVIDERS[kind]
    except KeyError:
        raise ValueError(
            f"unknown memory kind {kind!r}; valid kinds: {sorted(MEMORY_PROVIDERS)}"
        ) from None
    return cls(size, max_chars=max_chars)
