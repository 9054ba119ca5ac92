"""Data-parallel training on ``torch.distributed``: the rank logic, in one place.

Launch with ``torchrun --nproc-per-node N -m rlid train ...`` (several machines:
torchrun's ``--nnodes`` / ``--rdzv-*`` flags). Without a launcher (no
``WORLD_SIZE`` in the environment) everything here is a no-op on a world of one,
so the single-process path stays the plain path. Backend: ``gloo`` on a CPU
machine; on a CUDA machine one group with ``nccl`` for CUDA tensors (gradients,
parameters) and ``gloo`` for CPU tensors (the float64 budget counts, position-bias
sums and pickled objects every iteration reduces), as ``"cpu:gloo,cuda:nccl"``:
``nccl`` alone cannot reduce a CPU tensor.

The trainers call this module at a few named edges only:

* **seeding** -- group ``g`` of an iteration is played by rank ``g mod N``
  (:meth:`World.my_groups`); its game, reset seed and sampling randomness come from
  ``(seed, iteration, g)``, never from the rank, so N processes play the same
  episodes as one.
* **reduction** -- :func:`global_index` maps the *global* decision list (groups in
  order) to the members a rank holds, so minibatches are drawn over the global
  list with the same permutation everywhere. The gradients are *summed* over ranks
  (each rank's loss already carries the global normaliser, so the sum is the
  one-process gradient): by the wrapper of the update's model (:class:`Parallel`,
  ``--parallel``) and, for what it does not wrap (the value head), by
  :func:`reduce_gradients`; :func:`all_sum` reduces counters and statistics;
  :func:`reduce_budget` turns
  each rank's spend of one iteration into the global spend (sums, except
  ``optimizer_steps`` and ``wall_time``: the maximum, since every rank takes the
  same steps in the same iteration).
* **wrapping** -- :class:`Parallel` wraps the model for the update only:
  ``ddp`` (default) puts it in ``DistributedDataParallel`` with a SUM communication
  hook and runs every micro-batch but a rank's last under ``no_sync()``; ``fsdp``
  shards it with FSDP2 (``fully_shard`` per decoder layer and at the root, SUM
  reduce-scatters) and gathers the parameters between updates. Rollouts, evaluation
  and the KL reference call the unwrapped module (FSDP2: the same module, gathered),
  so inference synchronises nothing. Both wrappers need matched collectives in the
  update: a rank holding no member of a minibatch runs a filler step (one of its own
  items, loss times 0); under FSDP2 every rank runs as many micro-steps as the rank
  holding the most. LoRA: only the adapters require grad, so only they are reduced.
* **writing** -- rank 0 alone writes the run directory (:attr:`World.is_writer`);
  every rank's RNG state is gathered into the checkpoint (:func:`gather_objects`);
  an FSDP2 model's and optimizer's full states are gathered first
  (:meth:`Parallel.full_state`), so the checkpoint has the one-process format.

A peer that dies makes the next collective fail; that failure (or a collective
that waits longer than ``dist_timeout``) is raised as :class:`PeerLost` with
what to do next -- also inside a wrapped model's forward / backward, where the
collectives are the wrapper's (:func:`wrapper_collectives`).
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NoReturn, TypeVar

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor

from rlid.config.budget import Budget
from rlid.runs.state import StoredTensor, materialize

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

    def check_device(self, device: str) -> None:
        """Several processes each use the GPU of their ``LOCAL_RANK`` (:func:`init`); a
        device with an index would put them all on one GPU."""
        if self.distributed and device.startswith("cuda:"):
            raise ValueError(
                f"--device {device} would put all {self.size} processes on one GPU; under "
                "torchrun each process uses the GPU of its LOCAL_RANK: pass --device cuda "
                "(or auto), and choose the GPUs with CUDA_VISIBLE_DEVICES"
            )

    def check_groups(self, groups_per_iter: int) -> None:
        if groups_per_iter % self.size:
            raise ValueError(
                f"groups_per_iter={groups_per_iter} is the global number of game groups per "
                f"iteration and must be divisible by the number of processes ({self.size}); "
                f"use e.g. --groups-per-iter {self.size * max(1, groups_per_iter // self.size)}"
            )


SINGLE = World()
"""The world of a run without a launcher: one process, rank 0."""

_MADE_HERE = False  # whether init() made the default group (release() then destroys it)


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
        # CUDA tensors over nccl; the CPU-side counts and objects over gloo
        backend = "cpu:gloo,cuda:nccl"
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    else:
        backend = "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    global _MADE_HERE
    _MADE_HERE = True
    return World(dist.get_rank(), dist.get_world_size())


def release() -> None:
    """Destroy the default group if :func:`init` made it; a no-op otherwise.

    Call it when the process is done with the group: a gloo group left to the
    interpreter's exit can abort the process there ("terminate called without an
    active exception": its worker threads still hold tensors while Python shuts down),
    failing a run that had finished. A group the caller made stays theirs.
    """
    global _MADE_HERE
    if _MADE_HERE and dist.is_available() and dist.is_initialized():
        keep_until_exit(dist.group.WORLD)  # unregistered here, destroyed never (see below)
        dist.destroy_process_group()
    _MADE_HERE = False


_KEPT: list[Any] = []
"""Native communication objects of this process's run, kept until :func:`exit_process`."""


