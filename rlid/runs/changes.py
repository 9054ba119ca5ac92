"""Values given together with ``--resume``: applied where that is safe, refused otherwise.

A larger ``steps`` extends a finished run (its final evaluation is redone); only
:data:`RESUME_CHANGEABLE` fields may change, and each change is recorded in
``config.json``'s ``history`` with the fingerprint it replaces, so the run's checkpoints
stay loadable.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from rlid import envs as envs_pkg
from rlid.config import TrainConfig
from rlid.menus import Interface
from rlid.runs import dir as rundir
from rlid.runs.lock import RunLock
from rlid.runs.log import check_resumable, config_fingerprint, read_run_config

# Fields a ``--resume`` may change: they decide how long the run goes and how it is
# watched, not what any iteration computes. Anything else is refused.
RESUME_CHANGEABLE = (
    "steps", "threads", "checkpoint_every", "checkpoint_minutes", "eval_every", "stop_on",
    # hardware: where and how, not what (dtype and mixed precision change the numbers)
    "device", "env_workers", "keep_checkpoints", "gradient_checkpointing", "ref_offload",
)  # fmt: skip


def apply_resume_changes(path: Path, changes: dict[str, Any]) -> dict[str, list[Any]]:
    """Apply config values given together with ``--resume`` to the run in ``path``
    (``interface`` / ``env_options``: only the fields given, :func:`resume_changes`).

    Values equal to the run's are fine. Of the rest, only :data:`RESUME_CHANGEABLE`
    fields may change (a larger ``steps`` extends a finished run: its final
    evaluation is redone); anything else is refused. The change is recorded in
    config.json's ``history`` with the fingerprint it replaces, so the run's
    checkpoints stay loadable. Returns ``{field: [old, new]}`` of what changed.
    """
    path = Path(path)
    changes = resume_changes(path, changes)
    with RunLock(path, "rlid train --resume (config change)"):
        rundir.refuse_run_links(path)
        config, raw = read_run_config(path)
        current = config.to_dict()
        full = {k: getattr(config, k) for k in config.__dataclass_fields__}
        if changes.get("episode_weight") == "auto":  # auto, resolved for this run's plane
            resolved = config.replace(episode_weight="auto").resolved_episode_weight
            changes = {**changes, "episode_weight": resolved}
        diff = {k: [full[k], v] for k, v in changes.items() if full.get(k) != v}
        refused = sorted(k for k in diff if k not in RESUME_CHANGEABLE)
        if refused:
            flags = ", ".join("--" + k.replace("_", "-") for k in refused)
            raise ValueError(
                f"{flags} cannot change when resuming {path} (the resumed iterations would "
                f"not be the ones this run computes); only "
                f"{', '.join('--' + k.replace('_', '-') for k in RESUME_CHANGEABLE)} can. "
                "Start a new run with --out to train with other values"
            )
        if not diff:
            return {}
        check_resumable(path, config)  # a resume refused later must find the run unchanged
        if "steps" in diff and diff["steps"][1] < diff["steps"][0]:
            raise ValueError(
                f"--steps {diff['steps'][1]} is below the run's {diff['steps'][0]}: a resume "
                "can extend a run, not shorten it"
            )
        new = TrainConfig.from_record({**current, **{k: v[1] for k, v in diff.items()}})
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "changes": diff,
            "fingerprint": raw.get("fingerprint") or config_fingerprint(config),
        }
        eval_path = path / "eval.json"
        # (a damaged eval.json is left to the resume, which rebuilds it from the checkpoint)
        evals = _readable_json(eval_path) if "steps" in diff else None
        if isinstance(evals, dict) and "after" in evals:  # the extension evaluates anew
            entry["previous_after"] = evals.pop("after")
            rundir.write_json(eval_path, evals, sealed=True)
        raw.update(config=new.to_dict(), fingerprint=config_fingerprint(new))
        raw["history"] = [*raw.get("history", []), entry]
        rundir.write_json(path / "config.json", raw, sealed=True)
    for key, (old, value) in diff.items():
        print(f"note: {path}: {key} {old} -> {value} (recorded in config.json history)",
              file=sys.stderr)  # fmt: skip
    return diff


def resume_changes(run_dir: Path, given: dict[str, Any]) -> dict[str, Any]:
    """Values given with ``--resume`` (``interface`` / ``env_options``: the fields given)
    as whole TrainConfig fields of the saved run; ``--env-option`` strings that resolve to
    the saved options count as unchanged."""
    saved, _ = read_run_config(run_dir)
    changes = dict(given)
    if isinstance(changes.get("interface"), dict):  # the fields given; an Interface: whole
        changes["interface"] = Interface.from_dict(
            {**saved.interface.to_dict(), **changes["interface"]}
        )
    if "env_options" in changes:
        options = {**saved.env_options, **changes["env_options"]}
        if options != saved.env_options:  # --env-option values are strings: compare resolved
            spec = envs_pkg.get_spec(saved.env)
            if spec.resolve(options) == spec.resolve(saved.env_options):
                options = saved.env_options
        changes["env_options"] = options
    return changes


def _readable_json(path: Path) -> Any:
    """A sealed JSON record, or None when it is missing or damaged."""
    try:
        return rundir.read_json(path, sealed=True) if path.is_file() else None
    except ValueError:
        return None
