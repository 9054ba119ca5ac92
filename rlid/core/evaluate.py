"""Held-out evaluation of a policy: episodes played greedily on held-out games, and
walks along each game's walkthrough.

:func:`evaluate` is what a run's "before" / "after" rows and ``rlid eval`` report:
``episodes`` games of the held-out split, reset with the same seeds before and after
training (:data:`rlid.core.seeds.EVAL_SEED_BASE`), played greedily by default with their
own randomness stream, so evaluating never shifts the randomness of training.
:func:`follow_walkthroughs` asks a menu policy, state by state along each game's
walkthrough, how much it prefers the walkthrough's command (``rlid eval
--walkthrough``): where a policy fails, it says at which step and how.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from rlid.config.budget import Budget, Timers
from rlid.core.protocols import MenuPolicy
from rlid.core.rollout import Episode, Sampling, collect_episodes, gathered_episode_stats
from rlid.core.seeds import EVAL_SEED_BASE, iteration_rngs
from rlid.lm import distributed as dist_
from rlid.lm.distributed import World
from rlid.menus import Interface, make_memory
from rlid.runs.files import atomic_write_text


def evaluate(
    policy: Any,
    env_list: list[Any],
    episodes: int,
    *,
    interface: Any,
    seed: int = 0,
    greedy: bool = True,
    world: World = dist_.SINGLE,
    keep: list[Episode] | None = None,
    progress: str | None = None,
) -> dict[str, float]:
    """Success rate, return and length on ``episodes`` held-out games (greedy by default).

    Episodes are played in blocks of ``len(env_list)`` with the block's own randomness;
    with several processes block b is played by rank b mod N and the statistics are
    gathered, so the result does not depend on the number of processes. ``keep``: a
    list this process's episodes are appended to (``rlid eval --episodes-out``).
    ``progress``: a bar with this title on stderr (this process's episodes finished and
    env steps taken), or None for none; the results do not depend on it.
    """
    if episodes == 0:
        return {}
    # Evaluation is not training spend: count it in a throwaway budget.
    saved = (policy.budget, policy.timers)
    policy.budget, policy.timers = Budget(), Timers()
    starts = list(range(0, episodes, len(env_list)))[world.rank :: world.size]
    mine = sum(min(len(env_list), episodes - start) for start in starts)
    bar = _EvalBar(progress, mine) if progress is not None else None
    try:
        done = _evaluate(
            policy, env_list, starts, episodes, interface=interface, seed=seed, greedy=greedy,
            on_step=bar.step if bar is not None else None,
        )  # fmt: skip
    finally:
        policy.budget, policy.timers = saved
        if bar is not None:
            bar.close()
    if keep is not None:
        keep += done
    stats, _ = gathered_episode_stats(done, world)
    stats["episodes"] = episodes
    return stats


def _evaluate(
    policy: Any,
    env_list: list[Any],
    starts: list[int],
    episodes: int,
    *,
    interface: Any,
    seed: int,
    greedy: bool,
    on_step: Callable[[int, int], None] | None = None,
) -> list[Episode]:
    done: list[Episode] = []
    for start in starts:
        n = min(len(env_list), episodes - start)
        seeds = [EVAL_SEED_BASE + start + i for i in range(n)]
        rng, gen = iteration_rngs(seed, start, stream=1)
        with torch.no_grad():
            done += collect_episodes(
                env_list[:n], policy, seeds, list(range(start, start + n)),
                interface=interface, sampling=Sampling(rng, gen, greedy=greedy),
                on_step=on_step,
            )  # fmt: skip
    return done


class _EvalBar:
    """An evaluation's progress on stderr: episodes finished, env steps taken so far."""

    def __init__(self, title: str, episodes: int) -> None:
        self.steps = 0
        self._tqdm = tqdm(total=episodes, desc=title, unit="episode", file=sys.stderr)
        self._shown = time.monotonic()

    def step(self, decisions: int, finished: int) -> None:
        self.steps += decisions
        self._tqdm.set_postfix(env_steps=self.steps, refresh=False)
        self._tqdm.update(finished)
        # steps of a long episode show too, at most once a second (fast games: no flood)
        if not finished and time.monotonic() - self._shown >= 1.0:
            self._tqdm.refresh()
            self._shown = time.monotonic()

    def close(self) -> None:
        self._tqdm.close()


