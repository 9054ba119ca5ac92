"""Old module paths of 0.1 (flat ``rlid/``), kept importable for a while.

``import rlid.runlog`` still works and gives :mod:`rlid.runs.log` (the same module
object), with a ``DeprecationWarning`` naming the new path. Kept through 0.3 (its
recipe change came first); removed in 0.4.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

MOVED: dict[str, str] = {
    "rlid.audit_exact": "rlid.audit.exact",
    "rlid.audit_label": "rlid.audit.label",
    "rlid.audit_mc": "rlid.audit.mc",
    "rlid.audit_moments": "rlid.audit.moments",
    "rlid.audit_report": "rlid.audit.report",
    "rlid.audit_states": "rlid.audit.states",
    "rlid.paraphrases": "rlid.audit.paraphrases",
    "rlid.compare_config": "rlid.compare.config",
    "rlid.compare_curves": "rlid.compare.curves",
    "rlid.compare_parse": "rlid.compare.parse",
    "rlid.compare_report": "rlid.compare.report",
    "rlid.compare_text": "rlid.compare.text",
    "rlid.stats": "rlid.compare.stats",
    "rlid.rundir": "rlid.runs.dir",
    "rlid.runlog": "rlid.runs.log",
    "rlid.files": "rlid.runs.files",
    "rlid.report": "rlid.runs.summary",
    "rlid.evaluation": "rlid.runs.evaluate",
    "rlid.train_cli": "rlid.cli.train",
    "rlid.play": "rlid.cli.play",
    "rlid.demo": "rlid.cli.demo",
}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # a placeholder, replaced in exec_module

    def exec_module(self, module: ModuleType) -> None:
        warnings.warn(
            f"{module.__name__} moved to {self.new}; the old path goes away in rlid 0.4",
            DeprecationWarning,
            stacklevel=3,
        )
        # the import system returns whatever sys.modules holds under the old name after
        # this call: the real module, whose own attributes (__spec__, ...) stay untouched
        sys.modules[module.__name__] = importlib.import_module(self.new)


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(new))


def install() -> None:
    """Put the finder on ``sys.meta_path`` once."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
