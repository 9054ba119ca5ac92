"""What ScienceWorld's own parser reads in a command, asked of the running simulator.

The simulator names each object in its list of valid actions by one referent ("open
door"), while its parser accepts many ("open door to kitchen", "open kitchen door"),
and the benchmark's gold paths use those others. Two commands are the same action when
the parser reads them as the same action on the same objects: a *reading* is the
action's name and its (slot, object id) assignments. A command that names several
objects alike ("move orange seed to flower pot 1" with three identical seeds) has
several readings; the simulator then asks which one is meant.

These calls reach into the simulator's classes (``AgentInterface``, ``InputParser``) of
the pinned ScienceWorld 1.2.3 jar; they never change its state.
"""

from __future__ import annotations

from typing import Any

Reading = tuple[str, frozenset[tuple[str, int]]]
"""(action name, frozenset of (slot, object id)), e.g. ``("open door", {("door", 17568), ...})``."""


def _scala_map(mapping: Any) -> frozenset[tuple[str, int]]:
    """A Scala ``Map[String, EnvObject]`` as (slot, object id) pairs."""
    out = set()
    iterator = mapping.iterator()
    while iterator.hasNext():
        pair = iterator.next()
        out.add((str(pair._1()), int(pair._2().uuid())))
    return frozenset(out)


def _parse(simulator: Any, command: str) -> tuple[Any, Any]:
    """The parser's raw result for ``command`` in the simulator's current state."""
    agent_interface = simulator.agentInterface().get()
    agent = agent_interface.agent()
    parser = agent_interface.inputParser()
    visible = agent_interface.getAgentVisibleObjects(True)._2()
    result = parser.parse(
        command,
        visible,
        agent_interface.universe(),
        agent,
        agent_interface.objMonitor(),
        agent_interface.task().goalSequence(),
        agent.getContainer().get(),
    )
    return parser, result


def readings(simulator: Any, command: str) -> list[Reading]:
    """Every way the parser reads ``command`` here: [] when it reads nothing, one reading
    for a plain command, several (in the simulator's order) for an ambiguous one."""
    parser, result = _parse(simulator, command)
    if parser.isInAmbiguousState():
        matches = parser.lastAmbiguousMatches().get()
        out = []
        for match in matches:
            request = match.actionRequestDef()
            name = str(request.get().name()) if request.isDefined() else ""
            out.append((name, _scala_map(match.varLUT())))
        parser.clearAmbiguousState()
        return out
    action = result._4()
    if not result._1() or not action.isDefined():
        return []
    action = action.get()
    return [(str(action.name()), _scala_map(action.assignments()))]


def object_ids(reading: Reading) -> list[int]:
    """The object ids a reading acts on, the agent excluded, sorted."""
    return sorted(uuid for slot, uuid in reading[1] if slot != "agent")


def in_ambiguous_state(simulator: Any) -> bool:
    """Whether the simulator waits for the number of the object an ambiguous command meant."""
    return bool(simulator.agentInterface().get().inputParser().isInAmbiguousState())
