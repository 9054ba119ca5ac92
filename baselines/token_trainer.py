"""Token-plane training: the GRPO family on multi-step text games.

Sections per iteration, as in ``rlid.trainer`` (so the two planes read alike):
rollout -> advantages -> update -> logging/checkpoint. Run directory, budget,
held-out evaluation before/after, checkpoints and exact resume are shared with
the decision trainer (``RunLog``, ``Budget``, ``evaluate``, ``iteration_rngs``,
``make_reset_seeds``, ``make_envs``).

Multi-step credit (the choice, and why): the G episodes reset with the same seed
form a group, and *every generated token of an episode* gets that episode's
group-relative advantage, ``group_advantages`` of the episode returns (std
scaling for grpo / dapo / gspo / cispo, none for dr_grpo; ``adv_scale`` is a
decision-plane option). This is the episode-level GRPO that the decision plane's
``advantage="group"`` uses, so the two planes differ in the probability event
(text vs. action), not in credit assignment. A return is the undiscounted sum of
env rewards plus shaping: ``invalid_penalty`` per command that did not parse and,
with ``overlong_cache > 0``, DAPO's soft overlong penalty per completion.

DAPO dynamic sampling (``algo="dapo"``): groups whose shaped returns are all
equal (zero advantage, no gradient) are dropped and new groups (new reset seeds)
are played, up to ``max_gen_batches`` generation rounds per iteration, until at
least ``groups_per_iter`` groups are kept; every kept group is used. Every
generated completion counts in the budget (``generated_samples`` /
``generated_tokens``) and the dropped ones also in ``filtered_samples``, so
generated = used + filtered. The env steps of dropped episodes count too.

Update: ``token_policy_loss`` with the config's variant (the loss's default clip
range for it; ``clip_eps`` is a decision-plane option), ``max_len =
max_new_tokens`` (Dr. GRPO's constant normaliser), ``mismatch`` on ρ = π_old/μ
with μ from the rollout engine, and the k3 KL to a frozen copy of the starting
model when ``beta > 0``; epochs x minibatches over completions, gradient clip,
AdamW. Evaluation samples greedily from the trainer's own model (not the engine).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from baselines.engine import completion_logprobs, make_engine
from baselines.losses import (
    VARIANTS,
    group_advantages,
    nonzero_variance_groups,
    overlong_penalty,
    token_policy_loss,
)
from baselines.token_policy import Generation, TokenPolicy
from rlid import distributed as dist_
from rlid.budget import Budget, Timers
from rlid.config import TrainConfig
from rlid.distributed import World
from rlid.lora import load_run_model
from rlid.rollout import Episode
from rlid.runs.log import RunLog
from rlid.trainer import (
    begin_run,
    end_iteration,
    finish_run,
    gathered_episode_stats,
    iteration_rngs,
    make_envs,
    make_reset_seeds,
    play_groups,
    reference_model,
)


@dataclass
class TokenRollout:
    """One iteration's episodes: all generated, and those the update uses."""

    generated: list[Episode]
    kept: list[Episode]
    rounds: int


def round_reset_seeds(
    config: TrainConfig, iteration: int, round_: int
) -> tuple[list[int], list[int]]:
    """Round 0 plays ``make_reset_seeds``; each DAPO re-sampling round new games.

    Group ids of round r are offset by ``r * groups_per_iter`` so groups stay distinct.
    """
    seeds, groups = make_reset_seeds(config, iteration)
    if round_ == 0:
        return seeds, groups
    rng = np.random.default_rng([config.seed, iteration, 3, round_])
    fresh = rng.integers(0, 2**31 - 1, size=config.groups_per_iter)
    seeds = [int(fresh[g]) for g in groups]
    return seeds, [g + round_ * config.groups_per_iter for g in groups]


def shaped_return(episode: Episode, config: TrainConfig) -> float:
    """Env return + ``invalid_penalty`` per unparsed command + overlong shaping."""
    ret = episode.ret + config.invalid_penalty * sum(not g.valid for g in episode.decisions)
    if config.overlong_cache > 0:
        lengths = torch.tensor([g.num_tokens for g in episode.decisions])
        shaping = overlong_penalty(lengths, config.max_new_tokens, config.overlong_cache)
        ret += float(shaping.sum())
    return ret


def group_returns(
    episodes: list[Episode], config: TrainConfig
) -> tuple[list[list[Episode]], Tensor]:
    """Episodes grouped by group id (first-seen order) and their shaped returns (N, G)."""
    by_group: dict[int, list[Episode]] = {}
    for e in episodes:
        by_group.setdefault(e.group, []).append(e)
    grouped = list(by_group.values())
    returns = torch.tensor(
        [[shaped_return(e, config) for e in group] for group in grouped], dtype=torch.float32
    ).reshape(len(grouped), config.group_size)
    return grouped, returns


