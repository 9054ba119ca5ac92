"""The ``scienceworld`` env id: one id, the task an option (ScienceWorld 1.2.3).

    >>> from rlid import envs
    >>> env = envs.make("scienceworld", task="find-plant", split="heldout")  # doctest: +SKIP

Variations are split by the benchmark itself (train / dev / test); rlid's ``train``
split plays the train variations, ``heldout`` the test variations (or the dev ones with
``heldout_variations="dev"``). ``game_seed`` is an index into the split's variations
(sorted), ``num_games`` the size of the pool resets draw from (at most the split's size).
"""

from __future__ import annotations

from typing import Any

from rlid.envs.registry import EnvSpec, Option, register
from rlid.envs.scienceworld.tasks import AMBIGUITY, SIMPLIFICATIONS, TASKS

# No state copy, so no outcome can be predicted: the rows say nothing and menus show none.
NO_AFTERSTATES = Option(
    bool, True, "afterstate rows that say nothing ('': no state copy; menus show none); false: None"
)


def make_scienceworld(**options: Any):
    try:  # lazy: `import envs` must not need the jvm extra, nor load py4j
        from rlid.envs.scienceworld.env import ScienceWorldEnv
    except ImportError as err:
        raise ImportError(
            f"scienceworld needs the jvm extra: pip install 'rlid[jvm]' ({err})"
        ) from None
    return ScienceWorldEnv(**options)


register(
    EnvSpec(
        "scienceworld",
        make_scienceworld,
        "ScienceWorld: 30 elementary-science tasks in a Java simulator; hundreds to thousands "
        "of legal actions per state, no afterstates (needs Java)",
        {
            "task": Option(str, "find-plant", "the task (ScienceWorld ids 1-1 .. 10-2)", TASKS),
            "simplifications": Option(
                str,
                "none",
                "'none', 'easy' (ScienceWorld's preset: teleportAction, openDoors, "
                "selfWateringFlowerPots and, except in tasks 3-1..3-4, noElectricalAction; not "
                "openContainers) or a comma-separated list of " + ", ".join(SIMPLIFICATIONS),
            ),
            "heldout_variations": Option(
                str,
                "test",
                "the benchmark's variations the heldout split plays: 'test' or 'dev'",
                ("test", "dev"),
            ),
            "max_episode_steps": Option(
                int, 100, "steps before the episode is truncated (the package's default)", min=1
            ),
            "afterstates": NO_AFTERSTATES,
            "walkthrough": Option(
                bool,
                True,
                "give the gold path at reset (seconds to a minute per new variation, then "
                "cached on disk); false: info['walkthrough'] is None",
            ),
            "tick_limit": Option(
                int,
                None,
                "also truncate once the simulator's clock passes this many ticks "
                "(ScienceWorld's envStepLimit, getNumMoves: look around and inventory take 0, "
                "wait 11, other commands 1); unset: commands only",
                min=1,
            ),
            "raw_scores": Option(
                bool,
                False,
                "score as the simulator reports it, -100 on a failed task (ScienceWorld's API, "
                "DRRN); false: clipped at 0, the failure in info['lost']",
            ),
            "ambiguity": Option(
                str,
                "first",
                "the simulator's 'which one?' question about alike objects: 'first' answers 0 "
                "itself; 'ask' shows it and offers its numbers as the legal actions (upstream)",
                AMBIGUITY,
            ),
            "reset_task": Option(
                bool,
                False,
                "keep 'reset task' among the legal actions (upstream's list keeps it; it "
                "restarts the task's progress)",
            ),
        },
    )
)
