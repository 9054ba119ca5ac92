"""Evaluate a finished (or interrupted) run directory on held-out games.

The acting policy of the run's plane comes from the plane registry (:mod:`rlid.planes`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import envs as envs_pkg
from rlid.planes import get_plane
from rlid.runs import dir as rundir


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
    import torch

    from rlid.lora import load_run_model
    from rlid.runs.log import RunLog, check_checkpoint, read_run_config
    from rlid.trainer import evaluate

    if episodes < 1:
        raise ValueError(f"--episodes must be >= 1, got {episodes}")
    # Read-only: no lock, so a running training can be evaluated alongside.
    config, _ = read_run_config(Path(run))
    ckpt = Path(run) / rundir.CHECKPOINT
    if not (ckpt / "state.json").exists():
        raise FileNotFoundError(f"{run} has no checkpoint yet; nothing to evaluate")
    check_checkpoint(ckpt, config)
    log = RunLog(Path(run), config, resuming=True)
    if config.threads is not None:  # unset: torch's default (OMP_NUM_THREADS)
        torch.set_num_threads(config.threads)
    model, tokenizer = load_run_model(config, log)
    model.eval()
    policy = get_plane(config.plane).make_policy(config, model, tokenizer)
    env_id = env or config.env
    options = dict(config.env_options) if env is None else {}
    options.update(env_options or {})
    options["split"] = split
    env_list = [envs_pkg.make(env_id, **options) for _ in range(min(episodes, 16))]
    with torch.no_grad():
        stats = evaluate(
            policy, env_list, episodes, interface=config.interface, seed=seed, greedy=greedy
        )
    state = rundir.read_json(log.path / rundir.CHECKPOINT / "state.json")
    return {"env": env_id, "split": split, "iteration": state["iteration"], **stats}