def episode_record(episode: Episode, tokenizer: Any) -> dict[str, Any]:
    """One played episode as JSON: the game, the outcome, the first prompt as the
    policy read it (goal, observation, menu), and per step the command sent, the
    reward, and for a menu policy the chosen row's probability and the menu's size
    (for the token plane the text written and whether it parsed to a legal action)."""
    steps = []
    for decision, reward in zip(episode.decisions, episode.rewards):
        step: dict[str, Any] = {"action": decision.action, "reward": float(reward)}
        if hasattr(decision, "menu"):  # decision and scoring planes
            step["p"] = round(float(np.exp(decision.logp)), 6)
            step["rows"] = len(decision.menu.rows)
        else:  # token plane
            step["text"], step["valid"] = decision.text, bool(decision.valid)
        steps.append(step)
    first = episode.decisions[0].prompt_ids if episode.decisions else []
    return {
        "game": episode.group,
        "reset_seed": episode.reset_seed,
        "game_seed": episode.game_seed,
        "won": episode.won,
        "lost": episode.lost,
        "return": episode.ret,
        "length": episode.length,
        "first_prompt": tokenizer.decode(first, skip_special_tokens=True),
        "steps": steps,
    }


def write_episodes(path: Path, episodes: list[Episode], tokenizer: Any) -> None:
    """``rlid eval --episodes-out``: one JSON line per episode, in game order."""

    lines = [
        json.dumps(episode_record(e, tokenizer), sort_keys=True)
        for e in sorted(episodes, key=lambda e: e.group)
    ]
    atomic_write_text(Path(path), "".join(line + "\n" for line in lines))


