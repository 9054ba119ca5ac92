"""Prompt text of label trees: the menu of one step, and each later level's continuation.

Level 1 of a tree is read exactly like a flat menu (``rlid.menus.prompt.render_decision_prompt``
renders the tree's first menu). After the chosen label, a later level appends (plain
template)::

    Answer: B
    Chosen: move ... to ... (37 actions)
    Actions:
    A) move apple to cup
    B) move apple to jar
    ...
    Answer:

so its label is read in the same context as level 1's. With a chat template the level
is a new user turn after the assistant's label, rendered by the tokenizer's own template
(``[user: menu 1, assistant: "B", user: level 2]``), ending with the same generation
prompt level 1 ends with.

    >>> import numpy as np
    >>> from rlid.menus import Interface
    >>> info = {"legal_actions": ["open door", "open box", "look"], "afterstates": None}
    >>> interface = Interface(afterstates=False, shuffle=False, tree_fanout=2)
    >>> step = tree_for_step(info, interface, "A-Z")
    >>> print(level_continuation(step, (0,), step.labels[0]))
    <BLANKLINE>
    Chosen: open ... (2 actions)
    Actions:
    A) open door
    B) open box
    Answer:
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rlid.menus.interface import Interface
from rlid.menus.labels import LabelSet
from rlid.menus.memory import MemoryProvider
from rlid.menus.menu import Menu, label_strings_of
from rlid.menus.prompt import (
    ACTIONS_HEADER,
    ANSWER_CUE,
    _chat,
    check_step,
    label_context,
    menu_for_step,
    resolve_template,
)
from rlid.menus.tree import LabelTree, build_label_tree

CHOSEN_FIELD = "Chosen: "
_USER_PLACEHOLDER = "RLID_PREVIOUS_MENU_PLACEHOLDER"


def tree_for_step(
    info: Mapping[str, Any],
    interface: Interface,
    labels: LabelSet | str | Sequence[str],
    memory: str | MemoryProvider | None = None,
    rng: np.random.Generator | None = None,
) -> Menu | LabelTree:
    """The decision of one env step: a flat :class:`Menu` when the legal actions fit one
    menu (or the interface's overflow is not ``"tree"``: :func:`menu_for_step`), else a
    :class:`LabelTree`. The shuffle draws one permutation either way, so a step whose
    actions fit is compiled exactly as :func:`menu_for_step` compiles it."""
    legal = info["legal_actions"]
    label_strings = label_strings_of(labels)
    fanout = interface.fanout(len(label_strings))
    if interface.overflow != "tree" or len(legal) <= fanout:
        capped = label_strings[:fanout] if interface.overflow == "tree" else labels
        return menu_for_step(info, interface, capped, memory, rng)
    check_step(info, interface, rng)
    order = rng.permutation(len(legal)) if interface.shuffle and rng is not None else None
    memory_text = memory.render() if isinstance(memory, MemoryProvider) else memory
    return build_label_tree(
        legal,
        info.get("afterstates") if interface.afterstates else None,
        memory_text if interface.memory != "none" else None,
        labels=label_strings,
        templates=info.get("action_templates"),
        permutation=None if order is None else [int(i) for i in order],
        fanout=fanout,
        grouping=interface.tree_grouping,
    )


def level_body(tree: LabelTree, path: Sequence[int], interface: Interface) -> str:
    """A later level's menu: the chosen row, the rows behind it, the answer cue."""
    chosen = tree.node(path).text
    rows = tree.render_level(
        path, afterstates=interface.afterstates and tree.afterstates is not None
    )
    return "\n".join([CHOSEN_FIELD + chosen, ACTIONS_HEADER, rows, ANSWER_CUE])


def level_continuation(
    tree: LabelTree,
    path: Sequence[int],
    label: str,
    interface: Interface | None = None,
    tokenizer: Any = None,
) -> str:
    """The text after ``label`` (the row chosen last, ``path[-1]``) up to where the next
    label is read: the menu behind ``path`` (see the module docstring). Plain template:
    a newline and :func:`level_body`; chat: the next user turn, rendered by the
    tokenizer's template."""
    interface = interface if interface is not None else Interface()
    body = level_body(tree, path, interface)
    if tokenizer is None or resolve_template(interface, tokenizer) == "plain":
        return "\n" + body
    context, prefix = label_context(interface, tokenizer)
    head = _chat(tokenizer, _USER_PLACEHOLDER) + prefix + label
    turns = [
        {"role": "user", "content": _USER_PLACEHOLDER},
        {"role": "assistant", "content": label},
        {"role": "user", "content": body},
    ]
    full = tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=False)
    if not isinstance(full, str) or not full.startswith(head) or not full.endswith(context):
        raise ValueError(
            "the chat template does not continue a conversation after the label as a new "
            "user turn ending with its generation prompt, so a label tree's later menus "
            "cannot be read like its first; use template='plain'"
        )
    return full[len(head) :]
