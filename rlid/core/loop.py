"""The run lifecycle both trainers share: open, play, iterate, checkpoint, evaluate, finish.

A trainer (decision PPO in :mod:`rlid.core.train`, the token plane in
``rlid.baselines.token.train``) builds its model, policy and optimizer, then hands
:func:`run_iterations` its *update step*: ``step(iteration, rng) -> row``, which plays
the iteration's games, computes advantages, updates the model and returns the
iteration's metrics. Everything else is here, the same for every plane: the run
directory (new, or resumed with its config), the held-out evaluation before and after,
budgets reduced over processes, the per-iteration metrics row, checkpoints (also on
SIGTERM / Ctrl-C), the progress bar and the summary.

:class:`RunContext` carries what every part of a run shares (config, processes, run
directory, budget, timers, the update's wrapped model), so functions take it instead of
long parameter lists.
"""

from __future__ import annotations

import copy
import math
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from rlid import envs as envs_pkg
from rlid.config import TrainConfig
from rlid.config.budget import Budget, Timers
from rlid.config.limits import check_machine_limits, max_episode_steps
from rlid.config.registry import get_plane
from rlid.core.env_workers import WorkerEnvs
from rlid.core.evaluate import evaluate
from rlid.core.progress import RunBar, RunClock, format_left
from rlid.core.rollout import Episode, Sampling, collect_episodes
from rlid.core.seeds import group_rngs, iteration_rngs
from rlid.engines.session import check_engine_installed
from rlid.lm import distributed as dist_
from rlid.lm.distributed import World
from rlid.lm.hardware import (
    OffloadedModel,
    Precision,
    cuda_memory_row,
    enable_gradient_checkpointing,
    resolve_device,
)
from rlid.lm.lora import AdapterDisabled
from rlid.lm.models import CausalLM, own_memory
from rlid.lm.starts import load_policy_model, model_pin
from rlid.menus import resolve_template
from rlid.runs import health
from rlid.runs.changes import apply_resume_changes
from rlid.runs.dir import rng_state
from rlid.runs.log import RunLog, read_run_config
from rlid.runs.stop import RunStopped, StopSignals
from rlid.runs.summary import setup_lines


@dataclass
class RunContext:
    """What every part of one training run shares.

    ``RunContext(config)`` alone (one process, no run directory) is enough to call an
    update step directly (``rlid.core.train.ppo_update``, ``token_update``).

    Attributes:
        config: the run's config (a resumed run's own, read from its directory).
        world: this process's place among the run's processes (one process: rank 0 of 1).
        run_log: the run directory, ``log`` (None: none, e.g. an update step called directly).
        budget: what the run has spent (after each iteration: summed over processes).
        timers: where this iteration's time went.
        parallel: the update's wrapped model (DDP / FSDP2); unwrapped in one process.
    """

    config: TrainConfig
    world: World = dist_.SINGLE
    run_log: RunLog | None = None
    budget: Budget = field(default_factory=Budget)
    timers: Timers = field(default_factory=Timers)
    parallel: dist_.Parallel | None = None

    @property
    def log(self) -> RunLog:
        if self.run_log is None:
            raise RuntimeError("this run context has no run directory")
        return self.run_log


@dataclass
class TrainState:
    """What a checkpoint holds: the (unwrapped) model, its tokenizer, the optimizer, and
    the value head when the run has one."""

    model: torch.nn.Module
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    value_head: torch.nn.Module | None = None


