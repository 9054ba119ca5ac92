"""What the treasure-level11 policies do on their 32 held-out games.

Usage: python read_episodes.py tiny.jsonl seed0.jsonl seed1.jsonl seed2.jsonl

Each file is `rlid eval --episodes-out` of one policy (the warm start: `--model tiny
--config examples/suite.toml --setting treasure-level11`; a trained run: `--run DIR`).
A game is won by taking the object the goal names and lost by taking another one; the
rest end at the 30-step limit. Per file: wins, losses, time-outs, the episodes with a
`take`, the share of takes that win, and how often the first move goes the way the
goal says (its first objective names a direction).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def summary(path: str) -> dict[str, object]:
    records = [json.loads(line) for line in Path(path).read_text().splitlines()]
    won = sum(r["won"] for r in records)
    lost = sum(r["lost"] for r in records)
    took = sum(any(s["action"].startswith("take ") for s in r["steps"]) for r in records)
    goal_way = 0
    for r in records:
        goal = re.search(r"Goal:(.*)", r["first_prompt"])
        first = r["steps"][0]["action"]
        if goal and first.startswith("go ") and first.split()[1] in goal.group(1):
            goal_way += 1
    return {
        "episodes": len(records),
        "won": won,
        "lost": lost,
        "timed_out": len(records) - won - lost,
        "episodes_with_a_take": took,
        "takes_that_win": round(won / took, 2) if took else None,
        "first_move_the_goal_way": goal_way,
    }


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(Path(name).stem, json.dumps(summary(name)))
