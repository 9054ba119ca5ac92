"""The flag tables of ``docs/usage.md``, read from the command line's own parsers.

Every ``rlid`` flag is declared once: a config dataclass field with its help in the
field's metadata, turned into flags by :func:`rlid.config.flags.add_dataclass_arguments`, or an
``add_argument`` call in a command's parser hook. This module builds the real parser
(:func:`rlid.cli.main.build_parser`; no command module imports torch) and renders one
markdown table per argument group of each command, so the page cannot drift from what
``--help`` prints; ``tests/test_docs_usage.py`` checks the committed page is current.

    python -m rlid.cli.usage                          # print every table
    python -m rlid.cli.usage --write docs/usage.md    # refresh the page's blocks
    python -m rlid.cli.usage --check docs/usage.md    # exit 1 if they are stale

A block is the text between ``<!-- flags: COMMAND -->`` and ``<!-- /flags -->``;
nothing else on the page is touched. Example::

    >>> render_command(read_commands()["demo"]).splitlines()[0]
    '| flag | value | default | what it does |'
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from rlid.cli.main import build_parser

START = re.compile(r"<!-- flags: ([a-z-]+) -->\n")
END = "<!-- /flags -->"
_DEFAULT_SUFFIX = re.compile(r" \(default: [^()]*\)$")


def read_commands() -> dict[str, argparse.ArgumentParser]:
    """Every ``rlid`` command's parser, in the order ``rlid --help`` lists them."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _value(action: argparse.Action) -> str:
    """The value a flag takes, as a reader types it ("" for a switch or a positional)."""
    if not action.option_strings or action.nargs == 0:
        return ""
    if action.nargs == "?" and action.const is True:  # a config bool: bare flag = true
        return "[true|false]"
    if action.choices is not None:
        shown = ", ".join(str(c) for c in action.choices)
    elif isinstance(action.metavar, str):
        shown = action.metavar
    else:
        shown = action.dest.upper()
    return f"{shown} ..." if action.nargs in ("+", "*") else shown


def _default(action: argparse.Action) -> str:
    """The default the flag's help states (config fields), else argparse's own."""
    found = re.search(r"\(default: ([^()]*)\)$", action.help or "")
    if found:
        text = found.group(1)
        return {"None": "unset", "True": "true", "False": "false"}.get(text, text)
    if action.nargs == 0 or action.default in (None, [], (), argparse.SUPPRESS):
        return ""
    return str(action.default)


def _help(action: argparse.Action) -> str:
    text = _DEFAULT_SUFFIX.sub("", action.help or "")
    return text.replace("%(default)s", str(action.default)).replace("%%", "%")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_command(parser: argparse.ArgumentParser) -> str:
    """One markdown table of the command's flags, a heading row per argument group."""
    lines = ["| flag | value | default | what it does |", "|---|---|---|---|"]
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if not isinstance(a, argparse._HelpAction)]
        if not actions:
            continue
        if group.title not in ("positional arguments", "options"):
            lines.append(f"| **{_cell(str(group.title))}** | | | |")
        for action in actions:
            names = ", ".join(f"`{n}`" for n in (action.option_strings or [action.dest]))
            lines.append(
                f"| {names} | {_cell(_value(action))} | {_cell(_default(action))} | "
                f"{_cell(_help(action))} |"
            )
    return "\n".join(lines) + "\n"


def render_all() -> str:
    return "\n".join(
        f"## rlid {name}\n\n{render_command(parser)}" for name, parser in read_commands().items()
    )


def update_page(text: str) -> str:
    """``text`` with every ``<!-- flags: COMMAND -->`` block regenerated."""
    commands = read_commands()
    out, pos = [], 0
    for match in START.finditer(text):
        end = text.index(END, match.end())
        name = match.group(1)
        if name not in commands:
            raise ValueError(f"usage page: no command {name!r} (commands: {', '.join(commands)})")
        out += [text[pos : match.end()], render_command(commands[name])]
        pos = end
    return "".join(out) + text[pos:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", type=Path, metavar="PAGE", help="refresh PAGE's blocks")
    action.add_argument("--check", type=Path, metavar="PAGE", help="exit 1 if PAGE is stale")
    args = parser.parse_args(argv)
    if args.write is not None:
        args.write.write_text(update_page(args.write.read_text(encoding="utf-8")), "utf-8")
        return 0
    if args.check is not None:
        text = args.check.read_text(encoding="utf-8")
        if update_page(text) != text:
            print(f"{args.check} is stale: python -m rlid.cli.usage --write {args.check}")
            return 1
        return 0
    sys.stdout.write(render_all())
    return 0


if __name__ == "__main__":
    sys.exit(main())
