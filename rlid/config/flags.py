"""Command-line flags derived from a frozen config dataclass: one way for every command.

``rlid train`` (``TrainConfig`` and ``menus.Interface``), ``rlid audit``
(``AuditConfig``) and ``rlid pretrain`` (``PretrainConfig``) all get their flags
here: one ``--field-name`` per field, its help from ``field.metadata["help"]``
(or the field's docstring-style comment in the metadata), its type, choices and
``nargs`` from the type hint:

* ``Literal[...]``      -> ``choices``;
* ``bool``              -> ``true/false/yes/no/1/0``, or the bare flag for true;
* ``X | None``          -> ``X``;
* ``tuple[X, ...]``     -> ``nargs="+"`` of ``X`` (values are turned back into a tuple);
* anything else         -> the type itself (``int``, ``float``, ``str``, ``Path``).

Field metadata may override any of these with argparse keywords (``choices``,
``nargs``, ``type``, ``metavar``) and add ``aliases`` (other flag names).
Every flag defaults to ``None`` ("not given"): :func:`given_values` returns only
what the user gave, and the dataclass supplies its own defaults, so a default is
written once, in the dataclass. (``rlid compare`` takes its whole configuration from
a TOML file; its few flags are not config fields.)
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import re
import textwrap
import types
import typing
from typing import Any, Literal, get_args

_ARGPARSE_KEYS = ("choices", "nargs", "type", "metavar")


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {text!r}")


def _from_hint(hint: Any) -> dict[str, Any]:
    origin = typing.get_origin(hint)
    if origin is Literal:
        return {"type": type(get_args(hint)[0]), "choices": get_args(hint)}
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in get_args(hint) if a is not type(None)]
        return _from_hint(inner[0])
    if origin is tuple:
        return {**_from_hint(get_args(hint)[0]), "nargs": "+"}
    if hint is bool:
        return {"type": parse_bool}
    if hint is Any:
        return {"type": str}
    return {"type": hint}


@functools.cache
def attribute_docs(cls: type) -> dict[str, str]:
    """Field -> first sentence of its attribute docstring (the string literal right
    after the field in the class body, as ``menus.Interface`` documents its fields)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return {}
    docs: dict[str, str] = {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    for node, after in zip(body, body[1:]):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            text = " ".join(after.value.value.split()).replace("``", "")
            first = re.split(r"(?<=[a-z)])\.\s+(?=[A-Z])", text)[0]
            docs[node.target.id] = (
                first[:-1] if first.endswith(".") and not first.endswith("..") else first
            )
    return docs


def _shown(value: Any) -> str:
    return " ".join(map(str, value)) if isinstance(value, tuple) else str(value)


def add_dataclass_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    *,
    dest_prefix: str = "",
    skip: tuple[str, ...] = (),
) -> None:
    """Add one flag per field of the dataclass ``cls`` (defaults ``None``: not given)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        meta = dict(f.metadata or {})
        kwargs = _from_hint(hints[f.name])
        kwargs.update({k: meta[k] for k in _ARGPARSE_KEYS if k in meta})
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None
        if "choices" not in kwargs and "metavar" not in kwargs and dest_prefix:
            kwargs["metavar"] = f.name.upper()
        if kwargs.get("type") is parse_bool and "nargs" not in kwargs:
            kwargs.update(nargs="?", const=True)  # a bare --flag means true; a value still parses
        names = [flag_name(f.name), *meta.get("aliases", ())]
        parser.add_argument(
            *names,
            dest=dest_prefix + f.name,
            default=None,
            help=f"{meta.get('help') or attribute_docs(cls).get(f.name, f.name)} "
            f"(default: {_shown(default)})".replace("%", "%%"),
            **kwargs,
        )


def given_values(
    args: argparse.Namespace, cls: type, *, dest_prefix: str = "", skip: tuple[str, ...] = ()
) -> dict[str, Any]:
    """``{field: value}`` for the flags of ``cls`` the user gave (lists back to tuples)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        value = getattr(args, dest_prefix + f.name, None)
        if value is not None:
            out[f.name] = tuple(value) if isinstance(value, list) else value
    return out


def add_env_option_argument(
    parser: argparse.ArgumentParser, help: str = "env option (repeatable), e.g. -o size=3"
) -> None:
    """``--env-option/-o K=V`` (repeatable); parse with ``rlid.envs.registry.parse_option_strings``."""
    parser.add_argument("--env-option", "-o", action="append", default=[], metavar="K=V", help=help)
