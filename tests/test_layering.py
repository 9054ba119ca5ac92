"""The layering contract (pyproject.toml, import-linter), the import graph, and the
typed-package markers.

    rlid.envs < rlid.menus < rlid.config < rlid.runs < rlid.lm | rlid.losses < rlid.engines
    < rlid.core < the planes (rlid.decision | rlid.baselines.token | rlid.baselines.scoring)
    < rlid.agents | rlid.audit < rlid.compare < rlid.cli

``make test`` runs ``lint-imports`` itself; these tests show that the contract
really fails on a wrong import (with a message naming it), that no new module of
``rlid`` can escape the contract by not being listed in it, that the import graph has
no circle (function-level and ``TYPE_CHECKING`` imports counted), and that imports
inside functions are few and each says why.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("envs", "menus", "rlid", "baselines")  # rlid/envs, ... link to the others
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
    for name in FOLDERS:
        shutil.copytree(
            ROOT / name, tmp_path / name, symlinks=True,
            ignore=shutil.ignore_patterns("__pycache__"),
        )  # fmt: skip
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_contract_is_kept_on_the_repository() -> None:
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_core_importing_baselines_breaks_the_contract_with_a_clear_message(tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path)
    readout = tree / "rlid" / "core" / "rollout.py"
    readout.write_text(readout.read_text() + "\nimport rlid.baselines.scoring  # noqa: E402,F401\n")
    result = _lint_imports(tree)
    assert result.returncode != 0
    assert "rlid.core is not allowed to import rlid.baselines.scoring" in result.stdout
    assert "rlid.core.rollout -> rlid.baselines.scoring" in result.stdout


def test_a_plane_importing_another_plane_breaks_the_contract(tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path)
    scoring = tree / "baselines" / "scoring.py"
    scoring.write_text(scoring.read_text() + "\nimport rlid.decision.policy  # noqa: E402,F401\n")
    result = _lint_imports(tree)
    assert result.returncode != 0
    assert "rlid.baselines.scoring -> rlid.decision.policy" in result.stdout


def test_menus_importing_torch_breaks_the_contract(tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path)
    menu = tree / "menus" / "menu.py"
    menu.write_text(menu.read_text() + "\nimport torch  # noqa: E402,F401\n")
    result = _lint_imports(tree)
    assert result.returncode != 0
    assert "rlid.menus is not allowed to import torch" in result.stdout
    assert "rlid.menus.menu -> torch" in result.stdout


def test_every_rlid_module_is_named_in_the_layers_contract() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c for c in config["contracts"] if c["type"] == "layers"]
    named = {m.strip() for layer in layers["layers"] for m in layer.replace("|", ":").split(":")}

    def covered(module: str) -> bool:
        return any(module == n or module.startswith(n + ".") for n in named)

    # every module, or a package above it, sits on a floor (the packages that only hold
    # floors, rlid and rlid.baselines, excepted)
    # (rlid/data holds the shipped start and the script that wrote its corpus: no package)
    missing = sorted(
        m for m in _modules()
        if m not in ("rlid", "rlid.baselines") and not m.startswith("rlid.data.") and not covered(m)
    )  # fmt: skip
    assert not missing, f"modules outside the layering contract (add them to a layer): {missing}"


def test_packages_ship_py_typed() -> None:
    """One import name, one marker: PEP 561's py.typed at the top of ``rlid`` covers its
    sub-packages (rlid.envs, rlid.menus, rlid.baselines included)."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert (ROOT / "rlid" / "py.typed").exists()
    assert "py.typed" in data["package-data"]["rlid"]
    assert data["packages"]["find"]["include"] == ["rlid*"]  # no other top-level name


def test_storage_importing_the_core_breaks_the_contract(tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path)
    files = tree / "rlid" / "runs" / "files.py"
    files.write_text(files.read_text() + "\nimport rlid.core.train  # noqa: E402,F401\n")
    result = _lint_imports(tree)
    assert result.returncode != 0
    assert "rlid.runs is not allowed to import rlid.core" in result.stdout
    assert "rlid.runs.files -> rlid.core.train" in result.stdout


# ------------------------------------------------------------------- the import graph
def _modules() -> dict[str, Path]:
    """Every module of ``rlid`` (through its links), by its import name."""
    found = {}
    for folder, _, files in os.walk(ROOT / "rlid", followlinks=True):
        for file in files:
            if file.endswith(".py"):
                path = Path(folder) / file
                name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                found[name.removesuffix(".__init__")] = path
    return found


def _imports(path: Path) -> list[tuple[ast.AST, list[str], bool]]:
    """Every import statement of a file: (node, the names it imports, inside a function)."""
    tree = ast.parse(path.read_text())
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            inside |= {id(sub) for sub in ast.walk(node)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        out.append((node, names, id(node) in inside))
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for _, names, _ in _imports(path):
            for target in filter(None, map(owner, names)):
                # a package importing its own children is not a circle
                if target != name and not target.startswith(name + "."):
                    edges[name].add(target)
    return edges


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_has_no_circle() -> None:
    assert _circles(_graph()) == []


def test_the_circle_finder_finds_a_circle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _circles(edges) == [["a", "b", "c"]]


MAX_FUNCTION_LEVEL_IMPORTS = 30


def test_imports_inside_functions_are_few_and_say_why() -> None:
    """An import inside a function hides a dependency from the contract's reader; it is
    kept only where a comment on its line or the line above says why (an optional
    dependency, a heavy one that most commands never need, CLI start-up speed)."""
    local = []
    unexplained = []
    for path in _modules().values():
        lines = path.read_text().splitlines()
        for node, _, in_function in _imports(path):
            if not in_function:
                continue
            local.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            here, above = lines[node.lineno - 1], lines[node.lineno - 2].strip()
            if "#" not in here and "#" not in above:
                unexplained.append(f"{path.relative_to(ROOT)}:{node.lineno}: {here.strip()}")
    assert not unexplained, "imports inside functions without a comment saying why:\n" + "\n".join(
        unexplained
    )
    assert len(local) <= MAX_FUNCTION_LEVEL_IMPORTS, local
