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
import re
from pathlib import Path
from typing import Any

from rlid import envs

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


_G = 10**9
BOUNDS: dict[str, dict[str, tuple[float, float, str]]] = {
    # rlid train and eval's run settings (TrainConfig, the planes' configs, the
    # interface; also a comparison's arms and every run's recorded config)
    "run": {
        "steps": (1, 10**11, "the budget; counted in 64 bits with room to spare"),
        "seed": (0, SEED_MAX, "numpy and torch seeding, with room for derived streams"),
        "threads": (1, 4096, "and 4 x the usable CPU cores (checked where the run runs)"),
        "micro_batch_size": (1, 65_536, "rows of one forward pass"),
        "micro_batch_tokens": (1, _G, "tokens of one forward pass"),
        "env_workers": (0, 4096, "and 4 x the usable CPU cores; each is a process"),
        "groups_per_iter": (1, MAX_EPISODES_PER_ITER, "see the episodes per iteration"),
        "group_size": (1, MAX_GROUP_SIZE, "an env is built for each episode of a group"),
        "vllm_max_model_len": (1, 1 << 24, "tokens of a vLLM sequence"),
        "epochs": (1, 10_000, "passes over one iteration's batch"),
        "minibatch_size": (1, 1 << 20, "decisions per optimizer step"),
        "lora_rank": (0, 4096, "adapter matrices are rank x width (1e9 asked for 512 GB)"),
        "eval_episodes": (0, 1 << 20, "the held-out episodes are held at once"),
        "eval_every": (0, _G, "iterations"),
        "checkpoint_every": (1, _G, "iterations"),
        "keep_checkpoints": (1, 10_000, "each is a full copy of the model"),
        "max_new_tokens": (1, 4096, "a generated command; each token is a forward pass"),
        "max_gen_batches": (1, 64, "DAPO generation rounds in one iteration"),
        "overlong_cache": (0, 4096, "at most --max-new-tokens"),
        "memory_size": (0, MAX_MEMORY_SIZE, "the memory line of every prompt"),
        "max_obs_chars": (1, MAX_OBS_CHARS, "the observation in every prompt"),
        "tree_fanout": (0, 4096, "labels per node of a label tree"),
        "checkpoint_minutes": (0.0, 10**7, "minutes"),
        "lora_alpha": (0.0, 1e6, "the adapters' scale"),
        "engine_noise": (0.0, 1e3, "logit noise of the perturbed engine"),
    },
    "eval": {
        "episodes": (1, 1 << 20, "the episodes' results are held at once"),
        "seed": (0, SEED_MAX, "numpy and torch seeding"),
    },
    "pretrain": {
        "episodes_per_env": (1, 1 << 20, "the corpus is held in memory"),
        "max_episode_steps": (1, 100_000, "steps of one played episode"),
        "walkthrough_episodes": (0, 1 << 20, "the corpus is held in memory"),
        "walkthrough_max_steps": (1, 100_000, "steps of one walk"),
        "num_games": (0, 1 << 20, "and the env's own game count"),
        "steps": (1, _G, "optimizer steps"),
        "batch_size": (1, 4096, "sequences of one step (1e9 allocated for a minute, then failed)"),
        "max_tokens": (1, 1 << 16, "tokens of one sequence"),
        "seed": (0, SEED_MAX, "numpy and torch seeding"),
        "threads": (1, 4096, "and 4 x the usable CPU cores"),
        "max_batch_tokens": (0, 1 << 24, "tokens of one forward pass (0: no limit)"),
        "checkpoint_every": (0, _G, "steps (0: never)"),
        "answer_weight": (0.0, 1e6, "the loss weight of an answer token"),
        "lr": (0.0, 10.0, "the learning rate"),
        "spread_labels": (0.0, 1.0, "a share"),
    },
    "audit": {
        "mc_sizes": (1, 1 << 24, "samples of one Monte Carlo estimate, each held at once"),
        "n_boot": (1, 1_000_000, "bootstrap resamples"),
        "seed": (0, SEED_MAX, "numpy and torch seeding"),
        "threads": (1, 4096, "and 4 x the usable CPU cores"),
        "noise_sigma": (0.0, 1e3, "the noise's scale; exp of it stays finite"),
        "wording_bonus": (-1e3, 1e3, "a logit bonus; exp of it stays finite"),
    },
    "play": {
        "game_seed": (0, SEED_MAX, "a game index within the split"),
        "seed": (0, SEED_MAX, "the reset seed"),
    },
    "demo": {
        "steps": (1, 10**11, "the budget"),
        "seed": (0, SEED_MAX, "numpy and torch seeding"),
        "threads": (1, 4096, "and 4 x the usable CPU cores"),
    },
}
"""Every count, size and scale a command takes, ``{scope: {field: (low, high, why)}}``:
the one table the checks read (:func:`check_field`, :func:`check_flags`, the configs'
validation) and ``docs/run-directories.md`` shows (:func:`bounds_markdown`, tested to
match). ``run`` is every ``rlid train`` setting (also ``eval --config``, a comparison's
arms and a recorded config); ``eval`` adds ``rlid eval``'s own flags to it."""

COMMAND_SCOPES = {"train": ("run",), "eval": ("eval", "run"), "pretrain": ("pretrain",),
                  "audit": ("audit",), "play": ("play",), "demo": ("demo",)}  # fmt: skip
