"""An untrusted run directory, file by file: every file rlid reads or writes in a run,
replaced by a link pointing outside, a truncated copy, a bit-flipped copy or a pickle,
ends in a refusal (one line, exit 2, nothing written) or a recovery (the file rebuilt
or rewritten), and nothing outside the run is touched or unpickled."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest

from rlid.cli import main as cli_main
from rlid.config import TrainConfig
from rlid.core import train as trainer_mod
from rlid.menus import Interface
from rlid.runs.dir import read_metrics

TINY_ENV = {"size": 2, "keys": 0, "distractors": 1, "max_episode_steps": 6}

# every file of a finished run (GAE: with a value head) and the directories holding them
FILES = [
    "config.json", "metrics.jsonl", "eval.json", "summary.md", "curves.png", ".rlid.lock",
    "checkpoint/state.json", "checkpoint/metrics.jsonl", "checkpoint/eval.json",
    "checkpoint/trainer_state.json", "checkpoint/trainer_state.safetensors",
    "checkpoint/value_head.safetensors", "checkpoint/model/config.json",
    "checkpoint/model/generation_config.json", "checkpoint/model/model.safetensors",
    "checkpoint/model/tokenizer.json", "checkpoint/model/tokenizer_config.json",
]  # fmt: skip
DIRECTORIES = ["checkpoint", "checkpoint/model"]
# what the resume makes of a damaged copy of these (the others: refused)
REBUILT = {"metrics.jsonl", "eval.json"}  # from the checkpoint's copies
REWRITTEN = {"summary.md", "curves.png", ".rlid.lock"}  # outputs, written anew
# what each command reads (a link anywhere in the run is refused by all of them)
READERS = {
    "resume": FILES,
    "eval": [f for f in FILES if f == "config.json" or f.startswith("checkpoint/")],
    "export": [
        f for f in FILES if f in ("config.json", "eval.json") or f.startswith("checkpoint/")
    ],
}


class _Exploit:
    """Unpickling this creates ``marker`` (a stand-in for running any code)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.delenv("RLID_DEBUG", raising=False)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("finished") / "run"
    config = TrainConfig(
        model="tiny-random", env="keydoor", env_options=dict(TINY_ENV), steps=24,
        groups_per_iter=2, group_size=2, epochs=1, minibatch_size=8, eval_episodes=1,
        threads=1, checkpoint_every=1, advantage="gae", interface=Interface(memory="none"),
    )  # fmt: skip
    trainer_mod.train(config, out, progress=False)
    # a lock record as a holder that died left it (so that it too can be damaged)
    (out / ".rlid.lock").write_text(json.dumps({"pid": 999_999_999, "host": "gone"}) + "\n")
    present = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert present == set(FILES), present ^ set(FILES)  # the suite covers every file
    return out


def tree(root: Path) -> dict[str, bytes | str]:
    found: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        key = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[key] = "-> " + os.readlink(path)
        elif path.is_file() and path.name != ".rlid.lock":
            found[key] = path.read_bytes()
    return found


def damage(run: Path, name: str, kind: str, outside: Path, marker: Path) -> None:
    path = run / name
    if kind == "link":  # to a copy outside, so that following it would seem to work
        target = outside / name.replace("/", "_")
        if path.is_dir():
            shutil.copytree(path, target)
            shutil.rmtree(path)
        else:
            shutil.copy(path, target)
            path.unlink()
        path.symlink_to(target)
    elif kind == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif kind == "bit flipped":
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x10
        path.write_bytes(bytes(data))
    else:  # a pickle in its place
        path.write_bytes(pickle.dumps({"state": _Exploit(marker)}))


def command(which: str, run: Path, agent: Path) -> list[str]:
    return {
        "resume": ["train", "--resume", str(run), "--quiet"],
        "eval": ["eval", "--run", str(run), "--episodes", "1"],
        "export": ["export", str(run), str(agent)],
    }[which]


def _cases() -> list:
    """resume: every damage to every file; eval and export: a link in place of any file
    or directory of the run, and a bit flipped in each file they read."""
    cases = []
    for which, read in READERS.items():
        for name in [*FILES, *DIRECTORIES]:
            kinds = ["link"]
            if name in read:
                kinds += ["truncated", "bit flipped", "pickle"] if which == "resume" else [
                    "bit flipped"]  # fmt: skip
            if name == ".rlid.lock":
                kinds = [k for k in kinds if k in ("link", "pickle")]  # a record, no data
            cases += [
                pytest.param(which, name, kind, id=f"{which}-{name}-{kind}") for kind in kinds
            ]
    return cases


CASES = _cases()


@pytest.mark.parametrize(("which", "name", "kind"), CASES)
def test_a_damaged_or_planted_file_is_refused_or_recovered_and_nothing_outside_touched(
    finished_run, tmp_path, capsys, which, name, kind
):
    run, outside, agent = tmp_path / "run", tmp_path / "outside", tmp_path / "agent"
    shutil.copytree(finished_run, run)
    outside.mkdir()
    (outside / "precious.txt").write_text("precious\n")
    marker = outside / "unpickled"
    rows_before = read_metrics(run)
    before_eval = json.loads((run / "eval.json").read_text())
    damage(run, name, kind, outside, marker)
    outside_before, run_before = tree(outside), tree(run)

    code = cli_main(command(which, run, agent))
    err = capsys.readouterr().err

    assert "Traceback" not in err and "internal error" not in err, err
    assert tree(outside) == outside_before and not marker.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["run", "outside", *(["agent"] if code == 0 and which == "export" else [])]
    )
    recovers = which == "resume" and kind != "link" and name in REBUILT | REWRITTEN
    if not recovers:  # refused: one line, nothing written
        lines = [ln for ln in err.strip().splitlines() if not ln.startswith("note:")]
        assert code == 2 and len(lines) == 1, (code, err)
        if kind == "link":
            assert "symbolic link" in lines[0], lines[0]
        assert tree(run) == run_before
        return
    assert code == 0, err
    if name in REBUILT:  # rebuilt from the checkpoint's copy, and said so
        assert "rebuilt" in err, err
        assert read_metrics(run)[: len(rows_before)] == rows_before
        assert json.loads((run / "eval.json").read_text())["before"] == before_eval["before"]
    elif name in ("summary.md", "curves.png"):  # written anew at the run's end
        assert (run / name).read_bytes() != run_before[name]
        assert (run / "summary.md").read_text().startswith("#")
        assert (run / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
