"""The built wheel installs one top-level import name, ``rlid``: its envs, menus and
baselines are ``rlid.envs``, ``rlid.menus`` and ``rlid.baselines``, so an environment
that already has OpenAI Baselines (import name ``baselines``) or any other ``envs`` /
``menus`` package keeps both."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import baselines, gymnasium, rlid, rlid.baselines, rlid.envs, rlid.menus
import importlib.util
assert baselines.WHO == "someone else's baselines", baselines.__file__
for name in ("rlid", "rlid.baselines", "rlid.envs", "rlid.menus"):
    module = __import__(name, fromlist=["_"])
    assert module.__file__.startswith(SITE), (name, module.__file__)
for name in ("envs", "menus"):
    assert importlib.util.find_spec(name) is None, name
env = gymnasium.make("rlid/KeyDoor-v0", size=3)
print("ok", env.spec.id, rlid.baselines.__name__)
"""


@pytest.mark.slow
def test_the_wheel_installs_beside_another_baselines_package(tmp_path):
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "dist"), str(ROOT)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("rlid-*.whl")
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"rlid"}
    site = tmp_path / "site"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site),
         str(wheel)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-2000:]
    other = tmp_path / "other" / "baselines"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text('WHO = "someone else\'s baselines"\n')
    # the wheel first, the other package beside it, then this environment's dependencies
    # (a plain folder on the path: its editable rlid finder is not loaded)
    deps = sysconfig.get_paths()["purelib"]
    path = os.pathsep.join([str(site), str(tmp_path / "other"), deps])
    run = subprocess.run(
        [sys.executable, "-S", "-c", f"SITE = {str(site)!r}\n" + PROBE],
        capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": path},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["ok", "rlid/KeyDoor-v0", "rlid.baselines"]
