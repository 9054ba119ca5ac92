"""Shared test settings."""

from __future__ import annotations

import pytest
from hypothesis import settings

# CI machines are shared and slow: no per-example deadline, and a fixed derivation of
# examples so a failure reproduces.
settings.register_profile("rlid", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("rlid")


@pytest.fixture(autouse=True, scope="session")
def _small_warm_start_recipe():
    """``--model tiny`` builds its warm start on first use; in tests, from a tiny recipe.

    A non-default recipe has its own cache directory (``rlid.models.tiny_cache_dir``),
    so this never replaces a real warm-started model in the user's cache.
    """
    from rlid import models
    from rlid.pretrain import PretrainConfig

    saved = models.WARM_START_RECIPE
    models.WARM_START_RECIPE = PretrainConfig(
        envs=("keydoor",), episodes_per_env=2, max_episode_steps=4, steps=2, batch_size=2,
        threads=1,
    )  # fmt: skip
    yield
    models.WARM_START_RECIPE = saved
