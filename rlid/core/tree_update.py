"""The decision-PPO update's parts for label-tree decisions (``rlid.core.train`` calls them).

A micro-batch holding a label-tree decision (``Decision.path``) is re-scored path by path
with ONE forward (``DecisionPolicy.score_paths``: every level's answer position of the
sequence prompt + label + menu + label + ...) and trained with
:func:`rlid.losses.tree.factored_ppo_loss` (the ratio on the joint action; entropy and KL
estimated along the path). A flat decision in the same micro-batch is a one-level path.
Micro-batches of flat decisions only keep ``rlid.losses.decision.decision_ppo_loss`` unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from rlid.config.budget import Timers
from rlid.core.records import Decision
from rlid.lm.optim import Stepper
from rlid.losses.decision import PositionSums, PPOCoefs, position_directions, value_loss
from rlid.losses.tree import factored_ppo_loss


def has_paths(decisions: Sequence[Decision]) -> bool:
    """Whether some decision is a label-tree path (more than one level)."""
    return any(getattr(d, "path", ()) for d in decisions)


def path_rows(decisions: Sequence[Decision], depth: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Chosen rows (B, D) long (-1 where absent) and their rollout log-probs (B, D)."""
    rows = torch.full((len(decisions), depth), -1, dtype=torch.long)
    logp_old = torch.zeros((len(decisions), depth), dtype=torch.float32)
    for b, d in enumerate(decisions):
        steps = [(s.row, s.logp) for s in d.path] if d.path else [(d.chosen, d.logp)]
        rows[b, : len(steps)] = torch.tensor([r for r, _ in steps])
        logp_old[b, : len(steps)] = torch.tensor([lp for _, lp in steps], dtype=torch.float32)
    return rows, logp_old


def first_level_logp(policy: Any, decisions: list[Decision]) -> torch.Tensor:
    """The first menu's log-probs (B, W), the rows whose label positions the position
    penalty measures: ``policy.score`` for flat decisions, level 1 of the paths else."""
    if has_paths(decisions):
        return policy.score_paths(decisions).logp[:, 0]
    return policy.score(decisions)[0]


def attach_path_reference(ref_policy: Any, decisions: list[Decision]) -> None:
    """Store the KL reference's log-probs on each decision's own path, per level, in
    ``extra["logp_ref_levels"]`` (no gradients)."""
    with torch.no_grad():
        ref = ref_policy.score_paths(decisions).logp  # (B, D, W)
    for b, d in enumerate(decisions):
        widths = [len(s.label_ids) for s in d.path] or [len(d.label_ids)]
        d.extra["logp_ref_levels"] = [ref[b, level, :w].tolist() for level, w in enumerate(widths)]


def _reference(decisions: list[Decision], shape: torch.Size, device: torch.device) -> torch.Tensor:
    ref = torch.full(shape, float("-inf"), device=device)
    for b, d in enumerate(decisions):
        levels = d.extra.get("logp_ref_levels")
        if levels is None:  # a flat decision scored by attach_reference_logprobs
            levels = [d.extra["logp_ref_all"]]
        for level, row in enumerate(levels):
            ref[b, level, : len(row)] = torch.tensor(row, device=device)
    return ref


def tree_micro_step(
    config: Any,
    timers: Timers,
    policy: Any,
    decisions: list[Decision],
    advantages: torch.Tensor,
    targets: torch.Tensor,
    minibatch: Any,
    stepper: Stepper,
    weight: float = 1.0,
) -> dict[str, Any]:
    """``rlid.core.train._decision_micro_step`` for a micro-batch with label-tree paths:
    forward + backward, every term a sum divided by the minibatch's size."""
    with timers.time("forward"):
        scores = policy.score_paths(decisions)  # logp (B, D, W), label_mass (B, D)
    logp = scores.logp
    device = logp.device
    rows, logp_old = path_rows(decisions, logp.shape[1])
    ref = _reference(decisions, logp.shape, device) if config.kl_coef > 0 else None
    first = logp[:, 0]
    position = minibatch.position
    direction = position_directions(first, position) if position is not None else None
    normaliser = minibatch.normaliser
    with timers.time("backward"):
        loss, metrics = factored_ppo_loss(
            logp,
            rows.to(device),
            logp_old.to(device),
            advantages.to(device=device, dtype=torch.float32),
            coefs=PPOCoefs.for_minibatch(config, minibatch.signal),
            normaliser=normaliser,
            logp_ref_levels=ref,
            label_mass=scores.label_mass.prod(-1),
            position_direction=direction,
        )
        if policy.value_head is not None:
            assert scores.hidden is not None
            value = policy.value_head(scores.hidden)  # (B,) float32
            target = targets.to(device=device, dtype=torch.float32)
            regression = value_loss(value, target, normaliser)
            loss = loss + config.vf_coef * regression
            metrics = {**metrics, "value_loss": regression.detach()}
        stepper.backward(loss, weight)
    out: dict[str, Any] = {**metrics, "loss": loss.detach()}
    if minibatch.positions:
        out["position_sums"] = PositionSums.of(first, minibatch.positions)
    return out


def level_stats(levels: Sequence[Sequence[float]]) -> dict[str, float]:
    """Rollout diagnostics of label trees from each decision's per-level label masses:
    the mean number of levels (``rollout_levels``) and the mean label mass at each level
    over the decisions that reach it (``rollout_label_mass_level_1``, ...). Empty when
    every decision was one level (a run whose menus all fit records nothing more)."""
    if not levels or max(len(masses) for masses in levels) <= 1:
        return {}
    out = {"rollout_levels": float(np.mean([len(masses) for masses in levels]))}
    for level in range(max(len(masses) for masses in levels)):
        reached = [masses[level] for masses in levels if len(masses) > level]
        out[f"rollout_label_mass_level_{level + 1}"] = float(np.mean(reached))
    return out
