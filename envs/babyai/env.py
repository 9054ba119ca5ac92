"""``babyai-text``: BabyAI levels (minigrid) played through GLAM's text.

Each reset draws a game seed of the split (``rlid.envs.base.split_game_seed``), builds the
level's minigrid env and resets it with that seed; the game's task, grid and mission
are functions of the seed alone. What the policy sees:

* observation: GLAM's sentences for the agent's 7x7 egocentric view
  (:mod:`rlid.envs.babyai.text`); objective: the BabyAI mission ("go to the red ball");
* legal actions: GLAM's six, in every state: ``turn left``, ``turn right``, ``go
  forward``, ``pick up``, ``drop``, ``toggle`` (minigrid's actions 0-5; ``done`` is
  left out, as GLAM does). One that does nothing here (``drop`` with empty hands,
  ``go forward`` into a wall) is still legal: it takes a step and changes nothing,
  exactly as in GLAM and BabyAI. A string outside the six is rlid's invalid action: a
  no-op that minigrid never sees (its step counter does not move);
* reward: success is 1 point (``score`` 1 of ``max_score`` 1; reward = score delta).
  BabyAI's own reward, ``1 - 0.9 * steps / max_steps`` on success and 0 otherwise, is
  ``info["babyai_reward"]`` at every step (``steps``: minigrid's count of the six
  actions taken). A mission minigrid's verifier calls failed would be lost (``lost``,
  0 points), but the verifiers of these levels are not strict: no game here can be
  lost (a sequence done in the wrong order just goes on);
* afterstates (exact): for each of the six actions a deep copy of the minigrid env (a
  pickle round trip of the whole env), stepped once, rendered in the same text, with
  the built-in games' outcome note when it ends the game: ``"... (+1 point, you
  win)"`` or ``"... (you lose)"`` (read by :func:`rlid.envs.outcome.read_outcome`). An
  afterstate without a note equals the next observation; with one, it is the next
  observation plus the note;
* walkthrough: BabyAI's bot (``minigrid.utils.baby_ai_bot.BabyAIBot``) run on a fresh
  build of the same game, as commands (cached per game); ``None`` if the bot does not
  win within the step limit (it won held-out games 0-199 of every level);
* truncation: after BabyAI's own step limit (room size squared x rooms x navigations
  the mission needs: 64 for GoToLocal, 128 for PutNextLocal), or ``max_episode_steps``
  when given (minigrid's limit is set to the same number, so BabyAI's reward uses it).

    >>> from rlid import envs
    >>> env = envs.make("babyai-text", level="GoToLocal", split="heldout", game_seed=0)
    >>> obs, info = env.reset(seed=0)
    >>> for command in info["walkthrough"]:
    ...     obs, reward, terminated, truncated, info = env.step(command)
    >>> info["won"], info["score"], 0 < info["babyai_reward"] <= 1
    (True, 1, True)
"""

from __future__ import annotations

import contextlib
import functools
import io
import pickle
from typing import Any

from minigrid.utils.baby_ai_bot import BabyAIBot

from rlid.envs.babyai import levels
from rlid.envs.babyai.catalog import LEVELS, MIXED_TASKS, MIXTURES, game_task
from rlid.envs.babyai.text import describe_view, observation_text
from rlid.envs.base import TextGameEnv, split_game_seed

ACTIONS = ("turn left", "turn right", "go forward", "pick up", "drop", "toggle")
ACTION_IDS = {name: index for index, name in enumerate(ACTIONS)}  # minigrid's action ids
WIN_NOTE, LOSE_NOTE = " (+1 point, you win)", " (you lose)"


def render(game: Any, obs: dict[str, Any]) -> str:
    """GLAM's text for minigrid observation ``obs`` of ``game``."""
    held = game.carrying
    carrying = None if held is None else (held.color, held.type)
    return observation_text(describe_view(obs["image"], carrying))


def new_game(level: str, task: str, seed: int, max_steps: int | None) -> tuple[Any, dict]:
    """The minigrid env of game ``seed``, reset, and its first observation."""
    game = levels.make_level(level, task, max_steps=max_steps)
    # minigrid prints each rejected draw of a mission; keep stdout the caller's
    with contextlib.redirect_stdout(io.StringIO()):
        obs, _ = game.reset(seed=seed)
    return game, obs


def snapshot(game: Any) -> bytes:
    """The whole minigrid env as bytes: :func:`restore` makes a deep copy of it.

    A pickle round trip copies the object graph as ``copy.deepcopy`` does (shared
    references stay shared) at about half the cost, and one snapshot serves all six
    copies of a state."""
    return pickle.dumps(game, protocol=pickle.HIGHEST_PROTOCOL)


def restore(blob: bytes) -> Any:
    """A new, independent minigrid env from a :func:`snapshot`."""
    return pickle.loads(blob)


