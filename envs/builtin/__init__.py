"""Built-in pure-Python text games (registered on import).

* ``keydoor`` -- find keys, unlock doors, reach the goal room
  (:mod:`rlid.envs.builtin.keydoor`).
* ``crafting`` -- gather ingredients, process them in order with the right tools,
  combine at the workbench; wrong processing loses (:mod:`rlid.envs.builtin.crafting`).
* ``lab`` -- a ScienceWorld-like bench whose legal actions are every template x
  object command (16 to 414 of them): the small game for label trees
  (:mod:`rlid.envs.builtin.lab`).

All three are deterministic given the game seed, give exact afterstates, step in well
under a millisecond and report an optimal ``walkthrough`` at reset::

    >>> from rlid import envs
    >>> env = envs.make("crafting", rooms=1, steps=1, distractors=0)
    >>> obs, info = env.reset(seed=0)
    >>> len(info["walkthrough"]) >= 3
    True
"""

from __future__ import annotations

from rlid.envs.builtin.crafting import CraftingEnv
from rlid.envs.builtin.keydoor import KeyDoorEnv
from rlid.envs.builtin.lab import LabEnv
from rlid.envs.registry import EnvSpec, Option, register

# The built-in games are short: truncate at max(20, 2 x the optimal length) by default.
_STEP_LIMIT = Option(
    int,
    None,
    "steps before the episode is truncated (default: max(20, 2 x optimal solution length))",
    min=1,
)

register(
    EnvSpec(
        "keydoor",
        KeyDoorEnv,
        "key-and-door maze: take keys, unlock the doors on the goal path, reach the goal room",
        {"max_episode_steps": _STEP_LIMIT, **KeyDoorEnv.OPTIONS},
    )
)
register(
    EnvSpec(
        "crafting",
        CraftingEnv,
        "recipe crafting: gather, slice/fry/roast in order, make the dish; wrong steps lose",
        {"max_episode_steps": _STEP_LIMIT, **CraftingEnv.OPTIONS},
    )
)
register(
    EnvSpec(
        "lab",
        LabEnv,
        "ScienceWorld-like bench: every template x object command is legal (16 to 414), "
        "with info['action_templates']; put a solid in a container, then focus on it",
        {"max_episode_steps": _STEP_LIMIT, **LabEnv.OPTIONS},
    )
)
