"""Gymnasium text-game environments: TextWorld challenges and fast built-in games.

    >>> import envs
    >>> envs.list_envs()  # doctest: +ELLIPSIS
    [...]
    >>> env = envs.make("keydoor", size=3, split="heldout")

This package never imports torch.
"""

from __future__ import annotations

from envs import builtin as _builtin  # noqa: F401  (registers the built-in games)
from envs.base import TextGameEnv
from envs.registry import SPLITS, EnvSpec, Option, get_spec, list_envs, make, register
from envs.textworld import specs as _tw_specs  # noqa: F401  (registers tw-*; lazy textworld)

__all__ = [
    "SPLITS",
    "EnvSpec",
    "Option",
    "TextGameEnv",
    "get_spec",
    "list_envs",
    "make",
    "register",
]