def rollout(
    policy: TokenPolicy,
    env_list: list,
    config: TrainConfig,
    iteration: int,
    *,
    budget: Budget,
    timers: Timers,
    world: World = dist_.SINGLE,
) -> TokenRollout:
    """Play the iteration's groups; with DAPO drop zero-variance groups and play more.

    Each rank plays its share of the groups (``play_groups``); the kept count that
    ends DAPO's re-sampling is the global one, so every rank plays the same rounds.
    """
    dynamic = config.algo == "dapo"
    generated: list[Episode] = []
    kept: list[Episode] = []
    rounds = 0
    for round_ in range(config.max_gen_batches if dynamic else 1):
        seeds, groups = round_reset_seeds(config, iteration, round_)
        episodes = play_groups(
            env_list, policy, seeds, groups, config=config, iteration=iteration, world=world,
            round_=round_, budget=budget, timers=timers,
        )  # fmt: skip
        generated += episodes
        rounds += 1
        if not dynamic:
            kept = episodes
            break
        if episodes:
            grouped, returns = group_returns(episodes, config)
            for group, informative in zip(grouped, nonzero_variance_groups(returns).tolist()):
                if informative:
                    kept += group
                else:
                    budget.filtered_samples += sum(e.length for e in group)
        if dist_.all_sum([len(kept)], world)[0] >= config.episodes_per_iter:
            break
    return TokenRollout(generated=generated, kept=kept, rounds=rounds)


def token_advantages(
    episodes: list[Episode], config: TrainConfig
) -> tuple[list[Generation], Tensor]:
    """Flatten episodes into completions with the episode's group advantage (N,)."""
    if not episodes:
        return [], torch.zeros(0)
    grouped, returns = group_returns(episodes, config)
    scale = "none" if config.algo == "dr_grpo" else "std"
    adv = group_advantages(returns, scale=scale)  # (groups, G)
    completions: list[Generation] = []
    per_completion: list[float] = []
    for g, group in enumerate(grouped):
        for i, e in enumerate(group):
            completions += e.decisions
            per_completion += [float(adv[g, i])] * e.length
    return completions, torch.tensor(per_completion)


def right_aligned(rows: Sequence[Sequence[float]], width: int) -> Tensor:
    """Ragged per-token values -> (B, width), right-aligned like ``completion_logprobs``."""
    out = torch.zeros(len(rows), width)
    for b, row in enumerate(rows):
        if row:
            out[b, width - len(row) :] = torch.tensor(row, dtype=out.dtype)
    return out


@torch.no_grad()
def attach_reference_logprobs(
    ref_model: torch.nn.Module, completions: list[Generation], *, pad_id: int, chunk: int
) -> None:
    """Store log π_ref per completion token in ``extra["logp_ref"]`` (for the k3 KL)."""
    for start in range(0, len(completions), chunk):
        batch = completions[start : start + chunk]
        logp, mask, _ = completion_logprobs(
            ref_model, [g.prompt_ids for g in batch], [g.completion_ids for g in batch], pad_id
        )
        for b, g in enumerate(batch):
            g.extra["logp_ref"] = logp[b][mask[b]].tolist()


def _reduce(metric_rows: list[dict[str, float]]) -> dict[str, float]:
    """Mean over minibatches; ``*_min`` / ``*_max`` keep the extreme."""
    out: dict[str, float] = {}
    for key in dict.fromkeys(k for row in metric_rows for k in row):
        values = [row[key] for row in metric_rows if key in row]
        if key.endswith("_min"):
            out[key] = min(values)
        elif key.endswith("_max"):
            out[key] = max(values)
        else:
            out[key] = sum(values) / len(values)
    return out


def _combine(shares: list[tuple[float, dict[str, float]]]) -> dict[str, float]:
    """One minibatch's metrics from every rank's (weight, metrics): weighted mean, or extreme.

    The weight is the rank's share of the loss normaliser (tokens or sequences).
    """
    out: dict[str, float] = {}
    for key in dict.fromkeys(k for _, row in shares for k in row):
        held = [(w, row[key]) for w, row in shares if key in row]
        if key.endswith("_min"):
            out[key] = min(v for _, v in held)
        elif key.endswith("_max"):
            out[key] = max(v for _, v in held)
        else:
            out[key] = sum(w * v for w, v in held)
    return out


