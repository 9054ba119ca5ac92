"""How one optimizer step is made: minibatches, micro-batches, accumulation, clipping.

Both trainers (decision PPO in :mod:`rlid.core.train`, the token plane in
``rlid.baselines.token.train``) cut an iteration's samples into minibatches
(:func:`minibatches`, one optimizer step each), run each minibatch in micro-batches
(:func:`chunks`, or :func:`budget_chunks` under a token budget) whose gradients
accumulate, and step through a :class:`Stepper`
(loss scaling for fp16, gradient clipping over plain and sharded parameters).
Every micro-batch's loss is divided by its *minibatch's* normaliser, so the
accumulated step equals the one-batch step (docs/design.md §10).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch.distributed.tensor import DTensor


def minibatches(order: np.ndarray, size: int) -> list[np.ndarray]:
    """Split a permutation of the batch into minibatches of ``size`` indices.

    A tail shorter than half a minibatch joins the previous minibatch instead of
    getting an optimizer step of its own (N = 65, size 32 -> 32, 33, not 32, 32, 1):
    Adam would give a 1-decision estimate a full-size step. A tail of at least half
    a minibatch stays a minibatch.
    """
    if size < 1:
        raise ValueError(f"minibatch size must be >= 1, got {size}")
    starts = list(range(0, len(order), size))
    if len(starts) > 1 and len(order) - starts[-1] < size / 2:
        starts.pop()
    ends = starts[1:] + [len(order)]
    return [order[a:b] for a, b in zip(starts, ends)]


def chunks(count: int, size: int | None) -> list[slice]:
    """[0, count) in consecutive slices of at most ``size`` (None: one slice)."""
    size = size or max(count, 1)
    return [slice(start, min(start + size, count)) for start in range(0, count, size)]


def budget_chunks(costs: Sequence[int], size: int | None, budget: int | None) -> list[slice]:
    """[0, len(costs)) in consecutive slices of at most ``size`` items whose ``costs``
    add up to at most ``budget`` (None: no bound of that kind); an item that costs more
    than the budget alone gets a slice of its own.

    >>> budget_chunks([5, 5, 5, 20, 1], 3, 10)
    [slice(0, 2, None), slice(2, 3, None), slice(3, 4, None), slice(4, 5, None)]
    """
    if budget is None:
        return chunks(len(costs), size)
    if budget < 1:
        raise ValueError(f"the token budget must be >= 1, got {budget}")
    parts, start, total = [], 0, 0
    for i, cost in enumerate(costs):
        full = size is not None and i - start >= size
        if i > start and (full or total + cost > budget):
            parts.append(slice(start, i))
            start, total = i, 0
        total += cost
    if len(costs) > start:
        parts.append(slice(start, len(costs)))
    return parts


class Stepper:
    """backward / clip / step with an optional GradScaler (fp16), in one place.

    ``backward`` may be called several times (gradient accumulation over
    micro-batches) before one ``step``.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        params: list[torch.nn.Parameter],
        max_grad_norm: float,
        scaler: torch.amp.GradScaler | None = None,
    ) -> None:
        self.optimizer = optimizer
        self.params = params
        self.max_grad_norm = max_grad_norm
        self.scaler = scaler

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def backward(self, loss: torch.Tensor, weight: float = 1.0) -> None:
        """Backpropagate ``loss`` (times ``weight``: 0 for a filler step of a wrapped
        model, which must run its collectives but add nothing)."""
        if weight != 1.0:
            loss = loss * weight
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def step(self) -> torch.Tensor:
        """Clip the (unscaled) gradient norm, step; returns the norm before clipping."""
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        grad_norm = clip_grad_norm(self.params, self.max_grad_norm)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)  # skipped when the norm is inf / NaN
            self.scaler.update()
        else:
            self.optimizer.step()
        return grad_norm


def clip_grad_norm(params: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """``clip_grad_norm_`` that also takes a mix of sharded (FSDP2 DTensor) and plain
    parameters (a value head beside a sharded model): the total norm is computed over
    both kinds, the sharded part's norm reduced over its shards."""
    # lazy: torch.distributed is absent from some torch builds; one process never needs it

    sharded = [p for p in params if isinstance(p, DTensor)]
    if not sharded:
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    plain = [p for p in params if not isinstance(p, DTensor)]
    norms = []
    for group in (sharded, plain):
        grads = [p.grad for p in group if p.grad is not None]
        if grads:
            norm = torch.nn.utils.get_total_norm(grads)
            norms.append(norm.full_tensor() if isinstance(norm, DTensor) else norm)
    total = torch.linalg.vector_norm(torch.stack(norms)) if norms else torch.tensor(0.0)
    for group in (sharded, plain):
        torch.nn.utils.clip_grads_with_norm_(group, max_norm, total)
    return total
