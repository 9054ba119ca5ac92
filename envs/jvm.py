"""The Java engines behind ScienceWorld and TextWorldExpress: one JVM per process, owned.

Both games ship their simulator as a jar driven over py4j. Their own Python wrappers
start one JVM (and a callback server) per env object; here a process starts **one
JVM per game family**, shared by every env of that family in the process (each env
gets its own simulator object inside it), reused across resets, and closed when the
last env using it closes or the process exits.

No Java process outlives its Python process:

* the JVM runs py4j's ``--die-on-broken-pipe``: it exits as soon as its stdin (a pipe
  only this process holds) closes, which the kernel does when the process dies by any
  signal, SIGKILL included;
* it runs in its own process group, so a terminal's Ctrl-C (SIGINT to the foreground
  group) reaches Python alone, which can finish its work with the engine still up
  (``rlid.runs.stop``) and then closes it;
* :meth:`JavaEngine.close` closes the pipe, then terminates and kills if needed; an
  ``atexit`` hook closes what is still open on a normal exit.

Env worker processes (``rlid.core.env_workers``, ``spawn``) each start their own engine. A
``fork`` ed child never uses or closes its parent's engine; it starts its own (but it
holds the parent's pipe open until it exits, so prefer ``spawn``).

A dead engine is one clear error, :class:`EngineDied`, which the envs word with their
id and seeds; their next reset starts a fresh engine.

    >>> from rlid.envs.jvm import SCIENCEWORLD, acquire, release
    >>> engine = acquire(SCIENCEWORLD)  # doctest: +SKIP
    >>> simulator = engine.new(SCIENCEWORLD.entry_class)  # doctest: +SKIP
    >>> release(engine)  # doctest: +SKIP
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import logging
import os
import shutil
import subprocess
import threading
import weakref
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway
from py4j.protocol import Py4JError, Py4JJavaError

JAVA_PACKAGE_HINT = (
    "install a Java runtime (Java 8 or newer; on Debian/Ubuntu: "
    "apt-get install default-jre-headless) or set JAVA_HOME"
)


@dataclass(frozen=True)
class EngineKind:
    """A jar-backed game family: where its jar is and which class the envs instantiate."""

    name: str
    """Human name used in messages (``"ScienceWorld"``)."""
    package: str
    """The Python package shipping the jar (``"scienceworld"``)."""
    requirement: str
    """The pip requirement that provides the package (named when it is missing)."""
    jar: str
    """The jar's file name inside the package."""
    entry_class: str
    """The simulator class each env instantiates (one object per env)."""
    javaopts: tuple[str, ...] = ()
    """Extra JVM options."""

    def jar_path(self) -> Path:
        """The jar inside the installed package; a clear error when it is not installed."""
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            raise ModuleNotFoundError(
                f"{self.name} needs the Python package {self.package!r}: "
                f"pip install '{self.requirement}' (or: pip install 'rlid[jvm]')"
            )
        path = Path(next(iter(spec.submodule_search_locations))) / self.jar
        if not path.is_file():
            raise FileNotFoundError(f"{self.name}: the package has no {self.jar} at {path}")
        return path


HEAP_OPTIONS = (
    "-XX:+IgnoreUnrecognizedVMOptions",  # a JVM without G1's options starts all the same
    "-XX:G1PeriodicGCInterval=60000",
    "-XX:MinHeapFreeRatio=10",
    "-XX:MaxHeapFreeRatio=30",
)
"""Give unused heap back to the machine. A JVM left to its defaults may commit up to a
quarter of the machine's memory and is slow to give it back: three ScienceWorld runs on
a 24 GiB machine held 3.3-4.3 GiB each with about 1 GiB of it in use. With a G1
collection at least every minute and at most 30% of the heap kept free, a JVM that
waits (as a run's does through every update) shrinks back towards its live part
(``benchmarks/jvm_memory.py``; docs/benchmark-envs.md)."""

