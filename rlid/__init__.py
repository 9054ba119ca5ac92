"""rlid: reinforcement learning of language agents in the decision plane.

The decision plane: legal actions -> labelled menu (``rlid.menus``) -> one forward
pass -> label-token log-probs (``rlid.lm.readout``) -> decision-level PPO
(``rlid.core.train``). The token and scoring planes live in ``rlid.baselines``; the
audit of the marginalization variance identity in ``rlid.audit``. The package layout
and its layering contract: docs/design.md.

Importing ``rlid`` registers every env id with Gymnasium (``rlid.envs``: no torch), so
``gymnasium.make("rlid:rlid/KeyDoor-v0")`` works in a fresh interpreter (Gymnasium
imports the module before the ``:``) and ``gymnasium.make("rlid/KeyDoor-v0")`` after
``import rlid``.
"""

import os as _os

# Weight loading/saving progress bars of transformers would interleave with ours.
_os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

__version__ = "0.4.0"

from rlid import envs as _envs  # noqa: E402,F401  (registers the Gymnasium ids)
