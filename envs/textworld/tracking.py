"""Starting a TextWorld game and keeping its logic state in step with the live game.

``textworld.start`` wraps the Jericho-run story in TextWorld's ``StateTracking``
layer, which reads the Inform 7 action events the game prints (``[taking the key -
succeeded]``), maps each to a logic action and applies it to the logic state. This
module starts games that way, fixes the one event name found to be mismatched in
TextWorld 1.7 (see :class:`EventMatcher`), and saves/restores the whole stack.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import textworld
from textworld.generator.inform7 import Inform7Game

from rlid.envs.textworld import cache as tw_cache

# Z-machine RNG seed (Jericho's default, -1, follows the clock): fixed for determinism.
JERICHO_SEED = 20_240_101

# Inform 7 action names printed by the compiled game that differ from the knowledge
# base's event text for the same rule. The cooking games define drinking as
# "drinking carried thing", so "[drinking carried thing the milk - succeeded]" never
# matched "drinking the {f}": the game drank the milk, the logic state kept it.
EVENT_ALIASES = {"drink": "drinking carried thing the {f}"}


def event_matcher(game: Any) -> Any:
    """An ``Inform7Game`` for ``game`` whose ``detect_action`` also knows ``EVENT_ALIASES``."""

    class EventMatcher(Inform7Game):
        def detect_action(self, i7_event: str, actions: Any) -> Any:
            action = super().detect_action(i7_event, actions)
            if action is not None:
                return action
            for candidate in actions:
                alias = EVENT_ALIASES.get(candidate.name)
                if alias and alias.format(**self._get_name_mapping(candidate)).lower() == (
                    i7_event.lower()
                ):
                    return candidate
            return None

    return EventMatcher(game)


@dataclass
class StartedGame:
    """A running TextWorld env, its tracking layer, game and command generator."""

    tw_env: Any
    tracker: Any  # TextWorld's StateTracking layer: owner of the live logic state
    game: Any  # textworld.Game
    inform7: Any  # Inform7Game: logic actions -> command texts, events -> actions


def start_game(path: Path) -> StartedGame:
    """``textworld.start`` with state tracking on and a fixed Z-machine seed."""

    # last_action switches state tracking on without the per-step cost of the
    # admissible-command list (computed by the env) or of winning-policy search.
    infos = textworld.EnvInfos(last_action=True, score=True, won=True, lost=True)
    with tw_cache.quiet_jericho():
        tw_env = textworld.start(str(path), request_infos=infos)
    tw_env.seed(JERICHO_SEED)
    tracker = tracker_of(tw_env)
    tracker._inform7 = event_matcher(tracker._game)
    return StartedGame(tw_env, tracker, tracker._game, tracker._inform7)


def layers_of(tw_env: Any) -> list[Any]:
    """The wrapper chain of a TextWorld env, outermost first, Jericho env last."""
    layers, layer = [], tw_env
    while layer is not None:
        layers.append(layer)
        layer = vars(layer).get("_wrapped_env")
    return layers


def tracker_of(tw_env: Any) -> Any:
    """TextWorld's ``StateTracking`` layer (owner of the logic state)."""
    for layer in layers_of(tw_env):
        if "_game_progression" in vars(layer):
            return layer
    raise RuntimeError("TextWorld env has no state tracking layer")  # pragma: no cover


@dataclass
class TrackedState:
    """Saved Z-machine memory, wrapper attributes and logic state of a running game."""

    jericho_state: Any
    layers: list[tuple[Any, dict[str, Any]]]
    progression: Any


def save_tracked(started: StartedGame) -> TrackedState:
    # Wrapper attributes are replaced, not mutated, on each step (new GameState
    # objects), so shallow copies suffice; the logic state is mutated and is copied.
    return TrackedState(
        jericho_state=started.tw_env.unwrapped._jericho.get_state(),
        layers=[(layer, dict(vars(layer))) for layer in layers_of(started.tw_env)],
        progression=copy_progression(started.tracker._game_progression),
    )


def restore_tracked(started: StartedGame, saved: TrackedState) -> None:
    started.tw_env.unwrapped._jericho.set_state(saved.jericho_state)
    for layer, attributes in saved.layers:
        vars(layer).clear()
        vars(layer).update(attributes)
    started.tracker._game_progression = copy_progression(saved.progression)


def copy_progression(progression: Any) -> Any:
    """Exact copy of a ``GameProgression``.

    ``GameProgression.copy()`` recomputes the *initial* state's applicable actions
    before overwriting them; a shallow copy with a copied ``State`` is exact and
    much cheaper.
    """
    if progression is None:
        return None
    out = copy.copy(progression)
    out.state = progression.state.copy()
    out.quest_progressions = [qp.copy() for qp in progression.quest_progressions]
    return out
