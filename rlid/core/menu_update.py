"""Decision-level PPO's update for any menu policy (the decision and scoring planes).

One micro-step for every decision: a flat menu is a label tree of one level. A
micro-batch is re-scored (``policy.score`` for one-level menus; ``policy.score_paths``
when some decision is a label-tree path: one forward per sequence reads every level's
answer position), seen as levels (B, D, W), and trained with
:func:`rlid.losses.decision.decision_ppo_loss` on the joint action. The loop around it
(epochs, minibatches, micro-batches, the optimizer step) is :func:`rlid.core.update.run_update`.

The position penalty (``position_coef``, off by default) is the one part with state
across micro-batches: :class:`PositionTerm` keeps it in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rlid.config import TrainConfig
from rlid.core.protocols import MenuPolicy
from rlid.core.records import Decision
from rlid.core.update import run_update
from rlid.lm import distributed as dist_
from rlid.lm.optim import Stepper, budget_chunks, chunks
from rlid.losses.decision import PPOCoefs, decision_ppo_loss, value_loss
from rlid.losses.mismatch import MismatchCorrection
from rlid.losses.position import PositionSums, position_bias, position_directions

FILLER = np.zeros(1, dtype=np.int64)  # a filler micro-step scores the rank's first decision

MISMATCH_METRIC = {"tis": "tis_truncated_frac", "icepop": "icepop_masked_frac"}
"""The update metric of each mismatch correction (:func:`rlid.losses.decision.decision_ppo_loss`)."""


@dataclass
class DecisionBatch:
    """One iteration's decisions as the PPO update reads them.

    Attributes:
        decisions: this process's decisions (its groups, in order).
        advantages: (N,) float32, one per decision.
        targets: (N,) value targets (returns), one per decision.
        owner: (N_global,) maps the global decision list (all ranks, groups in order)
            to indices into ``decisions`` (-1: held by another rank); None: this process
            holds every decision.
    """

    decisions: list[Decision]
    advantages: torch.Tensor
    targets: torch.Tensor
    owner: np.ndarray | None = None

    def __post_init__(self) -> None:
        # log μ of the engine that played each decision (the trainer itself: π_old)
        self.logp_rollout = torch.tensor(
            [d.extra.get("logp_rollout", d.logp) for d in self.decisions]
        )  # (N,)


def has_paths(decisions: Sequence[Decision]) -> bool:
    """Whether some decision is a label-tree path (more than one level)."""
    return any(getattr(d, "path", ()) for d in decisions)


def path_rows(decisions: Sequence[Decision], depth: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Chosen rows (B, D) long (-1 where absent) and their rollout log-probs (B, D); a
    flat decision is the path of one level."""
    rows = torch.full((len(decisions), depth), -1, dtype=torch.long)
    logp_old = torch.zeros((len(decisions), depth), dtype=torch.float32)
    for b, d in enumerate(decisions):
        steps = [(s.row, s.logp) for s in d.path] if d.path else [(d.chosen, d.logp)]
        rows[b, : len(steps)] = torch.tensor([r for r, _ in steps])
        logp_old[b, : len(steps)] = torch.tensor([lp for _, lp in steps], dtype=torch.float32)
    return rows, logp_old


@dataclass(frozen=True)
class LevelScores:
    """A micro-batch re-scored at the current parameters.

    Attributes:
        logp: (B, D, W) log π over each level's rows (-inf padded; D = 1: flat menus).
        label_mass: (B,) the product of the levels' label masses.
        hidden: (B, d) the prompt's last hidden state (the value head's input).
    """

    logp: torch.Tensor
    label_mass: torch.Tensor
    hidden: torch.Tensor | None


def score_levels(policy: Any, decisions: list[Decision]) -> LevelScores:
    """``policy.score`` for one-level menus, ``policy.score_paths`` where some decision
    is a label-tree path, as levels (B, D, W)."""
    if has_paths(decisions):
        paths = policy.score_paths(decisions)  # logp (B, D, W), label_mass (B, D)
        return LevelScores(paths.logp, paths.label_mass.prod(-1), paths.hidden)
    logp_all, label_mass, hidden = policy.score(decisions)  # (B, K), (B,), (B, d)
    return LevelScores(logp_all[:, None], label_mass, hidden)


