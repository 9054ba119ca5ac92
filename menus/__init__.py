"""Legal actions -> a labelled menu with afterstates and memory (docs/design.md §4).

    >>> import numpy as np
    >>> from rlid.menus import Interface, compile_menu, make_memory
    >>> menu = compile_menu(["go east", "take key"], labels="A-Z",
    ...                     rng=np.random.default_rng(0))
    >>> sorted(menu.actions)
    ['go east', 'take key']

This package never imports torch; tokenizers are passed in.
"""

from __future__ import annotations

from rlid.menus.interface import TEMPLATES, Interface, MemoryKind, Template
from rlid.menus.labels import (
    AUTO_ALPHABET,
    DEFAULT_CONTEXT,
    DEFAULT_PREFIX,
    LabelError,
    LabelSet,
    label_token,
    parse_alphabet,
)
from rlid.menus.memory import (
    MAX_MEMORY_CHARS,
    MEMORY_PROVIDERS,
    LastKMemory,
    MemoryProvider,
    NoMemory,
    StructuredMemory,
    make_memory,
)
from rlid.menus.menu import OVERFLOW_POLICIES, Menu, MenuRow, Overflow, compile_menu
from rlid.menus.prompt import (
    ACTIONS_HEADER,
    ANSWER_CUE,
    COMMAND_CUE,
    COMMAND_END,
    COMMAND_PREFIX,
    LABEL_PREFIX,
    command_completion,
    command_context,
    label_completion,
    label_context,
    label_set_for,
    menu_for_step,
    parse_command,
    render_decision_prompt,
    render_decision_target,
    render_token_prompt,
    resolve_template,
)

__all__ = [
    "ACTIONS_HEADER",
    "ANSWER_CUE",
    "AUTO_ALPHABET",
    "COMMAND_CUE",
    "COMMAND_END",
    "COMMAND_PREFIX",
    "DEFAULT_CONTEXT",
    "DEFAULT_PREFIX",
    "LABEL_PREFIX",
    "MAX_MEMORY_CHARS",
    "MEMORY_PROVIDERS",
    "OVERFLOW_POLICIES",
    "TEMPLATES",
    "Interface",
    "LabelError",
    "LabelSet",
    "LastKMemory",
    "MemoryKind",
    "MemoryProvider",
    "Menu",
    "MenuRow",
    "NoMemory",
    "Overflow",
    "StructuredMemory",
    "Template",
    "command_completion",
    "command_context",
    "compile_menu",
    "label_completion",
    "label_context",
    "label_set_for",
    "label_token",
    "make_memory",
    "menu_for_step",
    "parse_alphabet",
    "parse_command",
    "render_decision_prompt",
    "render_decision_target",
    "render_token_prompt",
    "resolve_template",
]
