"""ScienceWorld's JVM-wide state, kept per simulator, so that one JVM can run several.

The simulator keeps two things JVM-wide (static), not per game:

* the object-id counter (``util.UniqueIdentifier``), from which every object it creates
  is numbered, and which its objects are compared by;
* the random generator (``scala.util.Random``), seeded at each load and drawn from while
  the game runs, also to name objects that are alike ("orange seed on seed jar" /
  "orange seed in the seed stage in cup") when it lists the valid actions.

Two games interleaved in one JVM (two envs, or an env and its gold-path simulator)
would draw from each other's streams: the same seed would play and read differently
with what else the process runs. So each simulator gets both of its own: before a call
into it, its saved counter and generator state are put back; after, they are saved.
Around a load the counter starts from 0 (the load seeds the generator itself). Object
ids then repeat between simulators, which is harmless: a game compares only its own.
Calls that only read for the caller's sake (parsing a command, the free look) are
*probes*: what they change is given back, so making them or not changes nothing after.

One call into the JVM at a time from this process is assumed, which is how envs are
stepped (one process per env worker, each with its own JVM).

    >>> state = PerSimulator(engine)  # doctest: +SKIP
    >>> with state.of(simulator, fresh=True):  # doctest: +SKIP
    ...     simulator.load("boil", 21, "", False)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

# java.util.Random.setSeed scrambles its argument with this multiplier (x ^ m)
_RANDOM_MULTIPLIER = 0x5DEECE66D


class PerSimulator:
    """Each simulator's object-id counter and random-generator state, in one engine."""

    def __init__(self, engine: Any) -> None:
        jvm = engine.gateway.jvm
        self._jvm = jvm
        self._counter = jvm.util.UniqueIdentifier
        self._random = getattr(getattr(jvm.scala.util, "Random$"), "MODULE$").self()
        self._saved: dict[int, tuple[int, int | None]] = {}  # id(simulator) -> state

    def _random_state(self) -> int:
        """The generator's 48-bit state, read from its serialised form (the last field
        before the end-of-block marker is the ``seed`` long)."""
        buffer = self._jvm.java.io.ByteArrayOutputStream()
        stream = self._jvm.java.io.ObjectOutputStream(buffer)
        stream.writeObject(self._random)
        stream.close()
        data = bytes(buffer.toByteArray())
        return int.from_bytes(data[-9:-1], "big")

    def _put_back(self, simulator: Any, fresh: bool) -> None:
        counter, random_state = self._saved.get(id(simulator), (0, None))
        getattr(self._counter, "count_$eq")(0 if fresh else counter)
        if random_state is not None and not fresh:
            self._random.setSeed(random_state ^ _RANDOM_MULTIPLIER)

    @contextlib.contextmanager
    def of(self, simulator: Any, *, fresh: bool = False) -> Iterator[None]:
        """Calls into ``simulator`` with its own counter and generator, kept after
        (``fresh``: around a load, numbering from 0)."""
        self._put_back(simulator, fresh)
        try:
            yield
        finally:
            self._saved[id(simulator)] = (int(self._counter.count()), self._random_state())

    @contextlib.contextmanager
    def probe(self, simulator: Any) -> Iterator[None]:
        """Calls into ``simulator`` whose changes to the counter and generator are not
        kept (the next :meth:`of` puts the saved ones back)."""
        self._put_back(simulator, fresh=False)
        yield

    def forget(self, simulator: Any) -> None:
        self._saved.pop(id(simulator), None)
