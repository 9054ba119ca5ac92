"""The flag tables of ``docs/usage.md``, read from the command line's own source.

Every ``rlid`` flag is declared once: a config dataclass field with its help in the
field's metadata (or its attribute docstring), turned into flags by
:func:`rlid.flags.add_dataclass_arguments`, or an ``add_argument`` call in a
command's parser hook. This module reads those declarations with :mod:`ast`,
without importing the modules that hold them (three of them import torch, and the
docs must not need it), and renders one markdown table per argument group.
``tests/test_docs_usage.py`` checks the reading against the real parser (every
flag's names, help, default, choices, metavar, nargs) and that the page is current.

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
import ast
import re
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from rlid.cli.main import _EXTERNAL

ROOT = Path(__file__).resolve().parents[2]  # the directory holding rlid/, menus/, envs/
START = re.compile(r"<!-- flags: ([a-z-]+) -->\n")
END = "<!-- /flags -->"
HOOKS = (("rlid.cli.main", "_add_envs"), ("rlid.cli.main", "_add_play"))
"""The commands rlid.cli.main defines itself; the others are its ``_EXTERNAL`` table."""
_FIRST_SENTENCE = re.compile(r"(?<=[a-z)])\.\s+(?=[A-Z])")  # as rlid.flags.attribute_docs


@dataclass(frozen=True)
class Flag:
    """One argument as argparse receives it (``help`` before its %-formatting)."""

    names: tuple[str, ...]  # ("--lr",), ("--env-option", "-o"), or ("run",) positional
    help: str
    default: Any = None
    choices: tuple[Any, ...] | None = None
    metavar: str | None = None
    nargs: str | int | None = None
    switch: bool = False  # store_true / store_false: takes no value
    boolean: bool = False  # a config bool: true / false, or the bare flag for true
    group: str = ""  # argument group title ("" for the parser's own)
    field_default: str | None = None  # a config field's default, as its help states it

    @property
    def value(self) -> str:
        """The value the flag takes, as a reader types it."""
        if self.switch or not self.names[0].startswith("-"):
            return ""  # a switch, or a positional argument: its name is its value
        if self.boolean:
            return "[true|false]"
        if self.choices is not None:
            shown = ", ".join(str(c) for c in self.choices)
        else:
            shown = self.metavar or self.names[0].lstrip("-").replace("-", "_").upper()
        return f"{shown} ..." if self.nargs == "+" else shown

    @property
    def shown_default(self) -> str:
        if self.field_default is not None:
            return {"None": "unset", "True": "true", "False": "false"}.get(
                self.field_default, self.field_default
            )
        return "" if self.switch or self.default in (None, [], ()) else str(self.default)

    @property
    def text(self) -> str:
        """The help as ``--help`` prints it, without a config field's default suffix."""
        text = self.help
        if self.field_default is not None:
            text = text[: -len(f" (default: {self.field_default})".replace("%", "%%"))]
        return text.replace("%(default)s", str(self.default)).replace("%%", "%")


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    flags: tuple[Flag, ...]


class Unreadable(ValueError):
    """A declaration this reader cannot evaluate without running its module."""


@dataclass(frozen=True)
class _Opaque:
    where: str  # a value only running the code would give (a call, an f-string)


@dataclass(frozen=True)
class _Ref:
    module: str  # a function or class of the project, or an outside name (int, Path)
    name: str


