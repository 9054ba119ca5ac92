"""docs/usage.md's flag tables: read from the source by rlid.cli.usage without torch,
equal to what the real parser holds, and committed as generated."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from rlid.cli import usage

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "usage.md"


def real_commands() -> dict[str, argparse.ArgumentParser]:
    from rlid.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_the_committed_page_is_current():
    text = PAGE.read_text(encoding="utf-8")
    assert usage.update_page(text) == text, (
        "docs/usage.md is stale: run `python -m rlid.cli.usage --write docs/usage.md`"
    )


def test_every_command_has_its_block_on_the_page():
    text = PAGE.read_text(encoding="utf-8")
    assert [m.group(1) for m in usage.START.finditer(text)] == list(usage.read_commands())


def test_reading_the_flags_imports_no_torch():
    code = (
        "import sys; from rlid.cli import usage; usage.render_all(); "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("name", list(usage.read_commands()))
def test_the_source_reading_equals_the_real_parser(name):
    """Every flag argparse holds, in its order, with the same names, help (defaults
    included), choices, metavar, nargs and default: the tables cannot drift."""
    parser = real_commands()[name]
    actions = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]
    flags = usage.read_commands()[name].flags
    assert [tuple(a.option_strings) or (a.dest,) for a in actions] == [f.names for f in flags]
    for action, flag in zip(actions, flags):
        assert action.help == flag.help, flag.names
        assert (tuple(action.choices) if action.choices else None) == flag.choices, flag.names
        assert action.metavar == flag.metavar, flag.names
        if flag.switch:
            assert action.nargs == 0 and action.default is False, flag.names
            continue
        assert action.nargs == flag.nargs, flag.names
        if flag.field_default is None:  # a config field's flag defaults to None: not given
            assert action.default == flag.default, flag.names


def test_groups_follow_the_parser():
    parser = real_commands()["train"]
    titles = {a.dest: g.title for g in parser._action_groups for a in g._group_actions}
    for flag in usage.read_commands()["train"].flags:
        dest = flag.names[0].lstrip("-").replace("-", "_")
        dest = f"interface__{dest}" if flag.group.startswith("interface") else dest
        assert titles[dest] in (flag.group, "options"), flag.names


def test_a_block_is_replaced_and_the_rest_kept():
    text = "intro\n\n<!-- flags: export -->\nold table\n<!-- /flags -->\n\nafter\n"
    fresh = usage.update_page(text)
    assert fresh.startswith("intro\n\n<!-- flags: export -->\n\n| flag |")
    assert "old table" not in fresh and fresh.endswith("<!-- /flags -->\n\nafter\n")
    assert "`--merge-lora`" in fresh
    assert usage.update_page(fresh) == fresh


def test_unknown_command_and_unclosed_block_are_clear_errors():
    with pytest.raises(ValueError, match="no such command"):
        usage.update_page("<!-- flags: nope -->\n<!-- /flags -->\n")
    with pytest.raises(ValueError, match="has no <!-- /flags -->"):
        usage.update_page("<!-- flags: demo -->\nno end\n")


def test_a_row_escapes_pipes_and_shows_a_config_bool():
    flag = usage.Flag(
        names=("--shuffle",), help="a | b (default: True)", boolean=True, nargs="?",
        field_default="True",
    )  # fmt: skip
    table = usage.render_command(usage.Command("x", "", (flag,)))
    assert table.splitlines()[-1] == "| `--shuffle` | `[true\\|false]` | `true` | a \\| b |"


def test_check_reports_a_stale_page(tmp_path, capsys):
    page = tmp_path / "usage.md"
    page.write_text("<!-- flags: demo -->\n<!-- /flags -->\n")
    assert usage.main(["--check", str(page)]) == 1
    assert "stale" in capsys.readouterr().out
    assert usage.main(["--write", str(page)]) == 0
    assert usage.main(["--check", str(page)]) == 0


def test_a_declaration_only_running_code_could_give_is_a_clear_error(tmp_path, monkeypatch):
    pkg = tmp_path / "fake"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "cli.py").write_text(
        "def add(sub):\n"
        "    p = sub.add_parser('x', help='a command')\n"
        "    p.add_argument('--n', help=f'{1 + 1} things')\n"
    )
    monkeypatch.setattr(usage, "ROOT", tmp_path)
    usage._source.cache_clear()
    try:
        src = usage._source("fake.cli")
        fn = src.defs["add"]
        with pytest.raises(usage.Unreadable, match=r"help of --n at fake/cli.py:3"):
            usage._walk(fn, src, {"sub": "subparsers"}, {})
    finally:
        usage._source.cache_clear()
