"""ScienceWorld behind the :class:`rlid.envs.base.TextGameEnv` contract.

* game: one variation of one task, drawn from the benchmark's split (``specs``);
* observation: the simulator's answer to each command; at reset, the room's
  description (the free "look around", which takes no simulated time);
* objective: the task description;
* legal actions: the simulator's valid action-object combinations, distinct and sorted,
  without ``reset task`` (it would restart the game under the env's feet). Hundreds to
  thousands per state; ``info["action_templates"]`` gives each one's template
  (``"open OBJ"``, ``"move OBJ to OBJ"``), aligned with ``info["legal_actions"]``.
  A legal action that names several identical objects acts on the first of them (the
  simulator's "which one?" question is answered ``0``);
* score: the simulator's 0-1 score times 100, rounded; reward = score delta; won when the
  task is completed (score 100), lost when the simulator fails it (its score goes
  negative; the reported score is then 0, so the failure takes back the points earned);
* walkthrough: the benchmark's gold path in legal actions (:mod:`rlid.envs.scienceworld.gold`);
* afterstates: none. The simulator has no state copy, so nothing can predict an
  action's outcome short of playing it; with ``afterstates=True`` every row's afterstate
  is the empty string, which menus do not show.

The simulator runs in this process's ScienceWorld JVM (:mod:`rlid.envs.jvm`), one simulator
object per env, started at the first reset.

    >>> import envs
    >>> env = envs.make("scienceworld", task="find-plant", split="heldout", game_seed=0)  # doctest: +SKIP
    >>> obs, info = env.reset(seed=0)  # doctest: +SKIP
    >>> len(info["legal_actions"]), info["legal_actions"][0], info["action_templates"][0]  # doctest: +SKIP
    (938, 'connect agent to air', 'connect OBJ to OBJ')
    >>> info["walkthrough"][:3]  # doctest: +SKIP
    ['open door', 'go to hallway', 'open door to greenhouse']
"""

from __future__ import annotations

import json
from typing import Any

from rlid.envs.base import TextGameEnv
from rlid.envs.jvm import SCIENCEWORLD, EngineLease, engine_errors
from rlid.envs.scienceworld import gold as gold_paths
from rlid.envs.scienceworld import parser
from rlid.envs.scienceworld.jvm_state import PerSimulator
from rlid.envs.scienceworld.tasks import TASKS, simplification_string

EXCLUDED_ACTIONS = frozenset({"reset task"})
NO_AFTERSTATE = ""


