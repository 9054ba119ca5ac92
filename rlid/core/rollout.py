"""Episode rollouts over several envs at once (one batched policy call per step).

Episodes of one iteration run in lockstep: at each step the still-running envs
are asked for one decision each in a single batched call, then stepped together
(``envs`` is a plain list, stepped in this process, or a
:class:`rlid.core.env_workers.WorkerEnvs` whose workers step their share at the same
time; episodes are the same either way). A *group*
is a set of episodes reset with the same seed, i.e. the same game played several
times (GRPO's "several responses to the same prompt", at the episode level).

The policy only needs :class:`rlid.core.protocols.Policy`: ``act(observations, infos,
memory_texts, rng=..., generator=..., greedy=..., temperature=...)`` returning one
record with an ``action`` string per env; decision, scoring and token policies all fit.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from rlid.config.budget import Budget, Timers
from rlid.core.env_workers import batched
from rlid.core.protocols import Policy
from rlid.lm import distributed as dist_
from rlid.lm.distributed import World
from rlid.menus import make_memory


@dataclass
class Episode:
    """One finished episode: its decisions and what the env returned."""

    group: int
    reset_seed: int
    decisions: list[Any] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    won: bool = False
    lost: bool = False
    score: float = 0.0
    max_score: float = 0.0
    invalid_actions: int = 0
    game_seed: int | None = None
    states: list[str] = field(default_factory=list)
    """:func:`state_key` of the state each decision was taken in (decision order)."""
    legal_counts: list[int] = field(default_factory=list)
    """How many legal actions the state of each decision had (decision order)."""
    actions_dropped: int = 0
    """Legal actions no row of the episode's menus could reach (``overflow="truncate"``)."""

    @property
    def length(self) -> int:
        return len(self.rewards)

    @property
    def ret(self) -> float:
        return float(sum(self.rewards))


def state_key(obs: str, info: dict[str, Any]) -> str:
    """A short digest of what the env shows of a state: the observation, the score, and
    the legal actions with their afterstates (sorted, so the menu's shuffle does not
    matter). Two decisions with the same key were taken in states the agent cannot tell
    apart from the env's output (the memory line aside); step-level group advantages
    (``step_group_coef``) compare the returns that followed them.
    """
    legal = [str(a) for a in info.get("legal_actions", [])]
    after = info.get("afterstates") or [None] * len(legal)
    rows = sorted(zip(legal, (None if a is None else str(a) for a in after)), key=str)
    text = json.dumps([obs, info.get("score"), rows], ensure_ascii=False, default=str)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=12).hexdigest()


@dataclass(frozen=True)
class Sampling:
    """How a policy picks its actions in a batch of episodes.

    Attributes:
        rng: shuffles the menus (label order per step).
        generator: draws the actions (a CPU generator, also for a model on a GPU).
        greedy: take the most likely action instead of sampling.
        temperature: the behaviour policy's sampling temperature.
    """

    rng: np.random.Generator
    generator: torch.Generator
    greedy: bool = False
    temperature: float = 1.0


