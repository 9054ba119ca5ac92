"""Token-plane training: the GRPO family on multi-step text games.

Sections per iteration, as in ``rlid.core.train`` (so the two planes read alike):
rollout -> advantages -> update -> logging/checkpoint. Run directory, budget,
held-out evaluation before/after, checkpoints and exact resume are shared with
the decision trainer (``RunLog``, ``Budget``, ``evaluate``, ``iteration_rngs``,
``make_reset_seeds``, ``make_envs``).

Multi-step credit (the choice, and why): the G episodes reset with the same seed
form a group, and *every generated token of an episode* gets that episode's
group-relative advantage, ``rlid.core.advantages.group_relative_advantages`` of the episode returns (std
scaling for grpo / dapo / gspo / cispo, none for dr_grpo; ``adv_scale`` is a
decision-plane option). This is the episode-level GRPO that the decision plane's
``advantage="group"`` uses, so the two planes differ in the probability event
(text vs. action), not in credit assignment. A return is the discounted sum of
env rewards, Σ_t gamma^t r_t (``rlid.core.advantages.episode_return``, as the decision
plane; ``gamma=1`` for the plain sum), plus undiscounted shaping: ``invalid_penalty`` per command that did not parse and,
with ``overlong_cache > 0``, DAPO's soft overlong penalty per completion.

DAPO dynamic sampling (``algo="dapo"``): groups whose task outcomes (env return
and success, not the shaping) are all equal are dropped and new groups (new reset seeds)
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

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from rlid.baselines.engine import completion_logprobs, make_engine
from rlid.baselines.token.policy import Generation, TokenPolicy
from rlid.config import TrainConfig
from rlid.config.names import AdvantageScale
from rlid.config.planes import TokenConfig
from rlid.core.advantages import episode_return, group_relative_advantages
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
from rlid.core.rollout import Episode, gathered_episode_stats
from rlid.core.seeds import make_reset_seeds
from rlid.core.update import run_update
from rlid.engines.gap import gap_row, token_gap
from rlid.engines.session import EngineSession
from rlid.lm import distributed as dist_
from rlid.lm.distributed import World
from rlid.lm.optim import Stepper, budget_chunks
from rlid.lm.starts import load_run_model
from rlid.losses.mismatch import MismatchCorrection
from rlid.losses.token import (
    TokenLoss,
    aggregation_normaliser,
    nonzero_variance_groups,
    overlong_penalty,
    token_policy_loss,
)
from rlid.runs.log import RunLog


def token_config(ctx: RunContext) -> TokenConfig:
    """The run's config, a token-plane one (``open_run(plane="token")`` checked it)."""
    if not isinstance(ctx.config, TokenConfig):
        raise TypeError(f"the token trainer needs a TokenConfig, got {type(ctx.config).__name__}")
    return ctx.config


@dataclass
class TokenRollout:
    """One iteration's episodes: all generated, and those the update uses."""

    generated: list[Episode]
    kept: list[Episode]
    rounds: int


