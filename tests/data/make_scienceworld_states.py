"""Write tests/data/scienceworld_states.json: real ScienceWorld states at chosen menu sizes.

Random walks (seeded) through the training variations of every task, under a few
simplification presets, record each state's observation, objective, legal actions and
their templates; for each target menu size the state whose number of legal actions is
closest is kept, with the task, preset, variation and the actions that lead to it from
the reset, so it can be replayed. The large-menu work (label trees, cost curves) reads
the file instead of starting a JVM.

    python tests/data/make_scienceworld_states.py [--targets 10 50 100 200 400] [--steps 12]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

import envs
from envs.scienceworld.specs import TASKS

OUT = Path(__file__).with_name("scienceworld_states.json")
PRESETS = ("easy", "noElectricalAction", "none")


def walk(task: str, preset: str, game: int, steps: int, rng: np.random.Generator) -> list[dict]:
    """The states of one seeded random walk (invalid presets for a task: none)."""
    try:
        env = envs.make(
            "scienceworld", task=task, simplifications=preset, game_seed=game,
            max_episode_steps=steps + 1, walkthrough=False,
        )  # fmt: skip
    except ValueError:  # e.g. noElectricalAction on an electrical task
        return []
    obs, info = env.reset(seed=0)
    played: list[str] = []
    states = []
    for _ in range(steps):
        if not info["legal_actions"]:
            break
        states.append(
            {
                "task": task,
                "simplifications": preset,
                "split": "train",
                "game_seed": game,
                "variation": info["variation"],
                "actions_from_reset": list(played),
                "observation": obs,
                "objective": info["objective"],
                "legal_actions": info["legal_actions"],
                "action_templates": info["action_templates"],
            }
        )
        # wander: moves and openings more often than the long tail of "connect" actions
        legal = info["legal_actions"]
        moving = [a for a in legal if a.startswith(("go ", "open ", "look around"))]
        choices = moving if moving and rng.random() < 0.5 else legal
        action = choices[int(rng.integers(len(choices)))]
        if action.startswith("focus on"):  # a wrong focus ends the game
            action = "look around" if "look around" in legal else action
        obs, _, terminated, truncated, info = env.step(action)
        played.append(action)
        if terminated or truncated:
            break
    env.close()
    return states


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", type=int, nargs="*", default=[10, 50, 100, 200, 400])
    parser.add_argument("--steps", type=int, default=12, help="random steps per walk")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    best: dict[int, dict] = {}
    for task in TASKS:
        for preset in PRESETS:
            for state in walk(task, preset, 0, args.steps, rng):
                size = len(state["legal_actions"])
                for target in args.targets:
                    kept = best.get(target)
                    if kept is None or abs(size - target) < abs(
                        len(kept["legal_actions"]) - target
                    ):
                        best[target] = {"target": target, "size": size, **state}
        print(task, {t: s["size"] for t, s in sorted(best.items())}, flush=True)
    payload = {
        "source": "ScienceWorld 1.2.3 via envs.make('scienceworld', ...); "
        "written by tests/data/make_scienceworld_states.py",
        "states": [best[t] for t in sorted(best)],
    }
    OUT.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size / 1024:.0f} KB)")


if __name__ == "__main__":
    main()
