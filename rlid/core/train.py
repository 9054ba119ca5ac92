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
from rlid.core.menu_update import (
    DecisionBatch,
    attach_reference_logprobs,
    level_stats,
    ppo_update,
)
from rlid.core.protocols import MenuPolicy
from rlid.core.records import Decision, ValueHead
from rlid.core.rollout import Episode, gathered_episode_stats
from rlid.core.seeds import make_reset_seeds
from rlid.engines.gap import decision_gap, gap_row
from rlid.engines.session import EngineSession, rescore_decisions
from rlid.lm import distributed as dist_
from rlid.lm.optim import Stepper
from rlid.lm.start_files import answered_labels
from rlid.lm.starts import base_model_path, load_run_model
from rlid.losses.mismatch import MismatchCorrection
from rlid.runs.log import RunLog


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


def plane_policy_factory(config: TrainConfig) -> Callable[..., MenuPolicy]:
    """``make_policy(model, tokenizer, interface, **kw)`` of the config's plane (rlid.config.registry)."""
    plane = get_plane(config.plane)

    def make_policy(model: Any, tokenizer: Any, interface: Any, **kw: Any) -> MenuPolicy:
        policy: MenuPolicy = plane.make_policy(
            config.replace(interface=interface), model, tokenizer, **kw
        )
        return policy  # decision / scoring: menu policies

    return make_policy


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
