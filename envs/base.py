"""The text-game environment contract shared by every env in this package.

A :class:`TextGameEnv` is a ``gymnasium.Env`` whose observations and actions are
strings. Subclasses implement a handful of ``_game_*`` hooks; this base class owns
the contract of docs/design.md §3:

* ``reset(seed=...) -> (obs, info)`` and ``step(action) -> (obs, reward,
  terminated, truncated, info)``; reward = score delta.
* ``info`` always carries ``legal_actions``, ``afterstates`` (aligned with
  ``legal_actions``; ``None`` when afterstates are disabled), ``objective``,
  ``score``, ``max_score``, ``won``, ``lost``, ``invalid_action``, ``steps_left``
  (steps before truncation, for time-aware prompts); at reset also
  ``walkthrough`` (a list of commands, or ``None``) and ``game_seed``.
* An action string that is not legal is a no-op step with a clear observation
  and ``info["invalid_action"] = True``. A non-``str`` action raises ``TypeError``.
* ``terminated`` on won/lost; ``truncated`` after ``max_episode_steps`` steps.

Example::

    >>> from rlid import envs
    >>> env = envs.make("keydoor", size=3)
    >>> obs, info = env.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = env.step(info["legal_actions"][0])
"""

from __future__ import annotations

import string
from typing import Any

import gymnasium
from gymnasium import spaces

from rlid.envs.registry import SPLIT_OFFSETS

# Printable ASCII plus newline/tab: every observation is sanitised to this set so
# that ``observation_space.contains(obs)`` always holds.
CHARSET = frozenset(string.printable)
_CHARSET_STR = "".join(sorted(CHARSET))
MAX_OBS_CHARS = 16_384
MAX_ACTION_CHARS = 512

INFO_KEYS = (
    "legal_actions",
    "afterstates",
    "objective",
    "score",
    "max_score",
    "won",
    "lost",
    "invalid_action",
    "steps_left",
)


def sanitize_text(text: str, max_chars: int = MAX_OBS_CHARS) -> str:
    """Map ``text`` into the env charset (non-printable -> '?') and cap its length."""
    out = "".join(ch if ch in CHARSET else "?" for ch in text)
    return out[:max_chars]


class TextGameEnv(gymnasium.Env):
    """Base class: string observations and actions, legal-action lists, afterstates.

    Args:
        max_episode_steps: steps after which an episode is truncated.
        afterstates: whether ``info["afterstates"]`` is computed (it costs time).
        render_mode: ``None`` or ``"ansi"`` (``render()`` returns the last observation).
    """

    # render_fps: only to satisfy Gymnasium's render check (text has no frame rate)
    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        *,
        max_episode_steps: int = 50,
        afterstates: bool = True,
        render_mode: str | None = None,
    ) -> None:
        if not isinstance(max_episode_steps, int) or max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be an int >= 1, got {max_episode_steps!r}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.max_episode_steps = max_episode_steps
        self.use_afterstates = bool(afterstates)
        self.render_mode = render_mode
        self.observation_space = spaces.Text(
            max_length=MAX_OBS_CHARS, min_length=0, charset=_CHARSET_STR
        )
        self.action_space = spaces.Text(
            max_length=MAX_ACTION_CHARS, min_length=1, charset=_CHARSET_STR
        )
        self._last_obs = ""
        self._score = 0
        self._steps = 0
        self._done = True  # no episode until reset()
        self._won = False
        self._lost = False
        self._legal: list[str] = []

    # ------------------------------------------------------------------ hooks
    def _game_reset(self) -> str:
        """Start a game (use ``self.np_random`` for any randomness); return the observation."""
        raise NotImplementedError

    def _game_step(self, action: str) -> tuple[str, int, bool, bool]:
        """Apply a *legal* action; return ``(observation, score, won, lost)``."""
        raise NotImplementedError

    def _game_legal_actions(self) -> list[str]:
        """The legal actions of the current state (distinct strings, stable order)."""
        raise NotImplementedError

    def _game_afterstates(self, legal_actions: list[str]) -> list[str]:
        """One short predicted-outcome sentence per legal action (same order)."""
        raise NotImplementedError

    def _game_objective(self) -> str:
        raise NotImplementedError

    def _game_max_score(self) -> int:
        raise NotImplementedError

    def _game_walkthrough(self) -> list[str] | None:
        return None

    def _game_extra_info(self) -> dict[str, Any]:
        """Extra deterministic info entries (e.g. ``game_seed``)."""
        return {}

    # --------------------------------------------------------------- contract
    def _info(self, *, invalid: bool) -> dict[str, Any]:
        legal = [] if self._done else list(self._legal)
        afterstates = None
        if self.use_afterstates:
            afterstates = self._game_afterstates(legal) if legal else []
            if len(afterstates) != len(legal):  # pragma: no cover - subclass bug
                raise RuntimeError("afterstates must align with legal_actions")
        info: dict[str, Any] = {
            "legal_actions": legal,
            "afterstates": afterstates,
            "objective": self._game_objective(),
            "score": self._score,
            "max_score": self._game_max_score(),
            "won": self._won,
            "lost": self._lost,
            "invalid_action": invalid,
            "steps_left": self.max_episode_steps - self._steps,
        }
        info.update(self._game_extra_info())
        return info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        obs = sanitize_text(self._game_reset())
        self._score = 0
        self._steps = 0
        self._done = False
        self._won = False
        self._lost = False
        self._legal = self._game_legal_actions()
        self._last_obs = obs
        info = self._info(invalid=False)
        info["walkthrough"] = self._game_walkthrough()
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if not isinstance(action, str):
            raise TypeError(
                f"action must be a str (one of info['legal_actions']), got {type(action).__name__}"
            )
        if self._done:
            raise RuntimeError(
                "step() called with no running episode (finished or never started); "
                "call reset() first"
            )
        self._steps += 1
        truncated = self._steps >= self.max_episode_steps
        if action not in self._legal:
            obs = sanitize_text(
                f'"{action[:80]}" is not a legal action here; nothing happens. '
                f"Legal actions: {', '.join(self._legal)}."
            )
            self._last_obs = obs
            self._done = truncated
            return obs, 0.0, False, truncated, self._info(invalid=True)
        obs, score, won, lost = self._game_step(action)
        obs = sanitize_text(obs)
        reward = float(score - self._score)
        self._score = score
        self._won, self._lost = bool(won), bool(lost)
        terminated = self._won or self._lost
        self._done = terminated or truncated
        self._legal = [] if self._done else self._game_legal_actions()
        self._last_obs = obs
        return obs, reward, terminated, truncated and not terminated, self._info(invalid=False)

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._last_obs
        return None


def split_game_seed(np_random, *, split: str, game_seed: int | None, num_games: int) -> int:
    """The absolute seed of the game to play at this reset.

    ``game_seed`` (an index inside the split) pins one game; otherwise one of the
    split's first ``num_games`` games is drawn with the env's seeded RNG. Train and
    held-out splits are disjoint seed ranges (``rlid.envs.registry.SPLIT_OFFSETS``).
    """
    index = int(np_random.integers(num_games)) if game_seed is None else int(game_seed)
    return SPLIT_OFFSETS[split] + index
