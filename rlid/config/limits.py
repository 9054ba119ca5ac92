"""Bounds on the counts, sizes and scales of a run, checked before any work starts.

Each limit comes from what torch, numpy or the machine can take, so that a value past
it is one line naming the flag instead of hours of swapping, a segmentation fault or
an internal error (``docs/run-directories.md`` lists them):

* every whole number fits in 64 bits (torch and numpy integers), :data:`INT64`;
* ``--seed`` in ``0 .. 2**32 - 1`` (:data:`SEED_MAX`): numpy seeds and torch
  generators take it, with room for the per-iteration streams derived from it;
* ``--threads`` and ``--env-workers`` at most :data:`PER_CORE` times the CPU cores this
  process may use (``--threads 1000`` on 2 cores hung; 100000 crashed torch);
* ``--group-size`` at most :data:`MAX_GROUP_SIZE` (one env is built per episode of a
  group) and ``--groups-per-iter`` x ``--group-size`` at most
  :data:`MAX_EPISODES_PER_ITER` episodes per iteration;
* the decisions an iteration collects, estimated as episodes x ``max_episode_steps``
  x :data:`BYTES_PER_DECISION`, at most :data:`MEMORY_SHARE` of the memory available
  when the run starts (:func:`check_machine_limits`, before the model loads);
* ``--temperature`` in :data:`TEMPERATURE_RANGE` (logits / T stays finite in float32
  and bfloat16), ``--dist-timeout`` at most :data:`MAX_DIST_TIMEOUT` seconds;
* the interface's ``--memory-size`` at most :data:`MAX_MEMORY_SIZE` items and
  ``--max-obs-chars`` at most :data:`MAX_OBS_CHARS`;
* an error line at most :data:`MESSAGE_LIMIT` characters (:func:`one_line`).

:func:`check_bounds` holds the machine-independent ones (``TrainConfig`` validation,
so a run's record is checked when read); :func:`check_machine_limits` the ones that
depend on this machine (a run recorded elsewhere is checked where it runs).

>>> check_seed(2**32, "--seed")
Traceback (most recent call last):
ValueError: --seed 4294967296 is out of range: seeds are whole numbers from 0 to 4294967295
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

INT64 = 2**63
"""Whole numbers must lie in ``[-INT64, INT64)``."""
SEED_MAX = 2**32 - 1
PER_CORE = 4
"""Threads (and env worker processes) per usable CPU core, at most."""
MAX_GROUP_SIZE = 1024
MAX_EPISODES_PER_ITER = 65_536
BYTES_PER_DECISION = 64 * 1024
"""A stored decision, generously: its prompt's token ids as Python ints (about 36 bytes
each, up to ~1000 tokens), the menu's text and the per-row numbers."""
MEMORY_SHARE = 0.5
TEMPERATURE_RANGE = (1e-3, 1e3)
MAX_DIST_TIMEOUT = 7 * 24 * 3600.0
MAX_MEMORY_SIZE = 1024
MAX_OBS_CHARS = 1 << 20


MESSAGE_LIMIT = 1000
"""Characters of an error line at most: a message that quotes a huge input is cut."""


def one_line(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """``message`` on one line, its middle cut when it is longer than ``limit``.

    >>> one_line("a\nb")
    'a b'
    """
    message = " ".join(message.splitlines())
    if len(message) <= limit:
        return message
    cut = len(message) - limit
    return f"{message[: limit - 200]} ... [{cut} characters left out] ... {message[-200:]}"


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_seed(value: int, name: str) -> None:
    """A seed is a whole number in ``0 .. SEED_MAX`` (``name``: the flag, for the message)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= SEED_MAX:
        raise ValueError(
            f"{name} {str(value)[:40]} is out of range: seeds are whole numbers from 0 to "
            f"{SEED_MAX}"
        )


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask; else the machine's)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def available_memory() -> int | None:
    """Bytes of memory available now: the kernel's ``MemAvailable``, less where a cgroup
    (a container, a batch job) allows less; ``None`` where neither can be read."""
    found: list[int] = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    cgroup = Path("/sys/fs/cgroup")
    try:
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            found.append(int(limit) - int((cgroup / "memory.current").read_text()))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def check_bounds(config: Any) -> None:
    """The machine-independent limits of a ``TrainConfig`` (module docstring)."""
    check_seed(config.seed, "--seed")
    if config.group_size > MAX_GROUP_SIZE:
        raise ValueError(
            f"--group-size {config.group_size} is more than {MAX_GROUP_SIZE} (an env is built "
            "for each episode of a group)"
        )
    episodes = config.groups_per_iter * config.group_size
    if episodes > MAX_EPISODES_PER_ITER:
        raise ValueError(
            f"--groups-per-iter {config.groups_per_iter} x --group-size {config.group_size} = "
            f"{episodes} episodes per iteration, more than {MAX_EPISODES_PER_ITER}; lower one "
            "of them (a larger budget runs more iterations)"
        )
    low, high = TEMPERATURE_RANGE
    if not low <= config.temperature <= high:
        raise ValueError(f"--temperature {config.temperature} is outside [{low}, {high}]")
    if config.dist_timeout > MAX_DIST_TIMEOUT:
        raise ValueError(
            f"--dist-timeout {config.dist_timeout} is more than {MAX_DIST_TIMEOUT:.0f} "
            "seconds (7 days)"
        )
    interface = config.interface
    for name, limit in (("memory_size", MAX_MEMORY_SIZE), ("max_obs_chars", MAX_OBS_CHARS)):
        if getattr(interface, name) > limit:
            raise ValueError(f"{flag(name)} {getattr(interface, name)} is more than {limit}")


def max_episode_steps(config: Any) -> int | None:
    """The env's step limit under the config's options, or None if they do not resolve
    (the env then reports its own error when it is made)."""
    # lazy: `rlid --help` imports this module and must stay quick (envs: gymnasium)
    from rlid import envs

    try:
        return int(envs.get_spec(config.env).resolve(dict(config.env_options))["max_episode_steps"])
    except (ValueError, TypeError, KeyError):
        return None


def check_machine_limits(config: Any) -> None:
    """The limits that depend on this machine: threads and env workers against its CPU
    cores, the iteration's collected decisions against its available memory."""
    cores = usable_cores()
    for name in ("threads", "env_workers"):
        value = getattr(config, name)
        if value is not None and value > PER_CORE * cores:
            raise ValueError(
                f"{flag(name)} {value} is more than this machine can use: at most {PER_CORE} x "
                f"its {cores} usable CPU core(s) = {PER_CORE * cores}"
            )
    steps = max_episode_steps(config)
    memory = available_memory()
    if steps is None or memory is None:
        return
    episodes = config.groups_per_iter * config.group_size
    estimate = episodes * steps * BYTES_PER_DECISION
    if estimate > MEMORY_SHARE * memory:
        gib = 1024**3
        raise ValueError(
            f"--groups-per-iter {config.groups_per_iter} x --group-size {config.group_size} "
            f"episodes of up to {steps} steps (max_episode_steps) would collect about "
            f"{estimate / gib:.1f} GiB of decisions per iteration, more than "
            f"{MEMORY_SHARE:.0%} of the {memory / gib:.1f} GiB of memory available now; "
            "lower one of them"
        )
