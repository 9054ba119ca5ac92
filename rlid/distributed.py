"""Data-parallel training on ``torch.distributed``: the rank logic, in one place.

Launch with ``torchrun --nproc-per-node N -m rlid train ...`` (several machines:
torchrun's ``--nnodes`` / ``--rdzv-*`` flags). Without a launcher (no
``WORLD_SIZE`` in the environment) everything here is a no-op on a world of one,
so the single-process path stays the plain path. Backend: ``nccl`` on CUDA,
``gloo`` on CPU.

The trainers call this module at a few named edges only:

* **seeding** -- group ``g`` of an iteration is played by rank ``g mod N``
  (:meth:`World.my_groups`); its game, reset seed and sampling randomness come from
  ``(seed, iteration, g)``, never from the rank, so N processes play the same
  episodes as one.
* **reduction** -- :func:`global_index` maps the *global* decision list (groups in
  order) to the members a rank holds, so minibatches are drawn over the global
  list with the same permutation everywhere; :func:`reduce_gradients` sums the
  gradients (each rank's loss already carries the global normaliser);
  :func:`all_sum` reduces counters and statistics; :func:`reduce_budget` turns
  each rank's spend of one iteration into the global spend (sums, except
  ``optimizer_steps`` and ``wall_time``: the maximum, since every rank takes the
  same steps in the same iteration).
* **writing** -- rank 0 alone writes the run directory (:attr:`World.is_writer`);
  every rank's RNG state is gathered into the checkpoint (:func:`gather_objects`).

A peer that dies makes the next collective fail; that failure (or a collective
that waits longer than ``dist_timeout``) is raised as :class:`PeerLost` with
what to do next.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import numpy as np
import torch
import torch.distributed as dist

from rlid.budget import Budget

T = TypeVar("T")

# Budget counters that every rank advances identically (or that measure elapsed
# time): reduced by maximum, not by sum.
_MAX_COUNTERS = ("optimizer_steps", "wall_time")


class PeerLost(RuntimeError):
    """A collective failed: another process of the run died or stopped answering."""


@dataclass(frozen=True)
class World:
    """This process's place in the run: rank and number of processes."""

    rank: int = 0
    size: int = 1

    @property
    def is_writer(self) -> bool:
        """Rank 0 alone writes the run directory."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def my_groups(self, groups: int) -> list[int]:
        """The group ids this rank plays: g with g mod size == rank."""
        return list(range(self.rank, groups, self.size))

    def check_groups(self, groups_per_iter: int) -> None:
        if groups_per_iter % self.size:
            raise ValueError(
                f"groups_per_iter={groups_per_iter} is the global number of game groups per "
                f"iteration and must be divisible by the number of processes ({self.size}); "
                f"use e.g. --groups-per-iter {self.size * max(1, groups_per_iter // self.size)}"
            )


SINGLE = World()
"""The world of a run without a launcher: one process, rank 0."""


def init(timeout_s: float = 300.0) -> World:
    """Join the process group torchrun describes (``RANK`` / ``WORLD_SIZE``), or a world of one.

    Idempotent: an already initialised default group is reused.
    """
    if dist.is_available() and dist.is_initialized():
        return World(dist.get_rank(), dist.get_world_size())
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return World()
    if not dist.is_available():
        raise RuntimeError("WORLD_SIZE > 1 but this torch build has no torch.distributed")
    if torch.cuda.is_available():
        backend = "nccl"
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    else:
        backend = "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    return World(dist.get_rank(), dist.get_world_size())


def shutdown(world: World) -> None:
    if world.distributed and dist.is_initialized():
        dist.destroy_process_group()


@contextmanager
def collective(what: str) -> Iterator[None]:
    """Turn a failed collective into :class:`PeerLost` with a message saying what to do."""
    try:
        yield
    except (RuntimeError, dist.DistBackendError) as err:
        rank = dist.get_rank() if dist.is_initialized() else "?"
        raise PeerLost(
            f"rank {rank}: {what} failed: another process of this run died or stopped "
            f"answering ({str(err).splitlines()[0] if str(err) else type(err).__name__}). "
            "Stop the run and continue it from its last checkpoint with "
            "`torchrun --nproc-per-node N -m rlid train --resume DIR` (same N)"
        ) from err


# --------------------------------------------------------------------------- reduction
Values = Sequence[float] | torch.Tensor | np.ndarray


def all_sum(values: Values, world: World) -> torch.Tensor:
    """Element-wise sum over ranks, in float64 (exact for counts)."""
    tensor = torch.as_tensor(values, dtype=torch.float64).clone()
    if world.distributed:
        with collective("all_reduce(sum)"):
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_max(values: Values, world: World) -> torch.Tensor:
    tensor = torch.as_tensor(values, dtype=torch.float64).clone()
    if world.distributed:
        with collective("all_reduce(max)"):
            dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor


def any_rank(flag: bool, world: World) -> bool:
    return bool(all_max([float(flag)], world)[0] > 0)


def gather_objects(obj: T, world: World) -> list[T]:
    """Every rank's ``obj``, in rank order (a list of one without a process group)."""
    if not world.distributed:
        return [obj]
    out: list[Any] = [None] * world.size
    with collective("all_gather_object"):
        dist.all_gather_object(out, obj)
    return out