SCIENCEWORLD = EngineKind(
    name="ScienceWorld",
    package="scienceworld",
    requirement="scienceworld==1.2.3",
    jar="scienceworld.jar",
    entry_class="scienceworld.runtime.pythonapi.PythonInterface",
    # The simulator lists objects in the order of JVM identity hashes, which differ from
    # run to run (and with everything the JVM did before): one constant hash makes the
    # order that of the objects' creation, so a seed gives the same episode text.
    javaopts=("-XX:+UnlockExperimentalVMOptions", "-XX:hashCode=2", *HEAP_OPTIONS),
)
TEXTWORLD_EXPRESS = EngineKind(
    name="TextWorldExpress",
    package="textworld_express",
    requirement="textworld-express==1.1.0",
    jar="textworld-express.jar",
    entry_class="textworldexpress.runtime.PythonInterface",
    javaopts=("-XX:+UnlockExperimentalVMOptions", "-XX:hashCode=2", *HEAP_OPTIONS),
)


def needs_java(env_id: str) -> bool:
    """Whether the env id runs in a JVM (``scienceworld``, ``twx-*``)."""
    return env_id == "scienceworld" or env_id.startswith("twx-")


class JavaMissingError(RuntimeError):
    """No Java runtime on this machine."""


class EngineDied(RuntimeError):
    """The engine's JVM is gone (crashed, killed, or out of memory)."""


