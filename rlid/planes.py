"""One registry of planes: name -> how to build its policy and how to train it.

The CLI (``rlid train`` / ``rlid eval``), :func:`rlid.runs.evaluate.evaluate_run` and
``rlid compare`` all read this registry; nothing else dispatches on a plane name.
The decision plane is registered here. The token and scoring planes live in the
``baselines`` package, which registers them through the ``rlid.planes`` entry-point
group (``pyproject.toml``), so the ``rlid`` core never imports ``baselines`` (the
layering contract in ``pyproject.toml`` checks that).

    >>> from rlid.planes import get_plane
    >>> get_plane("decision").name
    'decision'
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlid.budget import Budget, Timers
    from rlid.config import TrainConfig
    from rlid.policy import ValueHead
    from rlid.protocols import Policy
    from rlid.runs.log import RunLog

ENTRY_POINT_GROUP = "rlid.planes"


@dataclass(frozen=True)
class Plane:
    """A plane: what acts (``make_policy``) and what trains it (``train``).

    Attributes:
        name: the ``TrainConfig.plane`` value.
        summary: one line for help texts.
        make_policy: ``(config, model, tokenizer, *, value_head, budget, timers, autocast)
            -> Policy``, the acting policy around a model (training rollouts and evaluation).
        train: ``(config, out, *, resume, progress) -> RunLog``, a whole training run.
    """

    name: str
    summary: str
    make_policy: Callable[..., Policy]
    train: Callable[..., RunLog]


_PLANES: dict[str, Plane] = {}
_loaded_entry_points = False


def register_plane(plane: Plane) -> None:
    """Add ``plane`` to the registry (registering the same name again replaces it)."""
    _PLANES[plane.name] = plane


def _load_entry_points() -> None:
    global _loaded_entry_points
    if _loaded_entry_points:
        return
    _loaded_entry_points = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        register = ep.load()
        register()


def get_plane(name: str) -> Plane:
    """The plane called ``name``; an unknown name fails listing the registered ones."""
    if name not in _PLANES:
        _load_entry_points()
    if name not in _PLANES:
        known = ", ".join(repr(n) for n in plane_names())
        raise ValueError(
            f"unknown plane {name!r}; registered planes: {known} (the token and scoring "
            "planes are registered by the baselines package: install rlid with `pip install -e .`)"
        )
    return _PLANES[name]


def run_training(
    config: TrainConfig | None, out: Path, *, resume: bool, progress: bool = True
) -> RunLog:
    """Train ``config`` into the run directory ``out`` with its plane's trainer.

    With ``resume=True`` the config is read from ``out`` (``config`` is ignored;
    change what may change with :func:`rlid.runs.log.apply_resume_changes` first).
    """
    if resume:
        from rlid.runs.log import read_run_config

        config = read_run_config(out)[0]
    if config is None:
        raise ValueError("a config is required to start a new run")
    from rlid import distributed
    from rlid.runs.stop import RunStopped

    try:
        log = get_plane(config.plane).train(config, out, resume=resume, progress=progress)
    except RunStopped:
        distributed.release()  # every rank stopped after the same iteration: a clean exit
        raise
    distributed.release()  # the process group the trainer joined, before the process ends
    return log


def plane_names() -> list[str]:
    """Names of every registered plane (entry points loaded)."""
    _load_entry_points()
    return sorted(_PLANES)


# ----------------------------------------------------------------------- decision plane
def _decision_policy(
    config: TrainConfig,
    model: Any,
    tokenizer: Any,
    *,
    value_head: ValueHead | None = None,
    budget: Budget | None = None,
    timers: Timers | None = None,
    autocast: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> Policy:
    from rlid.policy import DecisionPolicy

    return DecisionPolicy(
        model, tokenizer, config.interface, value_head=value_head, budget=budget, timers=timers,
        autocast=autocast, micro_batch_size=config.micro_batch_size,
    )  # fmt: skip


def _decision_train(
    config: TrainConfig | None, out: Path, *, resume: bool = False, progress: bool = True
) -> RunLog:
    from rlid.trainer import train

    return train(config, out, resume=resume, progress=progress)


register_plane(
    Plane(
        name="decision",
        summary="menu of legal actions, label readout in one forward, decision-level PPO",
        make_policy=_decision_policy,
        train=_decision_train,
    )
)
