"""Env throughput, with and without afterstates, for every registered env id.

For each env id (small settings, one fixed game) two envs, ``afterstates=False``
and ``afterstates=True``, play the same random action sequence in lockstep; only
``env.step`` is timed (resets are not), and medians over steps are reported:

* steps/s without and with afterstates;
* afterstate cost per menu row: median paired (step with - step without) / rows;
* ratio: afterstate time per step / env step time (target <= 25% on tw-simple and
  tw-treasure_hunter);
* for envs that can save and restore a running episode (TextWorld), the cost per
  row of the alternative that afterstates replace: snapshot, step, restore.

Paired, alternating timing and medians keep a shared machine's load out of the
difference as far as possible.

With ``--env-workers N`` a second table follows: a batch of ``--batch`` envs (default
N) stepped in lockstep in this process and in N worker processes
(``rlid.core.env_workers``), side by side (alternating rounds, medians), in env steps per
second: where env steps are slow (ScienceWorld, JVM-backed) workers should pay.

    python benchmarks/env_throughput.py [--steps 300] [--rounds 3] [--only tw-simple]
    python benchmarks/env_throughput.py --only scienceworld twx-coin --steps 40 --env-workers 2
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from rlid import envs

SMALL_OPTIONS: dict[str, dict[str, Any]] = {
    "tw-simple": {"rewards": "dense", "goal": "brief"},
    "tw-coin_collector": {"level": 5},
    "tw-treasure_hunter": {"level": 5},
    "tw-cooking": {"recipe": 2, "take": 1, "go": 6, "open": True, "cook": True, "cut": True},
    "tw-custom": {"world_size": 3, "nb_objects": 6, "quest_length": 3},
    "babyai-text": {"level": "MixedTrainLocal"},
    "scienceworld": {"task": "find-plant", "walkthrough": False},
    "twx-cookingworld": {"numLocations": 3, "numIngredients": 2, "numDistractorItems": 2},
    "twx-coin": {"numLocations": 4, "includeDoors": False},
    "twx-twc": {"numLocations": 1, "numItemsToPutAway": 2},
    "twx-mapreader": {"numLocations": 8, "maxDistanceApart": 3},
    "twx-simonsays": {"gameLength": 3},
}


def options_for(env_id: str) -> dict[str, Any]:
    """Small settings for ``env_id``; ``tw-file`` plays a cached treasure-hunter game."""
    if env_id == "tw-file":
        from rlid.envs.textworld import cache as tw_cache

        return {"path": str(tw_cache.ensure_game("tw-treasure_hunter", {"level": 5}, 0))}
    return {"game_seed": 0, **SMALL_OPTIONS.get(env_id, {})}


def paired_step_times(off: Any, on: Any, steps: int, seed: int) -> tuple[np.ndarray, ...]:
    """Step two envs (afterstates off / on) in lockstep through the same random game.

    Returns per-step seconds in ``step()`` for each, and the menu rows after each step.
    Pairing the two timings step by step keeps machine-load drift out of the difference.
    """
    rng = np.random.default_rng(seed)
    _, info = off.reset(seed=seed)
    _, info_on = on.reset(seed=seed)
    assert info["legal_actions"] == info_on["legal_actions"]
    t_off, t_on, rows = np.zeros(steps), np.zeros(steps), np.zeros(steps)
    for i in range(steps):
        legal = info["legal_actions"]
        action = legal[int(rng.integers(len(legal)))]
        for env, times in ((off, t_off), (on, t_on)) if i % 2 else ((on, t_on), (off, t_off)):
            start = time.perf_counter()
            _, _, terminated, truncated, out = env.step(action)
            times[i] = time.perf_counter() - start
            if env is off:
                info = out
        rows[i] = len(info["legal_actions"])
        if terminated or truncated:
            _, info = off.reset()
            on.reset()
    return t_off, t_on, rows


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
    paired_step_times(off, on, 5, seed=0)  # load/generate the game, warm caches
    runs = [paired_step_times(off, on, steps, seed=r) for r in range(rounds)]
    t_off, t_on, rows = (np.concatenate(parts) for parts in zip(*runs))
    step_off, step_on = float(np.median(t_off)), float(np.median(t_on))
    extra = max(float(np.median(t_on - t_off)), 0.0)  # afterstate time per step
    ssr = time_save_step_restore(off, max(steps // 10, 5), seed=0)
    off.close()
    on.close()
    return {
        "steps_s_off": 1.0 / step_off,
        "steps_s_on": 1.0 / step_on,
        "rows": float(rows.mean()),
        "us_per_row": 1e6 * extra / max(float(rows.mean()), 1e-9),
        "ratio": extra / step_off,
        "ssr_us_per_row": None if ssr is None else 1e6 * ssr,
    }


def batched_steps_per_second(
    env_id: str, options: dict[str, Any], count: int, workers: int, steps: int, seed: int
) -> float:
    """Env steps per second of ``count`` envs stepped in lockstep through random games,
    in this process (``workers=0``) or in ``workers`` worker processes; resets untimed."""
    from rlid.core.env_workers import InProcessEnvs, WorkerEnvs

    pool: Any = (
        WorkerEnvs(env_id, options, count, workers)
        if workers
        else InProcessEnvs([envs.make(env_id, **options) for _ in range(count)])
    )
    rng = np.random.default_rng(seed)
    indices = list(range(count))
    infos = [info for _, info in pool.reset_many(indices, [seed + i for i in indices])]
    elapsed, done_steps = 0.0, 0
    try:
        for _ in range(steps):
            actions = [
                i["legal_actions"][int(rng.integers(len(i["legal_actions"])))] for i in infos
            ]
            start = time.perf_counter()
            results = pool.step_many(indices, actions)
            elapsed += time.perf_counter() - start
            done_steps += count
            infos = [r[4] for r in results]
            for k, (_, _, terminated, truncated, _) in enumerate(results):
                if terminated or truncated:
                    infos[k] = pool.reset_many([k], [int(rng.integers(1 << 30))])[0][1]
    finally:
        if workers:
            pool.close()
        else:
            for env in pool.envs:
                env.close()
    return done_steps / elapsed


def measure_workers(
    env_id: str, count: int, workers: int, steps: int, rounds: int
) -> tuple[float, float]:
    """Median env steps/s in-process and in workers, over alternating rounds."""
    options = {**options_for(env_id), "max_episode_steps": 100}
    options.pop("game_seed", None)  # a pool of games, as training plays
    local, pooled = [], []
    for r in range(rounds):
        local.append(batched_steps_per_second(env_id, options, count, 0, steps, seed=r))
        pooled.append(batched_steps_per_second(env_id, options, count, workers, steps, seed=r))
    return float(np.median(local)), float(np.median(pooled))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3, help="games played (seeds 0..rounds-1)")
    parser.add_argument("--only", nargs="*", default=None, help="env ids to measure")
    parser.add_argument(
        "--env-workers", type=int, default=0,
        help="also step a batch of envs in this process and in this many worker processes",
    )  # fmt: skip
    parser.add_argument("--batch", type=int, default=None, help="envs in that batch (default N)")
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
    if args.env_workers > 0:
        count = args.batch or args.env_workers
        head = (
            f"\n{'env id':<20} {'envs':>5} {'in-process steps/s':>19} "
            f"{f'{args.env_workers} workers steps/s':>19} {'speed-up':>9}"
        )
        print(head)
        print("-" * len(head.strip()))
        for env_id in args.only or envs.list_envs():
            local, pooled = measure_workers(
                env_id, count, args.env_workers, args.steps, args.rounds
            )
            print(
                f"{env_id:<20} {count:>5} {local:>19.1f} {pooled:>19.1f} {pooled / local:>8.2f}x",
                flush=True,
            )


if __name__ == "__main__":
    main()