def token_update(
    model: torch.nn.Module,
    completions: list[Generation],
    advantages: Tensor,
    *,
    config: TrainConfig,
    optimizer: torch.optim.Optimizer,
    rng: np.random.Generator,
    pad_id: int,
    budget: Budget,
    timers: Timers,
    world: World = dist_.SINGLE,
    owner: np.ndarray | None = None,
) -> dict[str, float]:
    """Epochs x minibatches of ``token_policy_loss`` over completions; mean metrics.

    ``owner`` maps the global completion list (all ranks, groups in order) to indices
    into ``completions`` (-1: held by another rank). Minibatches are drawn over the
    global list; each rank's loss carries the *global* normaliser of the variant's
    aggregation (all ranks' tokens for token-mean, all sequences otherwise) and the
    gradients are summed over ranks.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    owner = np.arange(len(completions)) if owner is None else owner
    if len(owner) and not dist_.any_rank(bool(advantages.any()), world) and config.beta == 0:
        # Nothing to learn from (every group had equal returns): an AdamW step on a
        # zero gradient would still move the parameters through its momentum.
        return {"skipped_update": 1.0}
    per_token = VARIANTS[config.algo].aggregate.__name__ == "token_mean"
    held = owner >= 0
    lengths = np.zeros(len(owner))  # tokens of every global completion
    lengths[held] = [len(completions[i].completion_ids) for i in owner[held]]
    lengths = dist_.all_sum(lengths, world).numpy()
    rows: list[dict[str, float]] = []
    stop = False
    for _ in range(config.epochs if len(owner) else 0):
        order = rng.permutation(len(owner))
        for start in range(0, len(owner), config.minibatch_size):
            chosen = order[start : start + config.minibatch_size]
            members = owner[chosen]
            idx = members[members >= 0]  # the members this rank holds
            mine = members >= 0
            # this rank's share of the global normaliser (1 in one process)
            share = (
                float(lengths[chosen[mine]].sum() / max(lengths[chosen].sum(), 1))
                if per_token
                else len(idx) / len(members)
            )
            optimizer.zero_grad(set_to_none=True)
            metrics: dict[str, float] = {}
            if len(idx):
                metrics = _minibatch_update(
                    model, [completions[i] for i in idx], advantages[idx], share,
                    config=config, pad_id=pad_id, budget=budget, timers=timers,
                )  # fmt: skip
            with timers.time("backward"):
                dist_.reduce_gradients(params, world)
                grad_norm = torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
                optimizer.step()
            budget.optimizer_steps += 1
            combined = _combine(dist_.gather_objects((share, metrics), world))
            rows.append({**combined, "grad_norm": float(grad_norm)})
            if config.target_kl is not None and rows[-1]["approx_kl"] > config.target_kl:
                stop = True  # the global KL: every rank stops at the same step
                break
        if stop:
            break
    out = _reduce(rows)
    out["early_stop"] = float(stop)
    return out


def _minibatch_update(
    model: torch.nn.Module,
    batch: list[Generation],
    advantages: Tensor,
    share: float,
    *,
    config: TrainConfig,
    pad_id: int,
    budget: Budget,
    timers: Timers,
) -> dict[str, float]:
    """Backward of this rank's part of one minibatch (its loss times ``share``); metrics."""
    prompts, outputs = [g.prompt_ids for g in batch], [g.completion_ids for g in batch]
    with timers.time("forward"):
        logp, mask, _ = completion_logprobs(model, prompts, outputs, pad_id)  # (B, C)
    width = mask.shape[1]
    logp_ref = None
    if config.beta > 0:
        logp_ref = right_aligned([g.extra["logp_ref"] for g in batch], width)
    with timers.time("backward"):
        loss, metrics = token_policy_loss(
            logp,
            right_aligned([g.logp_old for g in batch], width),
            advantages,
            mask,
            variant=config.algo,
            max_len=config.max_new_tokens,
            logp_rollout=right_aligned([g.logp_rollout for g in batch], width),
            mismatch=config.mismatch,
            logp_ref=logp_ref,
            beta=config.beta,
        )
        (loss * share).backward()
    budget.forward_passes += 1
    budget.tokens_processed += sum(len(p) + len(c) for p, c in zip(prompts, outputs))
    return {**{k: float(v) for k, v in metrics.items()}, "loss": float(loss.detach())}


