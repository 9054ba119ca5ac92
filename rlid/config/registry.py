"""One registry of planes: name -> its config class, its acting policy, its trainer.

The CLI (``rlid train`` / ``rlid eval``), :mod:`rlid.agents` and ``rlid compare`` read
this registry; nothing else dispatches on a plane name. A plane names its config class,
policy factory and trainer as ``"module:attribute"`` strings, imported on first use, so
this module imports nothing (it is part of the base layer, :mod:`rlid.config`) and a
config is validated without importing any plane: the three built-in planes' config
classes live beside this module (:mod:`rlid.config.planes`). Planes of other packages
register through the ``rlid.planes`` entry-point group, loaded only when a name is not
built in.

    >>> from rlid.config.registry import get_plane
    >>> get_plane("decision").name
    'decision'
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Literal

ENTRY_POINT_GROUP = "rlid.planes"


def resolve(ref: Callable[..., Any] | str) -> Callable[..., Any]:
    """A callable, or the object a ``"module:attribute"`` string names (imported now)."""
    if callable(ref):
        return ref
    module, _, attribute = ref.partition(":")
    if not module or not attribute:
        raise ValueError(f"{ref!r} is not a 'module:attribute' reference")
    found = getattr(importlib.import_module(module), attribute, None)
    if not callable(found):
        raise ValueError(f"{ref!r} names nothing callable")
    return found


@dataclass(frozen=True)
class Plane:
    """A plane: what acts and what trains it.

    Attributes:
        name: the ``TrainConfig.plane`` value.
        summary: one line for help texts.
        policy: ``(config, model, tokenizer, *, value_head, budget, timers, autocast)
            -> Policy``, the acting policy around a model (training rollouts and
            evaluation), or its ``"module:attribute"`` reference.
        trainer: ``(config, out, *, resume, progress) -> RunLog``, a whole training
            run, or its ``"module:attribute"`` reference.
        config: the plane's config class (a ``rlid.config.run.TrainConfig`` that may add the
            plane's own fields, as TRL's ``GRPOConfig`` extends its training arguments), or
            its ``"module:attribute"`` reference.
        acts: how its policy acts: ``"menu"`` (a distribution over the menu of legal
            actions: a critic is possible, walkthroughs can be read, no text is generated)
            or ``"text"`` (free-text commands: generated tokens, critic-free).
        labels: its menus show label tokens at positions (the position penalty's domain).
        description: the algorithm in a few words, for the exported model card.
    """

    name: str
    summary: str
    policy: Callable[..., Any] | str
    trainer: Callable[..., Any] | str
    config: type | str = "rlid.config.run:TrainConfig"
    acts: Literal["menu", "text"] = "menu"
    labels: bool = False
    description: str = "decision-level PPO"

    @property
    def generates_text(self) -> bool:
        """Whether the plane's policy writes its commands (generated-token budgets, the
        simulated rollout engines)."""
        return self.acts == "text"

    def config_class(self) -> type:
        """The plane's config class (imported on first use)."""
        found = resolve(self.config)
        assert isinstance(found, type), found
        return found

    def make_policy(self, config: Any, model: Any, tokenizer: Any, **kw: Any) -> Any:
        """The plane's acting policy around ``model`` (see :attr:`policy`)."""
        return resolve(self.policy)(config, model, tokenizer, **kw)

    def train(self, config: Any, out: Any, *, resume: bool = False, progress: bool = True) -> Any:
        """A whole training run into the run directory ``out`` (see :attr:`trainer`)."""
        return resolve(self.trainer)(config, out, resume=resume, progress=progress)


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
        raise ValueError(f"unknown plane {name!r}; registered planes: {known}")
    return _PLANES[name]


def plane_names() -> list[str]:
    """Names of every registered plane (entry points loaded)."""
    _load_entry_points()
    return sorted(_PLANES)


BUILT_IN = (
    Plane(
        name="decision",
        summary="menu of legal actions, label readout in one forward, decision-level PPO",
        policy="rlid.decision.policy:decision_policy",
        trainer="rlid.core.train:train",
        labels=True,
    ),
    Plane(
        name="scoring",
        summary="TWOSOME-style action scoring (log-likelihood of each legal action), same PPO",
        policy="rlid.baselines.scoring:scoring_policy",
        trainer="rlid.core.train:train",  # decision-level PPO, with the scoring policy
        config="rlid.config.planes:ScoringConfig",
    ),
    Plane(
        name="token",
        summary="free-text commands, the GRPO family (GRPO, Dr. GRPO, DAPO, GSPO, CISPO)",
        policy="rlid.baselines.token.policy:make_token_policy",
        trainer="rlid.baselines.token.train:train_token",
        config="rlid.config.planes:TokenConfig",
        acts="text",
        description="the GRPO family (token plane)",
    ),
)
for _plane in BUILT_IN:
    register_plane(_plane)