def first_level_logp(policy: Any, decisions: list[Decision]) -> torch.Tensor:
    """The first menu's log-probs (B, W), the rows whose label positions the position
    penalty measures."""
    return score_levels(policy, decisions).logp[:, 0]


def attach_reference_logprobs(
    ref_policy: MenuPolicy, episodes: Sequence[Any], micro_batch_size: int | None
) -> None:
    """Store the KL reference's log-probabilities on each decision's own menus, per
    level, in ``extra["logp_ref_levels"]`` (each episode's decisions scored in
    micro-batches, without gradients)."""
    for e in episodes:
        for part in chunks(len(e.decisions), micro_batch_size):
            batch = e.decisions[part]
            with torch.no_grad():
                ref = score_levels(ref_policy, batch).logp  # (B, D, W)
            for b, d in enumerate(batch):
                widths = [len(s.label_ids) for s in d.path] or [d.num_rows]
                d.extra["logp_ref_levels"] = [
                    ref[b, level, :w].tolist() for level, w in enumerate(widths)
                ]


def reference_levels(
    decisions: list[Decision], shape: torch.Size, device: torch.device
) -> torch.Tensor:
    """The stored reference log-probs (``attach_reference_logprobs``) as (B, D, W)."""
    ref = torch.full(shape, float("-inf"), device=device)
    for b, d in enumerate(decisions):
        for level, row in enumerate(d.extra["logp_ref_levels"]):
            ref[b, level, : len(row)] = torch.tensor(row, device=device)
    return ref


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


def update_tokens(decision: Decision) -> int:
    """Token positions re-scoring a menu decision runs (``micro_batch_tokens``): its
    prompt once per level of its label-tree path (a flat menu: once)."""
    return len(decision.prompt_ids) * max(len(decision.path), 1)


def micro_parts(
    config: TrainConfig, policy: MenuPolicy, decisions: list[Decision], idx: np.ndarray
) -> list[slice]:
    """The micro-batches of a minibatch's held decisions ``idx``: at most
    ``micro_batch_size`` decisions (unset: the minibatch) and, with
    ``micro_batch_tokens``, at most that many token positions by the policy's
    ``update_tokens`` (the scoring plane counts its actions), else :func:`update_tokens`."""
    micro = config.micro_batch_size or config.minibatch_size
    if config.micro_batch_tokens is None:
        return chunks(len(idx), micro)
    cost = getattr(policy, "update_tokens", update_tokens)
    return budget_chunks([cost(decisions[i]) for i in idx], micro, config.micro_batch_tokens)


def update_metric_names(config: TrainConfig, policy: MenuPolicy) -> list[str]:
    """The per-minibatch metrics of ``ppo_update``, known before any forward pass (a rank
    holding no member of a minibatch still reports zeros for each)."""
    names = ["policy_loss", "clip_frac", "approx_kl", "entropy", "label_marginal_kl_uniform"]
    names += ["kl_ref"] if config.kl_coef > 0 else []
    names += ["label_mass"]
    names += ["label_mass_loss"] if config.label_mass_coef > 0 else []
    names += ["value_loss"] if policy.value_head is not None else []
    names += [MISMATCH_METRIC[config.mismatch]] if config.mismatch in MISMATCH_METRIC else []
    return names + ["loss"]


