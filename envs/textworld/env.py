"""TextWorld games as :class:`rlid.envs.base.TextGameEnv` environments.

The env wraps ``textworld.start(path, request_infos=EnvInfos(...))`` directly (not
``textworld.gym``): one loaded game is reused across resets and up to
``MAX_LOADED_GAMES`` games stay loaded, so switching among a small pool is cheap.
The compiled story runs in Jericho; TextWorld's state tracker keeps the game's
logic state (facts, applicable logic actions) in step with it.

* legal actions: the admissible commands (Inform 7 texts of the applicable logic
  actions), sorted and distinct, as TextWorld itself lists them;
* reward: score delta; ``won``/``lost`` from the game's own ending;
* afterstates: predicted from the logic state (:mod:`rlid.envs.textworld.afterstate`), never by
  stepping the live game;
* observations: the game text without the banner, ``>`` prompt, status line and
  excess whitespace.

    >>> from rlid import envs
    >>> env = envs.make("tw-treasure_hunter", level=1, game_seed=0)  # doctest: +SKIP
    >>> obs, info = env.reset(seed=0)  # doctest: +SKIP
    >>> info["legal_actions"][:2], info["afterstates"][:2]  # doctest: +SKIP
    (['examine ...', 'go east'], ['nothing changes', 'you will be in the ...'])
"""

from __future__ import annotations

import copy
import math
import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlid.envs.base import TextGameEnv, split_game_seed
from rlid.envs.registry import SPLIT_OFFSETS
from rlid.envs.textworld import cache as tw_cache
from rlid.envs.textworld.afterstate import AfterstateModel, group_commands
from rlid.envs.textworld.tracking import (
    StartedGame,
    TrackedState,
    restore_tracked,
    save_tracked,
    start_game,
)

MAX_LOADED_GAMES = 4
_BANNER_CHARS = frozenset(" _|\\/$<>()")
_RESTART_PROMPT = "Would you like to RESTART, RESTORE a saved game, QUIT or UNDO the last command?"


def clean_observation(text: str) -> str:
    """Strip the banner, ``>`` prompt, status line and excess whitespace from game text."""
    text = text.replace("\r", "").replace(_RESTART_PROMPT, "").rstrip()
    # The prompt and the status line ("-= Kitchen =-3/4") come last, after "\n>".
    text = re.sub(r"(^|\n)>[^\n]*$", "", text)
    lines = [line.strip() for line in text.split("\n")]
    lines = [line for line in lines if not (line and set(line) <= _BANNER_CHARS)]
    text = "\n".join(re.sub(r"[ \t]{2,}", " ", line) for line in lines)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


@dataclass(frozen=True)
class GeneratedGames:
    """Games generated on demand by TextWorld and cached on disk (:mod:`rlid.envs.textworld.cache`)."""

    challenge: str
    settings: Mapping[str, Any]

    def path(self, seed: int) -> Path:
        return tw_cache.ensure_game(self.challenge, self.settings, seed)

    def discard(self, seed: int) -> None:
        tw_cache.discard_entry(
            tw_cache.entry_dir(tw_cache.game_key(self.challenge, self.settings, seed))
        )


@dataclass(frozen=True)
class GameFile:
    """One user-supplied compiled game (``.z8`` with TextWorld's ``.json`` beside it)."""

    path: Path

    def __post_init__(self) -> None:
        check_game_file(self.path)


def check_game_file(path: Path) -> Path:
    """Validate a user game file; raise ``FileNotFoundError``/``ValueError`` naming it."""
    path = Path(path)
    if path.suffix == ".ulx":
        raise ValueError(
            f"game file {path}: Glulx (.ulx) games cannot be played with TextWorld 1.7; "
            "compile the game to .z8 (tw-make writes .z8 by default)"
        )
    if not re.fullmatch(r"\.z[1-8]", path.suffix):
        raise ValueError(
            f"game file {path}: expected a Z-machine story (.z8) compiled by TextWorld"
        )
    if not path.is_file():
        raise FileNotFoundError(f"game file {path} does not exist")
    problem = tw_cache.check_story_file(path)
    if problem:
        raise ValueError(f"game file {path} is corrupt: {problem}")
    logic = path.with_suffix(".json")
    if not logic.is_file():
        raise FileNotFoundError(
            f"game file {path} has no {logic.name} beside it: TextWorld writes it when it "
            "compiles the game; it holds the logic used for legal actions and afterstates"
        )
    problem = tw_cache.check_logic_file(logic)
    if problem:
        raise ValueError(f"game logic file {logic} is corrupt: {problem}")
    return path


