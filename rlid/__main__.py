"""``python -m rlid`` (also ``torchrun ... -m rlid train ...``): the ``rlid`` command line."""

import sys

from rlid.cli.main import main
from rlid.distributed import exit_process, in_multi_process_run

code = main()
if in_multi_process_run():  # one of several processes: no interpreter teardown
    exit_process(code)
sys.exit(code)
