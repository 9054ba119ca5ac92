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

from rlid.menus.labels import parse_alphabet
from rlid.menus.memory import MEMORY_PROVIDERS
from rlid.menus.menu import OVERFLOW_POLICIES
from rlid.menus.tree import GROUPINGS

MemoryKind = Literal["none", "last_k", "structured", "glam"]
Template = Literal["auto", "plain", "chat"]
TEMPLATES: tuple[str, ...] = ("auto", "plain", "chat")
LONG_PROMPT_POLICIES: tuple[str, ...] = ("error", "shorten")
LEGAL_LISTS: tuple[str, ...] = ("all", "groups")
LAYOUTS: tuple[str, ...] = ("rlid", "glam")
AFTERSTATE_TEXTS: tuple[str, ...] = ("full", "change")


@dataclass(frozen=True)
class Interface:
    """What the policy sees; both planes render their prompts from it."""

    observation: bool = True
    """Show the current observation (``"Now: ..."``)."""
    objective: bool = True
    """Show the game objective (``"Goal: ..."``)."""
    memory: MemoryKind = "last_k"
    """Memory provider kind (``rlid.menus.memory.MEMORY_PROVIDERS``); ``"none"`` hides the field."""
    memory_size: int = 3
    """Items the memory keeps: transitions for ``last_k``, places/failures for ``structured``."""
    afterstates: bool = True
    """Show each row's predicted afterstate in the decision-plane menu (``"-> ..."``)."""
    afterstate_text: Literal["full", "change"] = "full"
    """How a decision-plane row shows its afterstate: the whole predicted observation
    ("full"), or "change": a row whose afterstate is the current observation itself
    reads ``"-> no change"`` instead of a second copy of it (fewer tokens per decision;
    a change of what the policy reads, so off by default)."""
    labels: str = "A-Z"
    """Candidate label alphabet spec (``rlid.menus.labels.parse_alphabet``): ``"A-Z"``, ``"auto"``, ..."""
    shuffle: bool = True
    """Shuffle menu rows every step (against label-position bias); the permutation is kept."""
    template: Template = "auto"
    """Prompt template: ``"chat"`` when the tokenizer has a chat template (``"auto"``), or forced."""
    show_legal_to_token_plane: bool = True
    """Give the token plane the list of legal actions (without labels)."""
    show_afterstates_to_token_plane: bool = False
    """Also give the token plane each legal action's afterstate (needs the legal list)."""
    overflow: Literal["tree", "error", "truncate"] = "tree"
    """More legal actions than a menu may show (tree_fanout): "tree" reads them as a label
    tree, a short path of menus whose upper rows are groups (every legal action stays
    reachable, docs/large-menus.md); "error" raises; "truncate" keeps the first K rows
    (after shuffling) and records the rest. Menus that fit are the same under all three."""
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

    tree_grouping: Literal["template", "blocks"] = "template"
    """Label trees: the upper levels group actions by their template
    (info["action_templates"], else the first word; "move ... to ... (37 actions)"), or
    cut the legal list into contiguous blocks ("blocks")."""
    tree_fanout: int = 0
    """Label trees: the most rows one menu shows (0: as many as the label alphabet has
    labels); a state with more legal actions gets a tree."""
    legal_list: Literal["all", "groups"] = "all"
    """How the token and scoring planes' prompts list the legal actions: one per line
    ("all"), or the label tree's first menu without labels ("groups": "take ... (12
    actions)" and single actions, the rows the decision plane reads first). With
    long_prompts="shorten" a list too long for the model's context is shown as groups
    (counted in the run's grouped_lists)."""

    layout: Literal["rlid", "glam"] = "rlid"
    """The prompt's text: rlid's fields ("Goal:", "Memory:", "Now:"), or GLAM's prompt
    ("glam", with memory="glam"; Carta et al. 2023, base_agent.py generate_prompt): the
    legal actions after "Possible action of the agent:", the goal, the last
    observations and the actions between them, GLAM's separators. The token and scoring
    planes' prompt then ends at GLAM's "Action N:" (the command follows after a space);
    the decision plane's drops that line and shows its menu. The observation, objective,
    steps_left and legal-list fields do not apply to it."""

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
        if self.tree_grouping not in GROUPINGS:
            raise ValueError(
                f"Interface.tree_grouping must be one of {GROUPINGS}, got {self.tree_grouping!r}"
            )
        if not _is_int(self.tree_fanout) or self.tree_fanout < 0 or self.tree_fanout == 1:
            raise ValueError(
                f"Interface.tree_fanout must be 0 (the label alphabet's size) or an int >= 2, "
                f"got {self.tree_fanout!r}"
            )
        if self.legal_list not in LEGAL_LISTS:
            raise ValueError(
                f"Interface.legal_list must be one of {LEGAL_LISTS}, got {self.legal_list!r}"
            )
        if self.afterstate_text not in AFTERSTATE_TEXTS:
            raise ValueError(
                f"Interface.afterstate_text must be one of {AFTERSTATE_TEXTS}, "
                f"got {self.afterstate_text!r}"
            )
        if self.layout not in LAYOUTS:
            raise ValueError(f"Interface.layout must be one of {LAYOUTS}, got {self.layout!r}")
        if (self.layout == "glam") != (self.memory == "glam"):
            raise ValueError(
                "Interface.layout='glam' and memory='glam' go together (GLAM's prompt is "
                f"written from GLAM's memory); got layout={self.layout!r}, memory={self.memory!r}"
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
        already recorded interfaces (``long_prompts``, ``legal_list``, ``layout``; the tree's fields
        unless ``overflow="tree"``) appear only when changed, so those records (and the
        config fingerprints over them) stay identical and resumable."""
        out = asdict(self)
        quiet = _RECORDED_WHEN_CHANGED + (_TREE_FIELDS if self.overflow != "tree" else ())
        for name in quiet:
            if out[name] == self.__dataclass_fields__[name].default:
                del out[name]
        return out

    def fanout(self, num_labels: int) -> int:
        """The most rows one menu shows with ``num_labels`` valid labels."""
        if self.tree_fanout > num_labels:
            raise ValueError(
                f"Interface.tree_fanout={self.tree_fanout} exceeds the {num_labels} valid "
                f"labels of {self.labels!r} for this tokenizer; use a smaller fan-out or a "
                "larger alphabet (e.g. --labels auto)"
            )
        return self.tree_fanout or num_labels

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


_RECORDED_WHEN_CHANGED = ("long_prompts", "legal_list", "layout", "afterstate_text")
_TREE_FIELDS = ("tree_grouping", "tree_fanout")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
