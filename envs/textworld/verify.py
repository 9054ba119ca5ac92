"""Check predicted TextWorld afterstates against the real game.

Along random walks, for every (state, legal command) pair, the fact delta the
logic engine predicts (:mod:`rlid.envs.textworld.afterstate`, computed on one env) is compared
with the delta observed by stepping a *separate* env instance from the same state
(saved and restored with :meth:`TextWorldEnv.snapshot`): its logic-state facts
before and after the step. Predicted points / win / loss are compared with the
reward and the ending the game reports.

    python -m envs.textworld.verify            # prints pairs checked and every mismatch

A command shared by several logic actions counts as explained when the game ran
one of them (the game, not the predictor, picks which); those pairs are counted
separately.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlid.envs.registry import make

# Small games from every TextWorld challenge (and a custom one), used by the tests
# and by ``python -m envs.textworld.verify``.
CHECK_GAMES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("tw-simple", {"rewards": "dense", "goal": "brief"}),
    ("tw-coin_collector", {"level": 5}),
    ("tw-treasure_hunter", {"level": 15}),
    ("tw-cooking", {"recipe": 2, "take": 1, "go": 6, "open": True, "cook": True, "cut": True}),
    ("tw-custom", {"world_size": 3, "nb_objects": 6, "quest_length": 3}),
)


@dataclass
class Mismatch:
    env_id: str
    step: int
    command: str
    kind: str
    predicted: str
    observed: str


@dataclass
class CheckReport:
    pairs: int = 0
    ambiguous: int = 0
    outcome_checks: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)

    def merge(self, other: CheckReport) -> None:
        self.pairs += other.pairs
        self.ambiguous += other.ambiguous
        self.outcome_checks += other.outcome_checks
        self.mismatches += other.mismatches

    def summary(self) -> str:
        lines = [
            f"pairs checked: {self.pairs} (of which {self.ambiguous} commands shared by "
            f"several logic actions); outcome checks: {self.outcome_checks}; "
            f"mismatches: {len(self.mismatches)}"
        ]
        for m in self.mismatches:
            lines.append(
                f"  MISMATCH {m.env_id} step {m.step} {m.command!r} ({m.kind}): "
                f"predicted {m.predicted}; observed {m.observed}"
            )
        return "\n".join(lines)


def _fmt(facts: Any) -> str:
    return "{" + ", ".join(sorted(str(f) for f in facts)) + "}"


def check_afterstates(
    env_id: str,
    options: dict[str, Any],
    *,
    steps: int = 12,
    walk_seed: int = 0,
    walkthrough: bool = False,
) -> CheckReport:
    """Walk one game; check every legal command at every visited state.

    The walk is random (seeded by ``walk_seed``), or the game's walkthrough when
    ``walkthrough`` is true (it reaches the scoring and winning actions).
    """
    kwargs = {"game_seed": 0, "max_episode_steps": 200, **options}
    predictor = make(env_id, **kwargs).unwrapped
    reference = make(env_id, afterstates=False, **kwargs).unwrapped
    rng = np.random.default_rng(walk_seed)
    report = CheckReport()
    _, info = predictor.reset(seed=walk_seed)
    reference.reset(seed=walk_seed)
    plan = list(info["walkthrough"] or []) if walkthrough else []
    for step in range(len(plan) if walkthrough else steps):
        legal = info["legal_actions"]
        facts = predictor.logic_facts()
        assert facts == reference.logic_facts(), "predictor and reference diverged"
        quests = predictor.afterstate_model.quests
        saved = reference.snapshot()
        for command in legal:
            actions = predictor.logic_actions(command)
            candidates = predictor.afterstate_model.predict(facts, actions)
            _, reward, terminated, _, ref_info = reference.step(command)
            after = reference.logic_facts()
            reference.restore(saved)
            observed = (after - facts, facts - after)
            report.pairs += 1
            matches = [c for c in candidates if (c.added, c.removed) == observed]
            if len(actions) > 1:
                report.ambiguous += 1
            if not matches:
                kind = "no logic action detected" if after == facts else "fact delta differs"
                report.mismatches.append(
                    Mismatch(
                        env_id,
                        step,
                        command,
                        kind,
                        " or ".join(f"+{_fmt(c.added)} -{_fmt(c.removed)}" for c in candidates),
                        f"+{_fmt(observed[0])} -{_fmt(observed[1])}",
                    )
                )
                continue
            outcome = quests.predict(facts, matches[0])
            report.outcome_checks += 1
            actual = (int(reward), bool(ref_info["won"]), bool(ref_info["lost"]))
            if (outcome.points, outcome.won, outcome.lost) != actual:
                report.mismatches.append(
                    Mismatch(
                        env_id,
                        step,
                        command,
                        "quest outcome differs",
                        f"points={outcome.points} won={outcome.won} lost={outcome.lost}",
                        f"reward={actual[0]} won={actual[1]} lost={actual[2]}",
                    )
                )
        # Walk on, preferring commands that change something (examine/look are many).
        movers = [c for c, a in zip(legal, info["afterstates"]) if a != "nothing changes"]
        command = plan[step] if walkthrough else str(rng.choice(movers or legal))
        _, _, terminated, truncated, info = predictor.step(command)
        reference.step(command)
        if terminated or truncated:
            break
    predictor.close()
    reference.close()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12, help="steps per random walk")
    parser.add_argument("--walks", type=int, default=2, help="random walks per game")
    args = parser.parse_args(argv)
    total = CheckReport()
    for env_id, options in CHECK_GAMES:
        report = check_afterstates(env_id, options, walkthrough=True)
        print(f"{env_id} walkthrough: {report.summary()}")
        total.merge(report)
        for walk in range(args.walks):
            report = check_afterstates(env_id, options, steps=args.steps, walk_seed=walk)
            print(f"{env_id} walk {walk}: {report.summary()}")
            total.merge(report)
    print(f"TOTAL: {total.summary()}")
    return 0 if not total.mismatches else 1


if __name__ == "__main__":
    raise SystemExit(main())
