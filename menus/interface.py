"""The interface spec: what a policy sees at each decision (docs/design.md §4, §8).

An :class:`Interface` is written into every run's config; comparisons between the
decision plane and the token plane check it with :meth:`Interface.diff`.

Example::

    >>> a = Interface()
    >>> b = Interface(memory="structured", afterstates=False)
    >>> a.diff(b)
    {'memory': ('last_k', 'structured'), 'afterstates': (True, False)}
    >>> Interface.from_dict(b.to_dict()) == b
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from menus.labels import parse_alphabet
from menus.memory import MEMORY_PROVIDERS
from menus.menu import OVERFLOW_POLICIES

MemoryKind = Literal["none", "last_k", "structured"]
Template = Literal["auto", "plain", "chat"]
TEMPLATES: tuple[str, ...] = ("auto", "plain", "chat")
LONG_PROMPT_POLICIES: tuple[str, ...] = ("error", "shorten")


@dataclass(frozen=True)
class Interface:
    """What the policy sees; both planes render their prompts from it."""

    observation: bool = True
    """Show the current observation (``"Now: ..."``)."""
    objective: bool = True
    """Show the game objective (``"Goal: ..."``)."""
    memory: MemoryKind = "last_k"
    """Memory provider kind (``menus.memory.MEMORY_PROVIDERS``); ``"none"`` hides the field."""
    memory_size: int = 3
    """Items the memory keeps: transitions for ``last_k``, places/failures for ``structured``."""
    afterstates: bool = True
    """Show each row's predicted afterstate in the decision-plane menu (``"-> ..."``)."""
    labels: str = "A-Z"
    """Candidate label alphabet spec (``menus.labels.parse_alphabet``): ``"A-Z"``, ``"auto"``, ..."""
    shuffle: bool = True
    """Shuffle menu rows every step (against label-position bias); the permutation is kept."""
    template: Template = "auto"
    """Prompt template: ``"chat"`` when the tokenizer has a chat template (``"auto"``), or forced."""
    show_legal_to_token_plane: bool = True
    """Give the token plane the list of legal actions (without labels)."""
    show_afterstates_to_token_plane: bool = False
    """Also give the token plane each legal action's afterstate (needs the legal list)."""
    overflow: Literal["error", "truncate"] = "error"
    """More legal actions than labels: raise, or keep the first K rows and record the rest."""
    max_obs_chars: int = 400
    """Cap on the observation (and objective) text in a prompt; longer text ends in ``"..."``."""
    steps_left: bool = False
    """Show the steps left before truncation (``"Steps left: 7"``, from ``info["steps_left"]``)
    in both planes' prompts, so the policy and value can tell how much time remains
    (Pardo et al. 2018, "Time Limits in Reinforcement Learning"). Off by default: runs
    recorded before the field existed saw no such line."""

    long_prompts: Literal["error", "shorten"] = "shorten"
    """A prompt longer than the model's context (``max_position_embeddings``, less the
    room the plane's continuation needs): ``"shorten"`` renders that one step without
    its memory line, then also without the observation, then also without the menu's
    afterstates (labels and commands stay), until it fits (counted in the
    run's ``shortened_prompts``; still too long: an error); ``"error"`` raises at once.
    Prompts that fit are never changed, so runs recorded before the field existed are
    unaffected."""

    def __post_init__(self) -> None:
        for name in (
            "observation",
            "objective",
            "afterstates",
            "shuffle",
            "show_legal_to_token_plane",
            "show_afterstates_to_token_plane",
            "steps_left",
        ):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise TypeError(f"Interface.{name} must be True or False, got {value!r}")
        if self.memory not in MEMORY_PROVIDERS:
            raise ValueError(
                f"Interface.memory={self.memory!r} is unknown; valid kinds: {sorted(MEMORY_PROVIDERS)}"
            )
        if not _is_int(self.memory_size) or self.memory_size < 0:
            raise ValueError(f"Interface.memory_size must be an int >= 0, got {self.memory_size!r}")
        if self.memory != "none" and self.memory_size == 0:
            raise ValueError(
                f"Interface.memory={self.memory!r} with memory_size=0 would show an empty memory; "
                "set memory_size >= 1, or memory='none' to hide the field"
            )
        if not isinstance(self.labels, str):
            raise TypeError(
                f"Interface.labels must be an alphabet spec string such as 'A-Z', 'auto' or "
                f"'yes,no', got {self.labels!r}"
            )
        try:
            parse_alphabet(self.labels)
        except ValueError as error:
            raise ValueError(f"Interface.labels: {error}") from None
        if self.template not in TEMPLATES:
            raise ValueError(
                f"Interface.template must be one of {TEMPLATES}, got {self.template!r}"
            )
        if self.overflow not in OVERFLOW_POLICIES:
            raise ValueError(
                f"Interface.overflow must be one of {OVERFLOW_POLICIES}, got {self.overflow!r}"
            )
        if self.long_prompts not in LONG_PROMPT_POLICIES:
            raise ValueError(
                f"Interface.long_prompts must be one of {LONG_PROMPT_POLICIES}, "
                f"got {self.long_prompts!r}"
            )
        if not _is_int(self.max_obs_chars) or self.max_obs_chars < 20:
            raise ValueError(
                f"Interface.max_obs_chars must be an int >= 20, got {self.max_obs_chars!r}"
            )
        if self.show_afterstates_to_token_plane and not self.show_legal_to_token_plane:
            raise ValueError(
                "Interface.show_afterstates_to_token_plane=True needs "
                "show_legal_to_token_plane=True (afterstates are shown next to the legal list)"
            )

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable field -> value mapping. Fields added after run directories
        already recorded interfaces (``long_prompts``) appear only when changed, so those
        records (and the config fingerprints over them) stay identical and resumable."""
        out = asdict(self)
        for name in _RECORDED_WHEN_CHANGED:
            if out[name] == self.__dataclass_fields__[name].default:
                del out[name]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Interface:
        """Inverse of :meth:`to_dict`; missing fields take their defaults."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown Interface fields {unknown}; valid fields: {sorted(known)}")
        return cls(**dict(data))

    def diff(self, other: Interface) -> dict[str, tuple[Any, Any]]:
        """``{field: (self value, other value)}`` for every field that differs."""
        if not isinstance(other, Interface):
            raise TypeError(f"can only diff against an Interface, got {type(other).__name__}")
        return {
            f.name: (getattr(self, f.name), getattr(other, f.name))
            for f in fields(self)
            if getattr(self, f.name) != getattr(other, f.name)
        }


_RECORDED_WHEN_CHANGED = ("long_prompts",)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
