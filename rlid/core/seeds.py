"""All randomness of a run, derived from ``(seed, iteration, stream)``.

Each iteration's rollouts, shuffles and minibatch orders come from generators
seeded by the run's seed and the iteration (never from a global RNG's history), so
a resumed run replays exactly, and a group's episodes come from ``(seed, iteration,
group)``, never from the rank that plays them, so N processes play what one does.
Evaluation draws from its own stream and resets the same held-out games before and
after training (:data:`EVAL_SEED_BASE`).
"""

from __future__ import annotations

import numpy as np
import torch

from rlid.config import TrainConfig

EVAL_SEED_BASE = 7_000_000  # held-out evaluation resets: the same games before and after


def iteration_rngs(
    seed: int, iteration: int, stream: int = 0
) -> tuple[np.random.Generator, torch.Generator]:
    """All randomness of one iteration, derived from (seed, iteration, stream).

    Stream 0 is training; evaluation uses its own streams so that evaluating never
    shifts the randomness of training.
    """
    rng = np.random.default_rng([seed, iteration, stream])
    gen = torch.Generator().manual_seed(int(rng.integers(2**62)))
    return rng, gen


def make_reset_seeds(config: TrainConfig, iteration: int) -> tuple[list[int], list[int]]:
    """Reset seeds and group ids: group g plays one game group_size times."""
    rng = np.random.default_rng([config.seed, iteration, 2])
    group_seeds = rng.integers(0, 2**31 - 1, size=config.groups_per_iter)
    seeds = [int(s) for s in group_seeds for _ in range(config.group_size)]
    groups = [g for g in range(config.groups_per_iter) for _ in range(config.group_size)]
    return seeds, groups


def group_rngs(
    seed: int, iteration: int, group: int, round_: int = 0
) -> tuple[np.random.Generator, torch.Generator]:
    """The sampling randomness of one group: from (seed, iteration, group), never the rank."""
    rng = np.random.default_rng([seed, iteration, 4, round_, group])
    gen = torch.Generator().manual_seed(int(rng.integers(2**62)))
    return rng, gen
