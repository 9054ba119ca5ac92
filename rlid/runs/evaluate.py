"""Evaluate a finished (or interrupted) run directory, or a model as it is, on held-out games.

The acting policy of the run's plane comes from the plane registry (:mod:`rlid.planes`).
Besides playing episodes, :func:`follow_walkthroughs` asks a menu policy, state by
state along each game's walkthrough, how much it prefers the walkthrough's command
(``rlid eval --walkthrough``): where a policy fails, it says at which step and how.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

import envs as envs_pkg
from menus import make_memory
from rlid.budget import Budget, Timers
from rlid.planes import get_plane
from rlid.runs import dir as rundir

if TYPE_CHECKING:
    from menus import Interface
    from rlid.config import TrainConfig
    from rlid.protocols import MenuPolicy
    from rlid.rollout import Episode


def evaluate_run(
    run: Path,
    *,
    env: str | None = None,
    env_options: dict[str, Any] | None = None,
    split: str = "heldout",
    episodes: int = 32,
    greedy: bool = True,
    seed: int = 0,
    walkthrough: bool = False,
    episodes_out: Path | None = None,
) -> dict[str, Any]:
    """Load ``run``'s last checkpoint and play ``episodes`` episodes on ``split`` games
    (``walkthrough=True``: follow the walkthroughs of as many games instead,
    :func:`follow_walkthroughs`). ``episodes_out``: also write every episode played
    to that JSON-lines file (:func:`write_episodes`)."""
    from rlid.lora import load_run_model
    from rlid.runs.log import RunLog, check_checkpoint, read_run_config

    _check_episodes(episodes)
    _check_episodes_out(episodes_out, walkthrough)
    # Read-only: no lock, so a running training can be evaluated alongside.
    config, _ = read_run_config(Path(run))
    _check_walkthrough(walkthrough, greedy, config)
    ckpt = Path(run) / rundir.CHECKPOINT
    if not (ckpt / "state.json").exists():
        raise FileNotFoundError(f"{run} has no checkpoint yet; nothing to evaluate")
    check_checkpoint(ckpt, config, action="evaluate")
    log = RunLog(Path(run), config, resuming=True)
    _set_threads(config)
    model, tokenizer = load_run_model(config, log)
    stats = _play(
        config, model, tokenizer, env=env, env_options=env_options, split=split,
        episodes=episodes, greedy=greedy, seed=seed, walkthrough=walkthrough,
        episodes_out=episodes_out,
    )  # fmt: skip
    state = rundir.read_json(log.path / rundir.CHECKPOINT / "state.json")
    return {"env": stats.pop("env"), "split": split, "iteration": state["iteration"], **stats}


def evaluate_model(
    config: TrainConfig,
    *,
    env: str | None = None,
    env_options: dict[str, Any] | None = None,
    split: str = "heldout",
    episodes: int = 32,
    greedy: bool = True,
    seed: int = 0,
    walkthrough: bool = False,
    episodes_out: Path | None = None,
) -> dict[str, Any]:
    """Play ``config.model`` as it is (no run, no training) on ``split`` games.

    The same evaluation as a run's "before" row: the config's plane, interface,
    device and precision, the trainer's held-out resets. With ``config`` equal to a
    run's, ``success`` etc. equal that run's ``eval.json["before"]`` (tested).
    """
    from rlid.lora import load_dtype, own_memory
    from rlid.models import load_policy_model

    _check_episodes(episodes)
    _check_episodes_out(episodes_out, walkthrough)
    _check_walkthrough(walkthrough, greedy, config)
    _set_threads(config)
    loaded, tokenizer = load_policy_model(str(config.model), dtype=load_dtype(config))
    model = own_memory(loaded)  # as a run loads it (the same last bits)
    stats = _play(
        config, model, tokenizer, env=env, env_options=env_options, split=split,
        episodes=episodes, greedy=greedy, seed=seed, walkthrough=walkthrough,
        episodes_out=episodes_out,
    )  # fmt: skip
    origin = getattr(model, "rlid_origin", "local")
    return {"env": stats.pop("env"), "split": split, "model": str(config.model),
            "origin": origin, **stats}  # fmt: skip


def _check_episodes(episodes: int) -> None:
    if episodes < 1:
        raise ValueError(f"--episodes must be >= 1, got {episodes}")


def _check_episodes_out(path: Path | None, walkthrough: bool) -> None:
    """Before any model loads: a new file in an existing directory, and episodes to write."""
    if path is None:
        return
    if walkthrough:
        raise ValueError(
            "--episodes-out writes the episodes played; --walkthrough plays none (it walks "
            "each game's walkthrough): drop one of them"
        )
    if path.exists():
        raise FileExistsError(
            f"--episodes-out {path} exists; give a new file (nothing is overwritten)"
        )
    if not path.parent.is_dir():
        raise FileNotFoundError(f"--episodes-out {path}: no directory {path.parent}")


def _check_walkthrough(walkthrough: bool, greedy: bool, config: TrainConfig) -> None:
    """Before any model loads: a walk reads a menu policy's greedy row and probabilities."""
    if walkthrough and config.plane == "token":
        raise ValueError(
            "--walkthrough reads a policy's distribution over the menu of legal actions: "
            "the decision or scoring plane, not the token plane (free text)"
        )
    if walkthrough and not greedy:
        raise ValueError(
            "--walkthrough follows each game's walkthrough and reads the policy's greedy "
            "choice and its probabilities at every state; it samples nothing: drop --sample"
        )


def _set_threads(config: TrainConfig) -> None:
    import torch

    from rlid.limits import check_machine_limits

    check_machine_limits(config)  # e.g. a run recorded with more threads than cores here
    if config.threads is not None:  # unset: torch's default (OMP_NUM_THREADS)
        torch.set_num_threads(config.threads)


def _play(
    config: TrainConfig,
    model: Any,
    tokenizer: Any,
    *,
    env: str | None,
    env_options: dict[str, Any] | None,
    split: str,
    episodes: int,
    greedy: bool,
    seed: int,
    walkthrough: bool = False,
    episodes_out: Path | None = None,
) -> dict[str, Any]:
    """``model`` on the config's device and precision, as the config's plane, on
    ``episodes`` games of ``env`` (default: the config's env and options)."""
    import torch

    from rlid.hardware import Precision
    from rlid.trainer import evaluate

    precision = Precision.from_config(config)
    model = precision.place(model)
    model.eval()
    policy = get_plane(config.plane).make_policy(
        config, model, tokenizer, autocast=precision.autocast
    )
    env_id = env or config.env
    options = dict(config.env_options) if env is None else {}
    options.update(env_options or {})
    options["split"] = split
    env_list = [envs_pkg.make(env_id, **options) for _ in range(min(episodes, 16))]
    with torch.no_grad():
        if walkthrough:
            menu_policy = cast("MenuPolicy", policy)  # not the token plane: checked first
            stats = follow_walkthroughs(
                menu_policy, env_list, episodes, interface=config.interface, seed=seed
            )
        else:
            played: list[Episode] = []
            stats = evaluate(
                policy, env_list, episodes, interface=config.interface, seed=seed,
                greedy=greedy, keep=played,
            )  # fmt: skip
            if episodes_out is not None:
                write_episodes(episodes_out, played, tokenizer)
    return {"env": env_id, **stats}


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
    import json

    from rlid.runs.files import atomic_write_text

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
    from rlid.trainer import EVAL_SEED_BASE, iteration_rngs

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