class PositionTerm:
    """The position penalty and its diagnostic (``position_bias``), over ``width`` label
    positions (0: the policy shows no labels, e.g. the scoring plane).

    The penalty needs the minibatch's sums at the current parameters before any
    micro-batch's backward (:meth:`sums`, a no-grad pass over the same micro-plan), so
    that micro-batched and N-process steps equal the one-batch step; each micro-batch
    then gets its per-decision directions (:meth:`directions`). The diagnostic adds up
    every micro-batch's own sums (:meth:`diagnostic`).
    """

    def __init__(self, ctx: Any, policy: Any, coef: float, width: int) -> None:
        self.ctx, self.policy, self.coef, self.width = ctx, policy, coef, width

    def sums(
        self, decisions: list[Decision], idx: np.ndarray, plan: list[slice], signal: bool
    ) -> PositionSums | None:
        """The penalty's sums over the minibatch (every micro-batch, every rank), or None
        where the penalty is off or the minibatch has no signal."""
        if not (self.coef > 0 and signal):
            return None
        world, timers = self.ctx.world, self.ctx.timers
        parallel = self.ctx.parallel or dist_.Parallel.unwrapped(world)
        sums = PositionSums.zeros(self.width)
        with timers.time("forward"), torch.no_grad():
            # the update's micro-plan: a sharded model's forwards are collective (fillers)
            for part, context in parallel.micro_plan(plan):
                batch = [decisions[i] for i in (idx[part] if part is not None else FILLER)]
                with context:
                    logp_all = first_level_logp(self.policy, batch)
                if part is not None:
                    sums = sums + PositionSums.of(logp_all, self.width)
        return PositionSums.unflat(dist_.all_sum(sums.flat(), world))

    @staticmethod
    def directions(first: torch.Tensor, sums: PositionSums | None) -> torch.Tensor | None:
        """(B, W) directions of level 1's rows ``first`` (None: no penalty)."""
        return position_directions(first, sums) if sums is not None else None

    def diagnostic(self, parts: list[PositionSums]) -> dict[str, float]:
        """``position_bias`` of the minibatch from its micro-batches' sums (all ranks)."""
        if not self.width:
            return {}
        seen = PositionSums.zeros(self.width)
        for part in parts:
            seen = seen + part
        seen = PositionSums.unflat(dist_.all_sum(seen.flat(), self.ctx.world))
        return {"position_bias": position_bias(seen)}


@dataclass(frozen=True)
class MenuMinibatch:
    """What the micro-steps of one minibatch share.

    Attributes:
        normaliser: the minibatch's decision count (all ranks): every loss term's divisor.
        signal: some decision of the minibatch has a non-zero advantage.
        position: the position penalty's sums over the whole minibatch (None: no penalty).
    """

    normaliser: int
    signal: bool
    position: PositionSums | None


