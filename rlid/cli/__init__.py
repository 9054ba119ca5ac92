"""The ``rlid`` command line: the one layer (with :mod:`rlid.compare`) that sees every plane.

* :mod:`rlid.cli.main`     — the parser, error handling and ``envs`` / ``play``.
* :mod:`rlid.cli.train`    — ``rlid train`` and ``rlid eval``.
* :mod:`rlid.cli.pretrain` — ``rlid pretrain``.
* :mod:`rlid.cli.demo`     — ``rlid demo``.
* :mod:`rlid.cli.play`     — the terminal game loop of ``rlid play``.
"""

from __future__ import annotations

from rlid.cli.main import UserError, build_parser, main

__all__ = ["UserError", "build_parser", "main"]