@dataclass
class _LoadedGame:
    """A started TextWorld game and what is derived from it once."""

    path: Path
    started: StartedGame
    model: AfterstateModel
    walkthrough: list[str] | None

    @property
    def tw_env(self) -> Any:
        return self.started.tw_env

    @property
    def game(self) -> Any:
        return self.started.game


def _start(path: Path) -> _LoadedGame:
    started = start_game(path)
    return _LoadedGame(path, started, AfterstateModel(started.game), started.game.walkthrough)


@dataclass
class TextWorldSnapshot:
    """Saved state of a running episode (see :meth:`TextWorldEnv.snapshot`)."""

    path: Path
    tracked: TrackedState
    fields: dict[str, Any]
    quests: tuple[list[int], list[bool]]


class TextWorldEnv(TextGameEnv):
    """A TextWorld game pool (or one game file) behind the :class:`TextGameEnv` contract.

    Args:
        games: where games come from: :class:`GeneratedGames` (a pool indexed by
            seed) or :class:`GameFile` (one fixed game; ``split``, ``game_seed`` and
            ``num_games`` are then unused and ``info["game_seed"]`` is ``None``).
        split, game_seed, num_games: which game each reset plays
            (:func:`rlid.envs.base.split_game_seed`).
        max_episode_steps, afterstates, render_mode: see :class:`TextGameEnv`.
    """

    def __init__(
        self,
        games: GeneratedGames | GameFile,
        *,
        split: str = "train",
        game_seed: int | None = None,
        num_games: int = 16,
        max_episode_steps: int = 50,
        afterstates: bool = True,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(
            max_episode_steps=max_episode_steps, afterstates=afterstates, render_mode=render_mode
        )
        self.games = games
        self.split = split
        self.game_seed = game_seed
        self.num_games = num_games
        self._loaded: OrderedDict[Path, _LoadedGame] = OrderedDict()
        self._paths: dict[int | None, Path] = {}
        self._current: _LoadedGame | None = None
        self._seed_index: int | None = None
        self._state: Any = None  # TextWorld GameState of the current step
        self._commands: list[str] = []
        self._valid_actions: list[Any] = []
        self._facts: frozenset = frozenset()

    # ------------------------------------------------------------ game loading
    def _select_game(self) -> tuple[int | None, int | None]:
        """(index within the split, absolute seed) of the game this reset plays."""
        if isinstance(self.games, GameFile):
            return None, None
        seed = split_game_seed(
            self.np_random, split=self.split, game_seed=self.game_seed, num_games=self.num_games
        )
        return seed - SPLIT_OFFSETS[self.split], seed

    def _load(self, seed: int | None) -> _LoadedGame:
        path = self._paths.get(seed)
        if path is None:
            if isinstance(self.games, GameFile):
                path = self.games.path
            else:
                assert seed is not None  # generated games are indexed by seed
                path = self.games.path(seed)
            self._paths[seed] = path
        if path in self._loaded:
            self._loaded.move_to_end(path)
            return self._loaded[path]
        try:
            loaded = _start(path)
        except Exception as exc:
            if isinstance(self.games, GameFile):
                raise ValueError(f"game file {path} cannot be loaded by TextWorld: {exc}") from exc
            # A cache entry that passed its checks but does not load: regenerate once.
            assert seed is not None
            self.games.discard(seed)
            path = self._paths[seed] = self.games.path(seed)
            loaded = _start(path)
        self._loaded[path] = loaded
        while len(self._loaded) > MAX_LOADED_GAMES:
            _, old = self._loaded.popitem(last=False)
            old.tw_env.close()
        return loaded

    def _game(self) -> _LoadedGame:
        if self._current is None:
            raise RuntimeError("call reset() before step()")
        return self._current

    # ------------------------------------------------------------------- hooks
    def _game_reset(self) -> str:
        self._seed_index, seed = self._select_game()
        self._current = self._load(seed)
        self._state = self._game().tw_env.reset()
        self._sync_logic(reset=True)
        return clean_observation(self._state["feedback"])

    def _game_step(self, action: str) -> tuple[str, int, bool, bool]:
        self._state, _, _ = self._game().tw_env.step(action)
        self._sync_logic(reset=False)
        state = self._state
        return (
            clean_observation(state["feedback"]),
            int(state["score"]),
            state["won"],
            state["lost"],
        )

    def _sync_logic(self, *, reset: bool) -> None:
        """Read the logic state the tracker keeps in step with the live game."""
        self._valid_actions = self._state["_valid_actions"]
        self._commands = self._game().started.inform7.gen_commands_from_actions(self._valid_actions)
        if self.use_afterstates:
            previous, self._facts = self._facts, self.logic_facts()
            if reset:
                self._game().model.reset(self._facts)
            else:
                self._game().model.observe(self._facts, previous)

    def _game_legal_actions(self) -> list[str]:
        return sorted(set(self._commands))

    def _game_afterstates(self, legal_actions: list[str]) -> list[str]:
        groups = group_commands(self._commands, self._valid_actions)
        return self._game().model.afterstates(self._facts, groups, legal_actions)

    def _game_objective(self) -> str:
        return self._game().game.objective if self._current else ""

    def _game_max_score(self) -> int:
        if self._current is None:
            return 0
        max_score = self._game().game.max_score
        # Repeatable rewarded quests make it unbounded (never in tw-make's games).
        return int(max_score) if math.isfinite(max_score) else 0

    def _game_walkthrough(self) -> list[str] | None:
        walkthrough = self._game().walkthrough
        return list(walkthrough) if walkthrough is not None else None

    def _game_extra_info(self) -> dict[str, Any]:
        return {"game_seed": self._seed_index}

    # ------------------------------------------------------- logic-level access
    @property
    def game(self) -> Any:
        """The ``textworld.Game`` being played (``None`` before the first reset)."""
        return self._game().game if self._current else None

    @property
    def afterstate_model(self) -> AfterstateModel:
        """The current game's afterstate predictor (quest state included)."""
        if self._current is None:
            raise RuntimeError("no game loaded; call reset() first")
        return self._game().model

    def logic_facts(self) -> frozenset:
        """The live logic state's facts (``textworld.logic.Proposition`` s)."""
        return frozenset(self._game().started.tracker._game_progression.state.facts)

    def logic_actions(self, command: str) -> list[Any]:
        """The logic actions behind a legal command (preferred first)."""
        return group_commands(self._commands, self._valid_actions).get(command, [])

    # ----------------------------------------------------------- save/restore
    def snapshot(self) -> TextWorldSnapshot:
        """Save the running episode exactly (Z-machine memory, logic state, bookkeeping).

        Afterstates never need this; it exists to check them against the real game and
        to measure the save/step/restore alternative they replace.
        """
        if self._current is None:
            raise RuntimeError("snapshot() needs a running episode; call reset() first")
        quests = self._game().model.quests
        return TextWorldSnapshot(
            path=self._game().path,
            tracked=save_tracked(self._game().started),
            fields={name: copy.copy(getattr(self, name)) for name in _FIELDS},
            quests=(list(quests.completions), list(quests.failed)),
        )

    def restore(self, snapshot: TextWorldSnapshot) -> None:
        """Return to a state saved by :meth:`snapshot` (same env, same game)."""
        if self._current is None or snapshot.path != self._current.path:
            raise ValueError("restore() needs the game the snapshot was taken in to be loaded")
        restore_tracked(self._game().started, snapshot.tracked)
        for name, value in snapshot.fields.items():
            setattr(self, name, copy.copy(value))
        quests = self._game().model.quests
        quests.completions, quests.failed = list(snapshot.quests[0]), list(snapshot.quests[1])

    def close(self) -> None:
        for loaded in self._loaded.values():
            loaded.tw_env.close()
        self._loaded.clear()
        self._current = None
        super().close()


# Per-episode attributes saved by snapshot(): the base contract's and this class's.
_FIELDS = frozenset(
    {"_last_obs", "_score", "_steps", "_done", "_won", "_lost", "_legal"}
    | {"_state", "_commands", "_valid_actions", "_facts"}
)
