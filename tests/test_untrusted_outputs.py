"""Every command that writes a directory follows one rule (rlid.runs.outdir): a link
the user named is followed to an existing target, a directory holding someone else's
files is refused (never replaced or emptied), a build or staging directory is never a
link, and nothing outside is touched. Pretrain's output and build directories, the
snapshot, export and compare are held to it as train is."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from rlid.cli import main as cli_main
from rlid.runs.outdir import OutputDirError, check_work_dir, claim_output_dir

PRETRAIN = ["pretrain", "--envs", "keydoor", "--episodes", "2", "--steps", "2",
            "--batch-size", "2", "--threads", "1", "--quiet", "--checkpoint-every", "0"]  # fmt: skip


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.delenv("RLID_DEBUG", raising=False)


def digests(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (and where each link points)."""
    found = {}
    for path in sorted(root.rglob("*")):
        key = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[key] = "-> " + os.readlink(path)
        elif path.is_file():
            found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[key] = "dir"
    return found


@pytest.fixture
def outside(tmp_path) -> Path:
    place = tmp_path / "OUTSIDE"
    (place / "pdir").mkdir(parents=True)
    (place / "pdir" / "keep").write_text("the user's\n")
    (place / "pbuild").mkdir()
    (place / "pbuild" / "keep").write_text("the user's too\n")
    return place


def _refused(capsys, code: int) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if ln]
    assert code == 2 and len(lines) == 1, (code, err)
    assert "Traceback" not in err
    return lines[0]


def test_pretrain_out_linked_to_a_directory_of_files_outside_is_refused(tmp_path, outside, capsys):
    before = digests(outside)
    (tmp_path / "plink").symlink_to(outside / "pdir")
    line = _refused(capsys, cli_main([*PRETRAIN, "--out", str(tmp_path / "plink")]))
    assert "already holds files (keep)" in line
    assert digests(outside) == before
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no build dir left
    assert not any(p.name.startswith(".") for p in outside.iterdir())


def test_pretrain_out_holding_a_users_file_is_refused(tmp_path, capsys):
    out = tmp_path / "preal"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    line = _refused(capsys, cli_main([*PRETRAIN, "--out", str(out)]))
    assert "notes.txt" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["preal"]
    assert (out / "notes.txt").read_text() == "mine\n"


def test_pretrain_build_directory_planted_as_a_link_is_refused(tmp_path, outside, capsys):
    before = digests(outside)
    (tmp_path / ".pb.pretraining").symlink_to(outside / "pbuild")
    line = _refused(capsys, cli_main([*PRETRAIN, "--out", str(tmp_path / "pb")]))
    assert "symbolic link" in line and ".pb.pretraining" in line
    assert digests(outside) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".pb.pretraining", "OUTSIDE"]


def test_pretrain_build_directory_with_a_link_or_a_stranger_inside_is_refused(tmp_path, capsys):
    work = tmp_path / ".pb.pretraining"
    work.mkdir()
    (work / "progress").symlink_to(tmp_path)
    assert "symbolic link" in _refused(capsys, cli_main([*PRETRAIN, "--out", str(tmp_path / "pb")]))
    (work / "progress").unlink()
    (work / "diary.txt").write_text("mine\n")
    assert "diary.txt" in _refused(capsys, cli_main([*PRETRAIN, "--out", str(tmp_path / "pb")]))
    assert (work / "diary.txt").read_text() == "mine\n"


def test_pretrain_replaces_its_own_finished_output_and_a_named_link_to_a_new_directory(
    tmp_path, capsys
):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "plink").symlink_to(target)
    assert cli_main([*PRETRAIN, "--out", str(tmp_path / "plink")]) == 0
    assert (target / "pretrain.json").is_file() and (tmp_path / "plink").is_symlink()
    assert cli_main([*PRETRAIN, "--out", str(tmp_path / "plink")]) == 0  # its own: rebuilt
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "plink"]
    capsys.readouterr()


def test_pretrain_dangling_link_out_is_refused(tmp_path, capsys):
    (tmp_path / "plink").symlink_to(tmp_path / "nowhere")
    assert "does not exist" in _refused(
        capsys, cli_main([*PRETRAIN, "--out", str(tmp_path / "plink")])
    )
    assert not (tmp_path / "nowhere").exists()


def test_snapshot_into_a_link_to_files_outside_is_refused(tmp_path, outside, capsys):
    before = digests(outside)
    (tmp_path / "snap").symlink_to(outside / "pdir")
    code = cli_main(
        [*PRETRAIN, "--out", str(tmp_path / "pb"), "--snapshot", str(tmp_path / "snap")]
    )
    assert "not empty" in _refused(capsys, code)
    assert digests(outside) == before


def test_the_rule_itself():
    with pytest.raises(OutputDirError, match="holds files rlid did not write"):
        here = Path(__file__).parent
        check_work_dir(here, allowed=("x",), what="a test")
    with pytest.raises(NotADirectoryError):
        claim_output_dir(Path(__file__), flag="--out", is_own=lambda _: True)
