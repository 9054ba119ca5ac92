"""``python -m rlid`` (also ``torchrun ... -m rlid train ...``): the ``rlid`` command line."""

import os
import sys

from rlid.cli.main import main

code = main()
if os.environ.get("WORLD_SIZE"):  # torchrun; rlid.lm.distributed imports torch, so only then
    from rlid.lm.distributed import exit_process, in_multi_process_run

    if in_multi_process_run():  # one of several processes: no interpreter teardown
        exit_process(code)
sys.exit(code)
