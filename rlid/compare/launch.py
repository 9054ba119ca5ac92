"""One process of a multi-process comparison run (``[arms.NAME] nproc = N``).

``rlid compare`` starts ``torchrun --standalone --nproc-per-node N -m
rlid.compare.launch RUN_DIR CONFIG_JSON|resume PROGRESS``; every process trains the
same run directory through ``run_training`` (rank 0 alone writes it). Each process
writes its pid into ``$RLID_LAUNCH_PIDS/rankN`` so that ``rlid compare`` can pass a
SIGTERM / Ctrl-C on to it; stopped by one, after its checkpoint, rank 0 writes
``stopped.json`` there and every process exits 0 (the comparison says how to resume).
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
from pathlib import Path

from rlid.compare.run import PIDS_ENV, STOPPED
from rlid.config import TrainConfig
from rlid.core.loop import run_training
from rlid.runs.dir import write_json
from rlid.runs.files import atomic_write_text
from rlid.runs.stop import RunStopped


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # a process of its own: a native crash prints the Python stack
        faulthandler.enable()
    run_dir, spec, progress = argv if argv is not None else sys.argv[1:]
    pids = os.environ.get(PIDS_ENV)
    rank = os.environ.get("RANK", "0")
    if pids:  # `rlid compare` passes a stop on to these pids
        atomic_write_text(Path(pids) / f"rank{rank}", str(os.getpid()))
    try:
        if spec == "resume":
            run_training(None, Path(run_dir), resume=True, progress=json.loads(progress))
        else:
            config = TrainConfig.from_record(json.loads(Path(spec).read_text()))
            run_training(config, Path(run_dir), resume=False, progress=json.loads(progress))
    except RunStopped as stopped:
        # every rank checkpointed the same iteration; `rlid compare` says how to resume,
        # and a clean exit keeps torchrun from reporting failed workers
        if pids and rank == "0":
            write_json(
                Path(pids) / STOPPED, {"signum": stopped.signum, "iteration": stopped.iteration}
            )
        if not pids:
            raise
    return 0


if __name__ == "__main__":
    from rlid.lm.distributed import exit_process

    exit_process(main())  # always one of several processes: no interpreter teardown