def round_reset_seeds(
    config: TokenConfig, iteration: int, round_: int
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


def shaped_return(episode: Episode, config: TokenConfig) -> float:
    """Discounted env return + ``invalid_penalty`` per unparsed command + overlong shaping."""
    ret = episode_return(episode.rewards, config.gamma) + config.invalid_penalty * sum(
        not g.valid for g in episode.decisions
    )
    if config.overlong_cache > 0:
        lengths = torch.tensor([g.num_tokens for g in episode.decisions])
        shaping = overlong_penalty(lengths, config.max_new_tokens, config.overlong_cache)
        ret += float(shaping.sum())
    return ret


def group_returns(
    episodes: list[Episode], config: TokenConfig
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


def outcomes_vary(grouped: list[list[Episode]]) -> Tensor:
    """(N,) bool: groups whose task outcomes (env return, success) are not all equal.

    DAPO's dynamic-sampling test. The shaping (``invalid_penalty``, overlong) is left
    out on purpose: an all-failed group whose episodes differ only in penalties has no
    task signal, and std-normalising it would turn small length penalties into
    unit-scale advantages. Shaping enters the advantage of the groups that are kept.
    """
    returns = torch.tensor([[e.ret for e in group] for group in grouped], dtype=torch.float64)
    won = torch.tensor([[float(e.won) for e in group] for group in grouped], dtype=torch.float64)
    return nonzero_variance_groups(returns) | nonzero_variance_groups(won)


def rollout(ctx: RunContext, policy: TokenPolicy, env_list: Any, iteration: int) -> TokenRollout:
    """Play the iteration's groups; with DAPO drop zero-variance groups and play more.

    Each rank plays its share of the groups (``play_groups``); the kept count that
    ends DAPO's re-sampling is the global one, so every rank plays the same rounds.
    """
    config, world = token_config(ctx), ctx.world
    dynamic = config.algo == "dapo"
    generated: list[Episode] = []
    kept: list[Episode] = []
    rounds = 0
    for round_ in range(config.max_gen_batches if dynamic else 1):
        episodes = play_groups(
            ctx, env_list, policy, iteration, round_reset_seeds(config, iteration, round_), round_
        )
        generated += episodes
        rounds += 1
        if not dynamic:
            kept = episodes
            break
        if episodes:
            grouped, _ = group_returns(episodes, config)
            for group, informative in zip(grouped, outcomes_vary(grouped).tolist()):
                if informative:
                    kept += group
                else:
                    ctx.budget.filtered_samples += sum(e.length for e in group)
        if dist_.all_sum([len(kept)], world)[0] >= config.episodes_per_iter:
            break
    return TokenRollout(generated=generated, kept=kept, rounds=rounds)


def token_advantages(
    episodes: list[Episode], config: TokenConfig
) -> tuple[list[Generation], Tensor]:
    """Flatten episodes into completions with the episode's group advantage (N,)."""
    if not episodes:
        return [], torch.zeros(0)
    grouped, returns = group_returns(episodes, config)  # (groups, G)
    scale: AdvantageScale = "none" if config.algo == "dr_grpo" else "std"
    group_ids = torch.arange(returns.shape[0]).repeat_interleave(returns.shape[1])
    # the decision plane's function: one group-advantage definition for both planes
    adv = group_relative_advantages(returns.flatten(), group_ids, scale=scale).view_as(returns)
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
    """Store log π_ref per completion token in ``extra["logp_ref"]`` (for the k3 KL), at
    the temperature each completion was sampled at (the same event as ``logp``)."""
    for start in range(0, len(completions), chunk):
        batch = completions[start : start + chunk]
        logp, mask, _ = completion_logprobs(
            ref_model, [g.prompt_ids for g in batch], [g.completion_ids for g in batch], pad_id,
            temperature=batch_temperature(batch),
        )  # fmt: skip
        for b, g in enumerate(batch):
            g.extra["logp_ref"] = logp[b][mask[b]].tolist()


@dataclass
class TokenBatch:
    """One iteration's completions as the token update reads them.

    Attributes:
        completions: this process's completions (its kept groups, in order).
        advantages: (N,) the episode's group advantage, per completion.
        owner: (N_global,) maps the global completion list (all ranks, groups in order)
            to indices into ``completions`` (-1: held by another rank).
        filler: any completion this rank generated, scored with weight 0 by a filler
            micro-step when the rank holds none (None: it generated none).
    """

    completions: list[Generation]
    advantages: Tensor
    owner: np.ndarray
    filler: Generation | None = None


@dataclass(frozen=True)
class Rescoring:
    """How the trainer re-scores completions: the tokenizer's pad id and the autocast
    context around its forwards (mixed precision)."""

    pad_id: int
    autocast: Callable[[], AbstractContextManager[Any]] = nullcontext


class TokenSteps:
    """The token plane's part of :func:`rlid.core.update.run_update`: completions,
    re-scored token by token, trained with ``token_policy_loss``."""

    def __init__(
        self,
        ctx: RunContext,
        model: torch.nn.Module,
        batch: TokenBatch,
        stepper: Stepper,
        rescoring: Rescoring,
    ) -> None:
        self.ctx, self.config, self.model, self.batch = ctx, token_config(ctx), model, batch
        self.stepper, self.rescoring = stepper, rescoring
        self.owner = batch.owner
        self.keeps_without_signal = False
        self.lengths = np.zeros(len(self.owner))

    def signal(self) -> np.ndarray:
        """Which completions carry advantage signal; also each one's token count (the
        minibatch normaliser needs every rank's), in one all-reduce."""
        completions, advantages, owner = self.batch.completions, self.batch.advantages, self.owner
        held = owner >= 0
        lengths, nonzero = np.zeros(len(owner)), np.zeros(len(owner))
        lengths[held] = [completions[i].num_tokens for i in owner[held]]
        nonzero[held] = (advantages.detach().cpu()[owner[held]] != 0).numpy()
        both = dist_.all_sum(np.concatenate([lengths, nonzero]), self.ctx.world).numpy()
        self.lengths = both[: len(owner)]
        return both[len(owner) :] > 0

    def micro_plan(self, idx: np.ndarray) -> list[slice]:
        completions = self.batch.completions
        costs = [
            len(completions[i].prompt_ids) + len(completions[i].completion_ids) for i in idx
        ]  # token positions, for micro_batch_tokens
        micro = self.config.micro_batch_size or self.config.minibatch_size
        return budget_chunks(costs, micro, self.config.micro_batch_tokens)

    def begin(self, chosen: np.ndarray, idx: np.ndarray, plan: list[slice], signal: bool) -> Any:
        normaliser = aggregation_normaliser(
            self.config.algo, torch.tensor(self.lengths[chosen]).long(), self.config.max_new_tokens
        )
        return normaliser, len(chosen)

    def micro_step(self, minibatch: Any, sub: np.ndarray | None) -> dict[str, float] | None:
        normaliser, _ = minibatch
        completions = self.batch.completions
        if sub is None:  # a filler step: keeps the wrapper's collectives matched
            stand_in = completions[0] if completions else self.batch.filler
            assert stand_in is not None
            _token_micro_step(
                self.ctx, self.model, [stand_in], torch.zeros(1), normaliser,
                self.stepper, self.rescoring, weight=0.0,
            )  # fmt: skip
            return None
        return _token_micro_step(
            self.ctx, self.model, [completions[i] for i in sub], self.batch.advantages[sub],
            normaliser, self.stepper, self.rescoring,
        )  # fmt: skip

    def metrics(
        self, minibatch: Any, steps: list[tuple[np.ndarray | None, Any]], grad_norm: float
    ) -> dict[str, float]:
        """Micro-batch means weighted by their share of the minibatch's sequences, over
        every rank; the loss adds up."""
        _, size = minibatch
        parts = [(len(sub) / size, m) for sub, m in steps if sub is not None]
        everyone = [p for ps in dist_.gather_objects(parts, self.ctx.world) for p in ps]
        row = _combine_micro_metrics(everyone)
        row["grad_norm"] = grad_norm
        return row


def token_update(
    ctx: RunContext,
    model: torch.nn.Module,
    batch: TokenBatch,
    stepper: Stepper,
    rng: np.random.Generator,
    rescoring: Rescoring,
) -> dict[str, float]:
    """Epochs x minibatches of ``token_policy_loss`` over completions; mean metrics
    (:func:`rlid.core.update.run_update` with :class:`TokenSteps`).

    Each minibatch is one optimizer step, computed in micro-batches of
    ``config.micro_batch_size`` completions (and at most ``config.micro_batch_tokens``
    prompt + completion tokens) whose gradients accumulate; every micro-batch divides by
    the *minibatch's* ``aggregation_normaliser`` (token count, sequence count or
    B·max_len; all ranks' tokens for token-mean), so the step equals the one-batch step.
    ``stepper`` steps the parameters of ``model`` (the wrapped one inside
    ``ctx.parallel``'s update block); a rank short of micro-batches runs filler steps on
    one of its completions, or on ``batch.filler`` when it holds none.
    """
    if not len(batch.owner):  # no completion kept on any rank (dynamic sampling)
        return {"early_stop": 0.0}
    steps = TokenSteps(ctx, model, batch, stepper, rescoring)
    return run_update(ctx, steps, stepper, rng, model)


def _token_micro_step(
    ctx: RunContext,
    model: torch.nn.Module,
    batch: list[Generation],
    advantages: Tensor,
    normaliser: Tensor,
    stepper: Stepper,
    rescoring: Rescoring,
    weight: float = 1.0,
) -> dict[str, float]:
    """Forward + backward of one micro-batch, divided by the minibatch's ``normaliser``
    (``weight=0``: a filler step, a zero loss backpropagated)."""
    config, budget, timers = token_config(ctx), ctx.budget, ctx.timers
    prompts, outputs = [g.prompt_ids for g in batch], [g.completion_ids for g in batch]
    temperature = batch_temperature(batch)
    with timers.time("forward"):
        logp, mask, _ = completion_logprobs(
            model,
            prompts,
            outputs,
            rescoring.pad_id,
            temperature=temperature,
            autocast=rescoring.autocast,
        )  # (B, C) float32 on the model's device
    device, width = logp.device, mask.shape[1]

    def aligned(rows: Sequence[Sequence[float]]) -> Tensor:
        return right_aligned(rows, width).to(device)

    logp_ref = aligned([g.extra["logp_ref"] for g in batch]) if config.beta > 0 else None
    with timers.time("backward"):
        loss, metrics = token_policy_loss(
            logp,
            aligned([g.logp_old for g in batch]),
            advantages.to(device=device, dtype=torch.float32),
            mask,
            logp_rollout=aligned([g.logp_rollout for g in batch]),
            logp_ref=logp_ref,
            normaliser=normaliser.to(device),
            loss=TokenLoss(
                variant=config.algo,
                max_len=config.max_new_tokens,
                mismatch=config.mismatch,
                beta=config.beta,
            ),
        )
        stepper.backward(loss, weight)
    budget.forward_passes += 1
    budget.tokens_processed += sum(len(p) + len(c) for p, c in zip(prompts, outputs))
    return {**{k: float(v) for k, v in metrics.items()}, "loss": float(loss.detach())}


def _combine_micro_metrics(parts: list[tuple[float, dict[str, float]]]) -> dict[str, float]:
    """One minibatch's metrics from its micro-batches: the loss adds up (each is already
    divided by the minibatch's normaliser); means are weighted by the share of
    sequences; ``*_min`` / ``*_max`` keep the extreme."""
    out: dict[str, float] = {}
    for key in dict.fromkeys(k for _, row in parts for k in row):
        items = [(w, row[key]) for w, row in parts if key in row]
        if key == "loss":
            out[key] = sum(v for _, v in items)
        elif key.endswith("_min"):
            out[key] = min(v for _, v in items)
        elif key.endswith("_max"):
            out[key] = max(v for _, v in items)
        else:
            out[key] = sum(w * v for w, v in items) / sum(w for w, _ in items)
    return out


def batch_temperature(batch: Sequence[Generation]) -> float:
    """The sampling temperature shared by a batch of completions (re-scored at it)."""
    temps = {g.temperature for g in batch}
    if len(temps) != 1:
        raise ValueError(f"completions sampled at different temperatures {sorted(temps)}")
    return temps.pop()


def sample_stats(
    result: TokenRollout, config: TokenConfig, world: World = dist_.SINGLE
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


def engine_step(
    ctx: RunContext, session: EngineSession | None, model: torch.nn.Module, result: TokenRollout
) -> dict[str, Any]:
    """After the update: sync a served engine (then its probe check), and the gap between
    the engine's μ and the trainer's π_old over every token generated this iteration, all
    ranks (:mod:`rlid.engines.gap`)."""
    synced = {}
    if session is not None:
        with ctx.timers.time("sync"):
            synced = {"probe_gap": session.sync(model)["probe_gap"]}
    generated = [g for e in result.generated for g in e.decisions]
    gap = token_gap(generated, MismatchCorrection(ctx.config.mismatch))
    return {**gap_row(gap, ctx.world), **synced}


def train_token(
    config: TrainConfig | None, out: Path, *, resume: bool = False, progress: bool = True
) -> RunLog:
    """Train the free-text policy with the GRPO family; everything lands in ``out``."""
    ctx = open_run(config, out, resume=resume, plane="token")
    config, world, log = token_config(ctx), ctx.world, ctx.log

    model, tokenizer = load_run_model(config, log)
    model, precision, scaler = setup_hardware(config, model)
    model.eval()  # no dropout: rollouts and updates see the same function
    rescoring = Rescoring(tokenizer.pad_token_id, precision.autocast)
    served = config.rollout_engine == "vllm"  # started after begin_run (rlid.engines.session)
    engine = None if served else make_engine(
        config.rollout_engine, model, rescoring.pad_id, noise=config.engine_noise,
        seed=config.seed, autocast=precision.autocast,
    )  # fmt: skip
    policy = TokenPolicy(
        model, tokenizer, config.interface, max_new_tokens=config.max_new_tokens,
        engine=engine, budget=ctx.budget, timers=ctx.timers, autocast=precision.autocast,
        micro_batch_size=config.micro_batch_size,
    )  # fmt: skip
    eval_policy = TokenPolicy(
        model, tokenizer, config.interface, max_new_tokens=config.max_new_tokens,
        engine=make_engine("trainer", model, rescoring.pad_id, autocast=precision.autocast),
        autocast=precision.autocast,
    )  # fmt: skip
    train_envs = make_envs(config, "train", config.group_size)  # one group at a time
    held_out = HeldOut(
        eval_policy, make_envs(config, "heldout", min(config.eval_episodes, 16) or 1), progress
    )

    ref_model = reference_model(ctx, model) if config.beta > 0 else None
    # several processes: the update's model is wrapped (DDP / FSDP2); rollouts use `model`
    parallel = ctx.parallel = dist_.Parallel(model, world, config.parallel, precision.device)
    params = list(parallel.params)  # LoRA: adapters only; FSDP2: the sharded parameters
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    state = TrainState(model, tokenizer, optimizer)
    session: EngineSession | None = None

    def step(iteration: int, rng: np.random.Generator) -> dict[str, Any]:
        # 1. rollout: this rank's groups (DAPO: re-sample zero-variance groups)
        result = rollout(ctx, policy, train_envs, iteration)

        # 2. advantages: the episode's group advantage on every token it generated
        completions, advantages = token_advantages(result.kept, config)
        if ref_model is not None:
            attach_reference_logprobs(
                ref_model, completions, pad_id=rescoring.pad_id,
                chunk=config.micro_batch_size or config.minibatch_size,
            )  # fmt: skip

        # 3. update (minibatches over the global completion list)
        counts: dict[int, int] = {}
        for e in result.kept:
            counts[e.group] = counts.get(e.group, 0) + e.length
        groups = config.groups_per_iter * config.max_gen_batches
        owner = dist_.global_index(counts, groups, world)
        filler = next((g for e in result.generated for g in e.decisions), None)
        if filler is not None and config.beta > 0:  # scored with weight 0: any reference
            filler.extra.setdefault("logp_ref", list(filler.logp_old))
        batch = TokenBatch(completions, advantages, owner, filler)
        with parallel.update() as train_model:
            trainable = [p for p in train_model.parameters() if p.requires_grad]
            stepper = Stepper(optimizer, trainable, config.max_grad_norm, scaler)
            update = token_update(ctx, train_model, batch, stepper, rng, rescoring)

        # 4. statistics over all ranks (the loop logs, evaluates and checkpoints)
        stats, _ = gathered_episode_stats(result.generated, world)
        row: dict[str, Any] = {"iteration": iteration, **stats, **update}
        row.update(sample_stats(result, config, world))
        # 5. a served engine gets the new weights; the gap of every sampled token is logged
        if config.rollout_engine != "trainer":
            row["engine_gap"] = engine_step(ctx, session, model, result)
        return row

    start = begin_run(ctx, state, held_out)
    if served:
        session = EngineSession.start(config, model, tokenizer)
        policy.engine = session.engine
    try:
        run_iterations(ctx, step, state=state, held_out=held_out, start=start, progress=progress)
    finally:
        if session is not None:
            session.close()
    close_envs(train_envs, held_out.envs)
    return log
