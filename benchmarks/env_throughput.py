"""Env throughput, with and without afterstates, for every registered env id.

For each env id (small settings, one fixed game) the same random action sequence
is played twice, with ``afterstates=False`` and ``afterstates=True``; only
``env.step`` is timed (resets are not). Reported per env id:

* steps/s without and with afterstates;
* afterstate cost per menu row: (step time with - step time without) / rows;
* ratio: afterstate time per step / env step time (target <= 25% on tw-simple and
  tw-treasure_hunter);
* for envs that can save and restore a running episode (TextWorld), the cost per
  row of the alternative that afterstates replace: snapshot, step, restore.

Each configuration is timed in several alternating rounds and the fastest round is
kept (the machine may be shared).

    python benchmarks/env_throughput.py [--steps 300] [--rounds 3] [--only tw-simple]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

import envs

SMALL_OPTIONS: dict[str, dict[str, Any]] = {
    "tw-simple": {"rewards": "dense", "goal": "brief"},
    "tw-coin_collector": {"level": 5},
    "tw-treasure_hunter": {"level": 5},
    "tw-cooking": {"recipe": 2, "take": 1, "go": 6, "open": True, "cook": True, "cut": True},
    "tw-custom": {"world_size": 3, "nb_objects": 6, "quest_length": 3},
}


def options_for(env_id: str) -> dict[str, Any]:
    """Small settings for ``env_id``; ``tw-file`` plays a cached treasure-hunter game."""
    if env_id == "tw-file":
        from envs import tw_cache

        return {"path": str(tw_cache.ensure_game("tw-treasure_hunter", {"level": 5}, 0))}
    return {"game_seed": 0, **SMALL_OPTIONS.get(env_id, {})}


def time_steps(env: Any, steps: int, seed: int) -> tuple[float, int, int]:
    """Play ``steps`` random legal actions; return (seconds in step(), steps, rows)."""
    rng = np.random.default_rng(seed)
    _, info = env.reset(seed=seed)
    elapsed, rows = 0.0, 0
    for _ in range(steps):
        legal = info["legal_actions"]
        action = legal[int(rng.integers(len(legal)))]
        start = time.perf_counter()
        _, _, terminated, truncated, info = env.step(action)
        elapsed += time.perf_counter() - start
        rows += len(info["legal_actions"])
        if terminated or truncated:
            _, info = env.reset()
    return elapsed, steps, rows


def time_save_step_restore(env: Any, steps: int, seed: int) -> float | None:
    """Seconds per row of snapshot + step + restore (None if the env cannot save)."""
    if not hasattr(env, "snapshot"):
        return None
    rng = np.random.default_rng(seed)
    _, info = env.reset(seed=seed)
    elapsed, rows = 0.0, 0
    for _ in range(steps):
        legal = info["legal_actions"]
        start = time.perf_counter()
        saved = env.snapshot()
        for action in legal:
            env.step(action)
            env.restore(saved)
        elapsed += time.perf_counter() - start
        rows += len(legal)
        _, _, terminated, truncated, info = env.step(legal[int(rng.integers(len(legal)))])
        if terminated or truncated:
            _, info = env.reset()
    return elapsed / rows


def measure(env_id: str, steps: int, rounds: int) -> dict[str, float | None]:
    options = options_for(env_id)
    # max_episode_steps large enough that truncation does not dominate.
    off = envs.make(env_id, afterstates=False, max_episode_steps=100, **options).unwrapped
    on = envs.make(env_id, afterstates=True, max_episode_steps=100, **options).unwrapped
    time_steps(off, 5, 0), time_steps(on, 5, 0)  # load/generate the game, warm caches
    best_off = best_on = float("inf")
    rows = 0
    for r in range(rounds):
        t_off, n, _ = time_steps(off, steps, seed=r)
        t_on, _, rows = time_steps(on, steps, seed=r)
        best_off, best_on = min(best_off, t_off / n), min(best_on, t_on / n)
    rows_per_step = rows / steps
    extra = max(best_on - best_off, 0.0)
    ssr = time_save_step_restore(off, max(steps // 10, 5), seed=0)
    off.close()
    on.close()
    return {
        "steps_s_off": 1.0 / best_off,
        "steps_s_on": 1.0 / best_on,
        "rows": rows_per_step,
        "us_per_row": 1e6 * extra / max(rows_per_step, 1e-9),
        "ratio": extra / best_off,
        "ssr_us_per_row": None if ssr is None else 1e6 * ssr,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (min kept)")
    parser.add_argument("--only", nargs="*", default=None, help="env ids to measure")
    args = parser.parse_args(argv)
    header = (
        f"{'env id':<20} {'steps/s':>9} {'steps/s+as':>10} {'rows':>6} "
        f"{'us/row':>8} {'ratio':>7} {'save/step/restore us/row':>25}"
    )
    print(header)
    print("-" * len(header))
    for env_id in args.only or envs.list_envs():
        m = measure(env_id, args.steps, args.rounds)
        ssr = "-" if m["ssr_us_per_row"] is None else f"{m['ssr_us_per_row']:.0f}"
        print(
            f"{env_id:<20} {m['steps_s_off']:>9.0f} {m['steps_s_on']:>10.0f} {m['rows']:>6.1f} "
            f"{m['us_per_row']:>8.1f} {m['ratio']:>7.1%} {ssr:>25}",
            flush=True,
        )


if __name__ == "__main__":
    main()
