"""`rlid eval --episodes-out`: every episode the evaluation played, as JSON lines."""

from __future__ import annotations

import json

import pytest

from rlid.cli import main as cli_main
from rlid.core.seeds import EVAL_SEED_BASE

OPTIONS = {"size": 2, "keys": 1, "distractors": 1, "max_episode_steps": 6}


def _argv(plane: str, out, episodes: int = 3) -> list[str]:
    return ["eval", "--model", "tiny", "--plane", plane, "--env", "keydoor",
            "--episodes", str(episodes), "--episodes-out", str(out), "--json",
            *[f"-o{k}={v}" for k, v in OPTIONS.items()]]  # fmt: skip


@pytest.mark.parametrize("plane", ["decision", "token"])
def test_the_episodes_written_are_the_ones_the_statistics_count(plane, tmp_path, capsys):
    out = tmp_path / "episodes.jsonl"
    assert cli_main(_argv(plane, out)) == 0
    printed = capsys.readouterr()
    stats = json.loads(printed.out)  # stdout: the statistics alone
    assert f"episodes written to {out}" in printed.err
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["game"] for r in records] == [0, 1, 2]
    assert [r["reset_seed"] for r in records] == [EVAL_SEED_BASE + i for i in range(3)]
    for r in records:
        assert r["length"] == len(r["steps"]) >= 1
        assert r["return"] == pytest.approx(sum(s["reward"] for s in r["steps"]))
        assert r["first_prompt"].strip()  # the text the policy read first
        if plane == "decision":  # its menu lists the first command chosen
            assert r["steps"][0]["action"] in r["first_prompt"]
        for step in r["steps"]:
            if plane == "decision":
                assert 0.0 < step["p"] <= 1.0 and step["rows"] >= 1
            else:
                assert isinstance(step["text"], str) and isinstance(step["valid"], bool)
    assert stats["success"] == pytest.approx(sum(r["won"] for r in records) / 3)
    assert stats["return"] == pytest.approx(sum(r["return"] for r in records) / 3)
    assert stats["episode_length"] == pytest.approx(sum(r["length"] for r in records) / 3)
    # the same call plays the same episodes (the evaluation seed fixes them)
    again = tmp_path / "again.jsonl"
    assert cli_main(_argv(plane, again)) == 0
    capsys.readouterr()
    assert again.read_text() == out.read_text()


def test_an_existing_file_a_missing_directory_and_walkthrough_are_refused(tmp_path, capsys):
    kept = tmp_path / "kept.jsonl"
    kept.write_text("mine\n")
    assert cli_main(_argv("decision", kept)) == 2
    assert "exists; give a new file" in capsys.readouterr().err
    assert kept.read_text() == "mine\n"  # nothing overwritten
    assert cli_main(_argv("decision", tmp_path / "nowhere" / "e.jsonl")) == 2
    assert "no directory" in capsys.readouterr().err
    assert cli_main([*_argv("decision", tmp_path / "w.jsonl"), "--walkthrough"]) == 2
    assert "--walkthrough plays none" in capsys.readouterr().err
    assert not (tmp_path / "w.jsonl").exists()


def test_the_progress_bar_counts_the_episodes_and_steps_played(tmp_path, capsys):
    out = tmp_path / "episodes.jsonl"
    assert cli_main(_argv("decision", out, episodes=3)) == 0
    printed = capsys.readouterr()
    steps = sum(json.loads(line)["length"] for line in out.read_text().splitlines())
    final = printed.err.replace("\r", "\n").splitlines()
    bar = [line for line in final if line.startswith("heldout eval")][-1]
    assert "3/3" in bar and f"env_steps={steps}" in bar
    quiet = tmp_path / "quiet.jsonl"
    assert cli_main([*_argv("decision", quiet), "--quiet"]) == 0
    printed_quiet = capsys.readouterr()
    assert "heldout eval" not in printed_quiet.err
    assert json.loads(printed_quiet.out) == json.loads(printed.out)  # the bar changes nothing
    assert quiet.read_text() == out.read_text()
