"""``rlid play``: play an env in the terminal and see exactly what an agent sees."""

from __future__ import annotations

import argparse
import string
from collections.abc import Callable
from typing import Any

from rlid import envs
from rlid.envs.registry import parse_option_strings
from rlid.menus import MenuRow

LABELS = string.ascii_uppercase + string.ascii_lowercase


def format_menu(legal_actions: list[str], afterstates: list[str] | None) -> str:
    """The menu as a person sees it: one ``A) action -> afterstate`` line per legal action."""

    lines = []
    for i, action in enumerate(legal_actions):
        label = LABELS[i] if i < len(LABELS) else str(i)
        row = MenuRow(label, action, afterstates[i] if afterstates else None)
        lines.append("  " + row.render())  # the agent's menu line format
    return "\n".join(lines)


def play(
    args: argparse.Namespace,
    input_fn: Callable[[str], str] = input,
    print_fn: Callable[..., None] = print,
) -> int:
    """Run an interactive episode; type a label (A, B, ...) or the command text, or 'quit'."""

    options: dict[str, Any] = dict(parse_option_strings(args.env_option))
    options["split"] = args.split
    if args.game_seed is not None:
        options["game_seed"] = args.game_seed
    if args.no_afterstates:
        options["afterstates"] = False
    env = envs.make(args.env_id, **options)
    obs, info = env.reset(seed=args.seed)
    print_fn(f"Goal: {info['objective']}")
    total = 0.0
    while True:
        print_fn(f"\n{obs}")
        print_fn(f"[score {info['score']}/{info['max_score']}]")
        legal = info["legal_actions"]
        print_fn(format_menu(legal, info.get("afterstates")))
        try:
            choice = input_fn("> ").strip()
        except EOFError:
            choice = "quit"
        if choice.lower() in ("quit", "q", "exit"):
            break
        action = choice
        if choice in LABELS and LABELS.index(choice) < len(legal):
            action = legal[LABELS.index(choice)]
        obs, reward, terminated, truncated, info = env.step(action)
        total += reward
        if terminated or truncated:
            outcome = "won" if info["won"] else "lost" if info["lost"] else "out of steps"
            print_fn(f"\n{obs}\n\nEpisode over ({outcome}); return {total:g}.")
            break
    env.close()
    return 0