def keep_until_exit(obj: Any) -> None:
    """Keep ``obj`` (a process group, a wrapped model) alive until the process ends.

    Destroying a gloo group joins its worker thread while holding the GIL (pybind
    frees it without releasing the GIL), and that thread, just after completing the
    last collective, may still be dropping its work object, which takes the GIL to free
    the work's tensors: both wait for ever. Seen when a stopped run's frames (the DDP
    reducer) were freed right after the checkpoint's all-gather. Every multi-process
    entry point ends with :func:`exit_process`, which frees nothing, so these objects
    are simply never destroyed.
    """
    if obj is not None:
        _KEPT.append(obj)


def in_multi_process_run() -> bool:
    """Whether this process was started as one of several (torchrun's ``WORLD_SIZE``)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1) > 1


def exit_process(code: int) -> NoReturn:
    """End a process of a multi-process run at once, skipping the interpreter's teardown.

    Everything a run writes is written, fsynced and closed before its trainer returns
    (and env workers end when this process's pipes close); what the teardown would
    still do is destroy native objects, whose threads can abort a process that has
    finished ("terminate called without an active exception", SIGABRT, seen once
    after a resumed two-process FSDP run had written everything), and torchrun then
    reports the finished run as failed.
    """

    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):  # a closed or broken stream: nothing to keep
            stream.flush()
    logging.shutdown()
    os._exit(code)


@contextmanager
def collective(what: str) -> Iterator[None]:
    """Turn a failed collective into :class:`PeerLost` with a message saying what to do."""
    try:
        yield
    except (RuntimeError, dist.DistBackendError) as err:
        raise PeerLost(_peer_lost(what, err)) from err


# Words a communication library's own error carries when a peer died or stopped
# answering (gloo's TCP transport, NCCL's watchdog), lower case
_TRANSPORT_WORDS = ("gloo", "nccl", "connection closed by peer", "connection reset by peer",
                    "broken pipe", "timed out", "timeout")  # fmt: skip


@contextmanager
def wrapper_collectives(what: str) -> Iterator[None]:
    """A forward / backward of a wrapped model: a failed collective run inside torch's
    own hooks (FSDP2's all-gathers and reduce-scatters, DDP's all-reduce) becomes
    :class:`PeerLost`; any other error (out of memory, a shape error) passes unchanged.

    Such failures reach Python as a ``RuntimeError`` from ``backward()`` (or the
    forward), outside every :func:`collective` block; they are recognised by
    ``DistBackendError`` or the communication library's words in the message.
    """
    try:
        yield
    except PeerLost:
        raise
    except RuntimeError as err:
        if isinstance(err, dist.DistBackendError) or any(
            word in str(err).lower() for word in _TRANSPORT_WORDS
        ):
            raise PeerLost(_peer_lost(what, err)) from err
        raise


# torch's words around an error raised in a future's callback (DDP's all-reduce hook)
_CALLBACK_PREFIX = "Got the following error when running the callback: "


def _peer_lost(what: str, err: BaseException) -> str:
    rank = dist.get_rank() if dist.is_initialized() else "?"
    cause = str(err).splitlines()[0].removeprefix(_CALLBACK_PREFIX) if str(err) else ""
    return (
        f"rank {rank}: {what} failed: another process of this run died or stopped "
        f"answering ({cause or type(err).__name__}). "
        "Stop the run and continue it from its last checkpoint with "
        "`torchrun --nproc-per-node N -m rlid train --resume DIR` (same N)"
    )


# --------------------------------------------------------------------------- reduction
Values = Sequence[float] | torch.Tensor | np.ndarray


def _all_reduce(values: Values, world: World, op: str) -> torch.Tensor:
    """Element-wise ``op`` ("sum" or "max") over ranks, in float64 (exact for counts)."""
    tensor = torch.as_tensor(values, dtype=torch.float64).clone()
    if world.distributed:
        with collective(f"all_reduce({op})"):
            dist.all_reduce(tensor, op=getattr(dist.ReduceOp, op.upper()))
    return tensor


def all_sum(values: Values, world: World) -> torch.Tensor:
    """Element-wise sum over ranks, in float64 (exact for counts)."""
    return _all_reduce(values, world, "sum")


def all_max(values: Values, world: World) -> torch.Tensor:
    """Element-wise maximum over ranks, in float64."""
    return _all_reduce(values, world, "max")


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
    gradient one process would compute on the whole minibatch. Used for parameters
    outside the wrapped model (the value head) and for updates run without a
    :class:`Parallel` (a rank holding no member of a minibatch skips the forward and
    still joins the reduction).
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


# --------------------------------------------------------------------------- wrapping
def _sum_hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: all-reduce a gradient bucket with SUM, no division.

    DDP's default hook averages; each rank's loss here already carries the global
    normaliser, so the sum is the gradient one process would compute.
    """
    work = dist.all_reduce(bucket.buffer(), op=dist.ReduceOp.SUM, async_op=True)
    assert work is not None  # async_op=True
    return work.get_future().then(_bucket_value)


def _bucket_value(fut: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
    """The reduced bucket. A failed all-reduce (a peer died mid-backward) raises here,
    inside the backward: :func:`wrapper_collectives` (the micro-step's context) turns
    torch's re-raised error into :class:`PeerLost`."""
    return fut.value()[0]


# DDP checks the hook's annotations as objects (this module's are strings)
_sum_hook.__annotations__ = {
    "state": Any,
    "bucket": dist.GradBucket,
    "return": torch.futures.Future[torch.Tensor],
}


class DDPModel(torch.nn.Module):
    """A DDP-wrapped causal LM that still looks like one to the readout.

    Calls go through :class:`~torch.nn.parallel.DistributedDataParallel` (so a backward
    of its outputs sums the gradients over ranks); ``config`` and
    ``get_output_embeddings()`` are the inner model's (the readout reads the vocabulary
    size and hooks the LM head there).
    """

    def __init__(self, ddp: torch.nn.parallel.DistributedDataParallel) -> None:
        super().__init__()
        self.ddp = ddp
        self.config = ddp.module.config

        # inspect.signature(self.forward) is the inner model's (callers look up, e.g.,
        # what the model calls its KV cache argument)
        def forward(*args: Any, **kwargs: Any) -> Any:
            return ddp(*args, **kwargs)

        self.forward = functools.wraps(ddp.module.forward)(forward)  # type: ignore[method-assign]

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.ddp.module.get_output_embeddings()

    def forward(self, *args: Any, **kwargs: Any) -> Any:  # replaced per instance
        return self.ddp(*args, **kwargs)


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks of a Hugging Face model (also peft-wrapped): the modules
    whose class is named in ``_no_split_modules``, the unit FSDP shards one at a time."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(
            f"parallel='fsdp': found no decoder layers in {type(model).__name__} (no module "
            f"named in _no_split_modules={sorted(names)}); use --parallel ddp"
        )
    return layers


def _cuda_index(device: torch.device) -> int:
    """The CUDA device a model on ``device`` lives on (``cuda`` alone: the current one,
    which :func:`init` set to ``LOCAL_RANK``)."""
    return device.index if device.index is not None else torch.cuda.current_device()


class Parallel:
    """How a multi-process run's model is wrapped for its update (``--parallel``).

    ``module`` is what rollouts, evaluation, the KL reference and checkpoints see;
    ``train_module`` is what the update calls; ``params`` are the trainable parameters
    to hand the optimizer. One process: nothing is wrapped and everything here is a
    no-op (the plain path). Several processes:

    * ``ddp`` -- :class:`DDPModel` around ``DistributedDataParallel(module)`` with a SUM
      communication hook; ``module`` itself stays unwrapped, so rollouts run without
      any gradient synchronisation. Only parameters with ``requires_grad`` are reduced
      (LoRA: the adapters).
    * ``fsdp`` -- FSDP2: ``fully_shard`` on every decoder layer and at the root, with
      SUM reduce-scatters (divide factor 1). The module is sharded in place: between
      updates its parameters are kept gathered (unsharded, ``reshard_after_forward``
      off), so rollouts and evaluation run with no collective and any number of
      forwards per rank; :meth:`update` reshards them for the update and gathers the
      updated ones afterwards. Memory: a full copy of the weights per process outside
      the update (inference needs it), gradients and optimizer state always sharded.

    Parameters outside the wrapped module (the value head) are reduced with
    :func:`reduce_gradients` (:meth:`reduce_rest`).
    """

    def __init__(
        self, module: torch.nn.Module, world: World, mode: str, device: torch.device
    ) -> None:
        self.module = module
        self.world = world
        self.mode = mode if world.distributed else "none"
        self.train_module: torch.nn.Module = module
        self._ddp: torch.nn.parallel.DistributedDataParallel | None = None
        self._fsdp: list[Any] = []
        if self.mode == "ddp":
            ddp = torch.nn.parallel.DistributedDataParallel
            # no buffer broadcast in forward: ranks run unequal numbers of forwards
            # (torch >= 2.13 names it forward_sync_buffers; buffers still sync at init)
            known = inspect.signature(ddp.__init__).parameters
            name = (
                "forward_sync_buffers" if "forward_sync_buffers" in known else "broadcast_buffers"
            )
            with collective("DistributedDataParallel setup"):
                self._ddp = ddp(
                    module,
                    device_ids=[_cuda_index(device)] if device.type == "cuda" else None,
                    find_unused_parameters=False,
                    **{name: False},  # type: ignore[arg-type]
                )
            self._ddp.register_comm_hook(None, _sum_hook)
            self.train_module = DDPModel(self._ddp)
            keep_until_exit(self._ddp)  # its reducer holds the group (keep_until_exit)
        elif self.mode == "fsdp":
            broadcast_parameters([module], world)  # FSDP shards rank 0's weights
            mesh = init_device_mesh(device.type, (world.size,))
            with collective("fully_shard"):
                for layer in decoder_layers(module):
                    fully_shard(layer, mesh=mesh)
                fully_shard(module, mesh=mesh)
            self._fsdp = [m for m in module.modules() if isinstance(m, FSDPModule)]
            keep_until_exit((mesh, module))  # they hold the group (keep_until_exit)
            for m in self._fsdp:
                m.set_gradient_divide_factor(1.0)  # sum, not mean
                m.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM
        elif self.mode != "none":
            raise ValueError(f"parallel={mode!r} is not valid; choose ddp or fsdp")
        # fsdp: the sharded (DTensor) parameters, which the optimizer must hold
        self.params = [p for p in module.parameters() if p.requires_grad]
        self._gather()

    @classmethod
    def unwrapped(cls, world: World) -> Parallel:
        """No wrapper (direct ``ppo_update`` / ``token_update`` calls): micro-steps run
        as they are and :meth:`reduce_rest` sums every gradient over ``world``."""
        return cls(torch.nn.Module(), world, "none", torch.device("cpu"))

    @property
    def wrapped(self) -> bool:
        return self.mode != "none"

    # ---------------------------------------------------------------- fsdp states
    def _gather(self) -> None:
        """fsdp: all-gather the parameters and keep them gathered (no collective in forward)."""
        if not self._fsdp:
            return
        with collective("FSDP all-gather of the parameters"):
            for m in self._fsdp:
                m.set_reshard_after_forward(False)
            for m in self._fsdp:
                m.unshard()

    def _shard(self) -> None:
        if not self._fsdp:
            return
        for m in self._fsdp:
            m.reshard()
            m.set_reshard_after_forward(True)

    @contextmanager
    def update(self, policy: Any = None) -> Iterator[torch.nn.Module]:
        """The update's block: yields ``train_module`` (also set as ``policy.model``,
        restored afterwards); fsdp: parameters sharded inside, gathered again after.

        An update that raised is not gathered: the run stops there, and a collective
        after a failed one could only fail again (or wait for a rank that is gone),
        replacing the first error with its own."""
        saved = getattr(policy, "model", None)
        self._shard()
        if policy is not None:
            policy.model = self.train_module
        try:
            yield self.train_module
        finally:
            if policy is not None:
                policy.model = saved
        self._gather()

    # ---------------------------------------------------------------- micro-batches
    def micro_plan(
        self, parts: list[slice]
    ) -> list[tuple[slice | None, AbstractContextManager[Any]]]:
        """The micro-steps of one minibatch on this rank: ``(part, context)`` pairs, each a
        forward + backward run inside ``context``; ``part=None`` is a filler step (any one
        held item, loss multiplied by 0) that keeps the wrapper's collectives matched.

        * one process / explicit reduction: the parts as they are;
        * ddp: every part but the last under ``no_sync()``, so each rank runs exactly one
          synchronised backward per optimizer step (a rank holding no member: one filler);
        * fsdp: every forward / backward is collective (all-gathers, reduce-scatters), so
          every rank runs the same number of steps: the most any rank holds, padded with
          fillers (every step reduce-scatters its gradient; the shards accumulate).

        Wrapped, a step whose forward / backward runs the wrapper's collectives does so
        inside :func:`wrapper_collectives` (a lost peer there is :class:`PeerLost`).
        """
        if self._ddp is not None:
            steps: list[slice | None] = list(parts) or [None]
            synced = wrapper_collectives("the gradient all-reduce in backward (DDP)")
            return [
                (part, synced if i == len(steps) - 1 else self._ddp.no_sync())
                for i, part in enumerate(steps)
            ]
        if self._fsdp:
            most = int(all_max([len(parts)], self.world)[0])
            padded: list[slice | None] = [*parts, *[None] * (most - len(parts))]
            what = "an FSDP2 all-gather or reduce-scatter in forward / backward"
            return [(part, wrapper_collectives(what)) for part in padded]
        return [(part, nullcontext()) for part in parts]

    def reduce_rest(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Sum the gradients the wrapper does not reduce (unwrapped: all of them)."""
        if self.wrapped:
            owned = {id(p) for p in self.params}
            params = [p for p in params if id(p) not in owned]
        reduce_gradients(params, self.world)

    # ---------------------------------------------------------------- checkpoints
    def full_state(
        self, optimizer: torch.optim.Optimizer
    ) -> tuple[dict[str, torch.Tensor] | None, dict[str, Any] | None]:
        """fsdp: the full model and optimizer state dicts (a collective: every rank calls
        it), on rank 0's CPU only: the model's through ``get_model_state_dict`` (other
        ranks get an empty dict), the optimizer's as ``optimizer.state_dict()`` with
        every sharded state tensor gathered one at a time (the format of a one-process
        run, so the checkpoint reads the same; other ranks get None and drop each
        gathered tensor at once, so no rank but the writer ever holds a full copy).
        Otherwise ``(None, None)``: the modules' own state dicts are complete."""
        if not self._fsdp:
            return None, None

        keep = self.world.is_writer
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        with collective("FSDP gather of the checkpoint"):
            model_state = get_model_state_dict(self.module, options=options)
            optim_state = optimizer.state_dict()
            gathered: dict[Any, dict[str, Any]] = {}
            for pid, entry in optim_state["state"].items():  # the same order on every rank
                full = {}
                for k, v in entry.items():
                    if isinstance(v, DTensor):
                        v = v.full_tensor()  # a collective: every rank gathers
                        v = v.cpu() if keep else None
                    full[k] = v
                gathered[pid] = full
            optim_state["state"] = gathered
        self._gather()  # the state-dict gathering leaves the module resharded
        return dict(model_state), (optim_state if keep else None)  # type: ignore[arg-type]

    def load_optimizer(self, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        """Load an optimizer state written by :meth:`full_state` (or by one process),
        whose tensors may still be on disk (:class:`rlid.runs.state.StoredTensor`). fsdp:
        one full state tensor at a time is read and cut to this rank's shard (a copy of
        its own, so the full tensor is freed before the next is read)."""

        if self._fsdp:
            params = [p for group in optimizer.param_groups for p in group["params"]]
            for pid, entry in state["state"].items():
                param = params[int(pid)]
                for k, v in entry.items():
                    tensor_like = isinstance(v, torch.Tensor | StoredTensor)
                    if not (isinstance(param, DTensor) and tensor_like and v.shape == param.shape):
                        continue  # e.g. Adam's step count: read with the rest below
                    full = v.load() if isinstance(v, StoredTensor) else v
                    shard = distribute_tensor(
                        full.to(param.device), param.device_mesh, param.placements,
                        src_data_rank=None,  # every rank holds the full tensor: slice
                    )  # fmt: skip
                    entry[k] = DTensor.from_local(
                        shard.to_local().clone(), param.device_mesh, param.placements,
                        run_check=False, shape=shard.shape, stride=shard.stride(),
                    )  # fmt: skip
        optimizer.load_state_dict(materialize(state))
