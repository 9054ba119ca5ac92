"""scripts/install_torch.py picks PyTorch's CPU index where it answers and falls back to
the default index where it does not; nothing here downloads (reachability is mocked)."""

from __future__ import annotations

import importlib.util
import sys
import urllib.error
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "install_torch.py"


def _load():
    spec = importlib.util.spec_from_file_location("_install_torch", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


install = _load()


def test_cpu_index_when_it_answers():
    asked = []
    command, where = install.pip_command(
        "2.13.0", is_reachable=lambda url: asked.append(url) or True, python="py"
    )
    assert command == [
        "py",
        "-m",
        "pip",
        "install",
        "torch==2.13.0",
        "--index-url",
        install.CPU_INDEX,
    ]
    assert asked == [install.CPU_INDEX + "/torch/"]
    assert "CPU build" in where


def test_default_index_when_the_cpu_index_cannot_be_reached():
    command, where = install.pip_command("2.13.0", is_reachable=lambda url: False, python="py")
    assert command == ["py", "-m", "pip", "install", "torch==2.13.0"]
    assert where.startswith("note:") and "cannot be reached" in where


def test_gpu_and_an_explicit_index_ask_nothing():
    def never(url: str) -> bool:
        raise AssertionError("no reachability check expected")

    gpu, _ = install.pip_command("2.13.0", variant="gpu", is_reachable=never, python="py")
    assert gpu == ["py", "-m", "pip", "install", "torch==2.13.0"]
    url = "https://download.pytorch.org/whl/cu128"
    chosen, _ = install.pip_command("2.13.0", index_url=url, is_reachable=never, python="py")
    assert chosen[-2:] == ["--index-url", url]


@pytest.mark.parametrize(
    ("installed", "variant", "expected"),
    [
        (None, "cpu", False),
        ("2.13.0+cpu", "cpu", True),
        ("2.13.0", "cpu", True),  # a mirror's or macOS's plain build
        ("2.12.0+cpu", "cpu", False),
        ("2.13.0+cpu", "gpu", False),
        ("2.13.0+cu128", "gpu", True),
        ("2.13.0", "gpu", True),
    ],
)
def test_satisfied(installed, variant, expected):
    assert install.satisfied(installed, "2.13.0", variant) is expected


def test_reachable_is_quick_and_false_offline(monkeypatch):
    timeouts = []

    def refuse(request, timeout):
        timeouts.append(timeout)
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setattr(install.urllib.request, "urlopen", refuse)
    assert install.reachable(install.CPU_INDEX) is False
    assert timeouts == [install.TIMEOUT_S] and install.TIMEOUT_S <= 10

    def http_error(request, timeout):
        raise urllib.error.HTTPError(request.full_url, 403, "Forbidden", None, None)  # type: ignore[arg-type]

    monkeypatch.setattr(install.urllib.request, "urlopen", http_error)
    assert install.reachable(install.CPU_INDEX) is True  # it answered


def test_main_dry_run_offline(monkeypatch, capsys):
    monkeypatch.setattr(install, "installed_version", lambda package="torch": None)
    monkeypatch.setattr(install, "reachable", lambda url, timeout=5.0: False)
    assert install.main(["--dry-run", "--version", "2.13.0"]) == 0
    out = capsys.readouterr()
    assert "cannot be reached" in out.err
    assert out.out.strip().endswith("-m pip install torch==2.13.0")


def test_main_nothing_to_do(monkeypatch, capsys):
    monkeypatch.setattr(install, "installed_version", lambda package="torch": "2.13.0+cpu")
    monkeypatch.setattr(install.subprocess, "run", lambda *a, **k: pytest.fail("pip ran"))
    assert install.main([]) == 0
    assert "nothing to do" in capsys.readouterr().out


def test_makefile_installs_torch_with_the_script():
    makefile = (SCRIPT.parents[1] / "Makefile").read_text()
    assert "scripts/install_torch.py -q --variant $(TORCH)" in makefile
    assert "pip install -q torch==" not in makefile  # every venv goes through the script
