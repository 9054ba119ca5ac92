"""BabyAI-Text: BabyAI's grid levels (minigrid) as text, the way GLAM plays them.

``babyai-text`` (Gymnasium ``rlid/BabyAIText-v0``) plays BabyAI missions through GLAM's
text rendering of the agent's view and its six actions (:mod:`rlid.envs.babyai.env`), on
GLAM's task mixtures and single BabyAI levels (:mod:`rlid.envs.babyai.catalog`). minigrid is
an optional dependency (``pip install 'rlid[babyai]'``), imported when an env is made.

    >>> from rlid import envs
    >>> env = envs.make("babyai-text", level="PickupLocal", split="heldout")  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from rlid.envs.babyai.catalog import LEVELS, MIXED_TASKS
from rlid.envs.registry import EnvSpec, Option, register

OPTIONS = {
    "level": Option(
        str,
        "MixedTrainLocal",
        "BabyAI level: GLAM's mixtures or a single level (docs/benchmark-envs.md)",
        choices=tuple(LEVELS),
    ),
    "task": Option(
        str, "any", "pin a mixture level to one of GLAM's tasks", choices=("any", *MIXED_TASKS)
    ),
    "max_episode_steps": Option(
        int,
        None,
        "steps before the episode is truncated (default: BabyAI's limit per mission, 64 for "
        "a one-room go-to)",
        min=1,
    ),
}


def make_babyai_text(**options: Any):
    try:  # lazy: `import envs` must not need minigrid (the babyai extra)
        from rlid.envs.babyai.env import BabyAITextEnv
    except ImportError as err:
        raise ImportError(
            f"babyai-text needs minigrid: pip install 'rlid[babyai]' (or minigrid>=3.0) ({err})"
        ) from None
    return BabyAITextEnv(**options)


register(
    EnvSpec(
        "babyai-text",
        make_babyai_text,
        "BabyAI missions in GLAM's text (minigrid): six actions, exact afterstates, bot walkthrough",
        OPTIONS,
    )
)
