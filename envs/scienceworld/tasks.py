"""ScienceWorld's 30 tasks and its simplification presets (shared by the env and its specs)."""

from __future__ import annotations

# ScienceWorld's task ids 1-1 .. 10-2, in that order (scienceworld.constants.ID2TASK)
TASKS = (
    "boil",
    "melt",
    "freeze",
    "change-the-state-of-matter-of",
    "use-thermometer",
    "measure-melting-point-known-substance",
    "measure-melting-point-unknown-substance",
    "power-component",
    "power-component-renewable-vs-nonrenewable-energy",
    "test-conductivity",
    "test-conductivity-of-unknown-substances",
    "find-living-thing",
    "find-non-living-thing",
    "find-plant",
    "find-animal",
    "grow-plant",
    "grow-fruit",
    "chemistry-mix",
    "chemistry-mix-paint-secondary-color",
    "chemistry-mix-paint-tertiary-color",
    "lifespan-longest-lived",
    "lifespan-shortest-lived",
    "lifespan-longest-lived-then-shortest-lived",
    "identify-life-stages-1",
    "identify-life-stages-2",
    "inclined-plane-determine-angle",
    "inclined-plane-friction-named-surfaces",
    "inclined-plane-friction-unnamed-surfaces",
    "mendelian-genetics-known-plant",
    "mendelian-genetics-unknown-plant",
)


SIMPLIFICATIONS = (
    "teleportAction",
    "selfWateringFlowerPots",
    "openContainers",
    "openDoors",
    "noElectricalAction",
)
"""The simulator's simplifications. The preset ``easy`` is four of them in ScienceWorld
1.2.3 (and since 2022): ``teleportAction``, ``openDoors``, ``selfWateringFlowerPots`` and
``noElectricalAction``, the last left out in the electrical tasks (names containing
``power-component`` or ``conductivity``, 3-1..3-4); ``openContainers`` is not in it,
although the paper's Appendix B.5 says so (``AgentInterface.scala``; the package's README
says the same)."""

AMBIGUITY = ("first", "ask")
"""How the env meets the simulator's "which one?" question (``ScienceWorldEnv``)."""


def simplification_string(value: str, task: str) -> str:
    """The simulator's simplification string for ``value`` (``none``, ``easy`` or a
    comma-separated list of :data:`SIMPLIFICATIONS`); a clear error otherwise."""
    value = value.strip()
    if value in ("none", ""):
        return ""
    if value == "easy":
        return "easy"
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in SIMPLIFICATIONS]
    if unknown:
        raise ValueError(
            f"scienceworld: option simplifications={value!r} is not valid: expected 'none', "
            f"'easy' or a comma-separated list of {', '.join(SIMPLIFICATIONS)}"
        )
    if "noElectricalAction" in names and ("power-component" in task or "conductivity" in task):
        raise ValueError(
            f"scienceworld: option simplifications={value!r} is not valid for task {task!r}: "
            "it needs the electrical actions that noElectricalAction removes"
        )
    return ",".join(names)
