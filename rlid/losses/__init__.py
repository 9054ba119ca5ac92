"""Pure losses over tensors with explicit masks, one module per family.

* :mod:`rlid.losses.decision` — decision-level PPO over menus, a flat menu being a label
  tree of one level (clip on the joint action, exact or path-estimated entropy and KL to
  the start, label mass, value loss).
* :mod:`rlid.losses.position` — the position penalty's unbiased sums and directions.
* :mod:`rlid.losses.token`    — the GRPO family (GRPO, Dr. GRPO, DAPO, GSPO, CISPO) as
  (surrogate, aggregation) pairs.
* :mod:`rlid.losses.mismatch` — TIS / IcePop train-inference correction.
"""
