"""The decision plane: a labelled menu read in one forward, decision-level PPO on it.

* :mod:`rlid.decision.policy`    — :class:`~rlid.decision.policy.DecisionPolicy`.
* :mod:`rlid.decision.tree_walk` — label trees: a path of readouts, one per level.

It is trained by :mod:`rlid.core.train` (the plane registry names it).
"""
