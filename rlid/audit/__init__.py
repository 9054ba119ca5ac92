"""The marginalization variance identity, checked exactly (docs/design.md §7; ``rlid audit``).

* :mod:`rlid.audit.run`         — :func:`audit` and :class:`AuditConfig`: the whole audit.
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

from rlid.audit.run import (
    AUDIT_INTERFACE,
    AuditConfig,
    audit,
    load_wordings,
    parse_advantages,
    resolve_problem,
)

__all__ = [
    "AUDIT_INTERFACE",
    "AuditConfig",
    "add_audit_parser",
    "audit",
    "load_wordings",
    "parse_advantages",
    "resolve_problem",
]


def add_audit_parser(subparsers: Any) -> None:
    """Register ``rlid audit`` (see :mod:`rlid.audit.cli`)."""
    from rlid.audit.cli import add_audit_parser as add

    add(subparsers)
