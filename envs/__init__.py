"""Gymnasium text-game environments: TextWorld challenges, fast built-in games, and the
Java-backed benchmarks ScienceWorld and TextWorldExpress.

    >>> from rlid import envs
    >>> envs.list_envs()  # doctest: +ELLIPSIS
    [...]
    >>> env = envs.make("keydoor", size=3, split="heldout")
    >>> import gymnasium
    >>> env = gymnasium.make("rlid/KeyDoor-v0", size=3, split="heldout")  # the same game

Every env id is registered with Gymnasium under the ``rlid/`` namespace
(:mod:`rlid.envs.gym_ids`), so ``gymnasium.make`` and ``gymnasium.make_vec`` work.

This package never imports torch.
"""

from __future__ import annotations

from rlid.envs import babyai as _babyai  # noqa: F401  (registers babyai-text; lazy minigrid)
from rlid.envs import builtin as _builtin  # noqa: F401  (registers the built-in games)
from rlid.envs.base import TextGameEnv
from rlid.envs.gym_ids import gym_id
from rlid.envs.outcome import Outcome, best_rows, read_outcome
from rlid.envs.registry import SPLITS, EnvSpec, Option, get_spec, gym_ids, list_envs, make, register
from rlid.envs.scienceworld import specs as _sw_specs  # noqa: F401  (registers scienceworld; lazy JVM)
from rlid.envs.textworld import specs as _tw_specs  # noqa: F401  (registers tw-*; lazy textworld)
from rlid.envs.twx import specs as _twx_specs  # noqa: F401  (registers twx-*; lazy JVM)

__all__ = [
    "SPLITS",
    "EnvSpec",
    "Option",
    "Outcome",
    "TextGameEnv",
    "best_rows",
    "get_spec",
    "gym_id",
    "gym_ids",
    "list_envs",
    "make",
    "read_outcome",
    "register",
]
