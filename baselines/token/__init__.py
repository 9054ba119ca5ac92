"""The token plane: free-text commands trained with the GRPO family.

* :mod:`rlid.baselines.token.policy` — :class:`~rlid.baselines.token.policy.TokenPolicy`.
* :mod:`rlid.baselines.token.parse`  — generated text -> a legal action.
* :mod:`rlid.baselines.token.train`  — ``train_token``: the GRPO family on multi-step games.
"""
