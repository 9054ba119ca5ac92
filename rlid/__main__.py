"""``python -m rlid`` (also ``torchrun ... -m rlid train ...``): the ``rlid`` command line."""

import sys

from rlid.cli.main import main

sys.exit(main())