@dataclass
class HeldOut:
    """The held-out evaluation of a run: its policy (greedy) on its held-out envs;
    ``progress``: show a bar while it plays, and the run's configuration as it starts
    (the writer process only). ``seconds``: how long each evaluation took (the progress
    bar's estimate of the time left); ``note``: added to the bar's title."""

    policy: Any
    envs: Any
    progress: bool = False
    seconds: list[float] = field(default_factory=list)
    note: str = ""

    def evaluate(self, ctx: RunContext, when: str) -> dict[str, float]:
        """Play the config's held-out episodes; ``when`` titles the bar ("before", ...)."""
        config = ctx.config
        shown = self.progress and ctx.world.is_writer
        t0 = time.perf_counter()
        stats = evaluate(
            self.policy, self.envs, config.eval_episodes, interface=config.interface,
            world=ctx.world, progress=f"held-out eval ({when}{self.note})" if shown else None,
        )  # fmt: skip
        self.seconds.append(time.perf_counter() - t0)
        return stats

    def typical_seconds(self) -> float | None:
        """One evaluation's duration, the mean of those timed (None: none yet)."""
        return sum(self.seconds) / len(self.seconds) if self.seconds else None


def open_run(
    config: TrainConfig | None, out: Path, *, resume: bool, plane: str | None = None
) -> RunContext:
    """Start a trainer: the process group, the run directory (new, or the one to resume,
    whose config wins) and the checks that must fail before any work (the config's
    plane when ``plane`` is given, groups per process, device, precision); seeds torch."""
    world = dist_.init(config.dist_timeout if config is not None else 300.0)
    log = RunLog.open(Path(out), config, resume=resume, writer=world.is_writer, pins=model_pin)
    config = log.config
    check_machine_limits(config)  # threads, workers and batch memory, before the model loads
    check_engine_installed(config)  # --rollout-engine vllm without vllm: one line, no work
    if plane is not None and config.plane != plane:
        raise ValueError(f"this trainer trains plane={plane!r}, got plane={config.plane!r}")
    world.check_groups(config.groups_per_iter)
    world.check_device(config.device)
    Precision.from_config(config)  # a bad --device fails before any work
    torch.manual_seed(config.seed)
    return RunContext(config, world, log)


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


def reference_model(ctx: RunContext, model: torch.nn.Module) -> torch.nn.Module:
    """The KL reference: the *starting* model, also when resuming from a later checkpoint.

    With LoRA it is the same model with its adapters disabled (no copy); otherwise a
    frozen copy (``requires_grad`` off, never in the optimizer) in the weight dtype, on
    the model's device — or kept on the CPU and moved per batch with ``ref_offload``.
    """
    config = ctx.config
    if config.lora_rank > 0:
        return AdapterDisabled(model)
    resuming = ctx.log.resuming
    start_model = own_memory(load_policy_model(str(config.model))[0]) if resuming else model
    precision = Precision.from_config(config)
    if config.ref_offload:
        ref = copy.deepcopy(start_model).to(device="cpu", dtype=precision.weight_dtype)
        return OffloadedModel(ref, precision.device)
    ref = copy.deepcopy(start_model).to(device=precision.device, dtype=precision.weight_dtype)
    return ref.eval().requires_grad_(False)


def make_envs(config: TrainConfig, split: str, count: int) -> Any:
    """``count`` envs of the config: a list, or with ``env_workers > 0`` a
    :class:`rlid.core.env_workers.WorkerEnvs` (list-like: ``len``, slices, ``[i]``)."""
    options = {**config.env_options, "split": split}
    if config.env_workers > 0:
        return WorkerEnvs(config.env, options, count, workers=config.env_workers)
    return [envs_pkg.make(config.env, **options) for _ in range(count)]


def close_envs(*env_lists: Any) -> None:
    """Stop env worker processes (a plain env list needs nothing)."""
    for env_list in env_lists:
        close = getattr(env_list, "close", None)
        if callable(close):
            close()


