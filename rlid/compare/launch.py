"""One process of a multi-process comparison run (``[arms.NAME] nproc = N``).

``rlid compare`` starts ``torchrun --standalone --nproc-per-node N -m
rlid.compare.launch RUN_DIR CONFIG_JSON|resume PROGRESS``; every process trains the
same run directory through ``run_training`` (rank 0 alone writes it).
"""

from __future__ import annotations

import faulthandler
import json
import sys
from pathlib import Path

from rlid.config import TrainConfig
from rlid.planes import run_training


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # a process of its own: a native crash prints the Python stack
        faulthandler.enable()
    run_dir, spec, progress = argv if argv is not None else sys.argv[1:]
    if spec == "resume":
        run_training(None, Path(run_dir), resume=True, progress=json.loads(progress))
    else:
        config = TrainConfig.from_record(json.loads(Path(spec).read_text()))
        run_training(config, Path(run_dir), resume=False, progress=json.loads(progress))
    return 0


if __name__ == "__main__":
    sys.exit(main())