def barrier(world: World) -> None:
    if world.distributed:
        with collective("barrier"):
            dist.barrier()


def broadcast_parameters(modules: Sequence[torch.nn.Module | None], world: World) -> None:
    """Give every rank rank 0's parameters and buffers (DDP does the same at wrap time)."""
    if not world.distributed:
        return
    with collective("broadcast of the initial parameters"), torch.no_grad():
        for module in modules:
            if module is None:
                continue
            for tensor in [*module.parameters(), *module.buffers()]:
                dist.broadcast(tensor.data, src=0)


def reduce_gradients(params: Sequence[torch.nn.Parameter], world: World) -> None:
    """Sum gradients over ranks in one flat all-reduce (missing gradients count as 0).

    Each rank's loss is already divided by the *global* normaliser, so the sum is the
    gradient one process would compute on the whole minibatch. (DDP would average;
    it is not used so that a rank holding no member of a minibatch can skip the
    forward pass and still join the reduction.)
    """
    if not world.distributed or not params:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    with collective("all_reduce of gradients"):
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset : offset + n].view_as(p).clone()
        offset += n


def reduce_budget(budget: Budget, before: dict[str, float], world: World) -> None:
    """Replace this rank's spend since ``before`` by the spend of all ranks (in place).

    Every rank then holds the same global budget, so the stop test agrees everywhere.
    """
    if not world.distributed:
        return
    names = [n for n in budget.__dataclass_fields__]
    delta = [getattr(budget, n) - before[n] for n in names]
    summed = all_sum(delta, world)
    maxed = all_max(delta, world)
    for i, name in enumerate(names):
        value = maxed[i] if name in _MAX_COUNTERS else summed[i]
        kind: Callable[[Any], Any] = type(getattr(budget, name))
        setattr(budget, name, kind(before[name] + kind(value.item())))


def mean_timers(seconds: dict[str, float], world: World) -> dict[str, float]:
    """The time split of one iteration, averaged over ranks (phases any rank used)."""
    if not world.distributed:
        return seconds
    phases = sorted({p for per_rank in gather_objects(sorted(seconds), world) for p in per_rank})
    summed = all_sum([seconds.get(p, 0.0) for p in phases], world)
    return {p: float(s) / world.size for p, s in zip(phases, summed)}


def global_index(local_counts: dict[int, int], groups: int, world: World) -> np.ndarray:
    """Map the global item list to this rank's local list.

    The global list holds the items (decisions, completions) of groups 0..groups-1 in
    group order; a rank holds its own groups' items in the same order. Returns
    ``owner`` of length (global count): the local index of each global item held
    here, -1 for items held by other ranks.
    """
    counts = np.zeros(groups, dtype=np.int64)
    for g, n in local_counts.items():
        counts[g] = n
    counts = (
        all_sum(counts.tolist(), world).numpy().astype(np.int64) if world.distributed else counts
    )
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    owner = np.full(int(counts.sum()), -1, dtype=np.int64)
    local = 0
    for g in sorted(local_counts):
        n = int(counts[g])
        owner[starts[g] : starts[g] + n] = np.arange(local, local + n)
        local += n
    return owner
