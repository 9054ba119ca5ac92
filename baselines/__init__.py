"""The token plane and the action-scoring plane, beside the decision plane (docs/design.md §6).

* :mod:`rlid.losses.token`        — GRPO / Dr. GRPO / DAPO / GSPO / CISPO losses, TIS / IcePop.
* :mod:`rlid.baselines.token.parse`         — generated text -> a legal action (documented normalisation).
* :mod:`rlid.baselines.engine`        — rollout engines (``trainer``, ``perturbed``, ``bf16``) and
  teacher-forced completion log-probs.
* :mod:`rlid.baselines.token.policy`  — the free-text command policy (:class:`TokenPolicy`).
* :mod:`rlid.baselines.token.train` — ``train_token``: the GRPO family on multi-step games.
* :mod:`rlid.baselines.scoring`       — TWOSOME-style action scoring (:class:`ScoringPolicy`),
  trained by the decision-level PPO of ``rlid.core.train``.

Imports flow one way: this package uses ``rlid`` core, never the reverse.
"""
