"""The layering contract (pyproject.toml, import-linter) and the typed-package markers.

    envs  <-  menus  <-  rlid core  <-  baselines  <-  rlid.cli / rlid.compare

``make test`` runs ``lint-imports`` itself; these tests show that the contract
really fails on a wrong import (with a message naming it) and that no new module
of the ``rlid`` core can escape the contract by not being listed in it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("envs", "menus", "rlid", "baselines")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    if not LINT_IMPORTS.exists():
        pytest.skip("import-linter is not installed (it comes with the test extra)")
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


def _copy_tree(tmp_path: Path) -> Path:
    for name in PACKAGES:
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_contract_is_kept_on_the_repository() -> None:
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_core_importing_baselines_breaks_the_contract_with_a_clear_message(tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path)
    readout = tree / "rlid" / "readout.py"
    readout.write_text(readout.read_text() + "\nimport baselines.losses  # noqa: E402,F401\n")
    result = _lint_imports(tree)
    assert result.returncode != 0
    assert "rlid.readout is not allowed to import baselines" in result.stdout
    assert "rlid.readout -> baselines.losses" in result.stdout


def test_menus_importing_torch_breaks_the_contract(tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path)
    menu = tree / "menus" / "menu.py"
    menu.write_text(menu.read_text() + "\nimport torch  # noqa: E402,F401\n")
    result = _lint_imports(tree)
    assert result.returncode != 0
    assert "menus is not allowed to import torch" in result.stdout
    assert "menus.menu -> torch" in result.stdout


def test_every_rlid_module_is_named_in_the_layers_contract() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c for c in config["contracts"] if c["type"] == "layers"]
    named = {m.strip() for layer in layers["layers"] for m in layer.replace("|", ":").split(":")}
    present = {
        f"rlid.{p.stem}" if p.is_file() else f"rlid.{p.name}"
        for p in (ROOT / "rlid").iterdir()
        if (p.suffix == ".py" and not p.stem.startswith("_"))
        or (p.is_dir() and (p / "__init__.py").exists())
    }
    missing = sorted(present - named)
    assert not missing, f"modules outside the layering contract (add them to a layer): {missing}"


def test_packages_ship_py_typed() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for name in PACKAGES:
        assert (ROOT / name / "py.typed").exists()
        assert "py.typed" in data["package-data"][name]
