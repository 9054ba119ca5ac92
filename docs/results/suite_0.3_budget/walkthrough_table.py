"""Markdown table from the logs of `rlid eval --walkthrough --json` runs.

Usage: python walkthrough_table.py BEFORE.log [AFTER.log ...]

Each log holds lines "== SETTING [SEED]" each followed by the JSON that
`rlid eval --walkthrough --json` printed. Per setting: the warm start's mean
probability of the walkthrough's row (and a uniform choice's), then the mean over the
seeds of each later log (e.g. after PPO), with the greedy accuracy.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path


def read(path: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    decoder = json.JSONDecoder()
    with open(path) as f:
        text = f.read()
    for part in text.split("== ")[1:]:
        head, rest = part.split("\n", 1)
        start = rest.find("{")
        if start >= 0:
            out[head.split()[0]].append(decoder.raw_decode(rest, start)[0])
    return out


def main(paths: list[str]) -> None:
    logs = [read(p) for p in paths]
    head = (
        "| setting | states | uniform | "
        + " | ".join(f"{Path(p).stem}: p (accuracy)" for p in paths)
        + " |"
    )
    print(head)
    print("|" + "---|" * (3 + len(paths)))
    for setting, first in logs[0].items():
        cells = []
        for log in logs:
            runs = log.get(setting, [])
            if not runs:
                cells.append("not run")
                continue
            p = sum(r["walkthrough_prob"] for r in runs) / len(runs)
            acc = sum(r["walkthrough_accuracy"] for r in runs) / len(runs)
            cells.append(f"{p:.2f} ({acc:.2f})" + (f", {len(runs)} seeds" if len(runs) > 1 else ""))
        print(
            f"| {setting} | {first[0]['states']} | {first[0]['uniform_prob']:.2f} | "
            + " | ".join(cells)
            + " |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
