"""Benchmark: where a decision-plane step's time goes, the menu (host) or the model.

The decision plane (``rlid.decision.policy.DecisionPolicy``) plays episodes of one env as a
training rollout does (sampled, the env's memory), and each decision's time is split,
side by side in the same calls, into

* ``menu``    -- host work: compiling the menu or label tree, rendering and tokenising
  the prompt, and fitting it to the model's context (measuring each tree's longest
  path, shortening the prompt, refitting the tree: ``DecisionPolicy.act_on_trees``);
* ``forward`` -- the model: level 1's forward and one forward per further level on the
  KV cache (``rlid.decision.tree_walk.walk_trees``).

Rows are buckets of the state's legal-action count; ``menu / forward`` is the ratio of
the two. On a large-menu benchmark (ScienceWorld: hundreds to a thousand legal actions
and the tiny models' 1,024 positions) the host work can outweigh the model's.

    python benchmarks/menu_cost.py --env scienceworld -o task=use-thermometer \\
        -o simplifications=easy -o max_episode_steps=32 --decisions 60
    python benchmarks/menu_cost.py --env keydoor -o size=3 --decisions 100
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from rlid import envs
from rlid.core.rollout import Sampling, collect_episodes
from rlid.decision.policy import DecisionPolicy
from rlid.envs.registry import parse_option_strings
from rlid.lm.starts import load_policy_model
from rlid.menus import Interface

BUCKETS = (1, 63, 200, 500, 1000)  # legal actions: one label menu (62 labels), then trees


class _Timed:
    """``policy.act`` with each call's menu / forward seconds and legal counts kept."""

    def __init__(self, policy: DecisionPolicy) -> None:
        self.policy, self.act = policy, policy.act  # the bound method, before it is wrapped
        self.rows: list[tuple[int, float, float]] = []  # (legal actions, menu s, forward s)

    def __call__(self, observations, infos, memory_texts, **kw):  # type: ignore[no-untyped-def]
        self.policy.timers.pop()
        decisions = self.act(observations, infos, memory_texts, **kw)
        spent = self.policy.timers.pop()
        n = len(infos)
        for info in infos:  # a batch of one env: its own times
            self.rows.append(
                (len(info["legal_actions"]), spent.get("menu", 0.0) / n,
                 spent.get("forward", 0.0) / n)
            )  # fmt: skip
        return decisions


def bucket_name(low: int) -> str:
    later = [b for b in BUCKETS if b > low]
    return f"{low}-{later[0] - 1}" if later else f">= {low}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="scienceworld", help="env id (`rlid envs`)")
    parser.add_argument(
        "-o", "--option", action="append", default=[], metavar="KEY=VALUE",
        help="env option (repeatable); default for scienceworld: task=use-thermometer, "
        "simplifications=easy, max_episode_steps=32",
    )  # fmt: skip
    parser.add_argument("--model", default="tiny", help="'tiny' or a model directory")
    parser.add_argument("--decisions", type=int, default=60, help="decisions to time (>= 1)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.decisions < 1:
        parser.error("--decisions must be >= 1")
    torch.set_num_threads(args.threads)
    options: dict[str, object] = dict(parse_option_strings(args.option))
    if args.env == "scienceworld" and not args.option:
        options = {"task": "use-thermometer", "simplifications": "easy", "max_episode_steps": 32}
    env = envs.make(args.env, split="train", **options)
    model, tokenizer = load_policy_model(args.model)
    policy = DecisionPolicy(model, tokenizer, Interface(labels="auto"))
    timed = _Timed(policy)
    policy.act = timed  # type: ignore[method-assign]
    start, seed = time.perf_counter(), args.seed
    try:
        while len(timed.rows) < args.decisions:
            rng, gen = np.random.default_rng(seed), torch.Generator().manual_seed(seed)
            collect_episodes(
                [env], policy, [seed], [0], interface=policy.interface,
                sampling=Sampling(rng, gen),
            )  # fmt: skip
            seed += 1
    finally:
        policy.act = timed.act  # type: ignore[method-assign]
        env.close()
    wall = time.perf_counter() - start
    print(
        f"{args.env} {options}, model {args.model}, {len(timed.rows)} decisions in "
        f"{seed - args.seed} episodes ({wall:.0f} s with env steps), {args.threads} thread(s); "
        f"prompts shortened: {policy.budget.shortened_prompts}"
    )
    print("| legal actions | decisions | mean K | menu ms | forward ms | menu / forward |")
    print("|---|---|---|---|---|---|")
    groups: dict[int, list[tuple[int, float, float]]] = {}
    for row in timed.rows:
        groups.setdefault(max(b for b in BUCKETS if b <= row[0]), []).append(row)
    named = [(bucket_name(low), groups[low]) for low in sorted(groups)]
    for name, rows in [*named, ("all", timed.rows)]:
        k = np.mean([r[0] for r in rows])
        menu, forward = np.mean([r[1] for r in rows]), np.mean([r[2] for r in rows])
        print(
            f"| {name} | {len(rows)} | {k:.0f} | {menu * 1e3:.0f} | {forward * 1e3:.0f} | "
            f"{menu / max(forward, 1e-9):.1f} |"
        )


if __name__ == "__main__":
    main()
