"""Every error a user's input or machine causes is one line with exit 2, saying what
is wrong and where (not an internal error, not advice about another problem)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from rlid.cli import main as cli_main
from rlid.cli.main import error_message
from rlid.lm.models import save_policy_model
from rlid.lm.starts import load_policy_model

TRAIN = ["--model", "tiny-random", "--env", "keydoor", "-o", "size=2", "-o", "keys=0",
         "-o", "distractors=1", "--steps", "8", "--groups-per-iter", "2", "--group-size", "2",
         "--epochs", "1", "--threads", "1", "--eval-episodes", "1", "--memory", "none",
         "--quiet"]  # fmt: skip
EVAL = ["--env", "keydoor", "-o", "size=2", "--episodes", "1"]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.delenv("RLID_DEBUG", raising=False)


def one_line(capsys) -> str:
    return one_line_of(capsys.readouterr().err)


def one_line_of(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith(("note:", "WARN"))]
    assert len(lines) == 1, err
    assert "internal error" not in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("finished") / "run"
    assert cli_main(["train", *TRAIN, "--out", str(out)]) == 0
    return out


@pytest.fixture
def model_folder(tmp_path) -> Path:
    path = tmp_path / "model"
    save_policy_model(*load_policy_model("tiny-random"), path)
    return path


# ------------------------------------------------------------------ config files
def test_a_deeply_nested_toml_file_is_named(tmp_path, capsys):
    path = tmp_path / "deep.toml"
    path.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    assert cli_main(["train", *TRAIN, "--config", str(path), "--out", str(tmp_path / "r")]) == 2
    line = one_line(capsys)
    assert str(path) in line and "too deeply" in line, line


def test_a_binary_toml_file_is_named(tmp_path, capsys):
    path = tmp_path / "binary.toml"
    path.write_bytes(bytes(range(256)) * 4)
    assert cli_main(["train", *TRAIN, "--config", str(path), "--out", str(tmp_path / "r")]) == 2
    line = one_line(capsys)
    assert str(path) in line and "not a text file" in line, line


def test_a_directory_given_as_config_is_called_a_directory(tmp_path, capsys):
    assert cli_main(["train", *TRAIN, "--config", str(tmp_path), "--out", str(tmp_path / "r")]) == 2
    line = one_line(capsys)
    assert "is a directory" in line and "does not exist" not in line, line


@pytest.mark.parametrize("command", ["train", "eval"])
def test_env_options_that_are_not_a_table_show_the_form(tmp_path, capsys, command):
    path = tmp_path / "c.toml"
    path.write_text('env = "keydoor"\nenv_options = "size=2"\n')
    argv = ["train", *TRAIN, "--out", str(tmp_path / "r")] if command == "train" else [
        "eval", "--model", "tiny-random", "--episodes", "1"]  # fmt: skip
    assert cli_main([*argv, "--config", str(path)]) == 2
    line = one_line(capsys)
    assert "'env_options' must be a table, e.g. env_options = {size = 2}" in line, line


def test_a_huge_value_is_not_echoed_whole(tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text(f'env = "{"x" * 10_000_000}"\n')
    argv = ["train", "--model", "tiny-random", "--config", str(path), "--out", str(tmp_path / "r")]
    assert cli_main(argv) == 2
    line = one_line(capsys)
    assert "unknown env id" in line and len(line) < 1200, len(line)


def test_any_error_line_is_capped_and_kept_on_one_line(monkeypatch, capsys):
    main_mod = __import__("sys").modules["rlid.cli.main"]

    def long(args):
        raise ValueError("first\nsecond " + "y" * 100_000)

    monkeypatch.setattr(main_mod, "_cmd_envs", long)
    assert cli_main(["envs"]) == 2
    line = one_line(capsys)
    assert line.startswith("rlid envs: error: first second") and len(line) < 1200
    assert "characters left out" in line


# ------------------------------------------------------------------ model folders
def test_a_model_config_holding_a_list_is_named(model_folder, capsys):
    (model_folder / "config.json").write_text("[1, 2]")
    assert cli_main(["eval", "--model", str(model_folder), *EVAL]) == 2
    line = one_line(capsys)
    assert "config.json holds a JSON list" in line, line


def test_a_model_without_tokenizer_files_says_so_in_one_line(model_folder, capsys):
    (model_folder / "tokenizer.json").unlink()
    assert cli_main(["eval", "--model", str(model_folder), *EVAL]) == 2
    line = one_line(capsys)
    assert "has no tokenizer files" in line and "sentencepiece" not in line.lower(), line


# ------------------------------------------------------------------ run directories
@pytest.mark.parametrize(("command", "verb"), [("eval", "evaluate"), ("export", "export")])
def test_eval_and_export_of_a_checkpoint_without_weights_say_what_they_cannot_do(
    finished_run, tmp_path, capsys, command, verb
):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    (run / "checkpoint" / "model" / "model.safetensors").unlink()
    argv = (["eval", "--run", str(run), "--episodes", "1"] if command == "eval"
            else ["export", str(run), str(tmp_path / "agent")])  # fmt: skip
    assert cli_main(argv) == 2
    line = one_line(capsys)
    assert f"cannot {verb}:" in line and "resume" not in line, line


def test_an_out_holding_only_a_dotfile_is_not_called_a_run(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / ".hidden").write_text("mine")
    assert cli_main(["train", *TRAIN, "--out", str(out)]) == 2
    line = one_line(capsys)
    assert "not a run directory" in line and ".hidden" in line and "--resume" not in line, line


def test_a_dangling_link_as_out_is_one_line(tmp_path, capsys):
    (tmp_path / "out").symlink_to(tmp_path / "nowhere")
    assert cli_main(["train", *TRAIN, "--out", str(tmp_path / "out")]) == 2
    line = one_line(capsys)
    assert "does not exist" in line and "File exists" not in line, line
    assert not (tmp_path / "nowhere").exists()


# ------------------------------------------------------------------ a full disk
def test_a_full_disk_while_saving_safetensors_names_the_disk_and_the_path():
    from safetensors import SafetensorError

    err = SafetensorError(
        "Error while serializing: I/O error: No space left on device (os error 28)"
    )
    line = error_message(err)
    assert "disk is full" in line and "corrupt" not in line, line


def test_a_checkpoint_save_on_a_full_disk_says_so_naming_the_checkpoint(
    tmp_path, capsys, monkeypatch
):
    import safetensors.torch
    from safetensors import SafetensorError

    import rlid.runs.state as state_mod

    def full(*args, **kwargs):
        raise SafetensorError(
            "Error while serializing: I/O error: No space left on device (os error 28)"
        )

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    monkeypatch.setattr(state_mod, "save_file", full)  # the trainer state's writer
    out = tmp_path / "run"
    assert cli_main(["train", *TRAIN, "--out", str(out)]) == 2
    line = one_line(capsys)
    assert f"No space left on device: {out / 'checkpoint'}" in line and "disk is full" in line
    assert "corrupt" not in line


def test_a_real_full_disk_is_one_line(tmp_path, capsys):
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(small)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a small file system here (needs root)")
    try:
        assert cli_main(["train", *TRAIN, "--out", str(small / "run")]) == 2
        line = one_line(capsys)
        assert "No space left on device" in line and "disk is full" in line, line
        assert "corrupt" not in line
    finally:
        subprocess.run(["umount", "--lazy", str(small)], check=True)


# ------------------------------------------------------------------ terminal safety
@pytest.mark.parametrize("control", ["\u001b[31m", "\u0007", "\u0000", "\u009b2J", "\u202e"])
@pytest.mark.parametrize("where", ["wording", "action", "goal"])
def test_audit_refuses_text_that_could_drive_the_terminal(tmp_path, capsys, control, where):
    wordings = {"go east": ["go east", "walk east"], "look": ["look"]}
    argv = ["audit", "--mc-sizes", "2", "--n-boot", "10"]
    if where == "wording":
        wordings["go east"].append(f"go {control}east")
    elif where == "action":
        wordings[f"take {control}key"] = ["take key"]
    else:
        argv += ["--goal", f"find {control}the key"]
    path = tmp_path / "w.json"
    path.write_text(json.dumps(wordings))
    assert cli_main([*argv, "--wordings", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    line = one_line_of(captured.err)
    assert f"{where} (" in line and "control character U+" in line, line
    assert not any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 or c == "\u202e" for c in line), line


def test_audit_threads_are_bounded(capsys):
    assert cli_main(["audit", "--threads", "100000"]) == 2
    assert "--threads 100000 is out of range" in one_line_of(capsys.readouterr().err)
    assert cli_main(["audit", "--threads", "4000"]) == 2  # within the table, not this machine
    assert "--threads 4000 is not between 1 and" in one_line_of(capsys.readouterr().err)
