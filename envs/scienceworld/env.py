"""ScienceWorld behind the :class:`rlid.envs.base.TextGameEnv` contract.

* game: one variation of one task, drawn from the benchmark's split (``specs``);
* observation: the simulator's answer to each command; at reset, the room's
  description (the free "look around", which takes no simulated time);
* objective: the task description;
* legal actions: the simulator's valid action-object combinations, distinct and sorted,
  without ``reset task`` (it would restart the game under the env's feet; kept with
  ``reset_task=True``, as upstream's list keeps it). Hundreds to thousands per state;
  ``info["action_templates"]`` gives each one's template (``"open OBJ"``, ``"move OBJ to
  OBJ"``), aligned with ``info["legal_actions"]``;
* alike objects: a legal action that names several identical objects makes the
  simulator ask which one is meant. By default (``ambiguity="first"``) the env answers
  ``0`` itself, so the action acts on the first of them; with ``ambiguity="ask"`` the
  question is the observation and the legal actions are the simulator's own answers
  ``"0"``, ``"1"``, ... (template ``"NUMBER"``), as upstream's valid-action list offers
  them (``InputParser.getValidActionsAmbiguousState``);
* score: the simulator's 0-1 score times 100, rounded; reward = score delta; won when the
  task is completed (score 100), lost when the simulator fails it (its score goes
  negative; the reported score is then 0, so the failure takes back the points earned;
  with ``raw_scores=True`` it is the simulator's own -100, as ScienceWorld's API and
  DRRN report it);
* time: ``max_episode_steps`` counts commands. ``tick_limit`` also ends (truncates) the
  episode once the simulator's clock passes that many ticks, as ScienceWorld's own
  ``envStepLimit`` does (``scienceworld.py`` ``step``: done when ``getNumMoves() >
  envStepLimit``): ``look around``, ``inventory`` and ``task`` take no tick, ``wait`` 11,
  ``wait1`` 2, other commands 1 (``ActionHandler.doQueuedActionsTakeTime``). The clock is
  then ``info["ticks"]``;
* walkthrough: the benchmark's gold path in legal actions (:mod:`rlid.envs.scienceworld.gold`;
  with ``ambiguity="ask"`` the answers ``"0"`` stand where the gold path answers);
* afterstates: none. The simulator has no state copy, so nothing can predict an
  action's outcome short of playing it; with ``afterstates=True`` every row's afterstate
  is the empty string, which menus do not show.

The simulator runs in this process's ScienceWorld JVM (:mod:`rlid.envs.jvm`), one simulator
object per env, started at the first reset.

    >>> from rlid import envs
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
from rlid.envs.scienceworld.tasks import AMBIGUITY, TASKS, simplification_string

EXCLUDED_ACTIONS = frozenset({"reset task"})
NO_AFTERSTATE = ""
ANSWER_TEMPLATE = "NUMBER"
"""The template of the numbered answers to the simulator's "which one?" question."""


def valid_entries(simulator: Any, excluded: frozenset[str]) -> list[dict[str, Any]]:
    """The simulator's valid action-object combinations (``action``, ``template_id``,
    ``obj_ids``), less the actions in ``excluded``."""
    entries = json.loads(simulator.getValidActionObjectCombinationsJSON())["validActions"]
    return [entry for entry in entries if entry["action"] not in excluded]


def _gold_entries(simulator: Any) -> list[dict[str, Any]]:
    """The entries gold paths are written in: the default legal actions, whatever the
    env's options (one cached gold path serves them all)."""
    return valid_entries(simulator, EXCLUDED_ACTIONS)


def walkthrough_with_answers(gold: gold_paths.GoldPath) -> list[str]:
    """The gold path as played with ``ambiguity="ask"``: ``"0"`` after each action whose
    question the gold path answered with the first object."""
    out: list[str] = []
    answered = set(gold.answered)
    for i, action in enumerate(gold.actions):
        out.append(action)
        if i in answered:
            out.append("0")
    return out


