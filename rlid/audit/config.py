"""What ``rlid audit`` enumerates and how: :class:`AuditConfig`, from which the CLI
derives its flags. No torch here, so that ``rlid audit --help`` starts at once.

>>> AuditConfig(n_boot=50).n_boot
50
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rlid.audit.paraphrases import WORDING_STYLES
from rlid.audit.states import BUILTIN_STATES, DEFAULT_STATE

DEFAULT_SIZES = (4, 16, 64, 256, 1024, 4096)
"""Monte-Carlo sample sizes n of the audit's picture (``rlid.audit.mc``)."""


def _opt(default: Any, help: str, **argparse_kwargs: Any) -> Any:
    return field(default=default, metadata={"help": help, **argparse_kwargs})


@dataclass(frozen=True)
class AuditConfig:
    """What ``rlid audit`` enumerates and how; the CLI flags are derived from these fields."""

    model: str = _opt("tiny", "policy model: 'tiny' (embedded) or a local HF model directory")
    state: str = _opt(
        DEFAULT_STATE,
        "built-in text-game state (goal, observation, actions, advantages)",
        choices=BUILTIN_STATES,
    )
    goal: str | None = _opt(None, "replace the state's goal line")
    observation: str | None = _opt(None, "replace the state's observation line")
    actions: tuple[str, ...] = _opt(
        (),
        "audit these actions (built-in paraphrase sets) instead of the state's",
        nargs="+",
        metavar="ACTION",
    )
    wording_style: str = _opt(
        "synonyms",
        "built-in wording sets: 'synonyms' (verb synonyms: go/walk/head east, take/get/pick up "
        "...) or 'surface' (case, article, full-stop variants: the ones the token plane's "
        "parse rule maps to the same action)",
        choices=WORDING_STYLES,
    )
    wordings: str | None = _opt(
        None,
        'JSON file {"action": ["wording", ...], ...}: the actions and their wordings '
        "(the first wording of each action is its canonical one); overrides --actions",
        metavar="FILE",
    )
    advantages: tuple[str, ...] = _opt(
        (),
        "A(a) as ACTION=VALUE pairs, e.g. 'take brass key=1.0'; unnamed actions keep their "
        "defaults (the state's table, or 1.0 for the first and 0.0 for the other custom actions)",
        nargs="+",
        metavar="ACTION=VALUE",
    )
    params: tuple[str, ...] = _opt(
        (),
        "glob(s) over parameter names for the gradient coordinates (default: all)",
        nargs="+",
        metavar="GLOB",
    )
    mc_sizes: tuple[int, ...] = _opt(
        DEFAULT_SIZES, "Monte-Carlo sample sizes n (each >= 2)", nargs="+", type=int, metavar="N"
    )
    n_boot: int = _opt(1000, "bootstrap resamples per Monte-Carlo interval", type=int)
    seed: int = _opt(0, "seed of the Monte-Carlo draws and the bootstrap", type=int)
    wording_bonus: float = _opt(
        0.5,
        "control 1: extra advantage of each action's canonical wording, centred within the "
        "action (so the action's mean advantage is unchanged)",
        type=float,
    )
    noise_sigma: float = _opt(
        0.5, "control 3: standard deviation of zero-mean noise added to A", type=float
    )

    def __post_init__(self) -> None:
        if self.wording_style not in WORDING_STYLES:
            raise ValueError(
                f"unknown wording style {self.wording_style!r}; valid: {sorted(WORDING_STYLES)}"
            )
        if self.state not in BUILTIN_STATES:
            raise ValueError(f"unknown state {self.state!r}; valid: {sorted(BUILTIN_STATES)}")
        if any(n < 2 for n in self.mc_sizes) or not self.mc_sizes:
            raise ValueError(f"--mc-sizes must be integers >= 2, got {list(self.mc_sizes)}")
        if self.n_boot < 10:
            raise ValueError(f"--n-boot must be >= 10, got {self.n_boot}")
        for name in ("wording_bonus", "noise_sigma"):
            if not math.isfinite(getattr(self, name)):
                flag = "--" + name.replace("_", "-")
                raise ValueError(f"{flag} must be a finite number, got {getattr(self, name)}")
        if self.wording_bonus == 0:
            raise ValueError(
                "--wording-bonus 0 makes control 1 the plain audit; give a non-zero one"
            )
        if self.noise_sigma <= 0:
            raise ValueError(f"--noise-sigma must be > 0, got {self.noise_sigma}")
