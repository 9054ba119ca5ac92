"""How much of a coin-collector game's route its prompt states.

Usage (from the repository root):
    python docs/results/suite_0.2_guided/coin_memory/goal_route.py

For the 16 training and 16 held-out games of coin-level2 and coin-level10 (the
suite's options), compares the walkthrough's moves with the directions named, in
order, by (a) the game's objective and (b) the "Goal:" line of the first decision
prompt, rendered with the suite's interface (objective capped at max_obs_chars).
Prints one JSON line per setting and split: games, walkthrough moves, games whose
objective names exactly the walkthrough's moves, and how many leading moves the
prompt's Goal line names correctly.
"""

from __future__ import annotations

import json
import re

import numpy as np

from rlid import envs
from rlid.compare.parse import load_compare_config
from rlid.lm.tokenizer import build_tiny_tokenizer
from rlid.menus import make_memory
from rlid.menus.prompt import label_set_for, menu_for_step, render_decision_prompt

DIRECTIONS = re.compile(r"\b(north|south|east|west)\b")


def main() -> None:
    compare = load_compare_config("examples/suite.toml")
    interface = compare.interface
    tokenizer = build_tiny_tokenizer()
    labels = label_set_for(interface, tokenizer)
    for spec in compare.envs:
        if spec.env_id != "tw-coin_collector":
            continue
        for split in ("train", "heldout"):
            options = spec.train_options if split == "train" else spec.heldout_options
            env = envs.make(spec.env_id, **{**options, "split": split})
            seen: set[int] = set()
            games = moves = exact = stated = 0
            for seed in range(200):
                obs, info = env.reset(seed=seed)
                if info["game_seed"] in seen:
                    continue
                seen.add(info["game_seed"])
                route = [a.split()[-1] for a in info["walkthrough"] if a.startswith("go ")]
                menu = menu_for_step(
                    info, interface, labels, make_memory(interface.memory), np.random.default_rng(0)
                )
                prompt = render_decision_prompt(obs, info, menu, interface, tokenizer)
                goal = next(line for line in prompt.split("\n") if line.startswith("Goal:"))
                named = DIRECTIONS.findall(goal)
                k = 0
                while k < min(len(named), len(route)) and named[k] == route[k]:
                    k += 1
                games += 1
                moves += len(route)
                exact += DIRECTIONS.findall(info["objective"]) == route
                stated += k
                if len(seen) == 16:
                    break
            print(json.dumps({
                "setting": spec.name, "split": split, "games": games, "moves": moves,
                "objective_is_route": exact, "moves_in_prompt_goal": stated,
            }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