def reported_score(raw: int, raw_scores: bool) -> int:
    """The env's score for the simulator's ``raw`` one (0-100, -100 on failure): as it
    is with ``raw_scores``, else clipped at 0 (upstream's ``examples/random_agent.py``
    and DRRN's scorer clip the same way before averaging)."""
    return raw if raw_scores else max(raw, 0)


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
        tick_limit: truncate once the simulator's clock passes this many ticks (``None``:
            commands only, ``max_episode_steps``).
        raw_scores: report the simulator's own score (-100 on failure), not clipped at 0.
        ambiguity: ``"first"`` (answer the simulator's question with ``0``) or ``"ask"``
            (offer the numbered answers as the legal actions).
        reset_task: keep ``reset task`` among the legal actions.
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
        tick_limit: int | None = None,
        raw_scores: bool = False,
        ambiguity: str = "first",
        reset_task: bool = False,
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
        if ambiguity not in AMBIGUITY:
            raise ValueError(f"{env_id}: ambiguity must be one of {', '.join(AMBIGUITY)}")
        if tick_limit is not None and tick_limit < 1:
            raise ValueError(f"{env_id}: tick_limit must be >= 1 (or unset), got {tick_limit}")
        self.env_id = env_id
        self.task = task
        self.simplifications = simplification_string(simplifications, task)
        self.split = split
        self.variation_set = "train" if split == "train" else heldout_variations
        self.game_seed = game_seed
        self.num_games = num_games
        self.give_walkthrough = bool(walkthrough)
        self.tick_limit = tick_limit
        self.raw_scores = bool(raw_scores)
        self.ambiguity = ambiguity
        self.excluded = frozenset() if reset_task else EXCLUDED_ACTIONS
        self._ticks = 0
        self._asking = False  # the simulator waits for the number of an alike object
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
        return valid_entries(simulator, self.excluded)

    # ------------------------------------------------------------------- hooks
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        self._reset_seed = seed
        return super().reset(seed=seed, options=options)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """The base contract's step, also truncated once the clock passes ``tick_limit``."""
        obs, reward, terminated, truncated, info = super().step(action)
        out_of_time = self.tick_limit is not None and self._ticks > self.tick_limit
        if out_of_time and not (terminated or truncated):
            self._done, self._legal = True, []
            info = self._info(invalid=bool(info["invalid_action"]))
            truncated = True
        return obs, reward, terminated, truncated, info

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
            self._ticks, self._asking = int(simulator.getNumMoves()), False
            return observation

    def _game_step(self, action: str) -> tuple[str, int, bool, bool]:
        simulator = self._running(f"playing {action!r}")
        state = self._jvm_state()
        with self._call(f"playing {action!r}"):
            with state.of(simulator):
                observation = str(simulator.step(action))
            with state.probe(simulator):
                ambiguous = parser.in_ambiguous_state(simulator)
            if ambiguous and self.ambiguity == "first":
                with state.of(simulator):
                    observation = str(simulator.step("0"))
            self._asking = ambiguous and self.ambiguity == "ask"
            raw = int(round(100 * float(simulator.getScore())))
            completed = bool(simulator.getCompleted())
            self._ticks = int(simulator.getNumMoves())
        won = completed and raw >= 100
        lost = raw < 0 or (completed and not won)
        return observation, reported_score(raw, self.raw_scores), won, lost

    def _game_legal_actions(self) -> list[str]:
        simulator = self._running("listing the legal actions")
        with self._call("listing the legal actions"), self._jvm_state().of(simulator):
            entries = self._legal_entries(simulator)
        templates: dict[str, str] = {}
        for entry in entries:
            template = (
                ANSWER_TEMPLATE if self._asking else self._templates.get(entry["template_id"], "")
            )
            templates.setdefault(entry["action"], template)
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
        if not self.give_walkthrough:
            return None
        gold = self.gold_path()
        return walkthrough_with_answers(gold) if self.ambiguity == "ask" else list(gold.actions)

    def _game_extra_info(self) -> dict[str, Any]:
        extra = {
            "game_seed": self._index,
            "task": self.task,
            "variation": self._variation,
            "action_templates": [] if self._done else list(self._legal_templates),
        }
        if self.tick_limit is not None:
            extra["ticks"] = self._ticks
        return extra

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
                _gold_entries,
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
