"""Afterstates of TextWorld games, predicted from the game's own logic engine.

TextWorld keeps a symbolic state next to the compiled game: a set of facts
(``at(P, r_1)``, ``closed(d_0)``, ``in(k_0, I)``...) and rules whose instances,
the *logic actions*, have preconditions and postconditions. The legal commands of
a state are the Inform 7 command texts of its applicable logic actions
(``Inform7Game.gen_commands_from_actions``).

For each legal command this module applies the command's logic action(s) to the
current fact set and describes the facts added/removed in one short clause::

    open wooden door  -> "the wooden door will be open"
    go east           -> "you will be in the kitchen; this scores a point"
    examine note      -> "nothing changes"

The live game is never touched. Applying an applicable action ``a`` to facts ``F``
gives ``(F | a.added) - a.removed`` (``textworld.logic.State.apply``), so the
delta is ``added = a.added - F`` and ``removed = a.removed`` (``a.removed`` is part
of the preconditions, hence of ``F``): two set differences instead of a
``State.copy()``. Quest outcomes (points, win, loss) are predicted by checking the
quests' win/fail conditions on the predicted facts, as
``textworld.generator.game.QuestProgression`` does (its policy-tree bookkeeping of
"unfinishable" quests is not reproduced).

A command shared by several logic actions (``take knife`` into either of two
interchangeable inventory slots) gets one clause when the actions look the same
to the player, and ``"either ..., or ... (N game actions share this command)"``
when they do not. One rule family is corrected where the compiled game is stricter
than its logic: "prepare meal" (:class:`RecipeCheck`). ``rlid.envs.textworld.verify`` checks
all of this against the real game.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from textworld.logic import Proposition, Variable

from rlid.envs.outcome import (
    Outcome,  # the predicted points / win / loss, read back by read_outcome
)

# Facts that encode static map structure or recipe bookkeeping: never described.
HIDDEN_PREDICATES = frozenset(
    {"free", "link", "north_of", "south_of", "east_of", "west_of", "match", "cooking_location"}
    | {"base", "out"}
    | {f"ingredient_{i}" for i in range(1, 6)}
)
# Recipe bookkeeping, and the interchangeable inventory slots of cooking games with
# limited capacity (``drop``): never described either.
HIDDEN_TYPES = frozenset({"RECIPE", "ingredient", "slot"})
COOKING_TYPES = ("fried", "roasted", "grilled")  # otherwise "raw"
CUTTING_TYPES = ("sliced", "chopped", "diced")  # otherwise "uncut"
RECIPE_NOT_READY = "the ingredients are not yet prepared as the recipe says"
ADJECTIVE_WORDS = {"needs_cooking": "in need of cooking", "used": "used up"}
NOTHING_CHANGES = "nothing changes"


@dataclass(frozen=True)
class FactDelta:
    """Facts a logic action adds to / removes from the current state."""

    added: frozenset
    removed: frozenset
    refusal: str = ""  # why the game will refuse an applicable logic action, if it will

    @property
    def empty(self) -> bool:
        return not self.added and not self.removed


def fact_delta(facts: frozenset | set, action: Any) -> FactDelta:
    """The exact change ``State.apply(action)`` makes to ``facts`` (action applicable)."""
    return FactDelta(frozenset(action.added - facts), frozenset(action.removed))


def group_commands(commands: Sequence[str], actions: Sequence[Any]) -> dict[str, list[Any]]:
    """Map each command text to its logic actions (most preconditions first).

    Several logic actions can share one command text (``cook carrot with stove`` is
    one of three rules). The game resolves the command to one of them; TextWorld's
    state tracker prefers actions with more preconditions, so they come first.
    """
    groups: dict[str, list[Any]] = {}
    for command, action in zip(commands, actions):
        groups.setdefault(command, []).append(action)
    for group in groups.values():
        if len(group) > 1:
            group.sort(key=lambda a: len(a.preconditions), reverse=True)
    return groups


class QuestTracker:
    """Which quests are completed/failed, and what a predicted delta would do to them."""

    def __init__(self, quests: Sequence[Any]) -> None:
        self.quests = list(quests)
        self.completions = [0] * len(self.quests)
        self.failed = [False] * len(self.quests)
        self._win = [[tuple(e.condition.preconditions) for e in q.win_events] for q in self.quests]
        self._fail = [
            [tuple(e.condition.preconditions) for e in q.fail_events] for q in self.quests
        ]
        self._mandatory = [i for i, q in enumerate(self.quests) if not q.optional]
        self._winnable = [i for i in self._mandatory if self._win[i]]
        # An untriggered event can only become true through a fact the step adds, so
        # only quests with an added condition fact are re-checked (repeatable quests,
        # which can complete again without any change, always are).
        self._always = [i for i, q in enumerate(self.quests) if q.repeatable]
        self._by_fact: dict[Any, list[int]] = {}
        for i in range(len(self.quests)):
            for cond in self._win[i] + self._fail[i]:
                for fact in cond:
                    self._by_fact.setdefault(fact, []).append(i)

    def _done(self, i: int) -> bool:
        return self.failed[i] or (self.completions[i] > 0 and not self.quests[i].repeatable)

    def _touched(self, added: Iterable[Any] | None) -> Iterable[int]:
        if added is None:
            return range(len(self.quests))
        touched = set(self._always)
        for fact in added:
            touched.update(self._by_fact.get(fact, ()))
        return sorted(touched)

    def observe(self, facts: frozenset | set, previous: frozenset | set | None = None) -> None:
        """Update the quest states after the live game went from ``previous`` to ``facts``."""
        added = None if previous is None else facts - previous
        for i in self._touched(added):
            if self._done(i):
                continue
            if any(all(p in facts for p in cond) for cond in self._fail[i]):
                self.failed[i] = True
            elif any(all(p in facts for p in cond) for cond in self._win[i]):
                self.completions[i] += 1

    def predict(self, facts: frozenset | set, delta: FactDelta) -> Outcome:
        """Outcome of moving from ``facts`` by ``delta`` (nothing is mutated)."""
        added, removed = delta.added, delta.removed

        def holds(p: Any) -> bool:
            return p in added or (p in facts and p not in removed)

        points, newly_completed, lost = 0, set(), False
        for i in self._touched(added):
            if self._done(i):
                continue
            if any(all(holds(p) for p in cond) for cond in self._fail[i]):
                lost = lost or not self.quests[i].optional
            elif any(all(holds(p) for p in cond) for cond in self._win[i]):
                newly_completed.add(i)
                points += self.quests[i].reward
        lost = lost or any(self.failed[i] for i in self._mandatory)
        won = (
            bool(newly_completed)
            and not lost
            and all(self.completions[i] > 0 or i in newly_completed for i in self._winnable)
        )
        return Outcome(points=points, won=won, lost=lost)


class RecipeCheck:
    """What the cooking games' "prepare meal" really needs, beyond its logic rules.

    ``make/recipe/N`` only asks for the first N ingredients to be carried, so with a
    two-ingredient recipe ``make/recipe/1`` is applicable too. The compiled game
    prepares the whole recipe or refuses: every ingredient must be carried and its
    type of cooking (raw, fried, roasted, grilled) and of cutting (uncut, sliced,
    chopped, diced) must match the recipe. The recipe is static, so it is read once
    from the initial facts.
    """

    def __init__(self, initial_facts: Iterable[Any]) -> None:

        facts = list(initial_facts)
        unary = {(f.name, f.arguments[0].name) for f in facts if len(f.arguments) == 1}
        inventory = Variable("I", "I")
        self.requirements: list[tuple[Any, tuple[Any, ...], str, tuple[Any, ...], str]] = []
        for fact in facts:
            if fact.name != "base":
                continue
            food, ingredient = fact.arguments
            self.requirements.append(
                (
                    Proposition("in", [food, inventory]),
                    tuple(Proposition(t, [food]) for t in COOKING_TYPES),
                    next((t for t in COOKING_TYPES if (t, ingredient.name) in unary), "raw"),
                    tuple(Proposition(t, [food]) for t in CUTTING_TYPES),
                    next((t for t in CUTTING_TYPES if (t, ingredient.name) in unary), "uncut"),
                )
            )
        self.rule = f"make/recipe/{len(self.requirements)}"

    def ready(self, facts: frozenset | set) -> bool:
        for carried, cook_props, cook, cut_props, cut in self.requirements:
            if carried not in facts:
                return False
            if next((p.name for p in cook_props if p in facts), "raw") != cook:
                return False
            if next((p.name for p in cut_props if p in facts), "uncut") != cut:
                return False
        return True


class FactDescriber:
    """Renders a :class:`FactDelta` as one short English clause, using entity names."""

    def __init__(self, entity_names: dict[str, str]) -> None:
        self.names = entity_names
        self._cache: dict[FactDelta, str] = {}

    def name(self, var: Any) -> str:
        if var.type == "P":
            return "you"
        return "the " + (self.names.get(var.name) or var.name)

    def describe(self, delta: FactDelta) -> str:
        text = self._cache.get(delta)
        if text is None:
            text = self._describe(delta)
            self._cache[delta] = text
        return text

    def _describe(self, delta: FactDelta) -> str:
        if delta.refusal:
            return f"{NOTHING_CHANGES} ({delta.refusal})"
        if delta.empty:
            return NOTHING_CHANGES
        added = _visible(delta.added)
        removed = _visible(delta.removed)
        was_locked = {f.arguments[0].name for f in removed if f.name == "locked"}
        # One entry per clause: a relation sentence, or a subject whose adjectives merge
        # ("the carrot will be sliced and fried").
        entries: list[str | Any] = []
        adjectives: dict[str, list[str]] = {}
        for fact in added:
            subject = fact.arguments[0]
            if len(fact.arguments) > 1:
                entries.append(self._relation(fact, negated=False))
                continue
            word = ADJECTIVE_WORDS.get(fact.name, fact.name.replace("_", " "))
            if fact.name == "closed" and subject.name in was_locked:
                word = "unlocked"
            if subject.name not in adjectives:
                adjectives[subject.name] = []
                entries.append(subject)
            adjectives[subject.name].append(word)
        # A removed fact about a subject that also gains a fact is implied by the gain
        # (the key leaves the trunk because you carry it); others are said explicitly.
        gaining = {f.arguments[0].name for f in added}
        entries += [self._removed(f) for f in removed if f.arguments[0].name not in gaining]
        clauses = [
            e if isinstance(e, str) else f"{self.name(e)} will be {_join_words(adjectives[e.name])}"
            for e in entries
        ]
        clauses.sort(key=lambda c: not c.startswith("you "))  # the player's own change first
        return "; ".join(clauses) if clauses else "nothing visible changes"

    def _relation(self, fact: Any, *, negated: bool) -> str:
        subject, other = fact.arguments[0], fact.arguments[1]
        will = "will no longer" if negated else "will"
        if fact.name == "at" and subject.type == "P":
            return f"you {will} be in {self.name(other)}"
        if fact.name == "in" and other.type == "I":
            return f"you {will} carry {self.name(subject)}"
        if fact.name == "at" and other.type == "r":
            return f"{self.name(subject)} {will} be on the floor of {self.name(other)}"
        if fact.name in ("in", "on"):
            return f"{self.name(subject)} {will} be {fact.name} {self.name(other)}"
        names = " and ".join(self.name(v) for v in fact.arguments[1:])
        return f"{self.name(subject)} {will} be {fact.name.replace('_', ' ')} {names}"

    def _removed(self, fact: Any) -> str:
        if len(fact.arguments) == 1:
            word = ADJECTIVE_WORDS.get(fact.name, fact.name.replace("_", " "))
            return f"{self.name(fact.arguments[0])} will no longer be {word}"
        return self._relation(fact, negated=True)


def describe_outcome(outcome: Outcome) -> str:
    """``"this scores a point"``-style suffix, or ``""`` when nothing is predicted."""
    parts = []
    if outcome.points:
        parts.append(
            "this scores a point" if outcome.points == 1 else f"this scores {outcome.points} points"
        )
    if outcome.won:
        parts.append("this wins the game")
    if outcome.lost:
        parts.append("this loses the game")
    return "; ".join(parts)


class AfterstateModel:
    """Afterstate predictor for one loaded TextWorld game.

    Args:
        game: the ``textworld.Game`` (its logic, entity names and quests).

    Call :meth:`reset` at the start of an episode and :meth:`observe` after every
    live step (both with the live logic state's facts), then :meth:`afterstates`.
    """

    def __init__(self, game: Any) -> None:
        names = {var_id: info.name for var_id, info in game.infos.items() if info.name}
        self.describer = FactDescriber(names)
        self._recipe = RecipeCheck(game.world.state.facts)
        self.quests = QuestTracker(game.quests)
        self._quest_source = game.quests

    def reset(self, facts: frozenset | set) -> None:
        self.quests = QuestTracker(self._quest_source)
        self.quests.observe(facts)

    def observe(self, facts: frozenset | set, previous: frozenset | set) -> None:
        self.quests.observe(facts, previous)

    def predict(self, facts: frozenset | set, actions: Iterable[Any]) -> list[FactDelta]:
        """Distinct fact deltas of a command's logic actions (preferred action first)."""
        actions = list(actions)
        if actions and actions[0].name.startswith("make/recipe/"):
            actions = [a for a in actions if a.name == self._recipe.rule]
            if not actions or not self._recipe.ready(facts):
                return [FactDelta(frozenset(), frozenset(), RECIPE_NOT_READY)]
        deltas: list[FactDelta] = []
        for action in actions:
            delta = fact_delta(facts, action)
            if delta not in deltas:
                deltas.append(delta)
        return deltas

    def describe_command(self, facts: frozenset | set, actions: Sequence[Any]) -> str:
        """One clause for one legal command (all its logic actions)."""
        texts = []
        for delta in self.predict(facts, actions):
            text = self.describer.describe(delta)
            suffix = describe_outcome(self.quests.predict(facts, delta))
            texts.append(f"{text}; {suffix}" if suffix else text)
        if len(texts) == 1:
            return texts[0]
        return (
            "either " + ", or ".join(texts) + f" ({len(actions)} game actions share this command)"
        )

    def afterstates(
        self, facts: frozenset | set, groups: dict[str, list[Any]], legal: Sequence[str]
    ) -> list[str]:
        """One clause per legal command, aligned with ``legal``."""
        return [self.describe_command(facts, groups[command]) for command in legal]


def _visible(facts: Iterable[Any]) -> list[Any]:
    out = [
        f
        for f in facts
        if f.name not in HIDDEN_PREDICATES and not any(v.type in HIDDEN_TYPES for v in f.arguments)
    ]
    out.sort(key=lambda f: (f.name, f.names))
    return out


def _join_words(words: list[str]) -> str:
    if len(words) == 1:
        return words[0]
    return ", ".join(words[:-1]) + " and " + words[-1]
