"""Decision-level PPO: the training loop, readable top to bottom.

Sections per iteration (as in CleanRL's ppo.py): rollout -> advantages -> PPO
update -> logging/checkpoint. Departures from textbook PPO, and why:

* The policy is a distribution over the current menu's legal rows, read from the
  label-token logits of one forward pass (``rlid.policy``); entropy and KL to the
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

import copy
import functools
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

import envs as envs_pkg
from menus import resolve_template
from rlid import distributed as dist_
from rlid.advantages import (
    discounted_returns,
    episode_return,
    gae,
    group_relative_advantages,
    next_values_from,
)
from rlid.budget import Budget, Timers
from rlid.config import TrainConfig
from rlid.distributed import World
from rlid.env_workers import WorkerEnvs
from rlid.hardware import (
    OffloadedModel,
    Precision,
    Stepper,
    cuda_memory_row,
    enable_gradient_checkpointing,
    resolve_device,
    train_mode_without_dropout,
)
from rlid.limits import check_machine_limits
from rlid.lora import AdapterDisabled, base_model_path, load_run_model, own_memory
from rlid.planes import get_plane
from rlid.policy import Decision, ValueHead, chunks
from rlid.ppo import (
    PositionSums,
    decision_ppo_loss,
    minibatches,
    position_bias,
    position_directions,
)
from rlid.pretrain import answered_labels
from rlid.protocols import CausalLM, MenuPolicy
from rlid.rollout import Episode, collect_episodes, episode_stats
from rlid.runs.dir import rng_state
from rlid.runs.log import RunLog
from rlid.runs.stop import RunStopped, StopSignals

EVAL_SEED_BASE = 7_000_000  # held-out evaluation resets: the same games before and after
FILLER = np.zeros(1, dtype=np.int64)  # a filler micro-step scores the rank's first decision


def iteration_rngs(
    seed: int, iteration: int, stream: int = 0
) -> tuple[np.random.Generator, torch.Generator]:
    """All randomness of one iteration, derived from (seed, iteration, stream).

    Stream 0 is training; evaluation uses its own streams so that evaluating never
    shifts the randomness of training.
    """
    rng = np.random.default_rng([seed, iteration, stream])
    gen = torch.Generator().manual_seed(int(rng.integers(2**62)))
    return rng, gen


def make_envs(config: TrainConfig, split: str, count: int) -> Any:
    """``count`` envs of the config: a list, or with ``env_workers > 0`` a
    :class:`rlid.env_workers.WorkerEnvs` (list-like: ``len``, slices, ``[i]``)."""
    options = {**config.env_options, "split": split}
    if config.env_workers > 0:
        return WorkerEnvs(config.env, options, count, workers=config.env_workers)
    return [envs_pkg.make(config.env, **options) for _ in range(count)]


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
            f"tokenizer; use a larger alphabet (e.g. --labels A-Za-z) or --overflow truncate"
        )
    if answered is not None and labels is not None:
        # the labels past the last one the start answered with (a gap before it is a
        # small corpus's chance, not a menu larger than any it saw)
        reach = max((i + 1 for i, label in enumerate(labels) if label in answered), default=0)
        never = list(labels[reach : min(biggest, max_rows)])
        if never:
            print(
                f"rlid train: warning: this env shows menus of up to {biggest} rows, and the "
                f"warm start {model} was never trained to answer with a label past "
                f"{labels[reach - 1] if reach else 'none'} ({len(never)} of their labels: "
                f"{' '.join(never[:8])}{' ...' if len(never) > 8 else ''}; its "
                "pretrain.json, answered_labels): rows labelled so are rarely picked. A warm "
                "start built with rlid pretrain --labels auto --spread-labels 0.5 answers "
                "with every label",
                file=sys.stderr,
                flush=True,
            )


def close_envs(*env_lists: Any) -> None:
    """Stop env worker processes (a plain env list needs nothing)."""
    for env_list in env_lists:
        close = getattr(env_list, "close", None)
        if callable(close):
            close()


def make_reset_seeds(config: TrainConfig, iteration: int) -> tuple[list[int], list[int]]:
    """Reset seeds and group ids: group g plays one game group_size times."""
    rng = np.random.default_rng([config.seed, iteration, 2])
    group_seeds = rng.integers(0, 2**31 - 1, size=config.groups_per_iter)
    seeds = [int(s) for s in group_seeds for _ in range(config.group_size)]
    groups = [g for g in range(config.groups_per_iter) for _ in range(config.group_size)]
    return seeds, groups


def group_rngs(
    seed: int, iteration: int, group: int, round_: int = 0
) -> tuple[np.random.Generator, torch.Generator]:
    """The sampling randomness of one group: from (seed, iteration, group), never the rank."""
    rng = np.random.default_rng([seed, iteration, 4, round_, group])
    gen = torch.Generator().manual_seed(int(rng.integers(2**62)))
    return rng, gen


def play_groups(
    env_list: list[Any],
    policy: Any,
    seeds: list[int],
    groups: list[int],
    *,
    config: TrainConfig,
    iteration: int,
    world: World,
    round_: int = 0,
    budget: Budget,
    timers: Timers,
) -> list[Episode]:
    """Play this rank's groups (g mod world size == rank), each with its own randomness.

    ``seeds`` / ``groups`` list every episode of the iteration (all ranks). A group's
    episodes run in lockstep with their own generators, so the episodes do not depend
    on which process plays them or which other groups it plays.
    """
    mine = set(world.my_groups(max(groups) + 1 if groups else 0))
    episodes: list[Episode] = []
    for g in dict.fromkeys(groups):
        if g not in mine:
            continue
        group_seeds = [s for s, h in zip(seeds, groups) if h == g]
        rng, gen = group_rngs(config.seed, iteration, g, round_)
        episodes += collect_episodes(
            env_list[: len(group_seeds)], policy, group_seeds, [g] * len(group_seeds),
            interface=config.interface, rng=rng, generator=gen,
            temperature=config.temperature, budget=budget, timers=timers,
        )  # fmt: skip
    return episodes


def gathered_episode_stats(
    episodes: list[Episode], world: World, extra: Callable[[Episode], Any] | None = None
) -> tuple[dict[str, float], list[Any]]:
    """``episode_stats`` over all ranks' episodes (in group order, as one process has them).

    ``extra(e)`` is gathered per episode alongside (e.g. per-decision rollout entropy).
    """
    if not world.distributed:
        return episode_stats(episodes), [extra(e) for e in episodes] if extra else []
    light = [
        (e.group, Episode(**{**e.__dict__, "decisions": []}), extra(e) if extra else None)
        for e in episodes
    ]
    everyone = [item for part in dist_.gather_objects(light, world) for item in part]
    everyone.sort(key=lambda item: item[0])  # stable: episode order within a group kept
    return episode_stats([item[1] for item in everyone]), [item[2] for item in everyone]


def equal_episode_weights(lengths: list[int], group_ids: torch.Tensor) -> torch.Tensor:
    """(E,) factors mean_g(T) / T_i that give every episode of a group the same weight.

    With every decision of episode i carrying A_i * mean_g(T) / T_i, the episode's
    decisions together weigh A_i * mean_g(T): a group's advantages sum to zero over its
    decisions, and the group's total weight (sum of T_i) is unchanged. Groups never
    span processes, so N processes compute what one does.
    """
    length = torch.tensor(lengths, dtype=torch.float32).clamp(min=1)
    group = torch.unique(group_ids, return_inverse=True)[1]
    sums = torch.zeros(int(group.max()) + 1).index_add_(0, group, length)
    counts = torch.zeros_like(sums).index_add_(0, group, torch.ones_like(length))
    return (sums / counts)[group] / length


def step_group_advantages(episodes: list[Episode], config: TrainConfig) -> torch.Tensor:
    """(N,) step-level group advantages, decision order (GiGPO's anchor-state groups).

    Decisions of one episode group (the same game) taken in the same state
    (:func:`rlid.rollout.state_key`) form a step group; each decision's discounted
    return-to-go G_t = sum_k gamma^k r_{t+k} is compared with its step group's, scaled
    as the episode advantages are (``adv_scale``). A decision whose state no other
    decision of its group met gets 0. Episode groups never span processes, so N
    processes compute what one does.
    """
    keys: list[tuple[int, str]] = []
    to_go: list[torch.Tensor] = []
    for e in episodes:
        if len(e.states) != e.length:
            raise ValueError(
                f"step_group_coef needs the state of every decision: an episode of group "
                f"{e.group} has {e.length} decisions but {len(e.states)} states"
            )
        keys += [(e.group, k) for k in e.states]
        to_go.append(discounted_returns(torch.tensor(e.rewards, dtype=torch.float32), config.gamma))
    if not keys:
        return torch.zeros(0)
    return group_relative_advantages(torch.cat(to_go), keys, scale=config.adv_scale)


def _decision_stats(e: Episode, shared: dict[int, list[bool]]) -> list[tuple[float, float, bool]]:
    """Per decision of ``e``: rollout entropy, label mass, and whether its state is shared."""
    flags = shared.get(id(e), [False] * e.length)
    return [(d.entropy, d.label_mass, flag) for d, flag in zip(e.decisions, flags)]


def shared_states(episodes: list[Episode]) -> dict[int, list[bool]]:
    """Per episode (by ``id``), whether each decision's state was met by another decision
    of its group: the decisions whose step-level group advantage can be non-zero."""
    seen: dict[tuple[int, str], int] = {}
    for e in episodes:
        for key in e.states:
            seen[(e.group, key)] = seen.get((e.group, key), 0) + 1
    return {id(e): [seen[(e.group, key)] > 1 for key in e.states] for e in episodes}


def compute_advantages(
    episodes: list[Episode], config: TrainConfig
) -> tuple[list[Decision], torch.Tensor, torch.Tensor]:
    """Flatten episodes into decisions with advantages (N,) and value targets (N,)."""
    decisions = [d for e in episodes for d in e.decisions]
    if config.advantage == "group":
        returns = torch.tensor(
            [episode_return(e.rewards, config.gamma) for e in episodes], dtype=torch.float32
        )
        group_ids = torch.tensor([e.group for e in episodes])
        adv_ep = group_relative_advantages(returns, group_ids, scale=config.adv_scale)
        if config.resolved_episode_weight == "equal":  # adv_i * mean_g(T) / T_i per episode
            adv_ep = adv_ep * equal_episode_weights([e.length for e in episodes], group_ids)
        adv = torch.cat([adv_ep[i].repeat(e.length) for i, e in enumerate(episodes)])
        if config.step_group_coef > 0:
            adv = adv + config.step_group_coef * step_group_advantages(episodes, config)
        returns_per_step = torch.cat([returns[i].repeat(e.length) for i, e in enumerate(episodes)])
        return decisions, adv, returns_per_step
    advs: list[torch.Tensor] = []
    value_targets: list[torch.Tensor] = []
    for e in episodes:
        rewards = torch.tensor(e.rewards, dtype=torch.float32).unsqueeze(1)  # (T, 1)
        values = torch.tensor([d.value for d in e.decisions], dtype=torch.float32).unsqueeze(1)
        # The final state of an episode is never scored (envs list no legal actions there),
        # so truncated episodes bootstrap with 0 too: every episode end is terminal here.
        next_values = next_values_from(values, torch.zeros(1))  # (T, 1)
        ended = torch.zeros_like(rewards, dtype=torch.bool)
        ended[-1] = True
        a, r = gae(
            rewards, values, next_values, ended, torch.zeros_like(ended),
            gamma=config.gamma, lam=config.lam,
        )  # fmt: skip
        advs.append(a.squeeze(1))
        value_targets.append(r.squeeze(1))
    return decisions, torch.cat(advs), torch.cat(value_targets)


def evaluate(
    policy: Any,
    env_list: list[Any],
    episodes: int,
    *,
    interface: Any,
    seed: int = 0,
    greedy: bool = True,
    world: World = dist_.SINGLE,
    keep: list[Episode] | None = None,
) -> dict[str, float]:
    """Success rate, return and length on ``episodes`` held-out games (greedy by default).

    Episodes are played in blocks of ``len(env_list)`` with the block's own randomness;
    with several processes block b is played by rank b mod N and the statistics are
    gathered, so the result does not depend on the number of processes. ``keep``: a
    list this process's episodes are appended to (``rlid eval --episodes-out``).
    """
    if episodes == 0:
        return {}
    # Evaluation is not training spend: count it in a throwaway budget.
    saved = (policy.budget, policy.timers)
    policy.budget, policy.timers = Budget(), Timers()
    try:
        starts = list(range(0, episodes, len(env_list)))[world.rank :: world.size]
        done = _evaluate(
            policy, env_list, starts, episodes, interface=interface, seed=seed, greedy=greedy
        )
    finally:
        policy.budget, policy.timers = saved
    if keep is not None:
        keep += done
    stats, _ = gathered_episode_stats(done, world)
    stats["episodes"] = episodes
    return stats


def _evaluate(
    policy: Any,
    env_list: list[Any],
    starts: list[int],
    episodes: int,
    *,
    interface: Any,
    seed: int,
    greedy: bool,
) -> list[Episode]:
    done: list[Episode] = []
    for start in starts:
        n = min(len(env_list), episodes - start)
        seeds = [EVAL_SEED_BASE + start + i for i in range(n)]
        rng, gen = iteration_rngs(seed, start, stream=1)
        with torch.no_grad():
            done += collect_episodes(
                env_list[:n], policy, seeds, list(range(start, start + n)),
                interface=interface, rng=rng, generator=gen, greedy=greedy,
            )  # fmt: skip
    return done


def ppo_update(
    policy: MenuPolicy,
    decisions: list[Decision],
    advantages: torch.Tensor,
    targets: torch.Tensor,
    *,
    config: TrainConfig,
    optimizer: torch.optim.Optimizer,
    params: list[torch.nn.Parameter],
    rng: np.random.Generator,
    budget: Budget,
    timers: Timers,
    scaler: torch.amp.GradScaler | None = None,
    world: World = dist_.SINGLE,
    owner: np.ndarray | None = None,
    parallel: dist_.Parallel | None = None,
) -> dict[str, float]:
    """PPO epochs x minibatches over one iteration's decisions; returns mean metrics.

    Several processes: ``owner`` maps the global decision list (all ranks, groups in
    order) to indices into ``decisions`` (-1: held by another rank; default: this
    process holds all). Minibatches are drawn over the global list with the same
    permutation on every rank; each rank's loss terms are divided by the *global*
    minibatch size and the gradients are summed over ranks, so every rank takes the
    same steps as one process would (a rank holding no member still joins the sum).
    ``parallel`` (:class:`rlid.distributed.Parallel`, its ``update`` block active:
    ``policy.model`` is the wrapped model) reduces the model's gradients in its
    backward (DDP / FSDP2); without it, or for parameters it does not wrap (the value
    head), :func:`rlid.distributed.reduce_gradients` sums them before the step.

    Each minibatch is one optimizer step; its forward/backward runs in micro-batches
    of ``config.micro_batch_size`` decisions whose gradients accumulate, every loss
    term divided by the *minibatch's* decision count (``normaliser``), so the step
    equals the one-batch step. A minibatch whose advantages are all zero carries no
    policy-gradient signal: it is skipped (with a value head only the value loss is
    kept), because an entropy / KL / label-mass term alone would get a full-size AdamW
    step (Adam normalises the gradient's scale away) and drive the policy by itself.
    ``advantages`` / ``targets`` are (N,) float32 on any device; each micro-batch's
    slice is moved to the model's device once.
    """
    owner = np.arange(len(decisions)) if owner is None else owner
    parallel = parallel if parallel is not None else dist_.Parallel.unwrapped(world)
    held = owner >= 0
    # which global decisions carry advantage signal (a minibatch without any is skipped)
    flags = np.zeros(len(owner))
    flags[held] = (advantages.detach().cpu()[owner[held]] != 0).numpy()
    nonzero = dist_.all_sum(flags, world).numpy() > 0
    if not nonzero.any() and policy.value_head is None:
        # Nothing to learn from (e.g. every group had equal returns): an AdamW step on a
        # zero gradient would still move the parameters through its momentum, and a
        # regulariser alone would be amplified to a full step.
        return {"skipped_update": 1.0}
    stepper = Stepper(optimizer, params, config.max_grad_norm, scaler)
    micro = config.micro_batch_size or config.minibatch_size
    # label positions exist on the decision plane only (scoring: no labels, no bound)
    positions = policy.max_menu_size if config.plane == "decision" else 0
    logp_old = torch.tensor([d.logp for d in decisions])  # (N,)
    actions = torch.tensor([d.chosen for d in decisions])  # (N,)
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
                whole = None  # the penalty's sums over the minibatch, before the step
                if config.position_coef > 0 and signal:
                    with timers.time("forward"):
                        whole = _position_sums(
                            policy, decisions, idx, micro, positions, parallel, world
                        )
                stepper.zero_grad()
                totals = dict.fromkeys(names, 0.0)
                seen = PositionSums.zeros(positions) if positions else None  # diagnostic
                for part, context in parallel.micro_plan(chunks(len(idx), micro)):
                    # a filler step (part None) keeps the wrapper's collectives matched
                    with context:
                        metrics = _decision_micro_step(
                            policy, decisions, idx[part] if part is not None else FILLER,
                            actions, logp_old, advantages, targets, normaliser=len(chosen),
                            signal=signal, config=config, stepper=stepper, timers=timers,
                            weight=1.0 if part is not None else 0.0, position=whole,
                            positions=positions,
                        )  # fmt: skip
                    part_sums = metrics.pop("position_sums", None)
                    if seen is not None and part is not None:
                        seen = seen + part_sums
                    for k, v in metrics.items():
                        totals[k] = totals.get(k, 0.0) + (float(v) if part is not None else 0.0)
                with timers.time("backward"):
                    parallel.reduce_rest(params)
                    grad_norm = stepper.step()
                budget.optimizer_steps += 1
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


def update_metric_names(config: TrainConfig, policy: MenuPolicy) -> list[str]:
    """The per-minibatch metrics of ``ppo_update``, known before any forward pass (a rank
    holding no member of a minibatch still reports zeros for each)."""
    names = ["policy_loss", "clip_frac", "approx_kl", "entropy", "label_marginal_kl_uniform"]
    names += ["kl_ref"] if config.kl_coef > 0 else []
    names += ["label_mass"]
    names += ["label_mass_loss"] if config.label_mass_coef > 0 else []
    names += ["value_loss"] if policy.value_head is not None else []
    return names + ["loss"]


def _position_sums(
    policy: MenuPolicy,
    decisions: list[Decision],
    idx: np.ndarray,
    micro: int,
    width: int,
    parallel: dist_.Parallel,
    world: World,
) -> PositionSums:
    """The position penalty's sums (``width`` positions) over the whole minibatch
    (every micro-batch, every rank) at the current parameters: a no-grad pass before
    its forward/backward, so the micro-batched, N-process step is the one-batch step.
    The same on every rank."""
    sums = PositionSums.zeros(width)
    with torch.no_grad():
        # the update's micro-plan: a sharded model's forwards are collective (fillers)
        for part, context in parallel.micro_plan(chunks(len(idx), micro)):
            batch = [decisions[i] for i in (idx[part] if part is not None else FILLER)]
            with context:
                logp_all, _, _ = policy.score(batch)
            if part is not None:
                sums = sums + PositionSums.of(logp_all, width)
    return PositionSums.unflat(dist_.all_sum(sums.flat(), world))


def _decision_micro_step(
    policy: MenuPolicy,
    decisions: list[Decision],
    idx: np.ndarray,
    actions: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    targets: torch.Tensor,
    *,
    normaliser: int,
    signal: bool,
    config: TrainConfig,
    stepper: Stepper,
    timers: Timers,
    weight: float = 1.0,
    position: PositionSums | None = None,
    positions: int = 0,
) -> dict[str, Any]:
    """Forward + backward of one micro-batch; its loss terms are sums / ``normaliser``
    (the minibatch's size), so micro-batch losses and metrics add up to the minibatch's.
    ``weight=0`` (a filler step of a wrapped model) backpropagates a zero loss.
    ``position``: the position penalty's sums over the whole minibatch (None: no
    penalty); with ``positions`` (the most menu rows; 0: none) the micro-batch's own
    sums come back as ``position_sums``."""
    batch = [decisions[i] for i in idx]
    with timers.time("forward"):
        logp_all, label_mass, hidden = policy.score(batch)  # (B, K), (B,), (B, d) on device
    device = logp_all.device
    ref = None
    if config.kl_coef > 0:
        ref = torch.full_like(logp_all, float("-inf"))
        for b, d in enumerate(batch):
            row = d.extra["logp_ref_all"]
            ref[b, : len(row)] = torch.tensor(row, device=device)
    direction = position_directions(logp_all, position) if position is not None else None
    with timers.time("backward"):
        # without policy-gradient signal (value head only) no regulariser may act alone
        loss, metrics = decision_ppo_loss(
            logp_all,
            actions[idx].to(device),
            logp_old[idx].to(device),
            advantages[idx].to(device=device, dtype=torch.float32),
            clip_eps=config.clip_eps,
            ent_coef=config.ent_coef if signal else 0.0,
            logp_ref_all=ref,
            kl_coef=config.kl_coef if signal else 0.0,
            label_mass=label_mass,
            normaliser=normaliser,
            position_direction=direction,
            position_coef=config.position_coef if signal else 0.0,
        )
        if config.label_mass_coef > 0 and signal:
            # The label softmax is blind to a shift of all label logits, so nothing
            # else holds the LM's mass on the labels (leakage grows at high lr).
            mass_loss = -torch.log(label_mass.clamp_min(1e-12)).sum() / normaliser
            loss = loss + config.label_mass_coef * mass_loss
            metrics = {**metrics, "label_mass_loss": mass_loss.detach()}
        if policy.value_head is not None:
            value = policy.value_head(hidden)  # (B,) float32
            target = targets[idx].to(device=device, dtype=torch.float32)
            value_loss = 0.5 * (value - target).pow(2).sum() / normaliser
            loss = loss + config.vf_coef * value_loss
            metrics = {**metrics, "value_loss": value_loss.detach()}
        stepper.backward(loss, weight)
    out: dict[str, Any] = {**metrics, "loss": loss.detach()}
    if positions:
        out["position_sums"] = PositionSums.of(logp_all, positions)
    return out


def reference_model(config: TrainConfig, log: RunLog, model: torch.nn.Module) -> torch.nn.Module:
    """The KL reference: the *starting* model, also when resuming from a later checkpoint.

    With LoRA it is the same model with its adapters disabled (no copy); otherwise a
    frozen copy (``requires_grad`` off, never in the optimizer) in the weight dtype, on
    the model's device — or kept on the CPU and moved per batch with ``ref_offload``.
    """
    from rlid.models import load_policy_model

    if config.lora_rank > 0:
        return AdapterDisabled(model)
    start_model = own_memory(load_policy_model(str(config.model))[0]) if log.resuming else model
    precision = Precision.from_config(config)
    if config.ref_offload:
        ref = copy.deepcopy(start_model).to(device="cpu", dtype=precision.weight_dtype)
        return OffloadedModel(ref, precision.device)
    ref = copy.deepcopy(start_model).to(device=precision.device, dtype=precision.weight_dtype)
    return ref.eval().requires_grad_(False)


def setup_hardware(
    config: TrainConfig, model: CausalLM
) -> tuple[CausalLM, Precision, torch.amp.GradScaler | None]:
    """Threads, device, weight dtype and gradient checkpointing of a run's model."""
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    precision = Precision.from_config(config)
    model = precision.place(model)
    if config.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    return model, precision, precision.grad_scaler()


def begin_run(
    log: RunLog,
    config: TrainConfig,
    *,
    model: torch.nn.Module,
    value_head: torch.nn.Module | None,
    optimizer: torch.optim.Optimizer,
    budget: Budget,
    eval_policy: Any,
    eval_envs: list[Any],
    world: World = dist_.SINGLE,
    parallel: dist_.Parallel | None = None,
) -> int:
    """Write the run directory, then restore a checkpoint (returning its iteration) or
    evaluate the starting policy on held-out games (returning 0).

    Every rank starts from rank 0's parameters (a no-op in one process; a wrapped model
    got them when it was wrapped).
    """
    dist_.barrier(world)  # every rank has checked the directory before rank 0 writes it
    log.start()
    synced = [None if parallel is not None and parallel.wrapped else model, value_head]
    if log.resuming:
        iteration = log.restore(
            value_head=value_head, optimizer=optimizer, budget=budget, world=world,
            load_optimizer=(
                (lambda state: parallel.load_optimizer(optimizer, state)) if parallel else None
            ),
        )  # fmt: skip
        dist_.broadcast_parameters(synced, world)
        return iteration
    dist_.broadcast_parameters(synced, world)
    log.write_origin(
        getattr(model, "rlid_origin", str(config.model)),
        template=resolve_template(config.interface, eval_policy.tokenizer),
    )
    before = evaluate(
        eval_policy, eval_envs, config.eval_episodes, interface=config.interface, world=world
    )
    log.write_eval("before", before)
    return 0


def end_iteration(
    log: RunLog,
    row: dict[str, Any],
    *,
    config: TrainConfig,
    iteration: int,
    budget: Budget,
    timers: Timers,
    eval_policy: Any,
    eval_envs: list[Any],
    bar: Any,
    checkpoint: dict[str, Any],
    world: World = dist_.SINGLE,
    parallel: dist_.Parallel | None = None,
    stop: StopSignals | None = None,
) -> None:
    """Log one iteration's row (time split, budget, optional eval) and checkpoint.

    ``budget`` is already the global one (``rlid.distributed.reduce_budget``); the time
    split is the mean over ranks. ``stop``: when any rank got SIGTERM / Ctrl-C
    (:mod:`rlid.runs.stop`), every rank checkpoints this iteration and raises
    :class:`RunStopped`.
    """
    row["time"] = dist_.mean_timers(timers.pop(), world)
    row["budget"] = budget.to_dict()
    if config.eval_every and iteration % config.eval_every == 0:
        row["eval"] = evaluate(
            eval_policy, eval_envs, config.eval_episodes, interface=config.interface,
            world=world,
        )  # fmt: skip
    # the allocator's peaks over this iteration's rollouts, update and evaluation
    memory = cuda_memory_row(resolve_device(config.device))
    if memory is not None:
        row["gpu_memory"] = memory
    log.append_metrics(row)
    spent = budget.get(config.budget_currency)
    stopping = stop is not None and dist_.any_rank(stop.requested, world)
    if stopping or log.checkpoint_due(iteration, budget):
        rng_states = dist_.gather_objects(rng_state(), world)
        model_state, optimizer_state = (
            parallel.full_state(checkpoint["optimizer"]) if parallel else (None, None)
        )  # fsdp: gathered by every rank
        log.checkpoint(
            **checkpoint, iteration=iteration, budget=budget, rng_states=rng_states,
            model_state=model_state, optimizer_state=optimizer_state,
        )  # fmt: skip
    bar.advance_to(spent)
    bar.set_postfix(ret=f"{row['return']:.2f}", win=f"{row['success']:.2f}")
    if stopping:
        assert stop is not None
        bar.close()
        log.close()  # the lock: the resume finds a clean directory
        raise RunStopped(
            log.path, iteration, stop.signum or signal.SIGTERM, quiet=not world.is_writer
        )


def finish_run(
    log: RunLog,
    bar: Any,
    *,
    eval_policy: Any,
    eval_envs: list[Any],
    config: TrainConfig,
    world: World = dist_.SINGLE,
) -> None:
    """Held-out evaluation after training (once, also across resumes), curves, summary."""
    bar.close()
    if dist_.any_rank(not log.has_eval("after"), world):
        after = evaluate(
            eval_policy, eval_envs, config.eval_episodes, interface=config.interface,
            world=world,
        )  # fmt: skip
        log.write_eval("after", after)
    log.finish()
    dist_.barrier(world)  # the run directory is complete when any rank returns


def plane_policy_factory(config: TrainConfig) -> Callable[..., MenuPolicy]:
    """``make_policy(model, tokenizer, interface, **kw)`` of the config's plane (rlid.planes)."""
    plane = get_plane(config.plane)

    def make_policy(model: Any, tokenizer: Any, interface: Any, **kw: Any) -> MenuPolicy:
        policy = plane.make_policy(config.replace(interface=interface), model, tokenizer, **kw)
        return policy  # type: ignore[return-value]  # decision / scoring: menu policies

    return make_policy


def open_run(
    config: TrainConfig | None, out: Path, *, resume: bool, plane: str | None = None
) -> tuple[World, RunLog, TrainConfig]:
    """Start a trainer: the process group, the run directory (new, or the one to resume,
    whose config wins) and the checks that must fail before any work (the config's
    plane when ``plane`` is given, groups per process, device, precision); seeds torch."""
    world = dist_.init(config.dist_timeout if config is not None else 300.0)
    log = RunLog.open(Path(out), config, resume=resume, writer=world.is_writer)
    config = log.config
    check_machine_limits(config)  # threads, workers and batch memory, before the model loads
    if plane is not None and config.plane != plane:
        raise ValueError(f"this trainer trains plane={plane!r}, got plane={config.plane!r}")
    world.check_groups(config.groups_per_iter)
    world.check_device(config.device)
    Precision.from_config(config)  # a bad --device fails before any work
    torch.manual_seed(config.seed)
    return world, log, config


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
    builds the menu policy (default: the config's plane from :mod:`rlid.planes`, i.e.
    :class:`DecisionPolicy` or the scoring plane's policy).
    """

    world, log, config = open_run(config, out, resume=resume)
    budget, timers = Budget(), Timers()

    model, tokenizer = load_run_model(config, log)
    model, precision, scaler = setup_hardware(config, model)
    model.eval()  # no dropout: rollouts and updates see the same function
    value_head = None
    if config.advantage == "gae":  # float32 on the model's device
        value_head = ValueHead(model.config.hidden_size).to(precision.device)
    make_policy = make_policy or plane_policy_factory(config)
    policy = make_policy(
        model, tokenizer, config.interface, value_head=value_head, budget=budget, timers=timers,
        autocast=precision.autocast,
    )  # fmt: skip
    train_envs = make_envs(config, "train", config.group_size)  # one group at a time
    eval_envs = make_envs(config, "heldout", min(config.eval_episodes, 16) or 1)
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
        ref_model = reference_model(config, log, model)
        ref_policy = make_policy(ref_model, tokenizer, config.interface, budget=Budget())
    # several processes: the update's model is wrapped (DDP / FSDP2); rollouts use `model`
    parallel = dist_.Parallel(model, world, config.parallel, precision.device)
    params = list(parallel.params)  # LoRA: adapters only; FSDP2: the sharded parameters
    params += list(value_head.parameters()) if value_head else []
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)

    iteration = begin_run(
        log, config, model=model, value_head=value_head, optimizer=optimizer, budget=budget,
        eval_policy=policy, eval_envs=eval_envs, world=world, parallel=parallel,
    )  # fmt: skip

    bar = log.progress_bar(config, budget, enabled=progress and world.is_writer)
    # SIGTERM / Ctrl-C: checkpoint this iteration, then stop (the writer says so)
    with StopSignals(announce=world.is_writer) as stop:
        while budget.get(config.budget_currency) < config.steps:
            iteration += 1
            t0 = time.perf_counter()
            spent_before = budget.to_dict()
            rng, _ = iteration_rngs(config.seed, iteration)

            # 1. rollout: groups_per_iter games (this rank's share), each played group_size times
            seeds, groups = make_reset_seeds(config, iteration)
            episodes = play_groups(
                train_envs, policy, seeds, groups, config=config, iteration=iteration, world=world,
                budget=budget, timers=timers,
            )  # fmt: skip
            if ref_policy is not None:
                for e in episodes:
                    for part in chunks(len(e.decisions), config.micro_batch_size):
                        with torch.no_grad():
                            logp_ref, _, _ = ref_policy.score(e.decisions[part])
                        for d, row in zip(e.decisions[part], logp_ref):
                            d.extra["logp_ref_all"] = row[: d.num_rows].tolist()

            # 2. advantages
            decisions, advantages, targets = compute_advantages(episodes, config)

            # 3. PPO update (minibatches over the global decision list)
            counts = {g: 0 for g in world.my_groups(config.groups_per_iter)}
            for e in episodes:
                counts[e.group] += e.length
            owner = dist_.global_index(counts, config.groups_per_iter, world)
            with parallel.update(policy):  # policy.model: the wrapped model, for this block
                update = ppo_update(
                    policy, decisions, advantages, targets, config=config, optimizer=optimizer,
                    params=params, rng=rng, budget=budget, timers=timers, scaler=scaler,
                    world=world, owner=owner, parallel=parallel,
                )  # fmt: skip

            # 4. logging, evaluation, checkpoint (statistics over all ranks)
            budget.wall_time += time.perf_counter() - t0
            dist_.reduce_budget(budget, spent_before, world)
            shared = shared_states(episodes) if config.step_group_coef > 0 else {}
            stats, per_episode = gathered_episode_stats(
                episodes, world, extra=functools.partial(_decision_stats, shared=shared)
            )
            rollout = [triple for triples in per_episode for triple in triples]
            row = {"iteration": iteration, **stats, **update}
            row["rollout_entropy"] = float(np.mean([h for h, _, _ in rollout]))
            row["rollout_label_mass"] = float(np.mean([m for _, m, _ in rollout]))
            if config.step_group_coef > 0:  # how often a state recurs within its group
                row["shared_states"] = float(np.mean([f for _, _, f in rollout]))
            end_iteration(
                log, row, config=config, iteration=iteration, budget=budget, timers=timers,
                eval_policy=policy, eval_envs=eval_envs, bar=bar,
                checkpoint=dict(model=model, tokenizer=tokenizer, value_head=value_head,
                                optimizer=optimizer),
                world=world, parallel=parallel, stop=stop,
            )  # fmt: skip
    finish_run(log, bar, eval_policy=policy, eval_envs=eval_envs, config=config, world=world)
    close_envs(train_envs, eval_envs)
    return log
