"""rlid: reinforcement learning of language agents in the decision plane.

The decision plane: legal actions -> labelled menu (``rlid.menus``) -> one forward
pass -> label-token log-probs (``rlid.lm.readout``) -> decision-level PPO
(``rlid.core.train``). The token plane lives in ``rlid.baselines``; the audit of the
marginalization variance identity in ``rlid.audit``.
"""

import os as _os

# Weight loading/saving progress bars of transformers would interleave with ours.
_os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

__version__ = "0.4.0"
