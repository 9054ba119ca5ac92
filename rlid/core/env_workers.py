"""Envs stepped in worker processes (``env_workers``), so a lockstep step costs about the
slowest env instead of the sum of all of them.

:class:`WorkerEnvs` holds ``count`` envs (``rlid.envs.make(env_id, **options)``) spread
round-robin over ``workers`` processes (``spawn``: nothing of the parent's torch state
is inherited). ``reset_many`` / ``step_many`` send each worker its share of the batch,
then collect the answers, so the workers run at the same time; results come back in
the order asked. Envs are deterministic given their reset seed, so episodes are the
same as in-process (``rlid.core.rollout.collect_episodes`` takes either).

For code that wants a plain env list, ``len``, slicing (``envs[:n]``, a view of the
same workers) and indexing (``envs[i]``, a proxy with ``reset``/``step``) work too.

Failures are loud: an exception inside an env comes back as a ``RuntimeError``
naming the env id, options, env index and its last reset seed, with the worker's
traceback; a worker that died is reported the same way with its exit code.
Workers ignore SIGINT (Ctrl-C reaches the parent, which shuts them down), exit when
the parent's pipe closes, and are daemonic and closed by ``close()`` or a
finaliser, so none outlives the parent.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import signal
import traceback
import weakref
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

from rlid import envs as envs_pkg

StepResult = tuple[str, float, bool, bool, dict[str, Any]]


def _worker(conn: Connection, env_id: str, options: dict[str, Any], count: int) -> None:
    """Worker loop: ("reset", [(local, seed)]) | ("step", [(local, action)]) | ("close",)."""
    # Ctrl-C and SIGTERM (a cluster stopping the job: sent to every process) are the
    # parent's to handle: it finishes its iteration with these workers, checkpoints and
    # exits (rlid.runs.stop); a worker ends when its pipe closes
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

    try:
        local_envs = [envs_pkg.make(env_id, **options) for _ in range(count)]
    except BaseException:
        conn.send(("error", -1, traceback.format_exc()))
        return
    conn.send(("ready",))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if message[0] == "close":
            for env in local_envs:
                env.close()
            return
        results = []
        local = -1
        try:
            for local, arg in message[1]:
                env = local_envs[local]
                if message[0] == "reset":
                    results.append(env.reset(seed=arg))
                else:
                    results.append(env.step(arg))
        except BaseException:
            conn.send(("error", local, traceback.format_exc()))
            continue
        conn.send(("ok", results))


def _shutdown(processes: list[Any], conns: list[Connection]) -> None:
    for conn in conns:
        with contextlib.suppress(OSError, ValueError):
            conn.send(("close",))
    for proc in processes:
        proc.join(timeout=2)
        if proc.is_alive():  # pragma: no cover - stuck in C code (SIGTERM it ignores)
            proc.kill()
            proc.join()
    for conn in conns:
        conn.close()


class WorkerEnvs:
    """``count`` envs ``rlid.envs.make(env_id, **options)`` in ``workers`` processes.

    Example::

        >>> pool = WorkerEnvs("keydoor", {"size": 2}, count=4, workers=2)
        >>> [obs for obs, info in pool.reset_many([0, 1], [7, 7])][0] == pool.reset_many([2], [7])[0][0]
        True
        >>> pool.close()
    """

    def __init__(self, env_id: str, options: dict[str, Any], count: int, workers: int) -> None:
        if count < 1 or workers < 1:
            raise ValueError(f"need count >= 1 and workers >= 1, got {count}, {workers}")
        self.env_id = env_id
        self.options = dict(options)
        self.workers = min(workers, count)
        self.count = count
        # env i lives in worker i % workers, at local index i // workers
        self.seeds: list[int | None] = [None] * count
        context = mp.get_context("spawn")
        self._processes: list[Any] = []
        self._conns: list[Connection] = []
        for w in range(self.workers):
            parent, child = context.Pipe()
            local_count = len(range(w, count, self.workers))
            proc = context.Process(
                target=_worker, args=(child, env_id, self.options, local_count), daemon=True,
                name=f"rlid-env-worker-{w}",
            )  # fmt: skip
            proc.start()
            child.close()
            self._processes.append(proc)
            self._conns.append(parent)
        self._finalizer = weakref.finalize(self, _shutdown, self._processes, self._conns)
        for w in range(self.workers):
            reply = self._receive(w, what="starting")
            if reply[0] != "ready":
                self.close()
                raise RuntimeError(
                    f"env worker {w} could not make {env_id} with options {self.options}:\n"
                    f"{reply[-1]}"
                )

    # ------------------------------------------------------------------ batched calls
    def reset_many(self, indices: Sequence[int], seeds: Sequence[int]) -> list[tuple[str, dict]]:
        for i, seed in zip(indices, seeds):
            self.seeds[i] = int(seed)
        return self._call("reset", indices, [int(s) for s in seeds])

    def step_many(self, indices: Sequence[int], actions: Sequence[str]) -> list[StepResult]:
        return self._call("step", indices, list(actions))

    def _call(self, kind: str, indices: Sequence[int], args: Sequence[Any]) -> list[Any]:
        if len(indices) != len(args):
            raise ValueError(f"{len(indices)} env indices but {len(args)} {kind} arguments")
        per_worker: dict[int, list[tuple[int, int, Any]]] = {}
        for pos, (i, arg) in enumerate(zip(indices, args)):
            if not 0 <= i < self.count:
                raise IndexError(f"env index {i} outside [0, {self.count})")
            per_worker.setdefault(i % self.workers, []).append((pos, i, arg))
        for w, items in per_worker.items():
            try:
                self._conns[w].send((kind, [(i // self.workers, arg) for _, i, arg in items]))
            except (BrokenPipeError, OSError):
                self._raise_dead(w, kind, [i for _, i, _ in items])
        results: list[Any] = [None] * len(indices)
        error: RuntimeError | None = None
        for w, items in per_worker.items():  # collect every answer before raising
            try:
                reply = self._receive(w, what=kind, envs=[i for _, i, _ in items])
            except RuntimeError as err:
                error = error or err
                continue
            if reply[0] == "error":
                local = reply[1]
                env_index = local * self.workers + w
                error = error or RuntimeError(
                    f"env {self._describe(env_index)} raised during {kind} in worker {w}:\n"
                    f"{reply[2]}"
                )
                continue
            for (pos, _, _), result in zip(items, reply[1]):
                results[pos] = result
        if error is not None:
            raise error
        return results

    def _receive(self, w: int, *, what: str, envs: Sequence[int] = ()) -> Any:
        try:
            return self._conns[w].recv()
        except (EOFError, OSError):
            self._raise_dead(w, what, envs)

    def _raise_dead(self, w: int, what: str, envs: Sequence[int]) -> None:
        proc = self._processes[w]
        proc.join(timeout=1)
        names = ", ".join(self._describe(i) for i in envs) or f"{self.env_id} {self.options}"
        raise RuntimeError(
            f"env worker {w} (pid {proc.pid}) died with exit code {proc.exitcode} while "
            f"{what} {names}"
        )

    def _describe(self, i: int) -> str:
        seed = self.seeds[i] if 0 <= i < self.count else None
        return f"#{i} ({self.env_id}, options {self.options}, reset seed {seed})"

    # ------------------------------------------------------------------ list-like view
    def __len__(self) -> int:
        return self.count

    def __getitem__(self, key: int | slice) -> Any:
        if isinstance(key, slice):
            return _View(self, list(range(self.count))[key])
        if not -self.count <= key < self.count:
            raise IndexError(f"env index {key} outside [0, {self.count})")
        return _EnvProxy(self, key % self.count)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._processes]

    def close(self) -> None:
        """Stop the workers (also done by a finaliser when the pool is collected)."""
        self._finalizer()

    def __enter__(self) -> WorkerEnvs:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _View:
    """Some envs of a pool (``pool[:n]``), with the pool's batched calls."""

    def __init__(self, pool: WorkerEnvs, indices: list[int]) -> None:
        self.pool = pool
        self.indices = indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, key: int | slice) -> Any:
        if isinstance(key, slice):
            return _View(self.pool, self.indices[key])
        return _EnvProxy(self.pool, self.indices[key])

    def reset_many(self, indices: Sequence[int], seeds: Sequence[int]) -> list[tuple[str, dict]]:
        return self.pool.reset_many([self.indices[i] for i in indices], seeds)

    def step_many(self, indices: Sequence[int], actions: Sequence[str]) -> list[StepResult]:
        return self.pool.step_many([self.indices[i] for i in indices], actions)


