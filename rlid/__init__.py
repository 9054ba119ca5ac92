"""rlid: reinforcement learning of language agents in the decision plane.

The decision plane: legal actions -> labelled menu (``menus``) -> one forward
pass -> label-token log-probs (``rlid.readout``) -> decision-level PPO
(``rlid.trainer``). The token plane lives in ``baselines``; the audit of the
marginalization variance identity in ``rlid.audit``.
"""

import os as _os

# Weight loading/saving progress bars of transformers would interleave with ours.
_os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

__version__ = "0.4.0"
