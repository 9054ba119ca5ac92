"""The core every plane shares: records, rollouts, advantages, the run loop and the update.

* :mod:`rlid.core.records`   — the :class:`~rlid.core.records.Decision` record and the value head.
* :mod:`rlid.core.acting`    — sampling rows of a menu, fitting prompts to the context.
* :mod:`rlid.core.protocols` — what a policy must provide to be played and trained.
* :mod:`rlid.core.rollout`, :mod:`rlid.core.env_workers` — episodes in lockstep.
* :mod:`rlid.core.advantages` — group, step-group and GAE advantages.
* :mod:`rlid.core.evaluate`  — held-out evaluation and walkthroughs.
* :mod:`rlid.core.loop`      — the run loop (setup, iterations, checkpoints, stop).
* :mod:`rlid.core.update`    — the one update path: epochs x minibatches x micro-batches
  around a plane's micro-step (every plane).
* :mod:`rlid.core.menu_update` — decision-level PPO's micro-step for any menu policy (the
  decision and scoring planes; a flat menu is a one-level label tree).
* :mod:`rlid.core.train`     — the decision and scoring planes' training run.

The core imports no plane (the layering contract in ``pyproject.toml``).
"""
