"""Does a model read its menu's outcome marks? Along the afterstate reference's own
play on a suite setting's games (fixed seeds; each step takes one of the rows the menu
marks best, as ``rlid compare``'s ``afterstate`` arm does), at every state whose menu
marks some rows better than others, compare the probability the model's readout gives
those rows with their uniform share, and count how often its greedy row is one of them.

A model that does not read the marks gives the best rows their uniform share.

    python docs/results/afterstate_reference/mark_reading.py SETTING SPLIT MODEL...
    python docs/results/afterstate_reference/mark_reading.py crafting-small train tiny
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import numpy as np
import torch

from rlid import envs
from rlid.decision.policy import DecisionPolicy
from rlid.envs.outcome import best_rows
from rlid.lm.starts import load_policy_model
from rlid.menus import Interface

GAMES, STEPS = 12, 20
SUITE = Path(__file__).resolve().parents[1] / "recipe_pilots" / "suite.toml"


def probe(model_path: str, setting: str, split: str) -> str:
    suite = tomllib.loads(SUITE.read_text())
    (entry,) = [e for e in suite["envs"] if e["name"] == setting]
    model, tokenizer = load_policy_model(model_path)
    policy = DecisionPolicy(model, tokenizer, Interface(**suite["interface"]))
    env = envs.make(entry["id"], split=split, **entry.get("options", {}))
    rng, gen = np.random.default_rng(0), torch.Generator().manual_seed(0)
    mass, share, greedy_best = [], [], []
    for game in range(GAMES):
        obs, info = env.reset(seed=game)
        for _ in range(STEPS):
            (decision,) = policy.act([obs], [info], [None], rng=rng, generator=gen, greedy=True)
            with torch.no_grad():
                logp, _, _ = policy.score([decision])
            rows = decision.num_rows
            probs = logp[0, :rows].exp().numpy()
            actions = [r.action for r in decision.menu.rows][:rows]
            afterstate = dict(zip(info["legal_actions"], info["afterstates"]))
            best = best_rows([afterstate[a] for a in actions])
            if len(best) < rows:
                mass.append(probs[best].sum())
                share.append(len(best) / rows)
                greedy_best.append(int(np.argmax(probs)) in best)
            action = actions[best[int(rng.integers(len(best)))]]  # the reference's own play
            obs, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
    env.close()
    return (
        f"{setting} ({split}), {model_path}: {len(mass)} menus with marks; probability of "
        f"the best-marked rows {np.mean(mass):.3f} against their uniform share "
        f"{np.mean(share):.3f}; greedy row among them {np.mean(greedy_best):.2f}"
    )


if __name__ == "__main__":
    setting, split, *models = sys.argv[1:]
    for path in models:
        print(probe(path, setting, split), flush=True)