# ------------------------------------------------------------------ reading source
def _module_path(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


@dataclass(frozen=True)
class _Source:
    module: str
    defs: dict[str, ast.stmt]  # top-level name -> its def or assignment
    imports: dict[str, tuple[str, str | None]]  # alias -> (module, name or None)

    def where(self, node: ast.AST) -> str:
        return f"{self.module.replace('.', '/')}.py:{getattr(node, 'lineno', '?')}"


@cache
def _source(module: str) -> _Source:
    path = _module_path(module)
    if path is None:
        raise Unreadable(f"no source file for module {module}")
    src = _Source(module, {}, {})
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            src.defs[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    src.defs[target.id] = node
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                src.imports[alias.asname or alias.name] = (node.module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                src.imports[alias.asname or alias.name.split(".")[0]] = (alias.name, None)
    return src


def _lookup(src: _Source, name: str) -> tuple[_Source, ast.stmt] | None:
    """Where ``name`` is defined, following ``from X import name`` through the project."""
    if name in src.defs:
        return src, src.defs[name]
    module, attr = src.imports.get(name, ("", None))
    if attr and _module_path(module) and not _module_path(f"{module}.{attr}"):
        return _lookup(_source(module), attr)
    return None


def _function(src: _Source, name: str, env: dict[str, Any]) -> tuple[_Source, ast.FunctionDef]:
    ref = env.get(name)  # a hook's own (local) import, else the module's names
    found = _lookup(_source(ref.module), ref.name) if isinstance(ref, _Ref) else None
    found = found or _lookup(src, name)
    if found is None or not isinstance(found[1], ast.FunctionDef):
        raise Unreadable(f"function {name} used in {src.module} is not found")
    return found[0], found[1]


def _value(node: ast.expr, src: _Source, env: dict[str, Any] | None = None) -> Any:
    """Evaluate a declaration: literals, ``+``, the project's constants, a hook's
    parameters (``env``); anything else is opaque."""
    if isinstance(node, ast.Name) and env and node.id in env:
        return env[node.id]
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Tuple | ast.List):
        items = [_value(e, src, env) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.Dict):
        return {_value(k, src): _value(v, src) for k, v in zip(node.keys, node.values) if k}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _value(node.left, src, env) + _value(node.right, src, env)
    if isinstance(node, ast.Name):
        found = _lookup(src, node.id)
        if found is None:
            return _Ref(src.module, node.id)
        where, stmt = found
        if isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
            return _value(stmt.value, where)
        return _Ref(where.module, node.id)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        module, attr = src.imports.get(node.value.id, ("", None))  # `from rlid import x as y`
        full = f"{module}.{attr}" if attr else module
        if full and _module_path(full):
            return _value(ast.Name(id=node.attr, lineno=node.lineno), _source(full))
    return _Opaque(src.where(node))


def _plain(value: Any, what: str) -> Any:
    """``value`` where it is rendered: an opaque one is an error naming its place."""
    if isinstance(value, _Opaque):
        raise Unreadable(f"{what} at {value.where} is not a literal this reader can evaluate")
    return tuple(value) if isinstance(value, dict) else value  # choices as a dict: its keys


# ------------------------------------------------------------------ config fields
def _hint(node: ast.expr, src: _Source) -> dict[str, Any]:
    """choices / nargs from a type hint, as rlid.flags reads the real one."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        inner = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if node.value.id == "Literal":
            return {"choices": tuple(_value(e, src) for e in inner)}
        return {**_hint(inner[0], src), "nargs": "+"} if node.value.id == "tuple" else {}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # X | None
        none = isinstance(node.left, ast.Constant) and node.left.value is None
        return _hint(node.right if none else node.left, src)
    if isinstance(node, ast.Name):
        if node.id == "bool":
            return {"nargs": "?"}
        found = _lookup(src, node.id)  # an alias such as PlaneName = Literal[...]
        if found and isinstance(found[1], ast.Assign | ast.AnnAssign) and found[1].value:
            return _hint(found[1].value, found[0])
    return {}


def _field_call(call: ast.Call, src: _Source) -> tuple[Any, dict[str, Any]]:
    """(default, metadata) of ``field(...)`` or of a helper like ``_f(default, help, **kw)``."""
    name = call.func.id if isinstance(call.func, ast.Name) else ""
    kwargs = {k.arg: k.value for k in call.keywords if k.arg}
    if name == "field":
        meta = _value(kwargs["metadata"], src) if "metadata" in kwargs else {}
        if "default" in kwargs:
            return _value(kwargs["default"], src), meta
        factory = _value(kwargs.get("default_factory", ast.Constant(None)), src)
        made: dict[str, Any] = {"dict": {}, "tuple": (), "list": []}
        return made.get(getattr(factory, "name", ""), factory), meta
    where, helper = _function(src, name, {})
    params = [a.arg for a in helper.args.args]
    bound = {**dict(zip(params, call.args)), **kwargs}
    extra = {k: _value(v, src) for k, v in kwargs.items() if k not in params}
    return _value(bound["default"], src), {"help": _value(bound["help"], src), **extra}


def _dataclass_flags(cls: _Ref, group: str, prefix: str, skip: tuple[str, ...]) -> list[Flag]:
    """The flags rlid.flags.add_dataclass_arguments derives from ``cls``'s fields."""
    src = _source(cls.module)
    node = src.defs.get(cls.name)
    if not isinstance(node, ast.ClassDef):
        raise Unreadable(f"class {cls.name} is not defined in {cls.module}")
    flags = []
    for stmt, after in zip(node.body, [*node.body[1:], None]):
        if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
            continue
        name, what = stmt.target.id, f"{cls.name}.{stmt.target.id}"
        if name in skip:
            continue
        if isinstance(stmt.value, ast.Call):
            default, meta = _field_call(stmt.value, src)
        else:
            default, meta = (None if stmt.value is None else _value(stmt.value, src)), {}
        if meta.get("help"):
            help_text = _plain(meta["help"], f"help of {what}")
        elif isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
            text = " ".join(str(after.value.value).split()).replace("``", "")
            first = _FIRST_SENTENCE.split(text)[0]  # the attribute docstring's first sentence
            help_text = first[:-1] if first.endswith(".") and not first.endswith("..") else first
        else:
            help_text = name
        default = _plain(default, f"default of {what}")
        shown = " ".join(map(str, default)) if isinstance(default, tuple) else str(default)
        kind = {**_hint(stmt.annotation, src), **meta}
        metavar = kind.get("metavar")
        if "choices" not in kind and metavar is None and prefix:
            metavar = name.upper()
        choices = _plain(kind.get("choices"), f"choices of {what}")
        flags.append(
            Flag(
                names=("--" + name.replace("_", "-"), *kind.get("aliases", ())),
                help=f"{help_text} (default: {shown})".replace("%", "%%"),
                choices=tuple(choices) if choices is not None else None,
                metavar=metavar,
                nargs=kind.get("nargs"),
                boolean=kind.get("nargs") == "?" and "type" not in meta,
                group=group,
                field_default=shown,
            )
        )
    return flags


# ------------------------------------------------------------------ parser hooks
@dataclass
class _Parser:
    command: str
    help: str
    flags: list[Flag] = field(default_factory=list)
    group: str = ""


def _walk(fn: ast.FunctionDef, src: _Source, env: dict[str, Any], out: dict[str, _Parser]) -> None:
    """Follow a parser hook: parsers, groups, arguments, and the helpers it hands a parser."""
    for stmt in fn.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level:
            for alias in stmt.names:  # a hook's own import (kept local for start-up speed)
                env[alias.asname or alias.name] = _Ref(stmt.module, alias.name)
        elif isinstance(stmt, ast.Expr | ast.Assign) and isinstance(stmt.value, ast.Call):
            made = _call(stmt.value, src, env, out)
            target = stmt.targets[0] if isinstance(stmt, ast.Assign) else None
            if isinstance(target, ast.Name) and made is not None:
                env[target.id] = made


def _call(call: ast.Call, src: _Source, env: dict[str, Any], out: dict[str, _Parser]) -> Any:
    kwargs = {k.arg: k.value for k in call.keywords if k.arg}
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        owner = env.get(func.value.id)
        if owner == "subparsers" and func.attr == "add_parser":
            name = _value(call.args[0], src, env)
            help_text = _value(kwargs["help"], src, env) if "help" in kwargs else ""
            out[name] = _Parser(name, _plain(help_text, f"help of {name}"))
            return out[name]
        if not isinstance(owner, _Parser):
            return None
        if func.attr == "add_argument_group":
            title = _plain(_value(call.args[0], src, env), "a group title") if call.args else ""
            return _Parser(owner.command, owner.help, owner.flags, title)
        if func.attr == "add_mutually_exclusive_group":
            return owner
        if func.attr == "add_argument":
            owner.flags.append(_argument(call, src, env, owner.group))
        return None
    if not isinstance(func, ast.Name):
        return None
    args = [_value(a, src, env) for a in call.args]
    if func.id == "add_dataclass_arguments" and isinstance(args[0], _Parser):
        prefix = _value(kwargs["dest_prefix"], src, env) if "dest_prefix" in kwargs else ""
        skip = _value(kwargs["skip"], src, env) if "skip" in kwargs else ()
        args[0].flags.extend(_dataclass_flags(args[1], args[0].group, prefix, skip))
    elif any(isinstance(a, _Parser) or a == "subparsers" for a in args):
        where, fn = _function(src, func.id, env)  # a helper that adds arguments
        params = fn.args.args
        inner = {p.arg: _value(d, where) for p, d in zip(params[::-1], fn.args.defaults[::-1])}
        inner.update({p.arg: a for p, a in zip(params, args)})
        inner.update({k: _value(v, src, env) for k, v in kwargs.items()})
        _walk(fn, where, inner, out)
    return None


def _argument(call: ast.Call, src: _Source, env: dict[str, Any], group: str) -> Flag:
    names = tuple(_value(a, src, env) for a in call.args)
    kw = {k.arg: _value(k.value, src, env) for k in call.keywords if k.arg}
    choices = _plain(kw.get("choices"), f"choices of {names[0]}")
    return Flag(
        names=names,
        help=_plain(kw.get("help", ""), f"help of {names[0]}"),
        default=_plain(kw.get("default"), f"default of {names[0]}"),
        choices=tuple(choices) if choices is not None else None,
        metavar=kw.get("metavar"),
        nargs=kw.get("nargs"),
        switch=kw.get("action") in ("store_true", "store_false"),
        group=group,
    )


def read_commands() -> dict[str, Command]:
    """Every ``rlid`` command with its flags, in the order ``rlid --help`` lists them."""
    out: dict[str, _Parser] = {}
    for module, hook in (*HOOKS, *((m, h) for m, h, _ in _EXTERNAL)):
        where, fn = _function(_source(module), hook, {})
        _walk(fn, where, {fn.args.args[0].arg: "subparsers"}, out)
    return {n: Command(n, p.help, tuple(p.flags)) for n, p in out.items()}


# ------------------------------------------------------------------ markdown
def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_command(command: Command) -> str:
    """One markdown table per argument group of ``command`` (the parser's own first)."""
    groups: dict[str, list[Flag]] = {}
    for flag in command.flags:
        groups.setdefault(flag.group, []).append(flag)
    parts = []
    for title, flags in groups.items():
        lines = [f"*{title}:*", ""] if title else []
        lines += ["| flag | value | default | what it does |", "|---|---|---|---|"]
        for f in flags:
            value = f"`{_cell(f.value)}`" if f.value else ""
            default = f"`{_cell(f.shown_default)}`" if f.shown_default else ""
            names = ", ".join(f"`{n}`" for n in f.names)
            lines.append(f"| {names} | {value} | {default} | {_cell(f.text)} |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def render_all() -> str:
    return "\n\n".join(
        f"### rlid {c.name}\n\n{c.help}\n\n{render_command(c)}" for c in read_commands().values()
    )


def update_page(text: str) -> str:
    """``text`` with every ``<!-- flags: COMMAND -->`` block regenerated."""
    commands = read_commands()
    out, pos = [], 0
    for start in START.finditer(text):
        name = start.group(1)
        end = text.find(END, start.end())
        if end < 0:
            raise ValueError(f"<!-- flags: {name} --> has no {END} after it")
        if name not in commands:
            raise ValueError(f"<!-- flags: {name} -->: no such command ({', '.join(commands)})")
        out += [text[pos : start.end()], "\n", render_command(commands[name]), "\n\n"]
        pos = end
    return "".join(out) + text[pos:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rlid.cli.usage", description="Render the rlid flag tables."
    )
    parser.add_argument("--write", type=Path, metavar="PAGE", help="refresh PAGE's blocks")
    parser.add_argument("--check", type=Path, metavar="PAGE", help="exit 1 if PAGE is stale")
    args = parser.parse_args(argv)
    page = args.write or args.check
    if page is None:
        print(render_all())
        return 0
    text = page.read_text(encoding="utf-8")
    fresh = update_page(text)
    if args.check and fresh != text:
        print(f"{page} is stale: run python -m rlid.cli.usage --write {page}")
        return 1
    if args.write:
        page.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
