"""Write tests/data/scienceworld_states.json: real ScienceWorld states at chosen menu sizes.

Random walks (seeded) through the training variations of every task, under a few
simplification presets, record each state's observation, objective, legal actions and
their templates; for each target menu size the state whose number of legal actions is
closest is kept, with the task, preset, variation and the actions that lead to it from
the reset, so it can be replayed. The large-menu work (label trees, cost curves) reads
the file instead of starting a JVM.

A ScienceWorld state always shows the agent, the air, the room and the inventory, so its
menu never gets small: the smallest met is kept for the small targets all the same
(``size`` says how far it is). For the targets below it, ``twx_states`` adds real states
of TextWorldExpress's CookingWorld (default options), whose menus are that small.

    python tests/data/make_scienceworld_states.py [--targets 10 50 100 200 400] [--steps 12]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from rlid import envs
from rlid.envs.scienceworld.tasks import TASKS

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


def twx_walk(steps: int, rng: np.random.Generator) -> list[dict]:
    """The states of one seeded random walk through a CookingWorld training game."""
    env = envs.make("twx-cookingworld", num_games=100, max_episode_steps=steps + 1)
    obs, info = env.reset(seed=int(rng.integers(1 << 30)))
    played: list[str] = []
    states = []
    for _ in range(steps):
        if not info["legal_actions"]:
            break
        states.append(
            {
                "env_id": "twx-cookingworld",
                "split": "train",
                "game_seed": info["game_seed"],
                "actions_from_reset": list(played),
                "observation": obs,
                "objective": info["objective"],
                "legal_actions": info["legal_actions"],
                "action_templates": [a.split(" ", 1)[0] for a in info["legal_actions"]],
            }
        )
        action = info["legal_actions"][int(rng.integers(len(info["legal_actions"])))]
        obs, _, terminated, truncated, info = env.step(action)
        played.append(action)
        if terminated or truncated:
            break
    env.close()
    return states


def closest(states: list[dict], targets: list[int]) -> list[dict]:
    """For each target, the state whose menu size is closest (the first met on ties)."""
    out = []
    for target in targets:
        state = min(states, key=lambda s: abs(len(s["legal_actions"]) - target))
        out.append({"target": target, "size": len(state["legal_actions"]), **state})
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", type=int, nargs="*", default=[10, 50, 100, 200, 400])
    parser.add_argument("--steps", type=int, default=12, help="random steps per walk")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    states: list[dict] = []
    for task in TASKS:
        for preset in PRESETS:
            states += walk(task, preset, 0, args.steps, rng)
        print(task, "smallest menu so far:", min(len(s["legal_actions"]) for s in states))
    smallest = min(len(s["legal_actions"]) for s in states)
    small = [t for t in sorted(args.targets) if t < smallest]
    twx: list[dict] = []
    for _ in range(20 if small else 0):
        twx += twx_walk(args.steps, rng)
    payload = {
        "source": "ScienceWorld 1.2.3 (states) and TextWorldExpress 1.1.0 (twx_states) "
        "through envs.make; written by tests/data/make_scienceworld_states.py",
        "scienceworld_smallest_menu": smallest,
        "states": closest(states, sorted(args.targets)),
        "twx_states": closest(twx, small) if twx else [],
    }
    OUT.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size / 1024:.0f} KB)")


if __name__ == "__main__":
    main()
