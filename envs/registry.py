"""Env ids, their documented options, and validation of user-given option values.

Every env id is registered with an :class:`EnvSpec`: a factory plus a table of
:class:`Option` s. ``rlid.envs.make(env_id, **options)`` validates every option (name,
type, range/choices) *before* the factory runs, so a typo fails with a message
that names the option and what is allowed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlid.envs.gym_ids import gym_id, register_gym

# Train / held-out games are disjoint seed ranges: game i of a split has seed
# SPLIT_OFFSETS[split] + i.
SPLIT_OFFSETS = {"train": 0, "heldout": 1_000_000}
SPLITS = tuple(SPLIT_OFFSETS)
SPLIT_SIZE = 1_000_000
"""Games per split: ``num_games=SPLIT_SIZE`` draws a fresh game at (almost) every reset
of a procedural family, and a whole split of a benchmark's fixed one (capped there)."""


@dataclass(frozen=True)
class Option:
    """One constructor option of an env id.

    Attributes:
        kind: python type the value must have (``int``, ``float``, ``str``, ``bool``).
        default: value used when the option is not given (``None`` = unset).
        doc: one line shown by ``rlid envs``.
        choices: allowed values (for ``str`` options), or ``None``.
        min, max: inclusive bounds (for numbers), or ``None``.
    """

    kind: type
    default: Any
    doc: str
    choices: tuple[Any, ...] | None = None
    min: float | None = None
    max: float | None = None

    def describe(self) -> str:
        if self.choices is not None:
            allowed = "one of " + ", ".join(repr(c) for c in self.choices)
        elif self.min is not None or self.max is not None:
            lo = "-inf" if self.min is None else self.min
            hi = "inf" if self.max is None else self.max
            allowed = f"{self.kind.__name__} in [{lo}, {hi}]"
        else:
            allowed = self.kind.__name__
        return allowed

    def check(self, env_id: str, name: str, value: Any) -> Any:
        """Return ``value`` converted to ``kind`` or raise ``ValueError`` naming the option."""
        if value is None:
            return None
        kind = self.kind
        try:
            if kind is bool:
                if isinstance(value, str):
                    low = value.strip().lower()
                    if low not in ("true", "false", "1", "0", "yes", "no"):
                        raise ValueError
                    value = low in ("true", "1", "yes")
                elif not isinstance(value, bool | int):
                    raise ValueError
                value = bool(value)
            elif kind is int:
                if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                    raise ValueError
                value = int(value)
            elif kind is float:
                value = float(value)
            else:
                value = kind(value)
        except (TypeError, ValueError):
            raise ValueError(
                f"{env_id}: option {name}={value!r} is not valid: expected {self.describe()}"
            ) from None
        if self.choices is not None and value not in self.choices:
            raise ValueError(
                f"{env_id}: option {name}={value!r} is not valid: expected {self.describe()}"
            )
        if (self.min is not None and value < self.min) or (
            self.max is not None and value > self.max
        ):
            raise ValueError(
                f"{env_id}: option {name}={value!r} is out of range: expected {self.describe()}"
            )
        return value


COMMON_OPTIONS: dict[str, Option] = {
    "max_episode_steps": Option(int, 50, "steps before the episode is truncated", min=1),
    "afterstates": Option(bool, True, "compute a predicted-outcome sentence per legal action"),
    "split": Option(
        str, "train", "game set: 'train' or 'heldout' (disjoint seed ranges)", choices=SPLITS
    ),
    "game_seed": Option(
        int, None, "play exactly this game of the split (default: sample one per reset)", min=0
    ),
    "num_games": Option(
        int,
        16,
        "size of the split's game pool that resets sample from (1000000: the whole split)",
        min=1,
        max=SPLIT_SIZE,
    ),
}


@dataclass(frozen=True)
class EnvSpec:
    """A registered env id: its factory, options and a one-line description."""

    env_id: str
    factory: Callable[..., Any]
    doc: str
    options: dict[str, Option] = field(default_factory=dict)

    def all_options(self) -> dict[str, Option]:
        return {**COMMON_OPTIONS, **self.options}

    def resolve(self, given: dict[str, Any]) -> dict[str, Any]:
        """Validate ``given`` against the option table; return all options with defaults."""
        table = self.all_options()
        unknown = sorted(set(given) - set(table))
        if unknown:
            raise ValueError(
                f"{self.env_id}: unknown option(s) {', '.join(unknown)}; "
                f"valid options: {', '.join(sorted(table))}"
            )
        return {
            name: opt.check(self.env_id, name, given.get(name, opt.default))
            for name, opt in table.items()
        }


_REGISTRY: dict[str, EnvSpec] = {}


def register(spec: EnvSpec) -> None:
    """Register an env id, for ``rlid.envs.make`` and as a Gymnasium id (``rlid.envs.gym_ids``)."""
    if spec.env_id in _REGISTRY:
        raise ValueError(f"env id {spec.env_id!r} is already registered")
    _REGISTRY[spec.env_id] = spec
    register_gym(spec.env_id)


def get_spec(env_id: str) -> EnvSpec:
    if not isinstance(env_id, str):
        raise TypeError(f"env_id must be a str, got {type(env_id).__name__}")
    if env_id not in _REGISTRY:
        shown = (
            repr(env_id) if len(env_id) <= 80 else f"{env_id[:60]!r}... ({len(env_id)} characters)"
        )
        raise ValueError(f"unknown env id {shown}; valid ids: {', '.join(list_envs())}")
    return _REGISTRY[env_id]


def list_envs() -> list[str]:
    """All registered env ids, sorted."""
    return sorted(_REGISTRY)


def make(env_id: str, **options: Any):
    """Build the env ``env_id`` with validated ``options`` (see ``rlid envs``)."""
    spec = get_spec(env_id)
    resolved = spec.resolve(options)
    return spec.factory(**resolved)


def parse_option_strings(pairs: list[str]) -> dict[str, str]:
    """Parse CLI ``k=v`` strings into a dict (values stay strings: :func:`typed_options`
    converts them once the env id is known; ``TrainConfig`` does)."""
    out: dict[str, str] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"env option {pair!r} must look like key=value")
        key, value = pair.split("=", 1)
        key = key.strip().replace("-", "_")
        if not key:
            raise ValueError(f"env option {pair!r} has an empty key")
        out[key] = value.strip()
    return out


def typed_options(env_id: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with every value converted to the type its env documents (``"30"`` ->
    ``30`` for ``max_episode_steps``), so configs, summaries and model cards record the
    value that is played. What does not convert (an unknown env id or option name, a value
    its option refuses) is left as given, for ``make`` / ``EnvSpec.resolve`` to report."""
    spec = _REGISTRY.get(env_id) if isinstance(env_id, str) else None
    if spec is None:
        return dict(options)
    table = spec.all_options()
    typed: dict[str, Any] = {}
    for name, value in options.items():
        option = table.get(name)
        try:
            typed[name] = value if option is None else option.check(env_id, name, value)
        except ValueError:
            typed[name] = value
    return typed


def make_gym(env_id: str, render_mode: str | None = None, **options: Any) -> Any:
    """Gymnasium entry point: ``rlid.envs.make(env_id, **options)`` with Gymnasium's render_mode."""
    if render_mode not in (None, "ansi"):
        raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
    env = make(env_id, **options)
    env.render_mode = render_mode
    return env


def gym_ids() -> dict[str, str]:
    """Gymnasium id -> rlid env id, for every registered rlid env."""
    return {gym_id(env_id): env_id for env_id in list_envs()}