class ScienceWorldEnv(TextGameEnv):
    """One ScienceWorld task; each reset plays one of its variations.

    Args:
        task: one of :data:`rlid.envs.scienceworld.tasks.TASKS`.
        simplifications: ``"none"``, ``"easy"`` or a comma-separated list of the
            simulator's simplifications.
        heldout_variations: ``"test"`` (default) or ``"dev"``: the variations the
            ``heldout`` split plays.
        split, game_seed, num_games: which variation a reset plays (``specs``).
        max_episode_steps, afterstates, render_mode: see :class:`TextGameEnv`.
        walkthrough: give the gold path at reset (``info["walkthrough"]``; else ``None``).
        env_id: the id used in error messages.
    """

    def __init__(
        self,
        *,
        task: str = "find-plant",
        simplifications: str = "none",
        heldout_variations: str = "test",
        split: str = "train",
        game_seed: int | None = None,
        num_games: int = 16,
        max_episode_steps: int = 100,
        afterstates: bool = True,
        walkthrough: bool = True,
        render_mode: str | None = None,
        env_id: str = "scienceworld",
    ) -> None:
        super().__init__(
            max_episode_steps=max_episode_steps, afterstates=afterstates, render_mode=render_mode
        )
        if task not in TASKS:
            raise ValueError(f"{env_id}: unknown task {task!r}; valid: {', '.join(TASKS)}")
        if heldout_variations not in ("test", "dev"):
            raise ValueError(f"{env_id}: heldout_variations must be 'test' or 'dev'")
        self.env_id = env_id
        self.task = task
        self.simplifications = simplification_string(simplifications, task)
        self.split = split
        self.variation_set = "train" if split == "train" else heldout_variations
        self.game_seed = game_seed
        self.num_games = num_games
        self.give_walkthrough = bool(walkthrough)
        self._lease = EngineLease(SCIENCEWORLD, self)
        self._simulator: Any = None
        self._simulator_engine: Any = None
        self._state: PerSimulator | None = None  # each simulator's JVM-wide state
        self._scratch: Any = None  # a second simulator, for gold paths
        self._variations: list[int] | None = None
        self._templates: dict[int, str] = {}
        self._index: int | None = None
        self._variation: int | None = None
        self._reset_seed: int | None = None
        self._objective = ""
        self._legal_templates: list[str] = []

    # --------------------------------------------------------------- engine access
    def where(self) -> str:
        """``scienceworld (task=boil, heldout game 3 = variation 24, reset seed 7)``."""
        game = "no game yet" if self._index is None else f"game {self._index}"
        if self._variation is not None:
            game += f" = variation {self._variation}"
        return (
            f"{self.env_id} (task={self.task}, {self.split} {game}, reset seed {self._reset_seed})"
        )

    def _call(self, what: str):
        return engine_errors(self._lease.engine, f"{self.where()} while {what}")

    def _sim(self) -> Any:
        engine = self._lease.get()
        if self._simulator is None or self._simulator_engine is not engine:
            with self._call("starting the simulator"):
                self._simulator = engine.new(SCIENCEWORLD.entry_class)
            self._simulator_engine = engine
            self._state = PerSimulator(engine)
            self._scratch = None
        return self._simulator

    def _jvm_state(self) -> PerSimulator:
        assert self._state is not None  # made with the simulator
        return self._state

    def _running(self, what: str) -> Any:
        """The simulator of the running game; :class:`~envs.jvm.EngineDied` if its engine died
        (only a reset starts a fresh one: the game is lost with it)."""
        engine = self._lease.current(f"{self.where()} while {what}")
        if self._simulator is None or self._simulator_engine is not engine:
            raise RuntimeError(f"{self.where()}: no game is running; call reset() first")
        return self._simulator

    def _legal_entries(self, simulator: Any) -> list[dict[str, Any]]:
        """The valid action-object combinations (``action``, ``template_id``, ``obj_ids``)."""
        entries = json.loads(simulator.getValidActionObjectCombinationsJSON())["validActions"]
        return [entry for entry in entries if entry["action"] not in EXCLUDED_ACTIONS]

    # ------------------------------------------------------------------- hooks
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        self._reset_seed = seed
        return super().reset(seed=seed, options=options)

    def _game_reset(self) -> str:
        simulator = self._sim()
        state = self._jvm_state()
        self._variation = None
        with self._call("loading the task"):
            if self._variations is None:
                with state.of(simulator, fresh=True):
                    simulator.load(self.task, 0, self.simplifications, False)
                getter = {
                    "train": simulator.getVariationsTrain,
                    "dev": simulator.getVariationsDev,
                    "test": simulator.getVariationsTest,
                }[self.variation_set]
                self._variations = sorted(int(v) for v in getter())
                self._templates = {
                    int(t["template_id"]): str(t["action_example"])
                    for t in json.loads(simulator.getPossibleActionsWithIDs())
                }
            pool = self._variations
            if self.game_seed is None:
                self._index = int(self.np_random.integers(min(self.num_games, len(pool))))
            elif self.game_seed >= len(pool):
                raise ValueError(
                    f"{self.env_id}: option game_seed={self.game_seed} is out of range: task "
                    f"{self.task} has {len(pool)} {self.variation_set} variations "
                    f"(game_seed in [0, {len(pool) - 1}])"
                )
            else:
                self._index = self.game_seed
            self._variation = pool[self._index]
            with state.of(simulator, fresh=True):
                message = simulator.load(self.task, self._variation, self.simplifications, False)
            with state.probe(simulator):
                self._objective = str(simulator.getTaskDescription())
                observation = str(simulator.freeActionLook())
            if message:
                raise RuntimeError(f"{self.where()}: the simulator refused to load: {message}")
            return observation

    def _game_step(self, action: str) -> tuple[str, int, bool, bool]:
        simulator = self._running(f"playing {action!r}")
        state = self._jvm_state()
        with self._call(f"playing {action!r}"):
            with state.of(simulator):
                observation = str(simulator.step(action))
            with state.probe(simulator):
                ambiguous = parser.in_ambiguous_state(simulator)
            if ambiguous:
                with state.of(simulator):
                    observation = str(simulator.step("0"))
            raw = int(round(100 * float(simulator.getScore())))
            completed = bool(simulator.getCompleted())
        won = completed and raw >= 100
        lost = raw < 0 or (completed and not won)
        return observation, max(raw, 0), won, lost

    def _game_legal_actions(self) -> list[str]:
        simulator = self._running("listing the legal actions")
        with self._call("listing the legal actions"), self._jvm_state().of(simulator):
            entries = self._legal_entries(simulator)
        templates: dict[str, str] = {}
        for entry in entries:
            templates.setdefault(entry["action"], self._templates.get(entry["template_id"], ""))
        legal = sorted(templates)
        self._legal_templates = [templates[a] for a in legal]
        return legal

    def _game_afterstates(self, legal_actions: list[str]) -> list[str]:
        return [NO_AFTERSTATE] * len(legal_actions)

    def _game_objective(self) -> str:
        return self._objective

    def _game_max_score(self) -> int:
        return 100

    def _game_walkthrough(self) -> list[str] | None:
        return list(self.gold_path().actions) if self.give_walkthrough else None

    def _game_extra_info(self) -> dict[str, Any]:
        return {
            "game_seed": self._index,
            "task": self.task,
            "variation": self._variation,
            "action_templates": [] if self._done else list(self._legal_templates),
        }

    # ------------------------------------------------------------------- extras
    def gold_path(self, *, fresh: bool = False) -> gold_paths.GoldPath:
        """The current variation's gold path in legal actions (disk-cached; ``fresh``:
        computed again, the cache neither read nor written)."""
        if self._variation is None:
            raise RuntimeError("gold_path() needs a game; call reset() first")
        engine = self._lease.current(f"{self.where()} while computing the gold path")
        with self._call("computing the gold path"):
            if self._scratch is None:
                self._scratch = engine.new(SCIENCEWORLD.entry_class)
            compute = gold_paths.legal_gold_path if fresh else gold_paths.cached_gold_path
            return compute(
                self._scratch,
                self._jvm_state(),
                self.task,
                self._variation,
                self.simplifications,
                self._legal_entries,
            )

    @property
    def engine_pid(self) -> int | None:
        """The pid of the JVM this env plays in (``None`` before the first reset)."""
        engine = self._lease.engine
        return None if engine is None else engine.pid

    def close(self) -> None:
        self._simulator = self._scratch = None
        self._lease.drop()
        super().close()
