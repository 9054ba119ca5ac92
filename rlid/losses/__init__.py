"""Pure losses over tensors with explicit masks, one module per family.

* :mod:`rlid.losses.decision` — decision-level PPO over a menu (clip, entropy, KL to the
  start, label mass, position terms, value loss).
* :mod:`rlid.losses.tree`     — the same loss factored along a label tree's path.
* :mod:`rlid.losses.token`    — the GRPO family (GRPO, Dr. GRPO, DAPO, GSPO, CISPO) as
  (surrogate, aggregation) pairs.
* :mod:`rlid.losses.mismatch` — TIS / IcePop train-inference correction.
"""
