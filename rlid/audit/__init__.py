"""The marginalization variance identity, checked exactly (docs/design.md §7; ``rlid audit``).

* :mod:`rlid.audit.run`         — :func:`audit`: the whole audit.
* :mod:`rlid.audit.config`      — :class:`AuditConfig`: what it enumerates and how.
* :mod:`rlid.audit.exact`       — exact enumeration of wordings and their scores (float64).
* :mod:`rlid.audit.moments`     — the variance decomposition from exact moments.
* :mod:`rlid.audit.mc`          — the Monte-Carlo picture with bootstrap intervals.
* :mod:`rlid.audit.label`       — control 2: the label-readout policy of the same weights.
* :mod:`rlid.audit.states`      — the built-in audit states.
* :mod:`rlid.audit.paraphrases` — wording styles (paraphrases of a command).
* :mod:`rlid.audit.report`      — the table and the plot.
* :mod:`rlid.audit.cli`         — ``rlid audit``.
"""

from __future__ import annotations

from typing import Any

from rlid.audit.config import AuditConfig

# the rest is read from rlid.audit.run (torch) on first use, so that `rlid audit --help`
# and importing the package stay light
_FROM_RUN = ("AUDIT_INTERFACE", "audit", "load_wordings", "parse_advantages", "resolve_problem")

__all__ = [
    "AUDIT_INTERFACE",
    "AuditConfig",
    "audit",
    "load_wordings",
    "parse_advantages",
    "resolve_problem",
]


def __getattr__(name: str) -> Any:
    if name in _FROM_RUN:
        # lazy: the audit imports torch; importing the package (`rlid audit --help`) must not
        from rlid.audit import run

        return getattr(run, name)
    raise AttributeError(f"module 'rlid.audit' has no attribute {name!r}")
