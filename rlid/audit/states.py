"""Built-in text-game states for ``rlid audit``, in the style of the built-in games.

Each state has a goal, an observation, its legal actions and an advantage A(a) per
action (a plausible Q(s, a) − V(s) for the goal: the useful action positive, the
detours negative). The advantages are inputs of the audit, not learned values.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AuditState:
    """One decision point: what the prompts show and the advantage of each action."""

    objective: str
    """The ``Goal:`` line."""
    observation: str
    """The ``Now:`` line."""
    actions: tuple[str, ...]
    """Legal actions (canonical wordings), in menu order."""
    advantages: tuple[float, ...]
    """A(a) per action, aligned with ``actions``."""

    def __post_init__(self) -> None:
        if len(self.actions) != len(self.advantages):
            raise ValueError("an AuditState needs one advantage per action")

    @property
    def info(self) -> dict[str, object]:
        """The env-style info dict the prompt renderers read."""
        return {"objective": self.objective, "legal_actions": list(self.actions)}


BUILTIN_STATES: dict[str, AuditState] = {
    "kitchen": AuditState(
        objective="unlock the oak door and go north",
        observation=(
            "You are in the kitchen. On the table you can see a brass key. "
            "You see a closed wooden chest. Exits: east, north."
        ),
        actions=("go east", "take brass key", "open chest", "examine table"),
        advantages=(-0.5, 1.0, 0.1, -0.3),
    ),
    "hallway": AuditState(
        objective="find the silver key and put it in the drawer",
        observation="You are in the hallway. You see a closed drawer. Exits: west, south.",
        actions=("go west", "go south", "open drawer", "look", "inventory"),
        advantages=(0.6, -0.4, 0.2, -0.2, -0.2),
    ),
    "cellar": AuditState(
        objective="unlock the iron door and go down",
        observation=(
            "You are in the cellar. You see a locked iron door. "
            "You are carrying an iron key and an old lamp. Exits: up."
        ),
        actions=("unlock iron door with iron key", "go up", "drop old lamp", "examine iron door"),
        advantages=(1.2, -0.8, -0.1, 0.0),
    ),
}
"""Name -> state; ``kitchen`` is the default."""

DEFAULT_STATE = "kitchen"
