"""How a model's readout splits its probability between menu rows labelled A-Z and the
rows beyond Z (a-z, 0-9: only menus of more than 26 rows have them) on cooking-easy's
training games, with the suite's interface (labels "auto", overflow "truncate").

The policy samples its own rows to move through the games (fixed seeds), so each
model sees the states its own play reaches.

    python docs/results/recipe_pilots/label_alphabet.py tiny runs/pilots/runs/X/checkpoint/model
"""

from __future__ import annotations

import sys

import numpy as np
import torch

import envs
from menus import Interface
from rlid.models import load_policy_model
from rlid.policy import DecisionPolicy

GAMES, STEPS, AZ = 8, 6, 26


def probe(model_path: str) -> str:
    model, tokenizer = load_policy_model(model_path)
    policy = DecisionPolicy(model, tokenizer, Interface(labels="auto", overflow="truncate"))
    env = envs.make(
        "tw-cooking", recipe=1, take=1, go=1, max_episode_steps=15, split="train"
    )  # the suite's cooking-easy
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
            if rows > AZ:
                long_menus += 1
                inside.append(probs[:AZ].mean().item())
                beyond.append(probs[AZ:].mean().item())
            obs, _, terminated, truncated, info = env.step(decision.action)
            if terminated or truncated:
                break
    env.close()
    ratio = np.mean(beyond) / np.mean(inside) if inside else float("nan")
    return (
        f"{model_path}: {menus} menus, {long_menus} with more than {AZ} rows; there the mean "
        f"probability of a row labelled A-Z is {np.mean(inside):.4f}, of a row beyond Z "
        f"{np.mean(beyond):.6f} (ratio {ratio:.4f}); label mass {np.mean(mass):.3f}"
    )


if __name__ == "__main__":
    torch.set_num_threads(1)
    for path in sys.argv[1:] or ["tiny"]:
        print(probe(path))
