"""Per-decision accuracy of a start model along the walkthrough (teacher forcing).

Usage (from the repository root):
    python docs/results/suite_0.2_guided/setting_corpus/decision_accuracy.py MODEL SETTING [SPLIT [CONFIG ARM]]

Plays each of 16 games of SPLIT (default heldout) along its walkthrough, with the
interface of ARM for SETTING in the comparison file CONFIG (default: examples/suite.toml,
arm decision-ppo), MODEL as the model, and at every state asks the policy for its
greedy row. Prints one JSON line: the fraction of states where that row is the
walkthrough's next command, the mean probability the policy gives that row, per
position along the walkthrough the same accuracy, and the first words of the wrong
choices ("go": a move other than the walkthrough's; "look": no move). An episode played greedily succeeds only if (nearly) every choice is
right, so a walkthrough of L steps at accuracy p succeeds at about p**L.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import numpy as np
import torch

from rlid import envs
from rlid.compare.config import build_train_config
from rlid.compare.parse import load_compare_config
from rlid.config.registry import get_plane
from rlid.lm.starts import load_policy_model
from rlid.menus import make_memory


def main(
    model_dir: str,
    setting: str,
    split: str = "heldout",
    config_path: str = "examples/suite.toml",
    arm_name: str = "decision-ppo",
) -> dict:
    torch.set_num_threads(1)
    compare = load_compare_config(config_path).select(arms=[arm_name], envs=[setting])
    arm, env_spec = compare.arms[0], compare.envs[0]
    config = build_train_config(compare, replace(arm, options={"model": model_dir}), env_spec, 0)
    model, tokenizer = load_policy_model(model_dir)
    policy = get_plane("decision").make_policy(config, model, tokenizer)
    interface = config.interface
    env = envs.make(config.env, **{**config.env_options, "split": split})
    rng, gen = np.random.default_rng(0), torch.Generator().manual_seed(0)
    right: list[bool] = []
    prob: list[float] = []
    by_step: dict[int, list[bool]] = {}
    wrong_verbs: dict[
        str, int
    ] = {}  # first word of the greedy row where it was not the walkthrough's
    for game in range(16):
        obs, info = env.reset(seed=7_000_000 + game)
        memory = make_memory(interface.memory, interface.memory_size)
        memory.reset(obs, info)
        for step, wanted in enumerate(list(info["walkthrough"])):
            decision = policy.act(
                [obs], [info], [memory.render() or None], rng=rng, generator=gen, greedy=True
            )[0]
            rows = [i for i, r in enumerate(decision.menu.rows) if r.action == wanted]
            if not rows:
                break
            with torch.no_grad():
                p_all = policy.score([decision])[0][0].exp()
            right.append(decision.action == wanted)
            prob.append(float(p_all[rows[0]]))
            by_step.setdefault(step, []).append(decision.action == wanted)
            if decision.action != wanted:
                verb = decision.action.split()[0]
                wrong_verbs[verb] = wrong_verbs.get(verb, 0) + 1
            obs, _, terminated, truncated, info = env.step(wanted)
            memory.update(obs, wanted, info)
            if terminated or truncated:
                break
    return {
        "setting": setting,
        "split": split,
        "model": model_dir,
        "states": len(right),
        "accuracy": float(np.mean(right)),
        "mean_prob_of_walkthrough_row": float(np.mean(prob)),
        "accuracy_by_step": {k: round(float(np.mean(v)), 3) for k, v in sorted(by_step.items())},
        "wrong_choices_by_verb": dict(sorted(wrong_verbs.items())),
    }


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:6])), flush=True)
