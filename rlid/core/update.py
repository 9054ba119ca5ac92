"""One update path for every plane: PPO epochs x minibatches x micro-batches.

The decision and scoring planes (:class:`rlid.core.train.MenuSteps`) and the token plane
(``rlid.baselines.token.train.TokenSteps``) train through :func:`run_update`; each gives
its own :class:`PlaneSteps`, the part that differs: which samples carry advantage signal,
how a minibatch is cut into micro-batches, one micro-batch's forward + backward, and how
a minibatch's metrics are combined. The loop itself is written once:

    for each epoch:
        for each minibatch of a fresh permutation (drawn over every rank's samples):
            skip it if no sample carries signal (unless the plane keeps those)
            forward + backward per micro-batch, gradients accumulated, every loss
                term divided by the *minibatch's* normaliser (= the one-batch step)
            one optimizer step; stop early past target_kl

Several processes: minibatches are drawn over the global sample list (``owner`` maps it
to this rank's samples, -1 where another rank holds one) with the same permutation on
every rank, and the gradients are summed over ranks by ``ctx.parallel``'s wrapper (DDP /
FSDP2, whose micro-plan adds filler steps so collectives match) or by
``parallel.reduce_rest``, so every rank takes the step one process would.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from rlid.lm import distributed as dist_
from rlid.lm.hardware import train_mode_without_dropout
from rlid.lm.optim import Stepper, minibatches


class PlaneSteps(Protocol):
    """A plane's part of the update (see the module docstring).

    Attributes:
        owner: (N_global,) index of each global sample into this rank's samples
            (-1: held by another rank).
        keeps_without_signal: train on minibatches whose advantages are all zero (a
            value head's regression still has a target there).
    """

    owner: np.ndarray
    keeps_without_signal: bool

    def signal(self) -> np.ndarray:
        """(N_global,) bool: which samples carry advantage signal (the same on every rank)."""
        ...

    def micro_plan(self, idx: np.ndarray) -> list[slice]:
        """The micro-batches of this rank's members ``idx`` of one minibatch."""
        ...

    def begin(self, chosen: np.ndarray, idx: np.ndarray, plan: list[slice], signal: bool) -> Any:
        """What the micro-steps of minibatch ``chosen`` (global indices) share."""
        ...

    def micro_step(self, minibatch: Any, sub: np.ndarray | None) -> Any:
        """Forward + backward of this rank's samples ``sub`` (None: a filler step whose
        loss is multiplied by 0); returns the micro-batch's metrics."""
        ...

    def metrics(
        self, minibatch: Any, steps: list[tuple[np.ndarray | None, Any]], grad_norm: float
    ) -> dict[str, float]:
        """The minibatch's metrics from its micro-steps (reduced over ranks)."""
        ...


def mean_rows(rows: list[dict[str, float]]) -> dict[str, float]:
    """The update's metrics: the mean over minibatches; ``*_min`` / ``*_max`` keep the
    extreme."""
    out: dict[str, float] = {}
    for key in dict.fromkeys(k for row in rows for k in row):
        values = [row[key] for row in rows if key in row]
        if key.endswith("_min"):
            out[key] = min(values)
        elif key.endswith("_max"):
            out[key] = max(values)
        else:
            out[key] = sum(values) / len(values)
    return out


def run_update(
    ctx: Any,
    steps: PlaneSteps,
    stepper: Stepper,
    rng: np.random.Generator,
    model: Any,
) -> dict[str, float]:
    """PPO epochs x minibatches over one iteration's samples; returns mean metrics.

    A minibatch without advantage signal is skipped (``skipped_minibatches``), and an
    iteration without any returns ``{"skipped_update": 1.0}`` before any step: an AdamW
    step on a zero gradient would still move the parameters through its momentum, and a
    regulariser alone (entropy, KL, label mass) would get a full-size step, because Adam
    normalises the gradient's scale away. ``model`` runs in train mode without dropout
    during the update when gradient checkpointing is on (None: no model of its own).
    """
    config, world, timers = ctx.config, ctx.world, ctx.timers
    parallel = ctx.parallel if ctx.parallel is not None else dist_.Parallel.unwrapped(world)
    owner = steps.owner
    signal = steps.signal()
    if not signal.any() and not steps.keeps_without_signal:
        return {"skipped_update": 1.0}
    rows: list[dict[str, float]] = []
    skipped = 0
    stop = False
    checkpointing = config.gradient_checkpointing and model is not None
    with train_mode_without_dropout(model, enabled=checkpointing):
        for _ in range(config.epochs):
            order = rng.permutation(len(owner))
            for chosen in minibatches(order, config.minibatch_size):
                has_signal = bool(signal[chosen].any())
                if not has_signal and not steps.keeps_without_signal:
                    skipped += 1
                    continue
                members = owner[chosen]
                idx = members[members >= 0]  # the members this rank holds
                plan = steps.micro_plan(idx)
                minibatch = steps.begin(chosen, idx, plan, has_signal)
                stepper.zero_grad()
                done: list[tuple[np.ndarray | None, Any]] = []
                for part, context in parallel.micro_plan(plan):
                    sub = None if part is None else idx[part]
                    with context:
                        done.append((sub, steps.micro_step(minibatch, sub)))
                with timers.time("backward"):
                    parallel.reduce_rest(stepper.params)
                    grad_norm = stepper.step()
                ctx.budget.optimizer_steps += 1
                rows.append(steps.metrics(minibatch, done, float(grad_norm)))
                if config.target_kl is not None and rows[-1]["approx_kl"] > config.target_kl:
                    stop = True  # the all-reduced KL: every rank stops at the same step
                    break
            if stop:
                break
    out = mean_rows(rows)
    out["early_stop"] = float(stop)
    if skipped:
        out["skipped_minibatches"] = float(skipped)
    return out
