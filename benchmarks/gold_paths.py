"""Do the walkthroughs win? ScienceWorld's gold paths in legal actions, and the menus met.

For every ScienceWorld task (or those given), the first ``--games`` held-out (test)
variations: the gold path is written in legal actions on a scratch simulator (timed, the
disk cache bypassed), then played in the env from a reset; the table gives per task
whether it won, its length against the gold path's, the commands dropped, and the number
of legal actions over the states it passes through. TextWorldExpress's walkthroughs are
the package's own; ``--twx`` plays those of ``--games`` held-out seeds of every game.

    python benchmarks/gold_paths.py [--tasks boil find-plant] [--games 2] [--simplifications none]
    python benchmarks/gold_paths.py --twx --games 10
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from rlid import envs
from rlid.envs.scienceworld.tasks import TASKS


def play(env: Any, info: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
    """Play ``info["walkthrough"]``; the last info and the menu sizes met before each step."""
    sizes = []
    for action in info["walkthrough"]:
        sizes.append(len(info["legal_actions"]))
        _, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    return info, sizes


def scienceworld_rows(tasks: list[str], games: int, simplifications: str) -> None:
    print(
        "| task | won | walkthrough / gold path steps | dropped | legal actions min-max (mean) "
        "| gold path in legal actions (s) |"
    )
    print("|---|---|---|---|---|---|")
    totals = {"won": 0, "played": 0, "sizes": []}
    for task in tasks:
        env = envs.make(
            "scienceworld", task=task, simplifications=simplifications, split="heldout",
            max_episode_steps=1000, walkthrough=False,
        )  # fmt: skip
        won, lengths, dropped, sizes, seconds = 0, [], 0, [], 0.0
        for game in range(games):
            env.game_seed = game
            _, info = env.reset(seed=0)
            start = time.perf_counter()
            path = env.gold_path(fresh=True)
            seconds += time.perf_counter() - start
            info = {**info, "walkthrough": list(path.actions)}
            last, met = play(env, info)
            won += bool(last["won"])
            lengths.append(f"{len(path.actions)}/{len(path.gold)}")
            dropped += len(path.dropped)
            sizes += met
        env.close()
        totals["won"] += won
        totals["played"] += games
        totals["sizes"] += sizes
        print(
            f"| {task} | {won}/{games} | {', '.join(lengths)} | {dropped} | "
            f"{min(sizes)}-{max(sizes)} ({np.mean(sizes):.0f}) | {seconds / games:.1f} |",
            flush=True,
        )
    all_sizes = np.array(totals["sizes"])
    print(
        f"\nwon {totals['won']} of {totals['played']}; legal actions over {len(all_sizes)} "
        f"states: {all_sizes.min()}-{all_sizes.max()}, mean {all_sizes.mean():.0f}, "
        f"median {np.median(all_sizes):.0f}"
    )


def twx_rows(games: int) -> None:
    from rlid.envs.twx.specs import GAMES

    print("| env id | won | walkthrough steps (mean, max) | legal actions mean (max) |")
    print("|---|---|---|---|")
    for game in GAMES:
        env = envs.make(f"twx-{game}", split="heldout", max_episode_steps=1000)
        won, lengths, sizes = 0, [], []
        for g in range(games):
            env.game_seed = g
            _, info = env.reset(seed=0)
            lengths.append(len(info["walkthrough"]))
            last, met = play(env, info)
            won += bool(last["won"])
            sizes += met
        env.close()
        print(
            f"| twx-{game} | {won}/{games} | {np.mean(lengths):.1f}, {max(lengths)} | "
            f"{np.mean(sizes):.1f} ({max(sizes)}) |",
            flush=True,
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="*", default=list(TASKS), help="ScienceWorld tasks")
    parser.add_argument("--games", type=int, default=2, help="held-out games per task or game")
    parser.add_argument("--simplifications", default="none")
    parser.add_argument("--twx", action="store_true", help="TextWorldExpress's games instead")
    args = parser.parse_args(argv)
    if args.twx:
        twx_rows(args.games)
    else:
        scienceworld_rows(args.tasks, args.games, args.simplifications)


if __name__ == "__main__":
    main()
