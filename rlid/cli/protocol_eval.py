"""``rlid eval --protocol NAME``: a run, a model or a reference played under a published
protocol's evaluation (:mod:`rlid.config.benchmark_protocols`).

Each of the protocol's evaluation sets that applies is played with the protocol's env
options (the run's or model's own options otherwise kept), its episode count (or
``--episodes``) and its action choice (greedy, or sampled where the source samples).
Per set it reports the success rate and the final score over the maximum, raw (a
failure's negative score kept) and clipped at 0 (the published averages' convention),
with a 95% interval of the clipped mean. The references need no model:

* ``random``: a uniform draw over the legal actions at every step;
* ``walkthrough``: the env's gold path, played until it ends or the episode does (a
  limit the path exceeds cuts it).

Both play the same games as a run's evaluation (reset seeds ``EVAL_SEED_BASE + i``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from rlid import envs as envs_pkg
from rlid.config.benchmark_protocols import EvalSet, Protocol, get_protocol
from rlid.config.run import TrainConfig, config_from_values, read_toml
from rlid.envs.registry import parse_option_strings

REFERENCES = ("random", "walkthrough")
EVAL_SEED_BASE = 7_000_000  # rlid.core.seeds.EVAL_SEED_BASE: the evaluation's games


@dataclass(frozen=True)
class Finals:
    """The final scores (over the maximum) and outcomes of one set's episodes."""

    scores: tuple[float, ...]
    won: tuple[bool, ...]


def summarise(finals: Finals) -> dict[str, float]:
    """Success rate, raw and clipped mean score (0-1) and a 95% normal interval of the
    clipped mean (cut to [0, 1]).

        >>> summarise(Finals((1.0, -1.0, 0.5, 0.0), (True, False, False, False)))["score_clipped"]
        0.375
    """
    raw = np.asarray(finals.scores, dtype=float)
    clipped = np.maximum(raw, 0.0)
    half = 1.96 * float(clipped.std(ddof=1)) / math.sqrt(len(raw)) if len(raw) > 1 else math.nan
    mean = float(clipped.mean())
    return {
        "episodes": len(raw),
        "success": float(np.mean(finals.won)),
        "score_raw": float(raw.mean()),
        "score_clipped": mean,
        "clipped_low": max(mean - half, 0.0),  # clipped scores lie in [0, 1]
        "clipped_high": min(mean + half, 1.0),
    }


def play_reference(name: str, env: Any, seed: int, rng: np.random.Generator) -> tuple[float, bool]:
    """One episode of reference ``name`` on ``env`` reset with ``seed``: (final score
    over the maximum, won)."""
    obs, info = env.reset(seed=seed)
    plan = list(info.get("walkthrough") or []) if name == "walkthrough" else []
    if name == "walkthrough" and not plan:
        raise ValueError("the walkthrough reference needs info['walkthrough']; this env gives none")
    done = False
    while not done:
        legal = info["legal_actions"]
        if name == "random":
            action = legal[int(rng.integers(len(legal)))]
        elif plan:
            action = plan.pop(0)
        else:
            break  # the walkthrough is used up and the game goes on: it ends here
        obs, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    return info["score"] / max(info["max_score"], 1), bool(info["won"])


def reference_finals(
    name: str, env_id: str, options: dict[str, Any], episodes: int, seed: int, progress: bool
) -> Finals:
    env = envs_pkg.make(env_id, **options)
    scores, won = [], []
    bar = tqdm(total=episodes, desc=name, unit="episode", file=sys.stderr, disable=not progress)
    try:
        for i in range(episodes):
            rng = np.random.default_rng((seed, i))
            score, win = play_reference(name, env, EVAL_SEED_BASE + i, rng)
            scores.append(score)
            won.append(win)
            bar.update(1)
    finally:
        bar.close()
        env.close()
    return Finals(tuple(scores), tuple(won))


def agent_finals(
    run: Path | None,
    config: TrainConfig | None,
    env_id: str,
    options: dict[str, Any],
    episodes: int,
    greedy: bool,
    seed: int,
    progress: bool,
) -> Finals:
    """A run's (or a model's) episodes, read back from ``--episodes-out``'s records."""
    from rlid.agents.agent import EvalRequest, evaluate_model, evaluate_run  # torch: lazy

    probe = envs_pkg.make(env_id, **{**options, "split": options.get("split", "heldout")})
    _, info = probe.reset(seed=EVAL_SEED_BASE)
    max_score = max(info["max_score"], 1)
    probe.close()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "episodes.jsonl"
        request = EvalRequest(
            env=env_id, env_options={k: v for k, v in options.items() if k != "split"},
            split=options.get("split", "heldout"), episodes=episodes, greedy=greedy, seed=seed,
            episodes_out=out, progress=progress,
        )  # fmt: skip
        if run is not None:
            evaluate_run(run, request)
        else:
            assert config is not None
            evaluate_model(config, request)
        records = [json.loads(line) for line in out.read_text().splitlines()]
    return Finals(
        tuple(float(r["return"]) / max_score for r in records),
        tuple(bool(r["won"]) for r in records),
    )


