"""A model folder is untrusted input: no custom code (even when a terminal says yes),
no pickle weights, one line for a malformed folder."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from rlid.cli import main as cli_main
from rlid.lm.models import save_policy_model
from rlid.lm.starts import load_policy_model

ROOT = Path(__file__).resolve().parents[1]
EVAL = ["--env", "keydoor", "-o", "size=2", "--episodes", "1"]
PLANTED = """import pathlib
pathlib.Path({marker!r}).write_text("the model folder's code ran")
from transformers import LlamaConfig


class PlantedConfig(LlamaConfig):
    model_type = "planted"
"""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("model") / "tiny"
    save_policy_model(*load_policy_model("tiny-random"), path)
    return path


@pytest.fixture
def folder(model_dir, tmp_path) -> Path:
    dest = tmp_path / "model"
    shutil.copytree(model_dir, dest)
    return dest


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith(("note:", "WARN"))]
    assert len(lines) == 1, err
    return lines[0]


def plant_custom_code(folder: Path, marker: Path, config_name: str = "config.json") -> None:
    (folder / "configuration_planted.py").write_text(PLANTED.format(marker=str(marker)))
    config = json.loads((folder / config_name).read_text())
    config["auto_map"] = {"AutoConfig": "configuration_planted.PlantedConfig"}
    if config_name == "config.json":  # an architecture transformers does not know
        config["model_type"] = "planted"
    (folder / config_name).write_text(json.dumps(config))


@pytest.mark.parametrize("config_name", ["config.json", "tokenizer_config.json"])
def test_a_folder_asking_for_custom_code_is_refused_naming_the_field(
    folder, tmp_path, capsys, config_name
):
    marker = tmp_path / "ran"
    plant_custom_code(folder, marker, config_name)
    assert cli_main(["eval", "--model", str(folder), *EVAL]) == 2
    line = one_line(capsys)
    assert "custom code" in line and "'auto_map'" in line and config_name in line
    assert cli_main(["train", "--model", str(folder), "--out", str(tmp_path / "r"), "--quiet"]) == 2
    assert "'auto_map'" in one_line(capsys)
    assert not marker.exists() and not (tmp_path / "r").exists()


def test_custom_code_never_runs_even_when_a_terminal_answers_yes(folder, tmp_path):
    # transformers asks "Do you wish to run the custom code? [y/N]" on a terminal unless
    # trust_remote_code is given; here the terminal answers y to whatever is asked
    marker = tmp_path / "ran"
    plant_custom_code(folder, marker)
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlid", "eval", "--model", str(folder), *EVAL],
        stdin=secondary, stdout=secondary, stderr=secondary, close_fds=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    os.close(secondary)
    said = b""
    deadline = time.time() + 120
    while proc.poll() is None and time.time() < deadline:
        ready, _, _ = select.select([primary], [], [], 0.2)
        if ready:
            try:
                said += os.read(primary, 4096)
            except OSError:
                break
        os.write(primary, b"y\n")
    proc.wait(timeout=60)
    os.close(primary)
    assert proc.returncode == 2, said
    assert not marker.exists(), said
    assert b"auto_map" in said and b"wish to run" not in said


def test_pickle_only_weights_are_refused_without_advising_an_unsafe_load(folder, capsys):
    weights = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    torch.save(weights, folder / "pytorch_model.bin")
    assert cli_main(["eval", "--model", str(folder), *EVAL]) == 2
    line = one_line(capsys)
    assert "pytorch_model.bin" in line and "safetensors weights only" in line
    assert "weights_only=False" not in line


def test_a_folder_without_weights_is_one_line(folder, capsys):
    (folder / "model.safetensors").unlink()
    assert cli_main(["eval", "--model", str(folder), *EVAL]) == 2
    assert "holds no weights" in one_line(capsys)


def test_non_finite_weights_are_refused_naming_the_tensor(folder, capsys):
    weights = load_file(str(folder / "model.safetensors"))
    name = sorted(weights)[0]
    weights[name][0] = float("nan")
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    assert cli_main(["eval", "--model", str(folder), *EVAL]) == 2
    line = one_line(capsys)
    assert "not finite" in line and name in line and str(folder) in line


def test_loading_passes_trust_remote_code_false(folder, monkeypatch):
    import transformers

    seen = []
    for cls in (transformers.AutoTokenizer, transformers.AutoModelForCausalLM):
        real = cls.from_pretrained

        def spy(*args, _real=real, **kwargs):
            seen.append(kwargs.get("trust_remote_code"))
            return _real(*args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", spy)
    load_policy_model(str(folder))
    assert seen == [False, False]
