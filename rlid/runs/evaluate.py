"""Evaluate a finished (or interrupted) run directory, or a model as it is, on held-out games.

The acting policy of the run's plane comes from the plane registry (:mod:`rlid.planes`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import envs as envs_pkg
from rlid.planes import get_plane
from rlid.runs import dir as rundir

if TYPE_CHECKING:
    from rlid.config import TrainConfig


def evaluate_run(
    run: Path,
    *,
    env: str | None = None,
    env_options: dict[str, Any] | None = None,
    split: str = "heldout",
    episodes: int = 32,
    greedy: bool = True,
    seed: int = 0,
) -> dict[str, Any]:
    """Load ``run``'s last checkpoint and play ``episodes`` episodes on ``split`` games."""
    from rlid.lora import load_run_model
    from rlid.runs.log import RunLog, check_checkpoint, read_run_config

    _check_episodes(episodes)
    # Read-only: no lock, so a running training can be evaluated alongside.
    config, _ = read_run_config(Path(run))
    ckpt = Path(run) / rundir.CHECKPOINT
    if not (ckpt / "state.json").exists():
        raise FileNotFoundError(f"{run} has no checkpoint yet; nothing to evaluate")
    check_checkpoint(ckpt, config)
    log = RunLog(Path(run), config, resuming=True)
    _set_threads(config)
    model, tokenizer = load_run_model(config, log)
    stats = _play(
        config, model, tokenizer, env=env, env_options=env_options, split=split,
        episodes=episodes, greedy=greedy, seed=seed,
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
) -> dict[str, Any]:
    """Play ``config.model`` as it is (no run, no training) on ``split`` games.

    The same evaluation as a run's "before" row: the config's plane, interface,
    device and precision, the trainer's held-out resets. With ``config`` equal to a
    run's, ``success`` etc. equal that run's ``eval.json["before"]`` (tested).
    """
    from rlid.lora import load_dtype, own_memory
    from rlid.models import load_policy_model

    _check_episodes(episodes)
    _set_threads(config)
    loaded, tokenizer = load_policy_model(str(config.model), dtype=load_dtype(config))
    model = own_memory(loaded)  # as a run loads it (the same last bits)
    stats = _play(
        config, model, tokenizer, env=env, env_options=env_options, split=split,
        episodes=episodes, greedy=greedy, seed=seed,
    )  # fmt: skip
    origin = getattr(model, "rlid_origin", "local")
    return {"env": stats.pop("env"), "split": split, "model": str(config.model),
            "origin": origin, **stats}  # fmt: skip


def _check_episodes(episodes: int) -> None:
    if episodes < 1:
        raise ValueError(f"--episodes must be >= 1, got {episodes}")


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
        stats = evaluate(
            policy, env_list, episodes, interface=config.interface, seed=seed, greedy=greedy
        )
    return {"env": env_id, **stats}