def subject_config(args: argparse.Namespace, protocol: Protocol) -> tuple[str, dict, Any]:
    """The env id, env options and (for ``--run``/``--model``) what is evaluated."""
    given = parse_option_strings(args.env_option or [])
    if args.run is not None:
        from rlid.runs.log import read_run_config  # lazy: run files import torch

        config, _ = read_run_config(Path(args.run))
        env_id = args.env or config.env
        base = dict(config.env_options) if env_id == config.env else {}
        # the protocol's settings replace the run's own; those given here must agree
        options = protocol.env_options_for(env_id, given)
        return env_id, {**base, **options}, config
    env_id = args.env or (protocol.env_ids[0] if len(protocol.env_ids) == 1 else None)
    if env_id is None:
        raise ValueError(
            f"protocol {protocol.name} covers {len(protocol.env_ids)} envs: name one with --env"
        )
    if args.model is not None:
        data: dict[str, Any] = {"env": env_id, "env_options": given, "protocol": protocol.name}
        if args.plane is not None:
            data["plane"] = args.plane
        if args.config is not None:
            data = {**read_toml(Path(args.config), "config file"), **data}
        config = config_from_values(data, model=args.model)
        return env_id, dict(config.env_options), config
    return env_id, protocol.env_options_for(env_id, given), None


def set_options(options: dict[str, Any], eval_set: EvalSet) -> dict[str, Any]:
    return {**options, **eval_set.env_options}


def evaluate_protocol(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every (subject, evaluation set) row of ``rlid eval --protocol``."""
    protocol = get_protocol(args.protocol)
    if args.walkthrough or args.episodes_out is not None or args.setting is not None:
        raise ValueError(
            "--protocol plays the protocol's evaluation sets: drop --walkthrough, "
            "--episodes-out and --setting"
        )
    if args.run is None and args.model is None and not args.reference:
        raise ValueError(
            "give --run DIR, --model M or --reference random|walkthrough (or several) to "
            f"evaluate under protocol {protocol.name}"
        )
    env_id, options, config = subject_config(args, protocol)
    protocol.check_env(env_id)
    sets = protocol.eval_sets_for(options)
    greedy = protocol.greedy and not args.sample
    subjects: list[tuple[str, Any]] = []
    if args.run is not None:
        subjects.append((f"run {args.run}", "run"))
    elif args.model is not None:
        subjects.append((f"model {args.model}", "model"))
    subjects += [(name, name) for name in args.reference or []]
    rows = []
    for label, kind in subjects:
        for eval_set in sets:
            episodes = args.episodes or eval_set.episodes
            opts = set_options(options, eval_set)
            if kind in REFERENCES:
                finals = reference_finals(kind, env_id, opts, episodes, args.seed, not args.quiet)
            else:
                run = Path(args.run) if kind == "run" else None
                finals = agent_finals(run, None if run else config, env_id, opts, episodes,
                                      greedy, args.seed, not args.quiet)  # fmt: skip
            rows.append({"protocol": protocol.name, "who": label, "set": eval_set.name,
                         "env": env_id, "greedy": greedy if kind not in REFERENCES else None,
                         **summarise(finals)})  # fmt: skip
    return rows


def print_rows(rows: Sequence[dict[str, Any]], protocol: Protocol) -> None:
    print(f"protocol {protocol.name}: {protocol.title}")
    print(f"scores: {protocol.scores}")
    print("score = final score / max score; raw keeps a failure's negative score, clipped "
          "counts it 0 (measured by rlid)")  # fmt: skip
    header = f"{'who':<28} {'set':<28} {'episodes':>8} {'success':>7} {'raw':>7} clipped [95% CI]"
    print(header)
    for r in rows:
        print(f"{r['who'][:28]:<28} {r['set'][:28]:<28} {r['episodes']:>8} {r['success']:>7.3f} "
              f"{r['score_raw']:>7.3f} {r['score_clipped']:.3f} "
              f"[{r['clipped_low']:.3f}, {r['clipped_high']:.3f}]")  # fmt: skip


def cmd_protocol_eval(args: argparse.Namespace) -> int:
    rows = evaluate_protocol(args)
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True))
    else:
        print_rows(rows, get_protocol(args.protocol))
    return 0
