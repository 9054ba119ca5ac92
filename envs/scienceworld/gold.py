"""The benchmark's gold path as a walkthrough of legal actions, cached on disk.

ScienceWorld generates a gold action sequence when a variation is loaded with
``generateGoldPath=True``. Its commands are written with other referents than the
legal actions ("open door to kitchen" where the legal action reads "open door"), some
are no legal action at all ("examine metal pot", "pour metal pot into metal pot": a
no-op), and the numbers that answer the simulator's ambiguity questions ("0") are
separate entries. :func:`legal_gold_path` replays the gold path on a scratch simulator
and writes each command as the legal action the parser reads the same way
(:mod:`rlid.envs.scienceworld.parser`), drops the commands no legal action matches and the
numbers, and stops where the game ends. ``won`` records whether the result solves the
variation; the raw gold path is kept beside it.

Computing one takes the gold path's generation (0.1-8 s) and a legal-action listing per
command (about 0.1 s each), so results are cached under ``<rlid cache>/scienceworld-1.2.3/``
(:func:`rlid.envs.paths.cache_root`), one small JSON file per (task, variation, simplifications).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rlid.envs import json_cache
from rlid.envs.paths import cache_root
from rlid.envs.scienceworld import parser
from rlid.envs.scienceworld.jvm_state import PerSimulator

CACHE_DIR = "scienceworld-1.2.3"
CACHE_FORMAT = 8


@dataclass(frozen=True)
class GoldPath:
    """A variation's gold path written in legal actions."""

    actions: tuple[str, ...]
    """Legal actions, in order, up to the end of the game."""
    won: bool
    """Whether playing ``actions`` solves the variation (score 100)."""
    score: int
    """The score (0-100) ``actions`` reach."""
    gold: tuple[str, ...]
    """The simulator's gold path as generated."""
    dropped: tuple[str, ...]
    """Gold commands left out: no legal action reads the same (ambiguity numbers excluded)."""
    answered: tuple[int, ...] = ()
    """Indices into ``actions`` of the actions the simulator asked "which one?" after
    (answered ``0``, the first of the alike objects)."""


def cache_path(task: str, variation: int, simplifications: str) -> Path:
    name = f"{task}__{variation}__{simplifications or 'none'}.json".replace(",", "+")
    return cache_root() / CACHE_DIR / "walkthroughs" / name


def _read_cache(path: Path) -> GoldPath | None:
    data = json_cache.read(path)
    if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT:
        return None  # absent, unreadable or of an older format: recompute
    try:
        return GoldPath(
            actions=tuple(data["actions"]),
            won=bool(data["won"]),
            score=int(data["score"]),
            gold=tuple(data["gold"]),
            dropped=tuple(data["dropped"]),
            answered=tuple(int(i) for i in data["answered"]),
        )
    except (KeyError, TypeError, ValueError):
        return None


def cached_gold_path(
    simulator: Any,
    state: PerSimulator,
    task: str,
    variation: int,
    simplifications: str,
    legal_entries: Callable[[Any], list[dict[str, Any]]],
) -> GoldPath:
    """The gold path of a variation from the disk cache, computed on ``simulator`` when
    absent (which leaves ``simulator`` in some later state of that variation)."""
    path = cache_path(task, variation, simplifications)
    found = _read_cache(path)
    if found is None:
        found = legal_gold_path(simulator, state, task, variation, simplifications, legal_entries)
        json_cache.write(path, {"format": CACHE_FORMAT, **asdict(found)})
    return found


def _match(simulator: Any, command: str, choice: int, entries: list[dict[str, Any]]) -> str | None:
    """The legal action the parser reads as ``command`` (its ``choice``-th reading when
    ambiguous), or None."""
    texts = {entry["action"] for entry in entries}
    if command in texts:
        return command
    found = parser.readings(simulator, command)
    if not found:
        return None
    target = found[min(choice, len(found) - 1)]
    wanted = set(parser.object_ids(target))
    # an entry names the objects it was made from; the parser may add implicit ones
    # ("pick up X" also assigns the inventory)
    candidates = [e for e in entries if {int(i) for i in e["obj_ids"]} <= wanted]
    verb = command.split(" ", 1)[0]
    # parsing is the slow part: try the entries with the command's verb and most objects first
    candidates.sort(key=lambda e: (not str(e["action"]).startswith(verb + " "), -len(e["obj_ids"])))
    for entry in candidates:
        # the entry's text may itself be ambiguous (identical objects): any reading will do,
        # since stepping it acts on the first of objects that are alike
        if target in parser.readings(simulator, entry["action"]):
            return str(entry["action"])
    return None


def legal_gold_path(
    simulator: Any,
    state: PerSimulator,
    task: str,
    variation: int,
    simplifications: str,
    legal_entries: Callable[[Any], list[dict[str, Any]]],
) -> GoldPath:
    """Replay the gold path on ``simulator`` (a scratch simulator) in legal actions.

    Args:
        state: the simulators' own JVM-wide state (:mod:`rlid.envs.scienceworld.jvm_state`):
            loaded and listed where the env's own simulator is, the scratch simulator
            draws and names objects as the env's does.
        legal_entries: the env's reading of the simulator's valid actions (dicts with
            ``action`` and ``obj_ids``), the legal actions being their ``action`` texts.
    """
    with state.of(simulator, fresh=True):
        simulator.load(task, variation, simplifications, True)
        gold = tuple(str(a) for a in simulator.getGoldActionSequence())
    with state.of(simulator, fresh=True):
        simulator.load(task, variation, simplifications, False)
    actions: list[str] = []
    dropped: list[str] = []
    answered: list[int] = []
    # Listing the valid actions draws from the game's random generator (to name alike
    # objects), so they are listed exactly where the env lists them (after the load, after
    # each step that does not end the game): the game then draws and reads as the env's. The
    # simulator's score and completion are those of its last step (a load keeps the
    # previous game's), so they are read after steps only.
    with state.of(simulator):
        entries = legal_entries(simulator)
    completed, score = False, 0
    for i, command in enumerate(gold):
        if completed:
            break
        if command.strip().isdigit():
            continue  # the answer to an ambiguity question, read with the command before
        following = gold[i + 1].strip() if i + 1 < len(gold) else ""
        choice = int(following) if following.isdigit() else 0
        with state.probe(simulator):
            legal = _match(simulator, command, choice, entries)
        if legal is None:
            dropped.append(command)
            continue
        with state.of(simulator):  # as the env plays it (ScienceWorldEnv._game_step)
            simulator.step(legal)
        with state.probe(simulator):
            ambiguous = parser.in_ambiguous_state(simulator)
        if ambiguous:  # alike objects: the first one
            with state.of(simulator):
                simulator.step("0")
            answered.append(len(actions))
        completed = bool(simulator.getCompleted())
        score = int(round(100 * float(simulator.getScore())))
        actions.append(legal)
        if not completed:
            with state.of(simulator):
                entries = legal_entries(simulator)
    won = completed and score >= 100
    return GoldPath(tuple(actions), won, max(score, 0), gold, tuple(dropped), tuple(answered))