def find_java() -> str:
    """The ``java`` executable (``$JAVA_HOME/bin/java``, else on ``PATH``), or a clear error."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise JavaMissingError(f"no Java runtime found: {JAVA_PACKAGE_HINT}")
    return found


class JavaEngine:
    """One JVM running a jar's py4j gateway, owned by the process that started it.

    Args:
        kind: the game family (its jar and JVM options).
    """

    def __init__(self, kind: EngineKind) -> None:

        # py4j logs every broken connection with a traceback; a dead engine is reported
        # once, by engine_errors
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
        self.kind = kind
        self.owner_pid = os.getpid()
        self.stderr_tail: deque[str] = deque(maxlen=20)
        jar = kind.jar_path()
        java = find_java()
        try:
            port, token, process = launch_gateway(
                classpath=str(jar),
                javaopts=list(kind.javaopts),
                java_path=java,
                cwd=str(jar.parent),
                die_on_exit=True,  # exits when our end of its stdin closes
                create_new_process_group=True,  # the terminal's Ctrl-C is Python's
                enable_auth=True,  # the gateway port is local, but not only ours
                redirect_stderr=self.stderr_tail,
                return_proc=True,
            )
        except ValueError:  # the JVM printed no port: it did not start
            raise RuntimeError(
                f"the {kind.name} Java engine did not start ({java}); {JAVA_PACKAGE_HINT}"
            ) from None
        self.process: subprocess.Popen = process
        self.gateway = JavaGateway(
            gateway_parameters=GatewayParameters(port=port, auth_token=token, auto_field=False),
            java_process=process,
        )
        self._lock = threading.Lock()

    @property
    def pid(self) -> int:
        return int(self.process.pid)

    def alive(self) -> bool:
        return self.process.poll() is None

    def died(self, timeout: float = 2.0) -> bool:
        """Whether the JVM has exited (waiting up to ``timeout`` s for its exit to be
        seen: ``poll()`` answers "running" while py4j's own thread is waiting on it)."""
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def new(self, class_name: str) -> Any:
        """A new instance of the Java class ``class_name`` (e.g. the simulator)."""
        target: Any = self.gateway.jvm
        for part in class_name.split("."):
            target = getattr(target, part)
        return target()

    def describe_death(self) -> str:
        """``"pid 123, exit code -9"`` plus the JVM's last stderr line, if any."""
        code = self.process.poll()
        text = f"pid {self.pid}, " + ("still running" if code is None else f"exit code {code}")
        last = [line.strip() for line in self.stderr_tail if line.strip()]
        return text + (f"; its last words: {last[-1][:200]}" if last else "")

    def close(self) -> None:
        """Stop the JVM (idempotent): close its stdin, then terminate, then kill."""
        with self._lock:
            if self.owner_pid != os.getpid():
                return  # a forked child: the engine is the parent's
            with contextlib.suppress(Exception):
                self.gateway.close(keep_callback_server=True)
            with contextlib.suppress(OSError, ValueError):
                if self.process.stdin is not None:
                    self.process.stdin.close()
            for stop in (None, self.process.terminate, self.process.kill):
                if stop is not None and self.process.poll() is None:
                    with contextlib.suppress(OSError):
                        stop()
                try:
                    self.process.wait(timeout=3)
                    break
                except subprocess.TimeoutExpired:
                    continue


# ---------------------------------------------------------------------- one per process
_SHARED: dict[str, tuple[JavaEngine, int]] = {}
_REGISTRY_LOCK = threading.Lock()


def acquire(kind: EngineKind) -> JavaEngine:
    """This process's engine for ``kind`` (started if absent or dead); count one user."""
    with _REGISTRY_LOCK:
        engine, users = _SHARED.get(kind.name, (None, 0))
        if engine is None or engine.owner_pid != os.getpid() or not engine.alive():
            if engine is not None and engine.owner_pid == os.getpid():
                engine.close()
            engine, users = JavaEngine(kind), 0
        _SHARED[kind.name] = (engine, users + 1)
        return engine


def release(engine: JavaEngine) -> None:
    """One user less; the last one closes the engine."""
    with _REGISTRY_LOCK:
        current, users = _SHARED.get(engine.kind.name, (None, 0))
        if current is not engine:
            engine.close()  # a replaced (dead) engine, or one from before a fork
            return
        if users <= 1:
            del _SHARED[engine.kind.name]
            engine.close()
        else:
            _SHARED[engine.kind.name] = (engine, users - 1)


class EngineLease:
    """One env's use of its process's engine: acquired at first use, released by
    :meth:`drop` (the env's ``close()``) or when the env is garbage-collected.

    A dead engine is dropped at the next :meth:`get`, which acquires a fresh one.
    """

    def __init__(self, kind: EngineKind, owner: object) -> None:
        self.kind = kind
        self.engine: JavaEngine | None = None
        weakref.finalize(owner, self.drop)

    def get(self) -> JavaEngine:
        """The engine, started (or restarted, if it died) as needed: for resets."""
        if self.engine is not None and not self.engine.alive():
            self.drop()
        if self.engine is None:
            self.engine = acquire(self.kind)
        return self.engine

    def current(self, where: str) -> JavaEngine:
        """The engine the running game lives in; :class:`EngineDied` if it is gone."""
        engine = self.engine
        if engine is None or not engine.alive():
            state = "not started" if engine is None else engine.describe_death()
            raise EngineDied(
                f"{where}: the {self.kind.name} engine died ({state}); reset() starts a fresh one"
            )
        return engine

    def drop(self) -> None:
        engine, self.engine = self.engine, None
        if engine is not None:
            release(engine)


def running_engines() -> list[JavaEngine]:
    """The engines this process holds now (for tests and diagnostics)."""
    with _REGISTRY_LOCK:
        return [engine for engine, _ in _SHARED.values() if engine.owner_pid == os.getpid()]


@atexit.register
def _close_all() -> None:
    with _REGISTRY_LOCK:
        engines = [engine for engine, _ in _SHARED.values()]
        _SHARED.clear()
    for engine in engines:
        engine.close()


@contextlib.contextmanager
def engine_errors(engine: JavaEngine | None, where: str) -> Iterator[None]:
    """Turn py4j failures into one line: :class:`EngineDied` when the JVM is gone, else a
    ``RuntimeError`` with the Java exception's message. ``where`` names the env and seeds.
    """

    try:
        yield
    except Py4JJavaError as error:
        message = str(error.java_exception.getMessage() or error.java_exception)
        raise RuntimeError(f"{where}: the engine raised {message[:300]}") from None
    except Py4JError as error:
        if engine is not None and not engine.died():
            raise RuntimeError(f"{where}: the engine did not answer: {error}") from None
        state = engine.describe_death() if engine is not None else "not started"
        raise EngineDied(
            f"{where}: the {engine.kind.name if engine else 'Java'} engine died ({state}); "
            "reset() starts a fresh one"
        ) from None