def step_outcome(game: Any, action: int) -> tuple[dict, float, bool, bool]:
    """Step ``game``: ``(observation, BabyAI reward, won, lost)``."""
    obs, reward, terminated, _, _ = game.step(action)
    won = bool(terminated and reward > 0)
    return obs, float(reward), won, bool(terminated and not won)


@functools.lru_cache(maxsize=4096)
def bot_walkthrough(level: str, task: str, seed: int, max_steps: int | None) -> tuple | None:
    """BabyAI's bot on game ``seed``: its commands, or ``None`` if it does not win."""
    game, _ = new_game(level, task, seed, max_steps)
    bot = BabyAIBot(game)
    plan: list[str] = []
    while game.step_count < game.max_steps:
        action = int(bot.replan())
        if action >= len(ACTIONS):  # the bot says "done" without having won
            return None
        plan.append(ACTIONS[action])
        _, _, won, lost = step_outcome(game, action)
        if won or lost:
            return tuple(plan) if won else None
    return None


class BabyAITextEnv(TextGameEnv):
    """The ``babyai-text`` env (options: see ``rlid envs babyai-text``).

    Args:
        level: a key of :data:`rlid.envs.babyai.catalog.LEVELS`.
        task: ``"any"``, or one of GLAM's five tasks to pin a mixture level to.
        split, game_seed, num_games: the game pool (train / held-out seed ranges).
        max_episode_steps: ``None`` = BabyAI's per-mission limit.
        afterstates, render_mode: see :class:`rlid.envs.base.TextGameEnv`.
    """

    env_id = "babyai-text"

    def __init__(
        self,
        *,
        level: str = "MixedTrainLocal",
        task: str = "any",
        split: str = "train",
        game_seed: int | None = None,
        num_games: int = 16,
        max_episode_steps: int | None = None,
        afterstates: bool = True,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(
            max_episode_steps=64 if max_episode_steps is None else max_episode_steps,
            afterstates=afterstates,
            render_mode=render_mode,
        )
        if level not in LEVELS:
            raise ValueError(
                f"babyai-text: option level={level!r} is not valid: one of {', '.join(LEVELS)}"
            )
        if task != "any" and task not in MIXED_TASKS:
            raise ValueError(
                f"babyai-text: option task={task!r} is not valid: 'any' or one of "
                f"{', '.join(MIXED_TASKS)}"
            )
        if task != "any" and level not in MIXTURES:
            raise ValueError(
                f"babyai-text: option task={task} pins a mixture ({', '.join(MIXTURES)}) to "
                f"one task; level={level} plays one task already: drop task"
            )
        self.level, self.task = level, task
        self.split, self.game_seed, self.num_games = split, game_seed, num_games
        self.fixed_step_limit = max_episode_steps
        self.game: Any = None
        self.current_game_seed: int | None = None
        self.current_task = ""
        self._babyai_reward = 0.0
        self._reward_step = 0  # the step (of the base class's count) that earned it

    # ------------------------------------------------------------------ hooks
    def _game_reset(self) -> str:
        seed = split_game_seed(
            self.np_random, split=self.split, game_seed=self.game_seed, num_games=self.num_games
        )
        self.current_game_seed = seed
        self.current_task = game_task(self.level, self.task, seed)
        self.game, obs = new_game(self.level, self.current_task, seed, self.fixed_step_limit)
        self.max_episode_steps = self.game.max_steps
        self._babyai_reward, self._reward_step = 0.0, 0
        return render(self.game, obs)

    def _loaded(self) -> Any:
        if self.game is None:
            raise RuntimeError("call reset() before step()")
        return self.game

    def _game_step(self, action: str) -> tuple[str, int, bool, bool]:
        game = self._loaded()
        obs, self._babyai_reward, won, lost = step_outcome(game, ACTION_IDS[action])
        self._reward_step = self._steps
        return render(game, obs), int(won), won, lost

    def _game_legal_actions(self) -> list[str]:
        return list(ACTIONS)

    def _game_afterstates(self, legal_actions: list[str]) -> list[str]:
        blob = snapshot(self._loaded())
        rows = []
        for action in legal_actions:
            future = restore(blob)
            obs, _, won, lost = step_outcome(future, ACTION_IDS[action])
            rows.append(render(future, obs) + (WIN_NOTE if won else LOSE_NOTE if lost else ""))
        return rows

    def _game_objective(self) -> str:
        return self.game.mission if self.game is not None else ""

    def _game_max_score(self) -> int:
        return 1

    def _game_walkthrough(self) -> list[str] | None:
        assert self.current_game_seed is not None
        plan = bot_walkthrough(
            self.level, self.current_task, self.current_game_seed, self.fixed_step_limit
        )
        return None if plan is None else list(plan)

    def _game_extra_info(self) -> dict[str, Any]:
        # an invalid action (not passed to minigrid) earns nothing
        reward = self._babyai_reward if self._reward_step == self._steps else 0.0
        return {
            "game_seed": self.current_game_seed,
            "babyai_reward": reward,
            "babyai_task": self.current_task,
        }