class _EnvProxy:
    """One env of a pool with the gymnasium ``reset`` / ``step`` calls (one at a time)."""

    def __init__(self, pool: WorkerEnvs, index: int) -> None:
        self.pool = pool
        self.index = index

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[str, dict]:
        if seed is None or options is not None:
            raise ValueError("an env in a worker is reset with an explicit seed and no options")
        return self.pool.reset_many([self.index], [seed])[0]

    def step(self, action: str) -> StepResult:
        return self.pool.step_many([self.index], [action])[0]


class InProcessEnvs:
    """A plain env list behind the batched calls of :class:`WorkerEnvs` (``env_workers=0``)."""

    def __init__(self, envs: Sequence[Any]) -> None:
        self.envs = list(envs)

    def __len__(self) -> int:
        return len(self.envs)

    def reset_many(self, indices: Sequence[int], seeds: Sequence[int]) -> list[tuple[str, dict]]:
        return [self.envs[i].reset(seed=int(s)) for i, s in zip(indices, seeds)]

    def step_many(self, indices: Sequence[int], actions: Sequence[str]) -> list[StepResult]:
        return [self.envs[i].step(a) for i, a in zip(indices, actions)]


def batched(envs: Any) -> Any:
    """Anything with ``reset_many`` / ``step_many`` as is; a plain env list wrapped."""
    return envs if hasattr(envs, "step_many") else InProcessEnvs(envs)
