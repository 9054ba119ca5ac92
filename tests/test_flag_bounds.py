"""Every count and size flag of every command is bounded by the one table
(rlid.config.limits.BOUNDS), before any work and before any directory is made: a
generated table of every integer flag of the CLI, each given 10^12 and -1, each refused
with exit 2 in under 2 s of CPU, nothing created. The table in docs/run-directories.md
is the same table."""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

import pytest

from rlid.cli import main as cli_main
from rlid.cli.main import build_parser
from rlid.config import TrainConfig, limits

DOCS = Path(__file__).resolve().parent.parent / "docs" / "run-directories.md"
# what each command needs besides the flag under test (the bound is checked first)
BASE = {
    "train": ["train", "--out", "OUT"],
    "eval": ["eval", "--model", "tiny-random"],
    "pretrain": ["pretrain", "--out", "OUT"],
    "audit": ["audit"],
    "play": ["play", "keydoor"],
    "demo": ["demo", "--out", "OUT"],
}


def integer_flags() -> list[tuple[str, str]]:
    """``(command, flag)`` for every flag of the CLI that takes whole numbers."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found = []
    for command, subparser in sub.choices.items():
        for action in subparser._actions:
            if action.type is int and action.option_strings:
                found.append((command, action.option_strings[0]))
    return found


FLAGS = integer_flags()


def test_the_generated_table_covers_the_commands():
    commands = {command for command, _ in FLAGS}
    assert {"train", "eval", "pretrain", "audit", "play"} <= commands
    assert len(FLAGS) >= 40, FLAGS
    assert set(commands) <= set(BASE)  # a new command with counts: give it a base here


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.delenv("RLID_DEBUG", raising=False)


@pytest.mark.parametrize("value", ["1000000000000", "-1"])
@pytest.mark.parametrize(("command", "flag"), FLAGS, ids=[f"{c} {f}" for c, f in FLAGS])
def test_every_count_or_size_flag_is_bounded_before_any_work(
    tmp_path, monkeypatch, capsys, command, flag, value
):
    monkeypatch.chdir(tmp_path)
    argv = [*BASE[command], flag, value]
    start = time.process_time()
    code = cli_main(argv)
    spent = time.process_time() - start
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if ln]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, err)
    assert flag in lines[0], lines[0]
    assert spent < 2.0, spent
    assert list(tmp_path.iterdir()) == []  # no directory created


def test_every_integer_flag_has_a_bound_in_the_table():
    missing = []
    for command, flag in FLAGS:
        name = flag[2:].replace("-", "_")
        name = {"episodes": "episodes_per_env"}.get(name, name) if command == "pretrain" else name
        if not any(limits.bound_of(scope, name) for scope in limits.COMMAND_SCOPES[command]):
            missing.append((command, flag))
    assert not missing, missing


def test_the_docs_show_the_table_the_checks_read():
    text = DOCS.read_text()
    shown = re.search(r"<!-- bounds:begin -->\n(.*?)<!-- bounds:end -->", text, re.S)
    assert shown is not None, "docs/run-directories.md lost its bounds table markers"
    assert shown.group(1) == limits.bounds_markdown()


def test_a_huge_env_option_number_is_refused():
    with pytest.raises(ValueError, match="game_seed"):
        TrainConfig(model="tiny-random", env="keydoor", env_options={"game_seed": 2**65})
    with pytest.raises(ValueError, match="game_seed"):
        TrainConfig(model="tiny-random", env="keydoor", env_options={"game_seed": str(2**65)})


def test_eval_and_train_settings_from_code_are_bounded_too():
    from rlid.agents.agent import EvalRequest

    with pytest.raises(ValueError, match="--episodes"):
        EvalRequest(episodes=10**12)
    for field, value in (("eval_episodes", 10**12), ("lora_rank", 10**9), ("tree_fanout", 10**9)):
        changes = (
            {"interface": {"tree_fanout": value}} if field == "tree_fanout" else {field: value}
        )
        with pytest.raises(ValueError, match=field.replace("_", "-")):
            TrainConfig.from_dict({"model": "tiny-random", "env": "keydoor", **changes})
