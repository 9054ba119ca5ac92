"""Shared test settings."""

from __future__ import annotations

from hypothesis import settings

# CI machines are shared and slow: no per-example deadline, and a fixed derivation of
# examples so a failure reproduces.
settings.register_profile("rlid", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("rlid")