def play_groups(
    ctx: RunContext,
    env_list: Any,
    policy: Any,
    iteration: int,
    episodes: tuple[list[int], list[int]],
    round_: int = 0,
) -> list[Episode]:
    """Play this rank's groups (g mod world size == rank), each with its own randomness.

    ``episodes`` = (reset seeds, group ids) of every episode of the iteration (all
    ranks, :func:`rlid.core.seeds.make_reset_seeds`). A group's episodes run in lockstep with
    their own generators, so the episodes do not depend on which process plays them or
    which other groups it plays.
    """
    seeds, groups = episodes
    config = ctx.config
    mine = set(ctx.world.my_groups(max(groups) + 1 if groups else 0))
    played: list[Episode] = []
    order = list(dict.fromkeys(groups))
    # the first round decides how many of the iteration's groups the budget left needs
    playing = set(order[: groups_to_play(ctx, len(order))] if round_ == 0 else order)
    for g in order:
        if g not in mine:
            continue
        if g not in playing:
            ctx.budget.groups_skipped += 1
            continue
        group_seeds = [s for s, h in zip(seeds, groups) if h == g]
        rng, gen = group_rngs(config.seed, iteration, g, round_)
        played += collect_episodes(
            env_list[: len(group_seeds)], policy, group_seeds, [g] * len(group_seeds),
            interface=config.interface, sampling=Sampling(rng, gen, temperature=config.temperature),
            budget=ctx.budget, timers=ctx.timers,
        )  # fmt: skip
    return played


def groups_to_play(ctx: RunContext, count: int) -> int:
    """How many of an iteration's ``count`` groups (in group order) the budget left
    (``--steps`` in ``budget_currency``) is expected to need: the budget left divided by
    what a group has cost so far in this run (the run's spend per group played), at
    least one group per process, at most ``count``.

    Before any group was played, the cost of a group is bounded by its episodes at the
    env's step limit (env steps and decisions; an episode budget counts episodes), so
    a small budget plays no more groups than it could need; other currencies play every
    group. The decision reads the run's budget, which every process holds the same at
    an iteration's start, so N processes play the groups one process would (unless the
    budget left needs fewer groups than there are processes), and a
    resumed run the groups of the uninterrupted one. The groups not started are counted
    in ``groups_skipped``; the episodes of the groups started are all finished."""
    config, budget = ctx.config, ctx.budget
    currency, size = config.budget_currency, config.group_size
    spent, done = budget.get(currency), budget.episodes / size
    if currency == "episodes":
        cost: float | None = size
    elif done > 0 and spent > 0:
        cost = spent / done
    elif currency in ("env_steps", "decisions"):
        limit = max_episode_steps(config)
        cost = size * limit if limit else None
    else:
        cost = None
    left = config.steps - spent
    if cost is None or left <= 0:
        return count
    # every process plays at least one group (a process without episodes has nothing to
    # join the update's collectives with): the one place the world size shows
    return min(count, max(1, ctx.world.size, math.ceil(left / cost)))


def begin_run(ctx: RunContext, state: TrainState, held_out: HeldOut) -> int:
    """Write the run directory, then restore a checkpoint (returning its iteration) or
    evaluate the starting policy on held-out games (returning 0): a run restarted
    before its first checkpoint keeps that evaluation where the same weights ran it
    with the same code (:meth:`rlid.runs.log.RunLog.start`).

    Every rank starts from rank 0's parameters (a no-op in one process; a wrapped model
    got them when it was wrapped).
    """
    world, log, parallel = ctx.world, ctx.log, ctx.parallel
    dist_.barrier(world)  # every rank has checked the directory before rank 0 writes it
    log.start()
    if held_out.progress and world.is_writer:  # --quiet: nothing
        starting = "resuming" if log.resuming else "starting"
        lines = [
            f"rlid: {starting} a run with this configuration",
            *setup_lines(log.path, ctx.config),
        ]
        print("\n".join(lines), file=sys.stderr, flush=True)
    synced = [None if parallel is not None and parallel.wrapped else state.model, state.value_head]
    if log.resuming:
        optimizer = state.optimizer
        iteration = log.restore(
            value_head=state.value_head, optimizer=optimizer, budget=ctx.budget, world=world,
            load_optimizer=(
                (lambda saved: parallel.load_optimizer(optimizer, saved)) if parallel else None
            ),
        )  # fmt: skip
        dist_.broadcast_parameters(synced, world)
        return iteration
    dist_.broadcast_parameters(synced, world)
    log.write_origin(
        getattr(state.model, "rlid_origin", str(ctx.config.model)),
        template=resolve_template(ctx.config.interface, held_out.policy.tokenizer),
    )
    if dist_.any_rank(not log.has_eval("before"), world):
        log.write_eval("before", held_out.evaluate(ctx, "before"))
    elif world.is_writer:  # restarted before a checkpoint, the same start and code
        log.reuse_eval("before")
    return 0


