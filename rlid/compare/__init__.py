"""The comparison harness (``rlid compare``): arms x envs x seeds under one budget.

* :mod:`rlid.compare.config` — :class:`CompareConfig`, arms, envs and run specs.
* :mod:`rlid.compare.parse`  — TOML -> :class:`CompareConfig`, with every check.
* :mod:`rlid.compare.run`    — :func:`run_comparison`: train, resume, reuse, evaluate.
* :mod:`rlid.compare.status` — ``--status``: where every run stands, read-only.
* :mod:`rlid.compare.report` — ``report.md``, ``results.json`` and the plots.
* :mod:`rlid.compare.curves` — learning curves against every budget currency.
* :mod:`rlid.compare.text`   — the text tables of the report.
* :mod:`rlid.compare.stats`  — bootstrap intervals across seeds.
* :mod:`rlid.compare.cli`    — ``rlid compare``.

Like :mod:`rlid.cli`, this layer sees every plane (through :mod:`rlid.config.registry`).
"""

from __future__ import annotations

from typing import Any

from rlid.compare.config import CompareConfig
from rlid.compare.parse import load_compare_config

__all__ = ["CompareConfig", "load_compare_config", "run_comparison"]


def __getattr__(name: str) -> Any:
    if name == "run_comparison":  # imports torch: on first use, not with the package
        # lazy: the runner imports torch; importing the package must not
        from rlid.compare.run import run_comparison

        return run_comparison
    raise AttributeError(f"module 'rlid.compare' has no attribute {name!r}")