def follow_walkthroughs(
    policy: MenuPolicy,
    env_list: list[Any],
    games: int,
    *,
    interface: Interface,
    seed: int = 0,
) -> dict[str, Any]:
    """Teacher-forced check of a menu policy along each game's walkthrough.

    Game ``i`` is the one the held-out evaluation's episode ``i`` plays (the same
    resets). It is walked along its walkthrough, with the interface's memory; at every
    state the policy renders its menu and is asked for its greedy row (as evaluation
    plays) and for the probability ``p`` it gives the walkthrough's command (from the
    same forward: greedy decisions keep every row's log-prob). Returns:

    * ``states``: states visited, over ``games`` games;
    * ``walkthrough_accuracy``: the fraction of states whose greedy row is the
      walkthrough's command; ``walkthrough_prob``: the mean of ``p``;
      ``uniform_prob``: the same for a uniform choice over each menu (1 / rows), the
      reference a policy that does not read its menu stays at;
    * ``greedy_follows``: the fraction of games whose every greedy row is the
      walkthrough's (greedy play then replays the walkthrough and wins);
    * ``sample_follows``: the mean over games of the product of ``p`` along the game,
      the chance that sampling (at temperature 1) replays the whole walkthrough;
    * ``off_menu``: states whose menu did not show the command (``overflow =
      "truncate"``), counted with ``p = 0`` and as wrong; the walk goes on;
    * ``accuracy_by_step``: the accuracy at walkthrough step 0, 1, ... over the games
      that reach it;
    * ``wrong_by_verb``: the first word of the greedy row where it was wrong ("look":
      stayed put, "go": a move the walkthrough did not make, ...).
    """

    if games < 1:
        raise ValueError(f"--episodes (games to walk) must be >= 1, got {games}")
    saved = (policy.budget, policy.timers)  # not training spend
    policy.budget, policy.timers = Budget(), Timers()
    right: list[bool] = []
    probs: list[float] = []
    uniform: list[float] = []
    by_step: dict[int, list[bool]] = {}
    wrong_by_verb: dict[str, int] = {}
    follows_greedy: list[bool] = []
    follows_sampled: list[float] = []
    off_menu = 0
    try:
        for start in range(0, games, len(env_list)):
            n = min(len(env_list), games - start)
            rng, gen = iteration_rngs(seed, start, stream=1)
            seeds = [EVAL_SEED_BASE + start + i for i in range(n)]
            walk = _Walk(env_list[:n], seeds, interface, first_game=start)
            while walk.active:
                active = walk.active
                decisions = policy.act(
                    [walk.obs[i] for i in active], [walk.infos[i] for i in active],
                    [walk.memories[i].render() or None for i in active],
                    rng=rng, generator=gen, greedy=True,
                )  # fmt: skip
                # greedy play keeps every row's log-prob (one forward per state); a
                # policy that does not is scored again
                kept = [getattr(d, "extra", {}).get("logp_rows") for d in decisions]
                logp_rows: list[Any] = kept
                if any(row is None for row in kept):
                    logp_all = policy.score(decisions)[0]
                    logp_rows = [logp_all[b] for b in range(len(decisions))]
                for b, i in enumerate(active):
                    wanted = walk.wanted(i)
                    rows = [
                        r for r, row in enumerate(decisions[b].menu.rows) if row.action == wanted
                    ]
                    p = float(logp_rows[b][rows[0]].exp()) if rows else 0.0
                    off_menu += not rows
                    ok = decisions[b].action == wanted
                    right.append(ok)
                    probs.append(p)
                    uniform.append(1.0 / len(decisions[b].menu.rows) if rows else 0.0)
                    by_step.setdefault(walk.step[i], []).append(ok)
                    walk.greedy_ok[i] &= ok
                    walk.sampled[i] *= p
                    if not ok:
                        verb = decisions[b].action.split()[0] if decisions[b].action else ""
                        wrong_by_verb[verb] = wrong_by_verb.get(verb, 0) + 1
                    walk.advance(i)
            follows_greedy += walk.greedy_ok
            follows_sampled += walk.sampled
    finally:
        policy.budget, policy.timers = saved
    if not right:
        raise ValueError("no game of this env has a walkthrough step to follow")
    return {
        "games": games,
        "states": len(right),
        "walkthrough_accuracy": float(np.mean(right)),
        "walkthrough_prob": float(np.mean(probs)),
        "uniform_prob": float(np.mean(uniform)),
        "greedy_follows": float(np.mean(follows_greedy)),
        "sample_follows": float(np.mean(follows_sampled)),
        "off_menu": off_menu,
        "accuracy_by_step": [round(float(np.mean(by_step[k])), 4) for k in sorted(by_step)],
        "wrong_by_verb": dict(sorted(wrong_by_verb.items())),
    }


class _Walk:
    """Envs stepping along their games' walkthroughs, with the interface's memory."""

    def __init__(
        self, env_list: list[Any], seeds: list[int], interface: Interface, *, first_game: int
    ) -> None:
        self.envs = env_list
        self.obs: list[str] = []
        self.infos: list[dict[str, Any]] = []
        self.memories = [make_memory(interface.memory, interface.memory_size) for _ in seeds]
        self.routes: list[list[str]] = []
        for game, (env, memory, seed) in enumerate(zip(env_list, self.memories, seeds)):
            obs, info = env.reset(seed=seed)
            if info.get("walkthrough") is None:
                raise ValueError(
                    f"game {first_game + game} of this env has no walkthrough; "
                    "--walkthrough needs an env whose games come with one"
                )
            memory.reset(obs, info)
            self.obs.append(obs)
            self.infos.append(info)
            self.routes.append(list(info["walkthrough"]))
        self.step = [0] * len(seeds)
        self.done = [not route for route in self.routes]
        self.greedy_ok = [True] * len(seeds)
        self.sampled = [1.0] * len(seeds)

    @property
    def active(self) -> list[int]:
        return [i for i, done in enumerate(self.done) if not done]

    def wanted(self, i: int) -> str:
        return self.routes[i][self.step[i]]

    def advance(self, i: int) -> None:
        """Send env ``i`` the walkthrough's command (whatever the policy chose)."""
        action = self.wanted(i)
        obs, _, terminated, truncated, info = self.envs[i].step(action)
        self.memories[i].update(obs, action, info)
        self.obs[i], self.infos[i] = obs, info
        self.step[i] += 1
        self.done[i] = terminated or truncated or self.step[i] >= len(self.routes[i])
