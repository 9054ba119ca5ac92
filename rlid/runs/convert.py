"""Convert a run directory's old pickle checkpoint state to safetensors + JSON.

    python -m rlid.runs.convert RUN_DIR

rlid up to 0.1 wrote ``checkpoint/trainer_state.pt`` (a pickle). Loading a pickle
can execute code, so rlid now refuses it; this reads it with
``torch.load(weights_only=True)`` (tensors and plain data only: anything else is
refused before it runs) and writes ``trainer_state.safetensors`` + ``.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rlid.runs.dir import (
    CHECKPOINT,
    TRAINER_STATE,
    read_json,
    recover_checkpoint_dir,
    refuse_run_links,
    write_json,
)
from rlid.runs.integrity import FILES, file_sha256
from rlid.runs.lock import RunLock
from rlid.runs.state import LEGACY_NAME, convert_legacy_state


def convert_run(run_dir: Path) -> Path:
    """Convert ``run_dir``'s checkpoint in place (under the run's lock); returns its path."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.json").is_file():
        raise FileNotFoundError(f"{run_dir} is not a run directory (no config.json)")
    with RunLock(run_dir, "python -m rlid.runs.convert"):
        refuse_run_links(run_dir)
        ckpt = recover_checkpoint_dir(run_dir) or run_dir / CHECKPOINT
        convert_legacy_state(ckpt)
        _record_converted(ckpt)
    return ckpt


def _record_converted(ckpt: Path) -> None:
    """A checkpoint that lists its files' sha256 lists the converted ones instead of the
    pickle (one of rlid <= 0.1 lists none: nothing to do)."""
    path = ckpt / "state.json"
    state = read_json(path, sealed=True)
    if not isinstance(state, dict) or not isinstance(state.get(FILES), dict):
        return
    files = {k: v for k, v in state[FILES].items() if k != LEGACY_NAME}
    for name in (f"{TRAINER_STATE}.json", f"{TRAINER_STATE}.safetensors"):
        files[name] = file_sha256(ckpt / name)
    write_json(path, {**state, FILES: files}, sealed=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        ckpt = convert_run(Path(args[0]))
    except (ValueError, OSError, RuntimeError) as err:
        print(f"rlid convert: error: {err}", file=sys.stderr)
        return 2
    print(f"converted {ckpt} to trainer_state.safetensors + trainer_state.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
