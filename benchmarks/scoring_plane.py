"""Benchmark: the scoring plane with a shared prompt KV cache vs one sequence per action.

Real decisions of one env (states reached by random play on its training games,
the suite's token-plane prompt, every legal action scored): the same
:class:`rlid.baselines.scoring.ScoringPolicy` with ``share_prompt=True`` (the default:
each prompt run once, its K completions on its KV cache) and ``share_prompt=False``
(K sequences of prompt + completion), interleaved per repetition so that load on a
shared machine hits both alike. Two calls are timed, each over ``--batch``
decisions at once, as PPO runs them:

* ``act``   -- sampling one decision per state (no gradients);
* ``update`` -- re-scoring the stored decisions with gradients, plus backward.

Before timing it checks that both paths give one distribution (max |Δ log π|).
Times are minima over ``--reps``.

``--against unpacked`` compares instead, on menus of more than 64 actions, the
default shared path (the prompt's cache copied at most 64 times, the completions
packed side by side) with one cache copy per action (``copies`` unbounded), as the
shared path ran before packing. ``--against even-rows`` compares the default packing
(rows as wide as the widest menu's, each menu on as few of them as its tokens need:
``rlid.baselines.engine.pack_rows``) with every menu split over min(K, 64) rows, as packing
ran before: in a batch of mixed menu sizes the small menus' rows were mostly padding.

    python benchmarks/scoring_plane.py --env "tw-cooking[recipe=1,take=1,go=1]" --states 8
    python benchmarks/scoring_plane.py --env "keydoor[size=5,keys=2]" --model tiny
    python benchmarks/scoring_plane.py --model tiny --against unpacked \
        --states-file tests/data/scienceworld_states.json --min-actions 100
    python benchmarks/scoring_plane.py --model tiny --against even-rows \
        --states-file tests/data/scienceworld_states.json
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch

import rlid.baselines.engine
from rlid import envs
from rlid.baselines.scoring import ScoringPolicy
from rlid.config import TrainConfig
from rlid.lm.pretrain import parse_env_entry
from rlid.lm.starts import load_policy_model


def collect_states(env_entry: str, count: int, seed: int) -> tuple[list[str], list[dict[str, Any]]]:
    """``count`` states met by uniformly random play (a new episode every few steps)."""
    env_id, options = parse_env_entry(env_entry)
    env = envs.make(env_id, **options)
    rng = np.random.default_rng(seed)
    observations: list[str] = []
    infos: list[dict[str, Any]] = []
    episode = 0
    while len(observations) < count:
        obs, info = env.reset(seed=seed + episode)
        episode += 1
        for _ in range(int(rng.integers(0, 6))):  # a few random steps into the game
            legal = info["legal_actions"]
            obs, _, terminated, truncated, info = env.step(legal[int(rng.integers(len(legal)))])
            if terminated or truncated:
                break
        else:
            observations.append(obs)
            infos.append(info)
    env.close()
    return observations, infos


def file_states(path: str, min_actions: int) -> tuple[list[str], list[dict[str, Any]]]:
    """The states of a file of recorded states with at least ``min_actions`` legal actions."""
    states = json.loads(Path(path).read_text(encoding="utf-8"))["states"]
    kept = [s for s in states if len(s["legal_actions"]) >= min_actions]
    if not kept:
        raise SystemExit(f"{path} holds no state of at least {min_actions} legal actions")
    infos = [{**s, "afterstates": None, "score": 0, "max_score": 100} for s in kept]
    return [s["observation"] for s in kept], infos


def even_rows(
    counts: Sequence[int], sizes: Sequence[int], copies: int
) -> tuple[list[int], list[int], list[int], list[int]]:
    """The packed rows as laid out before ``rlid.baselines.engine.pack_rows``: every menu of
    K completions split into rows of ceil(K / ``copies``) completions each, whatever the
    other menus of the batch (all rows are as wide as the widest)."""
    owners: list[int] = []
    row_of: list[int] = []
    offset_of: list[int] = []
    spans: list[int] = []
    first = 0
    for b, k in enumerate(counts):
        per_row = -(-k // copies)
        for start in range(first, first + k, per_row):
            used = 0
            for n in range(start, min(start + per_row, first + k)):
                row_of.append(len(owners))
                offset_of.append(used)
                used += sizes[n]
            owners.append(b)
            spans.append(max(used, 1))
        first += k
    return owners, row_of, offset_of, spans


@contextmanager
def even_rows_layout() -> Iterator[None]:
    """``rlid.baselines.engine`` packing with :func:`even_rows` inside the block."""
    default: Callable[..., Any] = rlid.baselines.engine.pack_rows
    rlid.baselines.engine.pack_rows = even_rows  # type: ignore[assignment]
    try:
        yield
    finally:
        rlid.baselines.engine.pack_rows = default  # type: ignore[assignment]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="tw-cooking[recipe=1,take=1,go=1]",
                        help="ENV[k=v,...] whose states are scored")  # fmt: skip
    parser.add_argument("--model", default="tiny", help="'tiny' (warm) or a model directory")
    parser.add_argument("--states", type=int, default=8, help="decisions per call (batch)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--states-file",
        default=None,
        help="score the states of this file (benchmarks/large_menus.py's "
        "format) instead of states met by random play in --env",
    )
    parser.add_argument(
        "--min-actions",
        type=int,
        default=0,
        help="with --states-file: only its states of at least this many legal actions",
    )
    parser.add_argument("--against", choices=("full", "unpacked", "even-rows"), default="full",
                        help="what the shared path is timed against: one sequence per "
                        "action (full), one cache copy per action (unpacked), or each "
                        "menu split over min(K, 64) rows (even-rows)")  # fmt: skip
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    logging.getLogger("transformers").setLevel(logging.ERROR)

    model, tokenizer = load_policy_model(args.model)
    interface = TrainConfig().interface
    if args.states_file:
        observations, infos = file_states(args.states_file, args.min_actions)
        args.env = args.states_file
    else:
        observations, infos = collect_states(args.env, args.states, args.seed)
    menus = [len(i["legal_actions"]) for i in infos]
    other = {"full": {"share_prompt": False}, "unpacked": {"copies": 10**9}}.get(args.against, {})
    # even-rows: the same policy, the rows laid out as before (see even_rows)
    layout = even_rows_layout if args.against == "even-rows" else nullcontext
    policies = {
        True: ScoringPolicy(model, tokenizer, interface),
        False: ScoringPolicy(model, tokenizer, interface, **other),
    }
    other_name = args.against  # the column name of the path timed against the default

    def act(policy: ScoringPolicy) -> list[Any]:
        with torch.no_grad():
            return policy.act(
                observations, infos, [None] * len(infos),
                rng=np.random.default_rng(0), generator=torch.Generator().manual_seed(0),
            )  # fmt: skip

    with layout():
        decisions = act(policies[False])
    prompt_tokens = [len(d.prompt_ids) for d in decisions]
    print(
        f"env={args.env} model={args.model} states={len(infos)} threads={args.threads} "
        f"menu sizes K={menus} (mean {statistics.mean(menus):.1f}) "
        f"prompt tokens {min(prompt_tokens)}-{max(prompt_tokens)}"
    )
    with torch.no_grad(), layout():
        against_logp = policies[False].score(decisions)[0]
    with torch.no_grad():
        gap = (policies[True].score(decisions)[0] - against_logp).abs()
    finite = torch.isfinite(gap)
    print(f"max |log pi shared - log pi {other_name}| = {float(gap[finite].max()):.1e}")

    def update(policy: ScoringPolicy) -> None:
        model.zero_grad(set_to_none=True)
        logp_all, _, _ = policy.score(decisions)
        chosen = torch.tensor([d.chosen for d in decisions])
        logp_all.gather(1, chosen[:, None]).sum().backward()

    times: dict[tuple[str, bool], list[float]] = {}
    for _ in range(args.reps):
        for share in (True, False):
            for name, call in (("act", act), ("update", update)):
                with nullcontext() if share else layout():
                    start = time.perf_counter()
                    call(policies[share])
                times.setdefault((name, share), []).append(time.perf_counter() - start)
    print(f"\n{'call':>7} {'shared s':>9} {other_name + ' s':>11} {other_name + '/shared':>16}")
    for name in ("act", "update"):
        shared, against = min(times[name, True]), min(times[name, False])
        print(f"{name:>7} {shared:>9.3f} {against:>11.3f} {against / shared:>16.1f}")
    per_decision = min(times["act", True]) / len(infos)
    print(f"act: {per_decision:.3f} s per decision shared, "
          f"{min(times['act', False]) / len(infos):.3f} s {other_name}")  # fmt: skip


if __name__ == "__main__":
    main()
