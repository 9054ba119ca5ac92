"""Evaluate a finished (or interrupted) run directory, or a model as it is, on held-out games.

The acting policy of the run's plane comes from the plane registry (:mod:`rlid.planes`).
Besides playing episodes, :func:`follow_walkthroughs` asks a menu policy, state by
state along each game's walkthrough, how much it prefers the walkthrough's command
(``rlid eval --walkthrough``): where a policy fails, it says at which step and how.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import envs as envs_pkg
from rlid.evaluate import evaluate, follow_walkthroughs, write_episodes
from rlid.planes import get_plane
from rlid.runs import dir as rundir

if TYPE_CHECKING:
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
    check_checkpoint(ckpt, config)
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
