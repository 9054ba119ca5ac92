"""Reference arms: a floor and a ceiling that need no model.

* ``random`` — uniform over the legal actions at every step (the floor a learner must
  clear; greedy evaluation does not apply to it, it always samples);
* ``walkthrough`` — the env's own solution (``info["walkthrough"]`` at reset, optimal
  for the built-in games, TextWorld's walkthrough for its challenges): the ceiling;
* ``afterstate`` — reads the outcome marks of the menu's afterstates and nothing else
  (:func:`rlid.envs.outcome.best_rows`): a row predicted to win, else one predicted to score the
  most points, else uniform over the rows not predicted to lose (over all rows when
  every one loses); ties drawn at random. What a policy that read its menu's marks,
  one step ahead, would get: how much of the ceiling the menus alone give away.

All are measured by the same code as the trained arms (``rlid.core.train.evaluate`` on
the held-out games, the same reset seeds), the random and afterstate arms once per
comparison seed (the walkthrough is deterministic: once), so the report can put floor and ceiling
next to each arm's before / after.

Example::

    >>> from rlid import envs
    >>> from rlid.menus import Interface
    >>> from rlid.core.evaluate import evaluate
    >>> env_list = [envs.make("keydoor", size=2, split="heldout")]
    >>> evaluate(WalkthroughPolicy(), env_list, 4, interface=Interface())["success"]
    1.0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rlid import envs as envs_pkg
from rlid.compare.config import REFERENCES
from rlid.config.budget import Budget, Timers
from rlid.core.evaluate import evaluate
from rlid.envs.outcome import best_rows


@dataclass(frozen=True)
class ReferenceAction:
    """What a reference policy returns per env: the command only."""

    action: str


class RandomPolicy:
    """Uniform over ``info["legal_actions"]``, drawn with the rollout's ``rng``."""

    def __init__(self) -> None:
        self.budget, self.timers = Budget(), Timers()

    def rows(self, info: dict[str, Any]) -> list[int]:
        """The rows (indices into ``info["legal_actions"]``) it draws from uniformly."""
        return list(range(len(info["legal_actions"])))

    def act(
        self,
        observations: list[str],
        infos: list[dict[str, Any]],
        memory_texts: list[str | None],
        *,
        rng: np.random.Generator,
        generator: torch.Generator,
        greedy: bool = False,
        temperature: float = 1.0,
    ) -> list[ReferenceAction]:
        del observations, memory_texts, generator, greedy, temperature
        out = []
        for info in infos:
            rows = self.rows(info)
            out.append(ReferenceAction(info["legal_actions"][rows[int(rng.integers(len(rows)))]]))
        self.budget.decisions += len(out)
        return out


class AfterstatePolicy(RandomPolicy):
    """The row whose afterstate predicts the best outcome: a win, else the most points,
    else any row not predicted to lose (uniform among ties, with the rollout's ``rng``).

    It reads ``info["afterstates"]`` (the text the menus show) through
    :func:`rlid.envs.outcome.best_rows`, so it needs an env that computes afterstates."""

    def rows(self, info: dict[str, Any]) -> list[int]:
        if info.get("afterstates") is None:
            raise ValueError(
                "the afterstate reference reads info['afterstates'], but this env "
                "computes none (afterstates=False); drop 'afterstate' from the "
                "comparison's references"
            )
        return best_rows(info["afterstates"])


class WalkthroughPolicy:
    """Plays each episode's ``info["walkthrough"]`` command by command.

    The rollout only passes the envs still running, so the policy keeps one plan per
    running env and drops those it knows end with this step: the plan is used up
    (the walkthrough's last command ends the game) or ``info["steps_left"]`` is 1
    (truncation). A batch of another size than predicted means the env and its
    walkthrough disagree, which is an error, not a silent mismatch.
    """

    def __init__(self) -> None:
        self.budget, self.timers = Budget(), Timers()
        self._plans: list[list[str]] = []

    def act(
        self,
        observations: list[str],
        infos: list[dict[str, Any]],
        memory_texts: list[str | None],
        *,
        rng: np.random.Generator,
        generator: torch.Generator,
        greedy: bool = False,
        temperature: float = 1.0,
    ) -> list[ReferenceAction]:
        del observations, memory_texts, rng, generator, greedy, temperature
        if all("walkthrough" in info for info in infos):  # the first step after reset
            missing = [i for i, info in enumerate(infos) if not info["walkthrough"]]
            if missing:
                raise ValueError(
                    "the walkthrough arm needs info['walkthrough'] at reset, but this env "
                    "gives none; drop 'walkthrough' from the comparison's references"
                )
            self._plans = [list(info["walkthrough"]) for info in infos]
        if len(self._plans) != len(infos):
            raise RuntimeError(
                f"{len(infos)} episodes still running but {len(self._plans)} walkthroughs "
                "expected: an episode ended before its walkthrough did (or went on after it)"
            )
        out, still = [], []
        for plan, info in zip(self._plans, infos):
            if not plan:
                raise RuntimeError("the walkthrough is used up but the episode goes on")
            out.append(ReferenceAction(plan.pop(0)))
            if plan and info.get("steps_left", 2) > 1:
                still.append(plan)
        self._plans = still
        self.budget.decisions += len(out)
        return out


ReferencePolicy = RandomPolicy | WalkthroughPolicy | AfterstatePolicy

REFERENCE_POLICIES: dict[str, type[ReferencePolicy]] = {
    "random": RandomPolicy,
    "walkthrough": WalkthroughPolicy,
    "afterstate": AfterstatePolicy,
}


def make_reference_policy(name: str) -> ReferencePolicy:
    if name not in REFERENCE_POLICIES:
        raise ValueError(f"unknown reference {name!r}; valid: {', '.join(REFERENCES)}")
    return REFERENCE_POLICIES[name]()


def evaluate_reference(
    name: str,
    env_id: str,
    env_options: dict[str, Any],
    *,
    episodes: int,
    seed: int,
    interface: Any,
) -> dict[str, float]:
    """Held-out stats of a reference policy, from ``rlid.core.train.evaluate``.

    The held-out games are those every trained arm is evaluated on; ``seed`` only
    changes the random and afterstate arms' draws (the games come from the evaluation
    reset seeds).
    """

    options = {**env_options, "split": "heldout"}
    env_list = [envs_pkg.make(env_id, **options) for _ in range(min(episodes, 16))]
    policy = make_reference_policy(name)
    return evaluate(policy, env_list, episodes, interface=interface, seed=seed)
