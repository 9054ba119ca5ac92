"""docs/usage.md's flag tables: rendered by rlid.cli.usage from the real parsers
(without importing torch) and committed as generated."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rlid.cli import usage

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "usage.md"


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


def test_a_table_row_per_flag_with_its_help_as_help_prints_it():
    parser = usage.read_commands()["train"]
    table = usage.render_command(parser)
    lr = next(a for a in parser._actions if "--lr" in a.option_strings)
    (row,) = [line for line in table.splitlines() if line.startswith("| `--lr` |")]
    assert row.split(" | ")[2] == "0.0001" and lr.help.startswith(row.split(" | ")[3].rstrip(" |"))
    groups = [line for line in table.splitlines() if line.startswith("| **")]
    assert any("token plane" in g for g in groups) and any("interface" in g for g in groups)