def end_iteration(
    ctx: RunContext,
    row: dict[str, Any],
    iteration: int,
    *,
    state: TrainState,
    held_out: HeldOut,
    stop: StopSignals | None = None,
) -> list[health.TrainingWarning]:
    """Log one iteration's row (time split, budget, optional eval), say its warnings
    and checkpoint.

    ``ctx.budget`` is already the global one (``rlid.lm.distributed.reduce_budget``); the
    time split is the mean over ranks. ``stop``: when any rank got SIGTERM / Ctrl-C
    (:mod:`rlid.runs.stop`), every rank checkpoints this iteration and raises
    :class:`RunStopped`. The row's warnings (:mod:`rlid.runs.health`) are printed by the
    writer; those ``config.stop_on`` names, while budget is left, are checkpointed and
    returned (every rank reads the same reduced row, so every rank stops).
    """
    config, world, log, budget, parallel = ctx.config, ctx.world, ctx.log, ctx.budget, ctx.parallel
    row["time"] = dist_.mean_timers(ctx.timers.pop(), world)
    row["budget"] = budget.to_dict()
    if config.eval_every and iteration % config.eval_every == 0:
        row["eval"] = held_out.evaluate(ctx, f"iteration {iteration}")
    # the allocator's peaks over this iteration's rollouts, update and evaluation
    memory = cuda_memory_row(resolve_device(config.device))
    if memory is not None:
        row["gpu_memory"] = memory
    found, new = health.watch(log.metrics, row)  # before a non-finite loss ends the run
    if world.is_writer:
        health.say(new, _write_above_bar)
    halt = health.stop_reasons(found, config.stop_on)
    if budget.get(config.budget_currency) >= config.steps:
        halt = []  # the run ends here anyway, evaluated as usual
    log.append_metrics(row)
    stopping = stop is not None and dist_.any_rank(stop.requested, world)
    if stopping or halt or log.checkpoint_due(iteration, budget):
        rng_states = dist_.gather_objects(rng_state(), world)
        model_state, optimizer_state = (
            parallel.full_state(state.optimizer) if parallel else (None, None)
        )  # fsdp: gathered by every rank
        log.checkpoint(
            model=state.model, tokenizer=state.tokenizer, value_head=state.value_head,
            optimizer=state.optimizer, iteration=iteration, budget=budget,
            rng_states=rng_states, model_state=model_state, optimizer_state=optimizer_state,
        )  # fmt: skip
    if stopping:
        assert stop is not None
        log.close()  # the lock: the resume finds a clean directory
        raise RunStopped(
            log.path, iteration, stop.signum or signal.SIGTERM, quiet=not world.is_writer
        )
    return halt


def _write_above_bar(line: str) -> None:
    """One line on stderr, above the progress bar when one is shown."""
    tqdm.write(line, file=sys.stderr)
    sys.stderr.flush()


def finish_run(ctx: RunContext, held_out: HeldOut) -> None:
    """Held-out evaluation after training (once, also across resumes), curves, summary."""
    if dist_.any_rank(not ctx.log.has_eval("after"), ctx.world):
        ctx.log.write_eval("after", held_out.evaluate(ctx, "after"))
    ctx.log.finish()
    dist_.barrier(ctx.world)  # the run directory is complete when any rank returns


