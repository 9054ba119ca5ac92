"""Greedy success of a start model on suite settings: the trainer's "before" evaluation.

Usage: before.py MODEL ENV[,ENV...] [heldout|train]   (from the repository root)
"""

import json
import sys
from dataclasses import replace

import torch

from rlid.compare.parse import load_compare_config
from rlid.config.registry import get_plane
from rlid.core.train import evaluate, make_envs
from rlid.lm.starts import load_policy_model

torch.set_num_threads(1)
model_dir, envs = sys.argv[1], sys.argv[2].split(",")
SPLIT = sys.argv[3] if len(sys.argv) > 3 else "heldout"
compare = load_compare_config("examples/suite.toml").select(
    arms=["decision-ppo"], envs=envs, seeds=[0]
)
model, tokenizer = load_policy_model(model_dir)
model.eval()
for run in compare.runs():
    config = replace(run.config, model=model_dir)
    policy = get_plane("decision").make_policy(config, model, tokenizer)
    stats = evaluate(policy, make_envs(config, SPLIT, 16), 32, interface=config.interface)
    print(json.dumps({"env": run.env, "split": SPLIT, "model": model_dir, **stats}), flush=True)