class MenuSteps:
    """Decision-level PPO's part of :func:`rlid.core.update.run_update`."""

    def __init__(
        self,
        ctx: Any,
        policy: MenuPolicy,
        batch: DecisionBatch,
        owner: np.ndarray,
        stepper: Stepper,
    ) -> None:
        self.ctx, self.config, self.policy, self.batch = ctx, ctx.config, policy, batch
        self.stepper = stepper
        self.owner = owner
        self.keeps_without_signal = policy.value_head is not None
        self.names = update_metric_names(self.config, policy)
        # label positions exist where the policy shows labels (the scoring plane: none)
        width = policy.max_menu_size if getattr(policy, "labels", None) is not None else 0
        self.position = PositionTerm(ctx, policy, self.config.position_coef, width)

    def signal(self) -> np.ndarray:
        held = self.owner >= 0
        flags = np.zeros(len(self.owner))
        flags[held] = (self.batch.advantages.detach().cpu()[self.owner[held]] != 0).numpy()
        return dist_.all_sum(flags, self.ctx.world).numpy() > 0

    def micro_plan(self, idx: np.ndarray) -> list[slice]:
        return micro_parts(self.config, self.policy, self.batch.decisions, idx)

    def begin(
        self, chosen: np.ndarray, idx: np.ndarray, plan: list[slice], signal: bool
    ) -> MenuMinibatch:
        sums = self.position.sums(self.batch.decisions, idx, plan, signal)
        return MenuMinibatch(len(chosen), signal, sums)

    def micro_step(self, minibatch: MenuMinibatch, sub: np.ndarray | None) -> dict[str, Any]:
        """Forward + backward of decisions ``sub`` (None: a filler, loss times 0); every
        loss term is a sum divided by the minibatch's size, so micro-batch losses and
        metrics add up to the minibatch's."""
        config, timers, batch = self.config, self.ctx.timers, self.batch
        idx = FILLER if sub is None else sub
        decisions = [batch.decisions[i] for i in idx]
        with timers.time("forward"):
            scores = score_levels(self.policy, decisions)
        logp = scores.logp  # (B, D, W)
        device = logp.device
        rows, logp_old = path_rows(decisions, logp.shape[1])
        ref = reference_levels(decisions, logp.shape, device) if config.kl_coef > 0 else None
        first = logp[:, 0]
        normaliser = minibatch.normaliser
        with timers.time("backward"):
            loss, metrics = decision_ppo_loss(
                logp,
                rows.to(device),
                logp_old.to(device),
                batch.advantages[idx].to(device=device, dtype=torch.float32),
                coefs=PPOCoefs.for_minibatch(config, minibatch.signal),
                normaliser=normaliser,
                logp_ref=ref,
                label_mass=scores.label_mass,
                position_direction=PositionTerm.directions(first, minibatch.position),
                logp_rollout=batch.logp_rollout[idx].to(device),
                correction=MismatchCorrection(config.mismatch),
            )
            if self.policy.value_head is not None:
                assert scores.hidden is not None
                value = self.policy.value_head(scores.hidden)  # (B,) float32
                target = batch.targets[idx].to(device=device, dtype=torch.float32)
                regression = value_loss(value, target, normaliser)
                loss = loss + config.vf_coef * regression
                metrics = {**metrics, "value_loss": regression.detach()}
            self.stepper.backward(loss, 0.0 if sub is None else 1.0)
        out: dict[str, Any] = {**metrics, "loss": loss.detach()}
        if self.position.width and sub is not None:
            out["position_sums"] = PositionSums.of(first, self.position.width)
        return out

    def metrics(
        self,
        minibatch: MenuMinibatch,
        steps: list[tuple[np.ndarray | None, Any]],
        grad_norm: float,
    ) -> dict[str, float]:
        """Every term is a sum / the global minibatch size: summed over micro-batches
        and ranks."""
        totals = dict.fromkeys(self.names, 0.0)
        for sub, metrics in steps:
            for k, v in metrics.items():
                if k != "position_sums":  # a filler step counts 0
                    totals[k] = totals.get(k, 0.0) + (0.0 if sub is None else float(v))
        reduced = dist_.all_sum([totals.get(k, 0.0) for k in self.names], self.ctx.world)
        row = {k: float(v) for k, v in zip(self.names, reduced)}
        row["grad_norm"] = grad_norm
        parts = [m["position_sums"] for sub, m in steps if sub is not None and "position_sums" in m]
        row.update(self.position.diagnostic(parts))
        return row


def ppo_update(
    ctx: Any,
    policy: MenuPolicy,
    batch: DecisionBatch,
    stepper: Stepper,
    rng: np.random.Generator,
) -> dict[str, float]:
    """PPO epochs x minibatches over one iteration's decisions; returns mean metrics
    (:func:`rlid.core.update.run_update` with :class:`MenuSteps`).

    Several processes: ``batch.owner`` maps the global decision list to this rank's
    decisions; each rank's loss terms are divided by the *global* minibatch size and the
    gradients are summed over ranks, so every rank takes the same steps as one process
    would. ``ctx.parallel`` (its ``update`` block active: ``policy.model`` is the
    wrapped model) reduces the model's gradients in its backward (DDP / FSDP2); the
    value head's are summed before the step.
    """
    owner = batch.owner if batch.owner is not None else np.arange(len(batch.decisions))
    steps = MenuSteps(ctx, policy, batch, owner, stepper)
    return run_update(ctx, steps, stepper, rng, getattr(policy, "model", None))
