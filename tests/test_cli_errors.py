"""The CLI's one error handler, start-up without torch, and input limits."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlid.cli import main as cli_main
from rlid.cli.main import ALL, build_parser, error_message

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
TINY = ["--env", "keydoor", "-o", "size=2", "-o", "keys=0", "-o", "distractors=1",
        "--steps", "8", "--groups-per-iter", "2", "--group-size", "2", "--epochs", "1",
        "--eval-episodes", "1", "--threads", "1", "--memory", "none", "--quiet"]  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def _warm_model_built(tmp_path_factory):
    # Built before any test reads stderr: the first use of "tiny" in a process prints
    # a notice and a progress bar, which are not the error line these tests check.
    from rlid.lm.starts import load_policy_model

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RLID_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
        load_policy_model("tiny")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.delenv("RLID_DEBUG", raising=False)


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.strip().splitlines() if not line.startswith(("note:", "WARN"))]
    assert len(lines) == 1, err
    return lines[0]


# --------------------------------------------------------------- start-up
def test_help_and_envs_do_not_import_torch():
    code = (
        "import sys\n"
        "from rlid.cli.main import build_parser, main\n"
        "build_parser(None)\n"
        "assert main(['envs']) == 0\n"
        "heavy = [m for m in ('torch', 'transformers', 'textworld') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], env=ENV, check=True, capture_output=True)


def test_stub_help_lines_match_the_real_parsers():
    def helps(parser):
        sub = next(a for a in parser._actions if a.dest == "command")
        return {a.dest: a.help for a in sub._choices_actions}

    assert helps(build_parser(None)) == helps(build_parser(ALL))


def test_a_native_crash_prints_the_python_stack():
    # a rank of a torchrun job dying in native code would otherwise leave only its
    # exit status: after main() the process has the fault handler on
    code = (
        "import os, signal\n"
        "from rlid.cli.main import main\n"
        "assert main(['envs']) == 0\n"
        "os.kill(os.getpid(), signal.SIGSEGV)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True)
    assert proc.returncode == -signal.SIGSEGV
    assert "Fatal Python error: Segmentation fault" in proc.stderr, proc.stderr


def test_a_closed_pipe_is_no_traceback():
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlid", "envs", "-v"], env=ENV,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    proc.stdout.close()  # the reader is gone before anything is written (`| head -0`)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert "Traceback" not in err and "BrokenPipe" not in err


# --------------------------------------------------------------- I/O faults
def test_out_under_a_file_is_a_one_line_error(tmp_path, capsys):
    afile = tmp_path / "file"
    afile.write_text("x")
    assert cli_main(["train", *TINY, "--out", str(afile / "run")]) == 2
    assert "not a directory" in _one_line_error(capsys)
    assert cli_main(["train", *TINY, "--out", str(afile)]) == 2
    assert "is a file" in _one_line_error(capsys)


def test_an_unwritable_out_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    real_access = os.access
    monkeypatch.setattr(
        os, "access",
        lambda path, mode: False if str(path) == str(tmp_path) else real_access(path, mode),
    )  # fmt: skip
    assert cli_main(["train", *TINY, "--out", str(tmp_path / "run")]) == 2
    line = _one_line_error(capsys)
    assert "cannot write" in line and "permissions" in line
    assert not (tmp_path / "run").exists()


def test_a_read_only_filesystem_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    from pathlib import Path as _Path

    real_mkdir = _Path.mkdir

    def read_only(self, *args, **kwargs):
        if str(self).startswith(str(tmp_path)):
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(_Path, "mkdir", read_only)
    assert cli_main(["train", *TINY, "--out", str(tmp_path / "run")]) == 2
    assert "read-only" in _one_line_error(capsys)


def test_a_full_disk_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    import rlid.runs.files as files_mod

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files_mod.os, "fsync", full)
    assert cli_main(["train", *TINY, "--out", str(tmp_path / "run")]) == 2
    assert "disk is full" in _one_line_error(capsys)


def test_sys_as_out_is_a_one_line_error(capsys):
    if not Path("/sys/kernel").is_dir():
        pytest.skip("no /sys here")
    assert cli_main(["train", *TINY, "--out", "/sys/kernel/rlid-run"]) == 2
    _one_line_error(capsys)


def test_debug_shows_the_traceback(tmp_path):
    with pytest.raises(ValueError, match="'lr'"):
        cli_main(["--debug", "train", "--lr", "nan", "--out", str(tmp_path / "r")])


def test_error_messages_for_environment_faults():
    assert "disk is full" in error_message(OSError(errno.ENOSPC, "No space left", "/x"))
    assert "/x" in error_message(PermissionError(errno.EACCES, "Permission denied", "/x"))
    assert error_message(RuntimeError("a bug")) is None  # bugs keep their traceback (--debug)


def test_an_unexpected_error_is_one_line_with_exit_1(monkeypatch, capsys):
    main_mod = sys.modules["rlid.cli.main"]  # (rlid.cli re-exports the function `main`)

    def boom(args):
        raise RuntimeError("boom")

    monkeypatch.setattr(main_mod, "_cmd_envs", boom)
    assert cli_main(["envs"]) == 1
    line = _one_line_error(capsys)
    assert "internal error" in line and "--debug" in line


# --------------------------------------------------------------- demo, audit, compare
def test_demo_validates_before_training(monkeypatch, capsys, tmp_path):
    import rlid.core.train as trainer_mod

    def no_training(*args, **kwargs):
        raise AssertionError("training started before the arguments were checked")

    monkeypatch.setattr(trainer_mod, "train", no_training)
    assert cli_main(["demo", "--steps", "8", "--env", "nosuch"]) == 2
    assert "unknown env id 'nosuch'" in _one_line_error(capsys)
    assert cli_main(["demo", "--steps", "0", "--env", "keydoor"]) == 2
    assert "--steps 0 is out of range" in _one_line_error(capsys)
    assert cli_main(["demo", "--env", "keydoor", "-o", "size=99"]) == 2
    assert "size" in _one_line_error(capsys)
    (tmp_path / "keep").write_text("x")
    assert cli_main(["demo", "--env", "keydoor", "--out", str(tmp_path)]) == 2
    assert "already holds files" in _one_line_error(capsys)


def test_a_100k_character_wording_is_refused_naming_the_limit(tmp_path, capsys):
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"go east": ["go east", "e" * 100_000], "look": ["look"]}))
    assert cli_main(["audit", "--wordings", str(path)]) == 2
    line = _one_line_error(capsys)
    assert "100,000 characters" in line and "limit of 300" in line
    assert cli_main(["audit", "--goal", "g" * 5000]) == 2
    assert "goal" in _one_line_error(capsys)


def test_audit_prints_its_result_before_a_failing_plot(tmp_path, capsys):
    afile = tmp_path / "file"
    afile.write_text("x")
    argv = ["audit", "--json", "--mc-sizes", "2", "--n-boot", "10", "--plot", str(afile / "p.png")]
    assert cli_main(argv) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "file where a directory is needed" in captured.err
    assert "trace_cov_text" in json.loads(captured.out)  # the finished audit was not lost


def _compare_toml(path: Path, defaults: str = "", arm: str = "") -> Path:
    path.write_text(
        'name = "t"\nseeds = [0]\nheldout_episodes = 1\n'
        'budget = {currency = "env_steps", amount = 8}\n'
        'interface = {memory = "none"}\n'
        "defaults = {groups_per_iter = 2, group_size = 2, epochs = 1, threads = 1"
        f"{defaults}}}\n"
        'envs = [{id = "keydoor", options = {size = 2, keys = 0, distractors = 1}}]\n'
        f'[arms.decision]\nplane = "decision"\n{arm}'
    )
    return path


@pytest.mark.parametrize(
    ("defaults", "arm", "key"),
    [
        (", lr = inf", "", "'lr'.*finite"),
        (", ent_coef = nan", "", "'ent_coef'.*finite"),
        (', lr = "fast"', "", "'lr'.*must be a number"),
        ("", "options = {group_size = 2.5}", "'group_size'.*whole number"),
        ("", "options = {minibatch_size = true}", "'minibatch_size'.*whole number"),
    ],
)
def test_compare_refuses_non_finite_and_wrong_typed_values(tmp_path, capsys, defaults, arm, key):
    import re

    path = _compare_toml(tmp_path / "c.toml", defaults, arm)
    out = tmp_path / "out"
    assert cli_main(["compare", "--config", str(path), "--out", str(out), "--quiet"]) == 2
    assert re.search(key, _one_line_error(capsys))
    assert not out.exists()


def test_compare_out_refuses_a_directory_that_is_not_a_comparison(tmp_path, capsys):
    path = _compare_toml(tmp_path / "c.toml")
    out = tmp_path / "mine"
    out.mkdir()
    (out / "report.md").write_text("my own report")
    assert cli_main(["compare", "--config", str(path), "--out", str(out), "--quiet"]) == 2
    assert "not the output of `rlid compare`" in _one_line_error(capsys)
    assert (out / "report.md").read_text() == "my own report"
    assert sorted(p.name for p in out.iterdir()) == ["report.md"]


def test_compare_waits_for_the_out_lock_and_names_its_holder(
    tmp_path, capsys, monkeypatch, hold_lock
):
    import rlid.compare.run as compare_run

    monkeypatch.setattr(compare_run, "SHARED_WAIT", 1.0)  # the default waits as long as it takes
    path = _compare_toml(tmp_path / "c.toml")
    out = tmp_path / "out"
    out.mkdir()
    with hold_lock(out, "rlid compare") as pid:
        start = time.perf_counter()
        assert cli_main(["compare", "--config", str(path), "--out", str(out), "--quiet"]) == 2
        assert time.perf_counter() - start >= 1.0
        err = capsys.readouterr().err
        assert f"note: waiting for pid {pid}" in err
        capsys.readouterr()
        print(err, file=sys.stderr)
        assert f"pid {pid}" in _one_line_error(capsys)
    assert sorted(p.name for p in out.iterdir()) == [".rlid.lock"]  # nothing written


def test_pretrain_into_an_output_another_build_holds_is_refused(tmp_path, capsys, hold_lock):
    from rlid.lm.pretrain.build import work_dir

    work = work_dir(tmp_path / "model")
    work.mkdir()
    with hold_lock(work, "rlid pretrain") as pid:
        argv = ["pretrain", "--envs", "keydoor", "--episodes", "1", "--steps", "1", "--quiet"]
        assert cli_main([*argv, "--out", str(tmp_path / "model")]) == 2
        assert f"pid {pid}" in _one_line_error(capsys)
        assert not (tmp_path / "model").exists()
