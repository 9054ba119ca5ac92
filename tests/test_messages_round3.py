"""One line, exit 2, the right blame; and one escaping rule for everything printed back:
a terminal escape in a user-given name (an option key, a config or run path, a TOML key,
an export directory) is shown escaped, never sent to the terminal raw."""

from __future__ import annotations

import errno
import json
import shutil

import pytest

from rlid.cli import main as cli_main
from rlid.cli.main import error_message
from rlid.lm import start_files
from rlid.runs.files import write_errors_as_os_errors

ESC = "\x1b[31mRED\x1b]0;pwned\x07"


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.delenv("RLID_DEBUG", raising=False)


def _raw_free(capsys) -> str:
    captured = capsys.readouterr()
    for text in (captured.out, captured.err):
        assert "\x1b" not in text and "\x07" not in text, repr(text)
    return captured.err


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "-o", f"{ESC}=1", "--env", "keydoor", "--out", "OUT"],
        ["train", "--config", f"{ESC}.toml", "--out", "OUT"],
        ["train", "--resume", f"run{ESC}"],
        ["train", "--env", f"kd{ESC}", "--out", "OUT"],
        ["eval", "--run", f"run{ESC}"],
        ["export", f"run{ESC}", f"agent{ESC}"],
        ["compare", "--config", f"{ESC}.toml", "--out", "OUT"],
        ["train", f"--no-such-flag{ESC}"],
    ],
)
def test_an_escape_in_a_user_given_name_is_printed_escaped(tmp_path, monkeypatch, capsys, argv):
    monkeypatch.chdir(tmp_path)
    try:
        code = cli_main(argv)
    except SystemExit as exit_:  # argparse's own refusal
        code = exit_.code
    err = _raw_free(capsys)
    assert code == 2 and "\\x1b" in err, (code, err)


def test_an_unknown_toml_key_is_printed_escaped(tmp_path, capsys):
    config = tmp_path / "c.toml"
    config.write_text(
        f'"{ESC}" = 1\nenv = "keydoor"\n'.replace("\x1b", "\\u001b").replace("\x07", "\\u0007")
    )
    assert cli_main(["train", "--config", str(config), "--out", str(tmp_path / "o")]) == 2
    assert "\\x1b" in _raw_free(capsys)


def test_a_malformed_tokenizer_json_is_one_line_naming_it(tmp_path, capsys):
    model = tmp_path / "model"
    shutil.copytree(start_files.shipped_dir(), model)
    (model / "manifest.json").unlink()  # a local model, not the shipped start
    (model / "pretrain.json").unlink()
    (model / "tokenizer.json").write_text(json.dumps({"version": 1.0, "model": 7}))
    code = cli_main(["eval", "--model", str(model), "--env", "keydoor", "--episodes", "1"])
    err = _raw_free(capsys).strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "tokenizer.json is not a tokenizer file" in err[0] and "'model'" in err[0], err


def test_a_sandboxed_chat_template_is_a_user_error_not_an_internal_one():
    from jinja2.exceptions import SecurityError

    line = error_message(SecurityError("access to attribute '__class__' of 'str' is unsafe"))
    assert line is not None and "chat template" in line and "__class__" in line


def test_a_full_disk_names_the_path_and_advises_per_command(tmp_path):
    full = OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(OSError) as raised, write_errors_as_os_errors(tmp_path / "agent"):
        raise full
    assert raised.value.filename == str(tmp_path / "agent")
    for command in ("export", "eval", None):
        line = error_message(raised.value, command)
        assert "agent" in line and "--resume" not in line, line
    assert "--resume" in error_message(raised.value, "train")
    assert "build resumes" in error_message(raised.value, "pretrain")


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_model_weights_that_are_a_directory_or_a_fifo_are_named(tmp_path, capsys, kind):
    import os

    model = tmp_path / "model"
    shutil.copytree(start_files.shipped_dir(), model)
    for name in ("manifest.json", "pretrain.json", "model.safetensors"):
        (model / name).unlink()
    if kind == "directory":
        (model / "model.safetensors").mkdir()
    else:
        os.mkfifo(model / "model.safetensors")
    code = cli_main(["eval", "--model", str(model), "--env", "keydoor", "--episodes", "1"])
    err = _raw_free(capsys).strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "model.safetensors is" in err[0] and "holds no weights" not in err[0], err