def collect_episodes(
    envs: list[Any],
    policy: Policy,
    reset_seeds: list[int],
    groups: list[int],
    *,
    interface: Any,
    sampling: Sampling,
    budget: Budget | None = None,
    timers: Timers | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> list[Episode]:
    """Play one episode in each env (reset with ``reset_seeds[i]``) in lockstep.

    ``on_step(decisions, finished)``: called after each lockstep step with the number of
    envs that took an action and of episodes that ended (progress bars).
    """
    if not (len(envs) == len(reset_seeds) == len(groups)):
        raise ValueError("envs, reset_seeds and groups must have the same length")
    budget = budget if budget is not None else Budget()
    timers = timers if timers is not None else Timers()
    env_batch = batched(envs)  # a list, or envs in worker processes (rlid.core.env_workers)
    episodes = [Episode(group=g, reset_seed=s) for g, s in zip(groups, reset_seeds)]
    memories = [make_memory(interface.memory, interface.memory_size) for _ in range(len(envs))]
    observations: list[str] = []
    infos: list[dict[str, Any]] = []
    with timers.time("env"):
        resets = env_batch.reset_many(list(range(len(envs))), [int(s) for s in reset_seeds])
        for (obs, info), memory, episode in zip(resets, memories, episodes):
            memory.reset(obs, info)  # the start place counts as visited
            episode.max_score = float(info["max_score"])
            episode.game_seed = info.get("game_seed")
            observations.append(obs)
            infos.append(info)
    active = list(range(len(envs)))
    while active:
        memory_texts = [memories[i].render() or None for i in active]
        records = policy.act(
            [observations[i] for i in active],
            [infos[i] for i in active],
            memory_texts,
            rng=sampling.rng,
            generator=sampling.generator,
            greedy=sampling.greedy,
            temperature=sampling.temperature,
        )
        still = []
        with timers.time("env"):
            steps = env_batch.step_many(active, [record.action for record in records])
            for i, record, step in zip(active, records, steps):
                obs, reward, terminated, truncated, info = step
                memories[i].update(obs, record.action, info)
                episode = episodes[i]
                episode.states.append(state_key(observations[i], infos[i]))
                episode.legal_counts.append(len(infos[i]["legal_actions"]))
                episode.actions_dropped += len(
                    getattr(getattr(record, "menu", None), "dropped", ())
                )
                episode.decisions.append(record)
                episode.rewards.append(float(reward))
                episode.invalid_actions += int(bool(info.get("invalid_action")))
                budget.env_steps += 1
                if terminated or truncated:
                    episode.terminated, episode.truncated = bool(terminated), bool(truncated)
                    episode.won, episode.lost = bool(info["won"]), bool(info["lost"])
                    episode.score = float(info["score"])
                    budget.episodes += 1
                else:
                    observations[i], infos[i] = obs, info
                    still.append(i)
        if on_step is not None:
            on_step(len(active), len(active) - len(still))
        active = still
    budget.invalid_actions += sum(e.invalid_actions for e in episodes)
    return episodes


def episode_stats(episodes: list[Episode]) -> dict[str, float]:
    """Mean return, success (won) rate, episode length and invalid-action rate; the most
    legal actions met in one state (``menu_rows_max``) and the legal actions no menu row
    could reach (``actions_dropped``, summed; 0 unless ``overflow="truncate"`` cut a menu)."""
    n = max(len(episodes), 1)
    steps = max(sum(e.length for e in episodes), 1)
    return {
        "return": sum(e.ret for e in episodes) / n,
        "success": sum(e.won for e in episodes) / n,
        "episode_length": sum(e.length for e in episodes) / n,
        "normalized_score": sum(e.score / max(e.max_score, 1e-9) for e in episodes) / n,
        "invalid_rate": sum(e.invalid_actions for e in episodes) / steps,
        "menu_rows_max": float(max((max(e.legal_counts, default=0) for e in episodes), default=0)),
        "actions_dropped": float(sum(e.actions_dropped for e in episodes)),
    }


def gathered_episode_stats(
    episodes: list[Episode], world: World, extra: Callable[[Episode], Any] | None = None
) -> tuple[dict[str, float], list[Any]]:
    """``episode_stats`` over all ranks' episodes (in group order, as one process has them).

    ``extra(e)`` is gathered per episode alongside (e.g. per-decision rollout entropy).
    """
    if not world.distributed:
        return episode_stats(episodes), [extra(e) for e in episodes] if extra else []
    light = [
        (e.group, Episode(**{**e.__dict__, "decisions": []}), extra(e) if extra else None)
        for e in episodes
    ]
    everyone = [item for part in dist_.gather_objects(light, world) for item in part]
    everyone.sort(key=lambda item: item[0])  # stable: episode order within a group kept
    return episode_stats([item[1] for item in everyone]), [item[2] for item in everyone]