Step = Callable[[int, np.random.Generator], dict[str, Any]]
"""A plane's update step: ``step(iteration, rng) -> row`` plays the iteration's games,
computes advantages, updates the model, and returns the iteration's metrics row
(``iteration``, the episode statistics, the update's metrics)."""


def run_iterations(
    ctx: RunContext,
    step: Step,
    *,
    state: TrainState,
    held_out: HeldOut,
    start: int,
    progress: bool = True,
) -> None:
    """Iterate ``step`` from iteration ``start`` + 1 until the budget is spent, then
    evaluate on held-out games and finish the run directory.

    Around each step: the iteration's randomness (:func:`rlid.core.seeds.iteration_rngs`),
    its wall time, the budget summed over processes, the metrics row, checkpoints and
    the progress bar. SIGTERM / Ctrl-C: the iteration under way ends, is checkpointed,
    and :class:`rlid.runs.stop.RunStopped` is raised (the writer says so). A warning
    ``config.stop_on`` names: the iteration is checkpointed, ``summary.md`` written
    (no held-out evaluation after training) and
    :class:`rlid.runs.health.StoppedOnWarning` raised.
    """
    config, budget = ctx.config, ctx.budget
    spent = budget.get(config.budget_currency)
    shown = progress and ctx.world.is_writer
    bar = RunBar(config.steps, spent, config.budget_currency, shown)
    clock = RunClock(config, iteration=start, spent=spent)  # the whole run's time left
    iteration = start
    halt: list[health.TrainingWarning] = []
    try:
        with StopSignals(announce=ctx.world.is_writer) as stop:
            while budget.get(config.budget_currency) < config.steps:
                iteration += 1
                t0 = time.perf_counter()
                spent_before = budget.to_dict()
                rng, _ = iteration_rngs(config.seed, iteration)
                row = step(iteration, rng)
                budget.wall_time += time.perf_counter() - t0
                dist_.reduce_budget(budget, spent_before, ctx.world)
                timed = len(held_out.seconds)
                halt = end_iteration(ctx, row, iteration, state=state, held_out=held_out, stop=stop)
                seconds = time.perf_counter() - t0 - sum(held_out.seconds[timed:])
                clock.record(iteration, budget.get(config.budget_currency), seconds)
                eval_seconds = held_out.typical_seconds()
                left = format_left(clock.left(eval_seconds), evaluations=eval_seconds is not None)
                held_out.note = f"; run left {left}" if shown else ""
                bar.advance_to(
                    budget.get(config.budget_currency), ret=row["return"], win=row["success"],
                    left=left,
                )  # fmt: skip
                if halt:
                    break
    finally:
        bar.close()
    if halt:
        ctx.log.finish()  # the summary says why
        dist_.barrier(ctx.world)
        raise health.StoppedOnWarning(ctx.log.path, halt, quiet=not ctx.world.is_writer)
    finish_run(ctx, held_out)


def run_training(
    config: TrainConfig | None,
    out: Path,
    *,
    resume: bool,
    progress: bool = True,
    changes: dict[str, Any] | None = None,
) -> RunLog:
    """Train ``config`` into the run directory ``out`` with its plane's trainer.

    With ``resume=True`` the config is read from ``out`` (``config`` is ignored);
    ``changes`` are values given with the resume, applied where that is safe and
    refused otherwise (:func:`rlid.runs.log.apply_resume_changes`).
    """
    if resume:
        if changes:
            apply_resume_changes(Path(out), changes)
        config = read_run_config(out)[0]
    if config is None:
        raise ValueError("a config is required to start a new run")
    try:
        log = get_plane(config.plane).train(config, out, resume=resume, progress=progress)
    except RunStopped:
        dist_.release()  # every rank stopped after the same iteration: a clean exit
        raise
    dist_.release()  # the process group the trainer joined, before the process ends
    return log
