"""Decision-level PPO: the training loop, readable top to bottom.

Sections per iteration (as in CleanRL's ppo.py): rollout -> advantages -> PPO
update -> logging/checkpoint. Departures from textbook PPO, and why:

* The policy is a distribution over the current menu's legal rows, read from the
  label-token logits of one forward pass (``rlid.decision.policy``); entropy and KL to the
  reference are exact sums over the menu, not sampled estimates.
* Rollouts are whole episodes in lockstep; all randomness of iteration ``i`` comes
  from generators seeded by ``(seed, i)``, so a resumed run replays exactly.
* ``advantage="group"`` is critic-free: episodes of the same game and seed form a
  group and every decision of an episode gets (return - group mean) [/ std], the
  episode-level counterpart of GRPO. The return is discounted, Σ_t gamma^t r_t (the
  token plane uses the same one), so among successes the shorter one is preferred;
  ``gamma=1`` gives the undiscounted sum. ``advantage="gae"`` uses a value head on the
  last hidden state and GAE(gamma, lambda); a truncated episode is bootstrapped with
  0 (its final state was never scored), which slightly under-values long episodes.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlid.config import TrainConfig
from rlid.config.budget import Budget
from rlid.config.registry import get_plane
from rlid.core.advantages import compute_advantages, shared_states
from rlid.core.loop import (
    HeldOut,
    RunContext,
    TrainState,
    begin_run,
    close_envs,
    make_envs,
    open_run,
    play_groups,
    reference_model,
    run_iterations,
    setup_hardware,
)
from rlid.core.protocols import MenuPolicy
from rlid.core.records import Decision, ValueHead
from rlid.core.rollout import Episode, gathered_episode_stats
from rlid.core.seeds import make_reset_seeds
from rlid.core.tree_update import (
    attach_path_reference,
    first_level_logp,
    has_paths,
    level_stats,
    tree_micro_step,
)
from rlid.engines.gap import decision_gap, gap_row
from rlid.engines.session import EngineSession, rescore_decisions
from rlid.lm import distributed as dist_
from rlid.lm.hardware import train_mode_without_dropout
from rlid.lm.optim import Stepper, budget_chunks, chunks, minibatches
from rlid.lm.start_files import answered_labels
from rlid.lm.starts import base_model_path, load_run_model
from rlid.losses.decision import (
    PositionSums,
    PPOCoefs,
    decision_ppo_loss,
    position_bias,
    position_directions,
    value_loss,
)
from rlid.losses.mismatch import MismatchCorrection
from rlid.runs.log import RunLog

FILLER = np.zeros(1, dtype=np.int64)  # a filler micro-step scores the rank's first decision


def largest_menu(env: Any, seeds: int = 4, steps: int = 20) -> int:
    """The most legal actions seen in ``seeds`` random walks of up to ``steps`` steps."""
    biggest = 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        _, info = env.reset(seed=seed)
        for _ in range(steps):
            legal = info["legal_actions"]
            biggest = max(biggest, len(legal))
            if not legal:
                break
            _, _, term, trunc, info = env.step(legal[int(rng.integers(len(legal)))])
            if term or trunc:
                break
    return biggest


def preflight_menu_sizes(
    env_list: list[Any],
    max_rows: int,
    interface: Any,
    seeds: int = 4,
    *,
    labels: Sequence[str] | None = None,
    answered: dict[str, int] | None = None,
    model: str = "",
) -> None:
    """Fail before training when the env's menus can exceed the label alphabet; warn when
    they show rows whose labels (``labels``, the policy's in order) the warm start
    ``model`` was never trained to answer with (``answered``: its ``pretrain.json``
    record): such rows are rarely picked. Menu sizes come from a short random walk."""
    if interface.overflow != "error" and (answered is None or labels is None):
        return
    biggest = largest_menu(env_list[0], seeds)
    if biggest > max_rows and interface.overflow == "error":
        raise ValueError(
            f"this env shows up to {biggest} legal actions but the label alphabet "
            f"{interface.labels!r} has only {max_rows} valid single-token labels for this "
            f"tokenizer; use --overflow tree (a label tree reaches every action), a larger "
            f"alphabet (e.g. --labels A-Za-z) or --overflow truncate"
        )
    if answered is not None and labels is not None:
        # the labels past the last one the start answered with (a gap before it is a
        # small corpus's chance, not a menu larger than any it saw)
        reach = max((i + 1 for i, label in enumerate(labels) if label in answered), default=0)
        never = list(labels[reach : min(biggest, max_rows)])
        if never:
            shown = f"menus of up to {biggest} rows"
            if biggest > max_rows and interface.overflow == "tree":
                shown += f" (read as label trees of at most {max_rows} rows per level)"
            print(
                f"rlid train: warning: this env shows {shown}, and the "
                f"warm start {model} was never trained to answer with a label past "
                f"{labels[reach - 1] if reach else 'none'} ({len(never)} of their labels: "
                f"{' '.join(never[:8])}{' ...' if len(never) > 8 else ''}; its "
                "pretrain.json, answered_labels): rows labelled so are rarely picked. A warm "
                "start built with rlid pretrain --labels auto --spread-labels 0.5 answers "
                "with every label",
                file=sys.stderr,
                flush=True,
            )


def _decision_stats(
    e: Episode, shared: dict[int, list[bool]]
) -> list[tuple[float, float, bool, list[float]]]:
    """Per decision of ``e``: rollout entropy, label mass, whether its state is shared,
    and the label mass of each level (label trees; one level for a flat menu)."""
    flags = shared.get(id(e), [False] * e.length)
    return [
        (d.entropy, d.label_mass, flag, [s.label_mass for s in getattr(d, "path", ())])
        for d, flag in zip(e.decisions, flags)
    ]


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
        self.logp_old = torch.tensor([d.logp for d in self.decisions])  # (N,)
        self.actions = torch.tensor([d.chosen for d in self.decisions])  # (N,)
        # log μ of the engine that played each decision (the trainer itself: π_old)
        self.logp_rollout = torch.tensor(
            [d.extra.get("logp_rollout", d.logp) for d in self.decisions]
        )  # (N,)


@dataclass(frozen=True)
class Minibatch:
    """What the micro-batches of one minibatch share.

    Attributes:
        normaliser: the minibatch's decision count (all ranks): every loss term's divisor.
        signal: some decision of the minibatch has a non-zero advantage.
        position: the position penalty's sums over the whole minibatch (None: no penalty).
        positions: menu positions of the position diagnostic (0: none, the scoring plane).
    """

    normaliser: int
    signal: bool
    position: PositionSums | None
    positions: int


def ppo_update(
    ctx: RunContext,
    policy: MenuPolicy,
    batch: DecisionBatch,
    stepper: Stepper,
    rng: np.random.Generator,
) -> dict[str, float]:
    """PPO epochs x minibatches over one iteration's decisions; returns mean metrics.

    Several processes: minibatches are drawn over the global decision list
    (``batch.owner``) with the same permutation on every rank; each rank's loss terms
    are divided by the *global* minibatch size and the gradients are summed over ranks,
    so every rank takes the same steps as one process would (a rank holding no member
    still joins the sum). ``ctx.parallel`` (its ``update`` block active:
    ``policy.model`` is the wrapped model) reduces the model's gradients in its
    backward (DDP / FSDP2); without it, or for parameters it does not wrap (the value
    head), :func:`rlid.lm.distributed.reduce_gradients` sums them before the step.

    Each minibatch is one optimizer step; its forward/backward runs in micro-batches
    of ``config.micro_batch_size`` decisions (and ``config.micro_batch_tokens`` token
    positions: :func:`micro_parts`) whose gradients accumulate, every loss
    term divided by the *minibatch's* decision count, so the step equals the one-batch
    step. A minibatch whose advantages are all zero carries no policy-gradient signal:
    it is skipped (with a value head only the value loss is kept), because an entropy /
    KL / label-mass term alone would get a full-size AdamW step (Adam normalises the
    gradient's scale away) and drive the policy by itself.
    """
    config, world, timers = ctx.config, ctx.world, ctx.timers
    parallel = ctx.parallel if ctx.parallel is not None else dist_.Parallel.unwrapped(world)
    owner = batch.owner if batch.owner is not None else np.arange(len(batch.decisions))
    held = owner >= 0
    # which global decisions carry advantage signal (a minibatch without any is skipped)
    flags = np.zeros(len(owner))
    flags[held] = (batch.advantages.detach().cpu()[owner[held]] != 0).numpy()
    nonzero = dist_.all_sum(flags, world).numpy() > 0
    if not nonzero.any() and policy.value_head is None:
        # Nothing to learn from (e.g. every group had equal returns): an AdamW step on a
        # zero gradient would still move the parameters through its momentum, and a
        # regulariser alone would be amplified to a full step.
        return {"skipped_update": 1.0}
    # label positions exist on the decision plane only (scoring: no labels, no bound)
    positions = policy.max_menu_size if config.plane == "decision" else 0
    names = update_metric_names(config, policy)
    sums: dict[str, float] = {}
    count = skipped = 0
    stop = False
    model = getattr(policy, "model", None)
    checkpointing = config.gradient_checkpointing and model is not None
    with train_mode_without_dropout(model, enabled=checkpointing):  # type: ignore[arg-type]
        for _ in range(config.epochs):
            order = rng.permutation(len(owner))
            for chosen in minibatches(order, config.minibatch_size):
                signal = bool(nonzero[chosen].any())
                if not signal and policy.value_head is None:
                    skipped += 1
                    continue
                members = owner[chosen]
                idx = members[members >= 0]  # the members this rank holds
                parts = micro_parts(config, policy, batch.decisions, idx)
                whole = None  # the penalty's sums over the minibatch, before the step
                if config.position_coef > 0 and signal:
                    with timers.time("forward"):
                        whole = _position_sums(ctx, policy, batch.decisions, idx, parts, positions)
                minibatch = Minibatch(len(chosen), signal, whole, positions)
                stepper.zero_grad()
                totals = dict.fromkeys(names, 0.0)
                seen = PositionSums.zeros(positions) if positions else None  # diagnostic
                for part, context in parallel.micro_plan(parts):
                    # a filler step (part None) keeps the wrapper's collectives matched
                    filler = part is None
                    with context:
                        metrics = _decision_micro_step(
                            ctx, policy, batch, FILLER if filler else idx[part], minibatch,
                            stepper, weight=0.0 if filler else 1.0,
                        )  # fmt: skip
                    part_sums = metrics.pop("position_sums", None)
                    if seen is not None and not filler:
                        seen = seen + part_sums
                    for k, v in metrics.items():
                        totals[k] = totals.get(k, 0.0) + (0.0 if filler else float(v))
                with timers.time("backward"):
                    parallel.reduce_rest(stepper.params)
                    grad_norm = stepper.step()
                ctx.budget.optimizer_steps += 1
                # every term is a sum / the global minibatch size: sum over ranks
                reduced = dist_.all_sum([totals.get(k, 0.0) for k in names], world)
                step_metrics = {k: float(v) for k, v in zip(names, reduced)}
                step_metrics["grad_norm"] = float(grad_norm)
                if seen is not None:
                    seen = PositionSums.unflat(dist_.all_sum(seen.flat(), world))
                    step_metrics["position_bias"] = position_bias(seen)
                for name, value in step_metrics.items():
                    sums[name] = sums.get(name, 0.0) + value
                count += 1
                if config.target_kl is not None and step_metrics["approx_kl"] > config.target_kl:
                    stop = True  # the all-reduced KL: every rank stops at the same step
                    break
            if stop:
                break
    out = {k: v / max(count, 1) for k, v in sums.items()}
    out["early_stop"] = float(stop)
    if skipped:
        out["skipped_minibatches"] = float(skipped)
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


def _position_sums(
    ctx: RunContext,
    policy: MenuPolicy,
    decisions: list[Decision],
    idx: np.ndarray,
    parts: list[slice],
    width: int,
) -> PositionSums:
    """The position penalty's sums (``width`` positions) over the whole minibatch
    (every micro-batch ``parts`` of ``idx``, every rank) at the current parameters: a
    no-grad pass before its forward/backward, so the micro-batched, N-process step is
    the one-batch step. The same on every rank."""
    world = ctx.world
    parallel = ctx.parallel if ctx.parallel is not None else dist_.Parallel.unwrapped(world)
    sums = PositionSums.zeros(width)
    with torch.no_grad():
        # the update's micro-plan: a sharded model's forwards are collective (fillers)
        for part, context in parallel.micro_plan(parts):
            batch = [decisions[i] for i in (idx[part] if part is not None else FILLER)]
            with context:
                logp_all = first_level_logp(policy, batch)  # label trees: their first menu
            if part is not None:
                sums = sums + PositionSums.of(logp_all, width)
    return PositionSums.unflat(dist_.all_sum(sums.flat(), world))


def _decision_micro_step(
    ctx: RunContext,
    policy: MenuPolicy,
    batch: DecisionBatch,
    idx: np.ndarray,
    minibatch: Minibatch,
    stepper: Stepper,
    weight: float = 1.0,
) -> dict[str, Any]:
    """Forward + backward of the micro-batch ``idx``; its loss terms are sums / the
    minibatch's size, so micro-batch losses and metrics add up to the minibatch's.
    ``weight=0`` (a filler step of a wrapped model) backpropagates a zero loss. With
    ``minibatch.positions`` the micro-batch's own position sums come back as
    ``position_sums``."""
    config, timers = ctx.config, ctx.timers
    decisions = [batch.decisions[i] for i in idx]
    if has_paths(decisions):  # label trees: PPO on the joint action (rlid.core.tree_update)
        return tree_micro_step(
            config, timers, policy, decisions, batch.advantages[idx], batch.targets[idx],
            minibatch, stepper, weight,
        )  # fmt: skip
    with timers.time("forward"):
        logp_all, label_mass, hidden = policy.score(decisions)  # (B, K), (B,), (B, d)
    device = logp_all.device
    ref = None
    if config.kl_coef > 0:
        ref = torch.full_like(logp_all, float("-inf"))
        for b, d in enumerate(decisions):
            row = d.extra["logp_ref_all"]
            ref[b, : len(row)] = torch.tensor(row, device=device)
    position = minibatch.position
    direction = position_directions(logp_all, position) if position is not None else None
    normaliser = minibatch.normaliser
    with timers.time("backward"):
        # without policy-gradient signal (value head only) no regulariser may act alone
        loss, metrics = decision_ppo_loss(
            logp_all,
            batch.actions[idx].to(device),
            batch.logp_old[idx].to(device),
            batch.advantages[idx].to(device=device, dtype=torch.float32),
            coefs=PPOCoefs.for_minibatch(config, minibatch.signal),
            normaliser=normaliser,
            logp_ref_all=ref,
            label_mass=label_mass,
            position_direction=direction,
            logp_rollout=batch.logp_rollout[idx].to(device),
            correction=MismatchCorrection(config.mismatch),
        )
        if policy.value_head is not None:
            value = policy.value_head(hidden)  # (B,) float32
            target = batch.targets[idx].to(device=device, dtype=torch.float32)
            regression = value_loss(value, target, normaliser)
            loss = loss + config.vf_coef * regression
            metrics = {**metrics, "value_loss": regression.detach()}
        stepper.backward(loss, weight)
    out: dict[str, Any] = {**metrics, "loss": loss.detach()}
    if minibatch.positions:
        out["position_sums"] = PositionSums.of(logp_all, minibatch.positions)
    return out


MISMATCH_METRIC = {"tis": "tis_truncated_frac", "icepop": "icepop_masked_frac"}
"""The update metric of each mismatch correction (:func:`rlid.losses.decision.decision_ppo_loss`)."""


def plane_policy_factory(config: TrainConfig) -> Callable[..., MenuPolicy]:
    """``make_policy(model, tokenizer, interface, **kw)`` of the config's plane (rlid.config.registry)."""
    plane = get_plane(config.plane)

    def make_policy(model: Any, tokenizer: Any, interface: Any, **kw: Any) -> MenuPolicy:
        policy: MenuPolicy = plane.make_policy(
            config.replace(interface=interface), model, tokenizer, **kw
        )
        return policy  # decision / scoring: menu policies

    return make_policy


def attach_reference_logprobs(
    ref_policy: MenuPolicy, episodes: list[Episode], micro_batch_size: int | None
) -> None:
    """Store the KL reference's log-probabilities over each decision's menu rows in
    ``extra["logp_ref_all"]`` (scored in micro-batches, without gradients)."""
    for e in episodes:
        for part in chunks(len(e.decisions), micro_batch_size):
            if has_paths(e.decisions[part]):  # label trees: the reference on each path
                attach_path_reference(ref_policy, e.decisions[part])
                continue
            with torch.no_grad():
                logp_ref, _, _ = ref_policy.score(e.decisions[part])
            for d, row in zip(e.decisions[part], logp_ref):
                d.extra["logp_ref_all"] = row[: d.num_rows].tolist()


def iteration_row(
    ctx: RunContext, iteration: int, episodes: list[Episode], update: dict[str, float]
) -> dict[str, Any]:
    """The iteration's metrics row: episode statistics and rollout diagnostics over all
    ranks, then the update's metrics."""
    config = ctx.config
    shared = shared_states(episodes) if config.step_group_coef > 0 else {}
    stats, per_episode = gathered_episode_stats(
        episodes, ctx.world, extra=functools.partial(_decision_stats, shared=shared)
    )
    rollout = [triple for triples in per_episode for triple in triples]
    row = {"iteration": iteration, **stats, **update}
    row["rollout_entropy"] = float(np.mean([h for h, *_ in rollout]))
    row["rollout_label_mass"] = float(np.mean([m for _, m, *_ in rollout]))
    if config.step_group_coef > 0:  # how often a state recurs within its group
        row["shared_states"] = float(np.mean([f for _, _, f, _ in rollout]))
    row.update(level_stats([levels for *_, levels in rollout]))  # label trees only
    return row


def train(
    config: TrainConfig | None,
    out: Path,
    *,
    resume: bool = False,
    make_policy: Callable[..., Any] | None = None,
    progress: bool = True,
) -> RunLog:
    """Train with decision-level PPO; everything lands in the run directory ``out``.

    ``make_policy(model, tokenizer, interface, value_head=..., budget=..., timers=...)``
    builds the menu policy (default: the config's plane from :mod:`rlid.config.registry`, i.e.
    :class:`DecisionPolicy` or the scoring plane's policy).
    """
    ctx = open_run(config, out, resume=resume)
    config, world, log = ctx.config, ctx.world, ctx.log

    model, tokenizer = load_run_model(config, log)
    model, precision, scaler = setup_hardware(config, model)
    model.eval()  # no dropout: rollouts and updates see the same function
    value_head = None
    if config.advantage == "gae":  # float32 on the model's device
        value_head = ValueHead(model.config.hidden_size).to(precision.device)
    make_policy = make_policy or plane_policy_factory(config)
    policy = make_policy(
        model, tokenizer, config.interface, value_head=value_head, budget=ctx.budget,
        timers=ctx.timers, autocast=precision.autocast,
    )  # fmt: skip
    train_envs = make_envs(config, "train", config.group_size)  # one group at a time
    held_out = HeldOut(
        policy, make_envs(config, "heldout", min(config.eval_episodes, 16) or 1), progress
    )
    # the decision plane's labels, checked against the start's once (the writer, new runs)
    label_set = getattr(policy, "labels", None) if world.is_writer and not log.resuming else None
    labels = label_set.labels if label_set is not None else None
    preflight_menu_sizes(
        train_envs, policy.max_menu_size, config.interface,
        labels=labels,
        answered=answered_labels(base_model_path(config)) if labels is not None else None,
        model=str(config.model),
    )  # fmt: skip

    ref_policy = None
    if config.kl_coef > 0:  # (a copy of the model is taken before it is wrapped)
        ref_model = reference_model(ctx, model)
        ref_policy = make_policy(ref_model, tokenizer, config.interface, budget=Budget())
    # several processes: the update's model is wrapped (DDP / FSDP2); rollouts use `model`
    parallel = ctx.parallel = dist_.Parallel(model, world, config.parallel, precision.device)
    params = list(parallel.params)  # LoRA: adapters only; FSDP2: the sharded parameters
    params += list(value_head.parameters()) if value_head else []
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    stepper = Stepper(optimizer, params, config.max_grad_norm, scaler)
    state = TrainState(model, tokenizer, optimizer, value_head)

    engine: EngineSession | None = None  # --rollout-engine vllm: started after begin_run
    acting = policy  # who plays the rollouts: the policy, or the same policy on the engine

    def step(iteration: int, rng: np.random.Generator) -> dict[str, Any]:
        # 1. rollout: groups_per_iter games (this rank's share), each played group_size times
        episodes = play_groups(
            ctx, train_envs, acting, iteration, make_reset_seeds(config, iteration)
        )
        if engine is not None:  # the engine's μ is recorded; the ratio needs the trainer's
            with ctx.timers.time("rescore"):
                rescore_decisions(
                    policy, engine_played(episodes),
                    config.micro_batch_size or config.minibatch_size,
                )  # fmt: skip
        if ref_policy is not None:
            attach_reference_logprobs(ref_policy, episodes, config.micro_batch_size)
        # 2. advantages
        decisions, advantages, targets = compute_advantages(episodes, config)
        # 3. PPO update (minibatches over the global decision list)
        counts = {g: 0 for g in world.my_groups(config.groups_per_iter)}
        for e in episodes:
            counts[e.group] += e.length
        owner = dist_.global_index(counts, config.groups_per_iter, world)
        batch = DecisionBatch(decisions, advantages, targets, owner)
        with parallel.update(policy):  # policy.model: the wrapped model, for this block
            update = ppo_update(ctx, policy, batch, stepper, rng)
        # 4. statistics over all ranks (the loop logs, evaluates and checkpoints)
        row = iteration_row(ctx, iteration, episodes, update)
        if engine is not None:  # 5. the engine gets the new weights, then the gap is logged
            row["engine_gap"] = engine_step(ctx, engine, model, episodes)
        return row

    start = begin_run(ctx, state, held_out)
    if config.rollout_engine == "vllm":
        engine = EngineSession.start(config, model, tokenizer)
        acting = make_policy(
            model, tokenizer, config.interface, budget=ctx.budget, timers=ctx.timers,
            autocast=precision.autocast, engine=engine.engine,
        )  # fmt: skip
    try:
        run_iterations(ctx, step, state=state, held_out=held_out, start=start, progress=progress)
    finally:
        if engine is not None:
            engine.close()
    close_envs(train_envs, held_out.envs)
    return log


def engine_step(
    ctx: RunContext, engine: EngineSession, model: torch.nn.Module, episodes: list[Episode]
) -> dict[str, Any]:
    """After the update: sync the engine (then its probe check), and the iteration's
    gap between the engine's μ and the trainer's π_old over all ranks' decisions
    (:mod:`rlid.engines.gap`)."""
    with ctx.timers.time("sync"):
        synced = engine.sync(model)
    gap = decision_gap(engine_played(episodes), MismatchCorrection(ctx.config.mismatch))
    return {**gap_row(gap, ctx.world), "probe_gap": synced["probe_gap"]}


def engine_played(episodes: list[Episode]) -> list[Decision]:
    """The decisions the engine played. A label tree's levels (a menu larger than the
    label alphabet) are read by the trainer itself, so their ``logp`` is already π_old
    and they carry no ``logp_rollout`` (their ratio π_old/μ is 1)."""
    return [d for e in episodes for d in e.decisions if "logp_rollout" in d.extra]