"""Which scopes of :data:`BOUNDS` bound each command's flags (the first that names one)."""

ENV_OPTION_MAX = SEED_MAX
"""A whole-number env option (``-o game_seed=N``, ``-o size=N``) at most this."""


def bound_of(scope: str, name: str) -> tuple[float, float, str] | None:
    return BOUNDS.get(scope, {}).get(name)


def check_field(scope: str, name: str, value: Any, *, shown: str | None = None) -> None:
    """``value`` (a number, or a tuple of them) within ``BOUNDS[scope][name]``, else one
    line naming the flag (``shown``; default ``--name``); no bound: nothing checked."""
    bound = bound_of(scope, name)
    if bound is None or value is None:
        return
    low, high, why = bound
    for item in value if isinstance(value, tuple | list) else (value,):
        if isinstance(item, bool) or not isinstance(item, int | float):
            continue  # a type error is the config's own to report
        if not low <= item <= high:
            text = f"{item:g}" if isinstance(item, float) else str(item)[:40]
            raise ValueError(
                f"{shown or flag(name)} {text} is out of range: {_range(low, high)} ({why}; "
                "docs/run-directories.md#limits)"
            )


def _range(low: float, high: float) -> str:
    def show(x: float) -> str:
        return f"{x:,}" if isinstance(x, int) else f"{x:g}"

    return f"from {show(low)} to {show(high)}"


def check_flags(command: str, values: dict[str, Any]) -> None:
    """Every count, size and scale flag of ``command`` the user gave (``{dest: value}``,
    argparse's names) within :data:`BOUNDS`, before any work and before any directory
    is made (``rlid.cli.main`` calls it right after parsing)."""
    for dest, value in values.items():
        name = dest.rsplit("__", 1)[-1]  # interface__memory_size: --memory-size
        for scope in COMMAND_SCOPES.get(command, ()):
            if bound_of(scope, name) is not None:
                check_field(scope, name, value)
                break


def bounds_markdown() -> str:
    """The table of :data:`BOUNDS` as ``docs/run-directories.md`` shows it."""
    lines = ["| command | setting | from | to | why |", "|---|---|---|---|---|"]
    where = {"run": "train, eval, compare", "eval": "eval", "pretrain": "pretrain",
             "audit": "audit", "play": "play", "demo": "demo"}  # fmt: skip
    for scope, fields in BOUNDS.items():
        for name, (low, high, why) in fields.items():
            lo = f"{low:,}" if isinstance(low, int) else f"{low:g}"
            hi = f"{high:,}" if isinstance(high, int) else f"{high:g}"
            lines.append(f"| {where[scope]} | `{flag(name)}` | {lo} | {hi} | {why} |")
    return "\n".join(lines) + "\n"


def check_env_option_numbers(options: Any) -> None:
    """Whole-number env options (``-o game_seed=N``) within ``0 .. ENV_OPTION_MAX``
    in size: a game seed past 2^64 was accepted and reached numpy."""
    if not isinstance(options, dict):
        return
    for key, value in options.items():
        number = value
        if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
            number = int(value)
        whole = isinstance(number, int) and not isinstance(number, bool)
        if whole and abs(number) > ENV_OPTION_MAX:
            raise ValueError(
                f"-o {str(key)[:40]}={str(value)[:40]} is out of range: whole-number env "
                f"options are at most {ENV_OPTION_MAX} in size"
            )


MESSAGE_LIMIT = 1000
"""Characters of an error line at most: a message that quotes a huge input is cut."""


_UNPRINTABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""What a terminal would act on rather than show: C0 controls but tab, newline and
carriage return (a progress bar's), DEL, C1 controls, and the bidirectional overrides."""


def printable(text: str) -> str:
    r"""``text`` with every character a terminal would act on (an escape sequence's ESC,
    BEL, C1 controls, bidirectional overrides) written as a visible escape: the one rule
    for every string rlid prints (``rlid.cli.main`` applies it to everything a command
    writes to stdout and stderr, so no message can drive the user's terminal).

    >>> printable("\x1b[31mRED\x1b]0;pwned\x07")
    '\\x1b[31mRED\\x1b]0;pwned\\x07'
    """
    return _UNPRINTABLE.sub(lambda m: ascii(m.group())[1:-1], text)


class PrintableStream:
    """A text stream that writes everything through :func:`printable` (the rest is the
    wrapped stream's: ``fileno``, ``isatty``, ``encoding``, ...)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(printable(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def one_line(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """``message`` on one line (:func:`printable`), its middle cut when it is longer
    than ``limit``.

    >>> one_line("a\nb")
    'a b'
    """
    message = printable(" ".join(message.splitlines()))
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
    for name in BOUNDS["run"]:  # the planes' own fields too, where the config has them
        holder = config.interface if hasattr(config.interface, name) else config
        check_field("run", name, getattr(holder, name, None))
    check_env_option_numbers(getattr(config, "env_options", None))
    split = (getattr(config, "env_options", None) or {}).get("split")
    if split is not None:
        raise ValueError(
            f"-o split={str(split)[:40]} would do nothing: a run trains on the train split and "
            "evaluates on the heldout split, whatever the option says; drop it (rlid eval "
            "--split picks the games an evaluation plays)"
        )
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
