"""The command line: help on every command, `rlid envs`, `rlid play`."""

from __future__ import annotations

import argparse

import pytest

from rlid.cli import build_parser, main
from rlid.cli.play import format_menu, play


def _choices() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _subparser(name: str) -> argparse.ArgumentParser:
    return _choices()[name]


def subcommands() -> list[str]:
    return sorted(_choices())


def test_every_subcommand_has_help(capsys):
    names = subcommands()
    for expected in ("envs", "play", "pretrain", "train", "eval", "audit", "compare", "demo"):
        assert expected in names
    for name in names:
        with pytest.raises(SystemExit) as stop:
            main([name, "--help"])
        assert stop.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith("usage: rlid " + name)
        sub = _subparser(name)
        undocumented = [
            a.dest for a in sub._actions if a.dest != "help" and not (a.help or "").strip()
        ]
        assert not undocumented, f"rlid {name}: options without help: {undocumented}"
    assert main([]) == 0


def test_envs_lists_ids_and_options(capsys):
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    assert "keydoor" in out and "tw-simple" in out
    assert main(["envs", "keydoor"]) == 0
    out = capsys.readouterr().out
    assert "size" in out and "max_episode_steps" in out
    assert main(["envs", "nope"]) == 2
    assert "valid ids" in capsys.readouterr().err


def test_play_shows_menu_with_afterstates_and_plays_the_walkthrough():
    from rlid import envs

    env = envs.make("keydoor", size=2, keys=1, game_seed=0)
    _, info = env.reset(seed=0)
    answers = list(info["walkthrough"])
    printed: list[str] = []
    args = build_parser().parse_args(["play", "keydoor", "-o", "size=2", "-o", "keys=1",
                                      "--game-seed", "0"])  # fmt: skip
    code = play(args, input_fn=lambda _: answers.pop(0), print_fn=printed.append)
    text = "\n".join(printed)
    assert code == 0
    assert "A) " in text and "->" in text
    assert "won" in text


def test_play_accepts_labels_and_quits():
    printed: list[str] = []
    inputs = iter(["A", "quit"])
    args = build_parser().parse_args(["play", "crafting", "--game-seed", "1"])
    assert play(args, input_fn=lambda _: next(inputs), print_fn=printed.append) == 0
    assert sum("A) " in p for p in printed) >= 2


def test_format_menu_without_afterstates():
    assert format_menu(["go east", "look"], None) == "  A) go east\n  B) look"


def test_pretrain_builds_a_guided_warm_start_usable_as_a_model_dir(tmp_path, capsys):
    import json

    from rlid.lm.starts import load_policy_model

    out = tmp_path / "guided"
    code = main([
        "pretrain", "--envs", "keydoor", "--episodes", "1", "--max-episode-steps", "2",
        "--walkthrough-episodes", "1", "--random-answers", "false", "--answer-weight", "8",
        "--steps", "2",
        "--batch-size", "2", "--threads", "1", "--quiet", "--out", str(out),
    ])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "random-play and walkthrough sequences" in printed
    # the labels the model was trained to answer with are named
    answered = json.loads((out / "pretrain.json").read_text())["answered_labels"]
    assert f"answering with {len(answered)} labels ({' '.join(answered)})" in printed
    recorded = json.loads((out / "pretrain.json").read_text())["config"]
    assert recorded["walkthrough_episodes"] == 1 and recorded["random_answers"] is False
    assert recorded["answer_weight"] == 8.0
    model, _ = load_policy_model(str(out))
    assert model.rlid_origin == "local"
