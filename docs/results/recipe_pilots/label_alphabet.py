"""How a model's readout splits its probability between menu rows labelled A-Z and the
rows beyond Z (a-z, 0-9: only menus of more than 26 rows have them) on a suite
setting's training games (cooking-easy unless ``--setting``), with the suite's
interface (labels "auto", overflow "truncate"). ``--split N`` compares the first N
labels with the rest instead (11: A-K, the labels the default warm start answered with).

The policy samples its own rows to move through the games (fixed seeds), so each
model sees the states its own play reaches.

    python docs/results/recipe_pilots/label_alphabet.py [--setting NAME] [--split N] tiny MODEL
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import numpy as np
import torch

from rlid import envs
from rlid.decision.policy import DecisionPolicy
from rlid.lm.starts import load_policy_model
from rlid.menus import Interface

GAMES, STEPS, AZ = 8, 6, 26


def probe(model_path: str, setting: str, split: int = AZ) -> str:
    suite = tomllib.loads((Path(__file__).parent / "suite.toml").read_text())
    (entry,) = [e for e in suite["envs"] if e["name"] == setting]
    model, tokenizer = load_policy_model(model_path)
    policy = DecisionPolicy(model, tokenizer, Interface(**suite["interface"]))
    labels = policy.labels.labels
    first = f"{labels[0]}-{labels[split - 1]}"
    env = envs.make(entry["id"], split="train", **entry.get("options", {}))
    rng, gen = np.random.default_rng(0), torch.Generator().manual_seed(0)
    inside, beyond, mass, menus, long_menus = [], [], [], 0, 0
    for game in range(GAMES):
        obs, info = env.reset(seed=game)
        for _ in range(STEPS):
            (decision,) = policy.act([obs], [info], [None], rng=rng, generator=gen)
            rows = decision.num_rows
            with torch.no_grad():
                logp, _, _ = policy.score([decision])
            probs = logp[0, :rows].exp()
            menus += 1
            mass.append(decision.label_mass)
            if rows > split:
                long_menus += 1
                inside.append(probs[:split].mean().item())
                beyond.append(probs[split:].mean().item())
            obs, _, terminated, truncated, info = env.step(decision.action)
            if terminated or truncated:
                break
    env.close()
    head = f"{setting}, {model_path}: {menus} menus, label mass {np.mean(mass):.3f}; "
    if not inside:
        return head + f"no menu of more than {split} rows"
    ratio = np.mean(beyond) / np.mean(inside)
    return head + (
        f"{long_menus} menus of more than {split} rows, where a row labelled {first} gets "
        f"{np.mean(inside):.4f} on average and a row beyond {labels[split - 1]} "
        f"{np.mean(beyond):.6f} "
        f"(ratio {ratio:.4f})"
    )


if __name__ == "__main__":
    torch.set_num_threads(1)
    args = sys.argv[1:]
    setting = "cooking-easy"
    split = AZ
    while args[:1] in (["--setting"], ["--split"]):
        if args[0] == "--setting":
            setting = args[1]
        else:
            split = int(args[1])
        args = args[2:]
    for path in args or ["tiny"]:
        print(probe(path, setting, split))
