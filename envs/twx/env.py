"""TextWorldExpress games behind the :class:`rlid.envs.base.TextGameEnv` contract.

* game: the game generated from one seed of the split's fold (``specs``), with the
  env's parameters;
* observation: the game's text (at reset, the starting room);
* objective: the game's task description;
* legal actions: the game's valid actions, distinct and sorted;
* score: the game's normalised score (0-1) times 100, rounded (each game scores its own
  way: CookingWorld a point per recipe step, Sorting a fraction of the objects placed);
  reward = score delta; won / lost: the game's task success / failure. A failed game's
  negative score (-1 in Sorting, Simon Says, Pecking Order and Arithmetic, times 100) is
  clipped at 0, or kept with ``raw_scores=True`` (as the package reports it);
* walkthrough: the game's gold path (``generateGoldPath``), legal actions all. Several
  games (coin, twc, mapreader, ...) draw their gold agent's moves from an unseeded
  generator, so the package gives a seed another gold path each time; the first one
  computed on this machine is cached on disk and given from then on
  (``<rlid cache>/textworld-express-1.1.0/``), so a seed always gives the same episode;
* afterstates: none. The games have no state copy; the only exact way to know an
  action's outcome is to replay the episode from its seed and play the action
  (:meth:`TextWorldExpressEnv.snapshot` / :meth:`~TextWorldExpressEnv.restore` do that,
  for measurement: ``benchmarks/env_throughput.py`` reports its cost per menu row).
  With ``afterstates=True`` every row's afterstate is the empty string, which menus do
  not show.

The game runs in this process's TextWorldExpress JVM (:mod:`rlid.envs.jvm`), one game object
per env, started at the first reset.

    >>> from rlid import envs
    >>> env = envs.make("twx-coin", numLocations=3, game_seed=0)  # doctest: +SKIP
    >>> obs, info = env.reset(seed=0)  # doctest: +SKIP
    >>> info["legal_actions"][:3]  # doctest: +SKIP
    ['close door to east', 'inventory', 'look around']
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlid.envs import json_cache
from rlid.envs.base import TextGameEnv
from rlid.envs.jvm import TEXTWORLD_EXPRESS, EngineLease, engine_errors
from rlid.envs.paths import cache_root

NO_AFTERSTATE = ""
FOLDS = ("train", "dev", "test")


def param_string(params: dict[str, Any]) -> str:
    """``{"numLocations": 3, "includeDoors": False}`` -> ``"numLocations=3,includeDoors=0"``."""
    return ",".join(f"{name}={int(value)}" for name, value in params.items())


def walkthrough_path(game: str, params: dict[str, Any], fold: str, seed: int) -> Path:
    """Where the walkthrough of one game is cached (the parameters in the name)."""
    setting = param_string(params).replace("=", "").replace(",", "-") or "defaults"
    return cache_root() / "textworld-express-1.1.0" / game / setting / f"{fold}-{seed}.json"


@dataclass(frozen=True)
class TextWorldExpressSnapshot:
    """A running episode, saved as its seed and the actions played (see ``snapshot``)."""

    seed: int
    fold: str
    actions: tuple[str, ...]
    fields: dict[str, Any]


class TextWorldExpressEnv(TextGameEnv):
    """One TextWorldExpress game with fixed parameters; each reset plays one seed.

    Args:
        game: the game's name (``cookingworld``, ``twc``, ``coin``, ``mapreader``,
            ``arithmetic``, ``sorting``, ``simonsays``, ``peckingorder``).
        params: its generation parameters (``rlid.envs.twx.specs.GAMES``).
        heldout_fold: ``"test"`` (default) or ``"dev"``: the fold the ``heldout`` split plays.
        split, game_seed, num_games: which seed a reset plays (``specs``).
        max_episode_steps, afterstates, render_mode: see :class:`TextGameEnv`.
        raw_scores: report the game's own score, negative on failure (else clipped at 0).
        env_id: the id used in error messages.
    """

    def __init__(
        self,
        game: str,
        params: dict[str, Any] | None = None,
        *,
        heldout_fold: str = "test",
        split: str = "train",
        game_seed: int | None = None,
        num_games: int = 16,
        max_episode_steps: int = 100,
        afterstates: bool = True,
        raw_scores: bool = False,
        render_mode: str | None = None,
        env_id: str | None = None,
    ) -> None:
        super().__init__(
            max_episode_steps=max_episode_steps, afterstates=afterstates, render_mode=render_mode
        )
        if heldout_fold not in ("test", "dev"):
            raise ValueError(f"heldout_fold must be 'test' or 'dev', got {heldout_fold!r}")
        self.game = game
        self.params = dict(params or {})
        self.env_id = env_id or f"twx-{game}"
        self.split = split
        self.fold = "train" if split == "train" else heldout_fold
        self.game_seed = game_seed
        self.num_games = num_games
        self.raw_scores = bool(raw_scores)
        self._lease = EngineLease(TEXTWORLD_EXPRESS, self)
        self._simulator: Any = None
        self._simulator_engine: Any = None
        self._seeds: list[int] | None = None
        self._index: int | None = None
        self._seed: int | None = None
        self._reset_seed: int | None = None
        self._objective = ""
        self._walkthrough: list[str] = []
        self._valid: list[str] = []
        self._actions: list[str] = []  # played this episode (for snapshot / restore)

    # --------------------------------------------------------------- engine access
    def where(self) -> str:
        """``twx-coin (train game 3 = seed 3, reset seed 7)``."""
        game = "no game yet" if self._index is None else f"game {self._index}"
        if self._seed is not None:
            game += f" = {self.fold} seed {self._seed}"
        return f"{self.env_id} ({self.split} {game}, reset seed {self._reset_seed})"

    def _call(self, what: str):
        return engine_errors(self._lease.engine, f"{self.where()} while {what}")

    def _sim(self) -> Any:
        engine = self._lease.get()
        if self._simulator is None or self._simulator_engine is not engine:
            with self._call("starting the game"):
                simulator = engine.new(TEXTWORLD_EXPRESS.entry_class)
                message = simulator.load(self.game, param_string(self.params))
            if message:
                raise ValueError(f"{self.env_id}: the game refused its parameters: {message}")
            self._simulator, self._simulator_engine = simulator, engine
            self._seeds = None
        return self._simulator

    def _running(self, what: str) -> Any:
        """The game object of the running game; :class:`~envs.jvm.EngineDied` if its engine
        died (only a reset starts a fresh one: the game is lost with it)."""
        engine = self._lease.current(f"{self.where()} while {what}")
        if self._simulator is None or self._simulator_engine is not engine:
            raise RuntimeError(f"{self.where()}: no game is running; call reset() first")
        return self._simulator

    def _generate(self, simulator: Any, seed: int, gold: bool) -> dict[str, Any]:
        return json.loads(simulator.generateNewGameJSON(seed, self.fold, gold))

    def _read(self, response: dict[str, Any]) -> tuple[str, int, bool, bool]:
        self._valid = [str(a) for a in response["validActions"]]
        score = int(round(100 * float(response["score"])))
        won, lost = bool(response["tasksuccess"]), bool(response["taskfailure"])
        shown = score if self.raw_scores else max(score, 0)
        return str(response["observation"]), shown, won, lost or score < 0

    # ------------------------------------------------------------------- hooks
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        self._reset_seed = seed
        return super().reset(seed=seed, options=options)

    def _game_reset(self) -> str:
        simulator = self._sim()
        self._seed = None
        with self._call("generating the game"):
            if self._seeds is None:
                getter = {
                    "train": simulator.getSeedsTrain,
                    "dev": simulator.getSeedsDev,
                    "test": simulator.getSeedsTest,
                }[self.fold]
                self._seeds = sorted(int(s) for s in getter())
            pool = self._seeds
            if self.game_seed is None:
                self._index = int(self.np_random.integers(min(self.num_games, len(pool))))
            elif self.game_seed >= len(pool):
                raise ValueError(
                    f"{self.env_id}: option game_seed={self.game_seed} is out of range: the "
                    f"{self.fold} fold has {len(pool)} seeds (game_seed in [0, {len(pool) - 1}])"
                )
            else:
                self._index = self.game_seed
            self._seed = pool[self._index]
            path = walkthrough_path(self.game, self.params, self.fold, self._seed)
            cached = json_cache.read(path)
            response = self._generate(simulator, self._seed, gold=cached is None)
            if cached is None:  # the first gold path computed here is the seed's for good
                computed = [str(a) for a in simulator.getGoldActionSequence()]
                cached = json_cache.write_once(path, computed)
            self._walkthrough = [str(a) for a in cached]
            self._objective = str(simulator.getTaskDescription())
        self._actions = []
        return self._read(response)[0]

    def _game_step(self, action: str) -> tuple[str, int, bool, bool]:
        simulator = self._running(f"playing {action!r}")
        with self._call(f"playing {action!r}"):
            response = json.loads(simulator.stepJSON(action))
        self._actions.append(action)
        return self._read(response)

    def _game_legal_actions(self) -> list[str]:
        return sorted(set(self._valid))

    def _game_afterstates(self, legal_actions: list[str]) -> list[str]:
        return [NO_AFTERSTATE] * len(legal_actions)

    def _game_objective(self) -> str:
        return self._objective

    def _game_max_score(self) -> int:
        return 100

    def _game_walkthrough(self) -> list[str] | None:
        return list(self._walkthrough)

    def _game_extra_info(self) -> dict[str, Any]:
        return {"game_seed": self._index, "twx_seed": self._seed}

    # ------------------------------------------------------------- replay copy
    def snapshot(self) -> TextWorldExpressSnapshot:
        """The running episode as (seed, fold, actions played): the games have no state
        copy, so :meth:`restore` regenerates the game and replays the actions."""
        if self._seed is None:
            raise RuntimeError("snapshot() needs a running episode; call reset() first")
        return TextWorldExpressSnapshot(
            self._seed,
            self.fold,
            tuple(self._actions),
            {name: copy.copy(getattr(self, name)) for name in _FIELDS},
        )

    def restore(self, snapshot: TextWorldExpressSnapshot) -> None:
        """Return to a snapshot's state: regenerate its game, replay its actions."""
        simulator = self._running("replaying a snapshot")
        with self._call("replaying a snapshot"):
            response = self._generate(simulator, snapshot.seed, gold=False)
            for action in snapshot.actions:
                response = json.loads(simulator.stepJSON(action))
        self._read(response)
        self._actions = list(snapshot.actions)
        for name, value in snapshot.fields.items():
            setattr(self, name, copy.copy(value))

    @property
    def engine_pid(self) -> int | None:
        """The pid of the JVM this env plays in (``None`` before the first reset)."""
        engine = self._lease.engine
        return None if engine is None else engine.pid

    def close(self) -> None:
        self._simulator = None
        self._lease.drop()
        super().close()


# Per-episode attributes a snapshot keeps: the base contract's and this class's.
_FIELDS = frozenset(
    {"_last_obs", "_score", "_steps", "_done", "_won", "_lost", "_legal"}
    | {"_index", "_seed", "_objective", "_walkthrough"}
)
