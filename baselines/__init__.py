"""The token plane and the action-scoring plane, beside the decision plane (docs/design.md §6).

* :mod:`baselines.losses`        — GRPO / Dr. GRPO / DAPO / GSPO / CISPO losses, TIS / IcePop.
* :mod:`baselines.parse`         — generated text -> a legal action (documented normalisation).
* :mod:`baselines.engine`        — rollout engines (``trainer``, ``perturbed``, ``bf16``) and
  teacher-forced completion log-probs.
* :mod:`baselines.token_policy`  — the free-text command policy (:class:`TokenPolicy`).
* :mod:`baselines.token_trainer` — ``train_token``: the GRPO family on multi-step games.
* :mod:`baselines.scoring`       — TWOSOME-style action scoring (:class:`ScoringPolicy`),
  trained by the decision-level PPO of ``rlid.trainer``.

Imports flow one way: this package uses ``rlid`` core, never the reverse.
"""