def sample_stats(
    result: TokenRollout, config: TrainConfig, world: World = dist_.SINGLE
) -> dict[str, float]:
    """Generated vs used samples, parse and stop rates of one iteration's rollout (all ranks)."""
    generated = [g for e in result.generated for g in e.decisions]
    sums = dist_.all_sum(
        [
            len(generated),
            sum(e.length for e in result.kept),
            len(result.generated),
            len(result.kept),
            sum(not g.valid for g in generated),
            sum(g.stopped for g in generated),
            sum(g.num_tokens for g in generated),
            sum(shaped_return(e, config) for e in result.generated),
        ],
        world,
    ).tolist()
    n, used, episodes, kept, unparsed, stopped, tokens, shaped = sums
    return {
        "generated_samples": int(n),
        "used_samples": int(used),
        "filtered_samples": int(n - used),
        "generated_episodes": int(episodes),
        "kept_episodes": int(kept),
        "generation_rounds": result.rounds,
        "unparsed_rate": unparsed / max(n, 1),
        "stopped_frac": stopped / max(n, 1),
        "completion_tokens": tokens / max(n, 1),
        "shaped_return": shaped / max(episodes, 1),
    }


def train_token(
    config: TrainConfig, out: Path, *, resume: bool = False, progress: bool = True
) -> RunLog:
    """Train the free-text policy with the GRPO family; everything lands in ``out``."""

    world = dist_.init(config.dist_timeout if config is not None else 300.0)
    log = RunLog.open(Path(out), config, resume=resume, writer=world.is_writer)
    config = log.config
    if config.plane != "token":
        raise ValueError(f"train_token trains plane='token', got plane={config.plane!r}")
    world.check_groups(config.groups_per_iter)
    torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    budget, timers = Budget(), Timers()

    model, tokenizer = load_run_model(config, log)
    model.eval()  # no dropout: rollouts and updates see the same function
    pad_id = tokenizer.pad_token_id
    engine = make_engine(
        config.rollout_engine, model, pad_id, noise=config.engine_noise, seed=config.seed
    )
    policy = TokenPolicy(
        model, tokenizer, config.interface, max_new_tokens=config.max_new_tokens,
        engine=engine, budget=budget, timers=timers,
    )  # fmt: skip
    eval_policy = TokenPolicy(
        model, tokenizer, config.interface, max_new_tokens=config.max_new_tokens
    )
    train_envs = make_envs(config, "train", config.group_size)
    eval_envs = make_envs(config, "heldout", min(config.eval_episodes, 16) or 1)

    params = [p for p in model.parameters() if p.requires_grad]  # LoRA: adapters only
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    ref_model = reference_model(config, log, model) if config.beta > 0 else None
    iteration = begin_run(
        log, config, model=model, value_head=None, optimizer=optimizer, budget=budget,
        eval_policy=eval_policy, eval_envs=eval_envs, world=world,
    )  # fmt: skip

    bar = log.progress_bar(config, budget, enabled=progress and world.is_writer)
    while budget.get(config.budget_currency) < config.steps:
        iteration += 1
        t0 = time.perf_counter()
        spent_before = budget.to_dict()
        rng, _ = iteration_rngs(config.seed, iteration)

        # 1. rollout: this rank's groups (DAPO: re-sample zero-variance groups)
        result = rollout(
            policy, train_envs, config, iteration, budget=budget, timers=timers, world=world
        )

        # 2. advantages: the episode's group advantage on every token it generated
        completions, advantages = token_advantages(result.kept, config)
        if ref_model is not None:
            attach_reference_logprobs(
                ref_model, completions, pad_id=pad_id, chunk=config.minibatch_size
            )

        # 3. update (minibatches over the global completion list)
        counts: dict[int, int] = {}
        for e in result.kept:
            counts[e.group] = counts.get(e.group, 0) + e.length
        groups = config.groups_per_iter * config.max_gen_batches
        owner = dist_.global_index(counts, groups, world)
        update = token_update(
            model, completions, advantages, config=config, optimizer=optimizer, rng=rng,
            pad_id=pad_id, budget=budget, timers=timers, world=world, owner=owner,
        )  # fmt: skip

        # 4. logging, evaluation, checkpoint (statistics over all ranks)
        budget.wall_time += time.perf_counter() - t0
        dist_.reduce_budget(budget, spent_before, world)
        stats, _ = gathered_episode_stats(result.generated, world)
        row = {"iteration": iteration, **stats, **update}
        row.update(sample_stats(result, config, world))
        end_iteration(
            log, row, config=config, iteration=iteration, budget=budget, timers=timers,
            eval_policy=eval_policy, eval_envs=eval_envs, bar=bar,
            checkpoint=dict(model=model, tokenizer=tokenizer, value_head=None,
                            optimizer=optimizer),
            world=world,
        )  # fmt: skip
    finish_run(log, bar, eval_policy=eval_policy, eval_envs=eval_envs, config=config, world=world)
    return log
