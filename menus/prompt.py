"""Prompt text for both planes, and the completions they are read or trained on.

Plain template (the default model is tiny and the CPU slow, so prompts stay short;
lines of fields the :class:`~menus.interface.Interface` disables are left out)::

    Goal: {objective}
    Steps left: {steps_left}      (only with Interface.steps_left)
    Memory: {memory}
    Now: {observation}
    Actions:
    A) go east -> you will be in the studio
    B) take key -> you will carry the key
    Answer:

The decision prompt ends exactly at ``"Answer:"``; the label is read as the next
token, ``LABEL_PREFIX + label`` (``" A"``). The token-plane prompt has the same
fields, the legal list as ``"- go east"`` lines when the interface shows it, and
ends at ``"Command:"``; the model writes ``COMMAND_PREFIX + action + COMMAND_END``
(``" go east\\n"``). A pretraining transcript is a decision prompt followed by
:func:`render_decision_target` (``" B\\nCommand: go east\\n"``), so one forward
teaches both the label and the command.

Chat template (``template="chat"``, or ``"auto"`` with a tokenizer that has one):
the same body is the user message, rendered with ``add_generation_prompt=True``;
the label (or command) follows the generation prompt with the prefix the template
itself writes before an assistant's words (``""`` for ChatML, ``" "`` for Llama-2's
``"[/INST] A"``), so the label is read as the token the model would emit.
:func:`label_context` returns the ``(context, prefix)`` the renderer uses, so
labels are validated exactly where they are read (:func:`label_set_for`).

With ``Interface.layout="glam"`` the body is GLAM's prompt instead (Carta et al. 2023,
``experiments/agents/base_agent.py`` ``generate_prompt``)::

    Possible action of the agent: turn left, turn right, go forward, pick up, drop, toggle \n Goal of the agent: go to the red ball \n Observation 0: You see a wall 2 steps forward, \n Action 0: turn left \n Observation 1: ..., \n Action 1: go forward \n Observation 2: ..., \n Action 2:

(``\n`` a newline). The token and scoring planes' prompt ends at ``"Action 2:"``, so
prompt + ``" turn left"`` is GLAM's prompt + ``"turn left"``; the decision plane's
drops the last ``Action`` line and continues with ``Actions:``, the menu and ``Answer:``.

Prompts are complete text: encode them with ``rlid.menus.tokens.encode_prompt`` (the
text's own tokens, plus the tokenizer's BOS unless a chat template already wrote it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

import numpy as np

from rlid.menus.interface import Interface
from rlid.menus.labels import LabelSet, parse_alphabet
from rlid.menus.memory import GLAM_ACTION, MemoryProvider, glam_history, one_line, shorten
from rlid.menus.menu import AFTERSTATE_ARROW, Menu, compile_menu
from rlid.menus.tree import LabelTree, build_tree_root

# --- the strings every plane and the pretraining transcripts share -------------
GOAL_FIELD = "Goal: "
STEPS_LEFT_FIELD = "Steps left: "
MEMORY_FIELD = "Memory: "
OBSERVATION_FIELD = "Now: "
ACTIONS_HEADER = "Actions:"
ANSWER_CUE = "Answer:"
"""The decision prompt ends with this; the label token comes next."""
LABEL_PREFIX = " "
"""Text before the label in the plain template (``"Answer: A"``); chat: the template's own."""
COMMAND_CUE = "Command:"
"""The token-plane prompt ends with this; the command text comes next."""
COMMAND_PREFIX = " "
"""Text before the command in the plain template (``"Command: go east"``); chat: the template's own."""
COMMAND_END = "\n"
"""A generated command ends at the first newline (or end-of-sequence)."""
TOKEN_PLANE_BULLET = "- "
EMPTY_MEMORY = "none yet"
EMPTY_OBSERVATION = "(nothing)"

GLAM_ACTIONS_HEAD = "Possible action of the agent:"
GLAM_GOAL = " \n Goal of the agent: "
GLAM_CUE = ":"
"""What GLAM's token-plane prompt ends with ("Action 2:"); the command follows a space."""

_CHAT_PLACEHOLDER = "RLID_PROMPT_BODY_PLACEHOLDER"
_ANSWER_PLACEHOLDER = "RLID_ANSWER_PLACEHOLDER"


# --- templates and reading contexts --------------------------------------------
def resolve_template(interface: Interface, tokenizer: Any) -> Literal["plain", "chat"]:
    """``"chat"`` or ``"plain"``: what ``interface.template`` means for ``tokenizer``."""
    has_chat = bool(getattr(tokenizer, "chat_template", None))
    if interface.template == "chat" and not has_chat:
        raise ValueError(
            "Interface.template='chat' but the tokenizer has no chat_template; "
            "use template='plain' or 'auto'"
        )
    if interface.template == "plain":
        return "plain"
    return "chat" if has_chat else "plain"


def _chat(tokenizer: Any, body: str) -> str:
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": body}], add_generation_prompt=True, tokenize=False
    )
    if not isinstance(text, str):
        raise TypeError(f"apply_chat_template(tokenize=False) returned {type(text).__name__}")
    return text


def _chat_tail(tokenizer: Any) -> str:
    """What the chat template appends after the user message (the generation prompt)."""
    text = _chat(tokenizer, _CHAT_PLACEHOLDER)
    if _CHAT_PLACEHOLDER not in text:
        raise ValueError("the chat template does not render the user message verbatim")
    return text[text.rindex(_CHAT_PLACEHOLDER) + len(_CHAT_PLACEHOLDER) :]


def _assistant_prefix(tokenizer: Any) -> str:
    """What the chat template writes between its generation prompt and the assistant's
    words: ``" "`` for Llama-2 style (``"[/INST] A"``), ``""`` for ChatML.

    Found by rendering a user turn followed by an assistant turn; ``""`` when the
    template cannot render one or the rendering does not extend the generation prompt.
    """
    turns = [
        {"role": "user", "content": _CHAT_PLACEHOLDER},
        {"role": "assistant", "content": _ANSWER_PLACEHOLDER},
    ]
    try:
        full = tokenizer.apply_chat_template(turns, tokenize=False)
    except Exception:  # jinja raises its own errors for templates without assistant turns
        return ""
    prompt = _chat(tokenizer, _CHAT_PLACEHOLDER)
    if not isinstance(full, str) or not full.startswith(prompt):
        return ""
    answer = full.find(_ANSWER_PLACEHOLDER, len(prompt))
    return full[len(prompt) : answer] if answer >= 0 else ""


def _reading_context(
    interface: Interface, tokenizer: Any, cue: str, prefix: str
) -> tuple[str, str]:
    if resolve_template(interface, tokenizer) == "chat":
        tail = _chat_tail(tokenizer)
        if tail:
            return tail, _assistant_prefix(tokenizer)
    return cue, prefix


def label_context(interface: Interface, tokenizer: Any) -> tuple[str, str]:
    """``(context, prefix)``: the decision prompt ends with ``context``, and each label
    is read as the token of ``prefix + label`` right after it."""
    return _reading_context(interface, tokenizer, ANSWER_CUE, LABEL_PREFIX)


def command_context(interface: Interface, tokenizer: Any) -> tuple[str, str]:
    """``(context, prefix)``: the token-plane prompt ends with ``context``, and the model
    writes ``prefix + action + COMMAND_END`` after it."""
    cue = GLAM_CUE if interface.layout == "glam" else COMMAND_CUE
    return _reading_context(interface, tokenizer, cue, COMMAND_PREFIX)


def label_set_for(interface: Interface, tokenizer: Any, *, strict: bool = False) -> LabelSet:
    """The label set for ``interface.labels``, validated in the renderer's context."""
    context, prefix = label_context(interface, tokenizer)
    return LabelSet.for_tokenizer(
        tokenizer, interface.labels, context=context, prefix=prefix, strict=strict
    )


# --- completions ----------------------------------------------------------------
def label_completion(label: str, prefix: str = LABEL_PREFIX) -> str:
    """The text of the label token after the decision prompt (``" A"``)."""
    return prefix + label


def command_completion(action: str, prefix: str = COMMAND_PREFIX) -> str:
    """What the token plane writes after its prompt (``" go east\\n"``)."""
    return prefix + action + COMMAND_END


def render_decision_target(
    label: str,
    action: str,
    *,
    label_prefix: str = LABEL_PREFIX,
    command_prefix: str = COMMAND_PREFIX,
) -> str:
    """The pretraining completion after a decision prompt: ``" B\\nCommand: go east\\n"``."""
    return (
        label_completion(label, label_prefix)
        + "\n"
        + COMMAND_CUE
        + command_completion(action, command_prefix)
    )


def parse_command(generated: str) -> str:
    """The command in token-plane output: text before the first ``COMMAND_END``, stripped."""
    return generated.split(COMMAND_END, 1)[0].strip()


# --- prompts --------------------------------------------------------------------
def glam_prompt(
    obs: str, info: Mapping[str, Any], memory_text: str | None, *, with_cue: bool
) -> str:
    r"""GLAM's prompt (``generate_prompt``): the legal actions, the goal, then the
    ``glam`` memory's observations and actions (just ``obs`` when the memory is left
    out). ``with_cue``: end at the last ``"Action N:"`` (the command follows after a
    space); else drop that line.

        >>> info = {"legal_actions": ["turn left", "go forward"], "objective": "go to the box"}
        >>> glam_prompt("You see a wall 1 step forward", info, None, with_cue=True)
        'Possible action of the agent: turn left, go forward \n Goal of the agent: go to the box \n Observation 0: You see a wall 1 step forward, \n Action 0:'
    """
    head = GLAM_ACTIONS_HEAD + "".join(f" {action}," for action in info["legal_actions"])[:-1]
    history = memory_text or glam_history([obs], [])
    if with_cue:
        body = history[:-1]  # "\n Action 2: " ends with the space before the command
    else:
        body = history[: history.rindex(GLAM_ACTION.split("{", 1)[0])]
    return head + GLAM_GOAL + str(info["objective"]) + body


def _fields(
    obs: str, info: Mapping[str, Any], interface: Interface, memory_text: str | None
) -> list[str]:
    lines: list[str] = []
    if interface.objective:
        if "objective" not in info:
            raise KeyError(
                "info has no 'objective' but Interface.objective=True; "
                "pass the env's info dict or set objective=False"
            )
        lines.append(GOAL_FIELD + shorten(str(info["objective"]), interface.max_obs_chars))
    if interface.steps_left:
        if "steps_left" not in info:
            raise KeyError(
                "info has no 'steps_left' but Interface.steps_left=True; "
                "pass the env's info dict or set steps_left=False"
            )
        lines.append(STEPS_LEFT_FIELD + str(int(info["steps_left"])))
    if interface.memory != "none":
        # None and "" both mean "nothing remembered yet" (e.g. the first step).
        lines.append(MEMORY_FIELD + (one_line(memory_text or "") or EMPTY_MEMORY))
    if interface.observation:
        lines.append(
            OBSERVATION_FIELD + (shorten(obs, interface.max_obs_chars) or EMPTY_OBSERVATION)
        )
    return lines


def _finish(body: str, interface: Interface, tokenizer: Any, context: str) -> str:
    if resolve_template(interface, tokenizer) == "plain":
        return body
    prompt = _chat(tokenizer, body)
    if not prompt.endswith(context):
        raise ValueError(
            f"the chat prompt does not end with the reading context {context!r}; "
            "the chat template depends on the message text, use template='plain'"
        )
    return prompt


def render_decision_prompt(
    obs: str,
    info: Mapping[str, Any],
    menu: Menu | LabelTree,
    interface: Interface,
    tokenizer: Any,
    memory_text: str | None = None,
) -> str:
    """The decision-plane prompt, ending exactly where the label token is read.

    Args:
        obs: the current observation.
        info: the env's info (``objective`` is read from it).
        menu: the compiled menu for this state (a label tree: its first menu).
        interface: which fields to show; ``afterstates=True`` requires them in the menu.
        tokenizer: decides plain vs chat (``interface.template``).
        memory_text: the memory line; defaults to ``menu.memory``. ``None`` or ``""``
            with a memory interface renders ``"Memory: none yet"``.
    """
    memory = menu.memory if memory_text is None else memory_text
    if interface.layout == "glam":
        lines = [glam_prompt(obs, info, memory, with_cue=False)]
    else:
        lines = _fields(obs, info, interface, memory)
    if interface.afterstate_text == "change" and isinstance(menu, Menu):
        menu = afterstate_changes(menu, obs)
    lines += [ACTIONS_HEADER, menu.render(afterstates=interface.afterstates), ANSWER_CUE]
    context, _ = label_context(interface, tokenizer)
    return _finish("\n".join(lines), interface, tokenizer, context)


NO_CHANGE = "no change"
"""A row's afterstate under ``Interface.afterstate_text="change"`` where the action leaves
the observation as it is."""


def afterstate_changes(menu: Menu, obs: str) -> Menu:
    """The menu as ``afterstate_text="change"`` shows it: a row whose afterstate is the
    observation ``obs`` itself reads :data:`NO_CHANGE` (its other rows unchanged)."""
    rows = tuple(
        replace(row, afterstate=NO_CHANGE) if row.afterstate == obs else row for row in menu.rows
    )
    return menu if rows == menu.rows else replace(menu, rows=rows)


def render_token_prompt(
    obs: str,
    info: Mapping[str, Any],
    interface: Interface,
    tokenizer: Any,
    memory_text: str | None = None,
    legal_actions: Sequence[str] | None = None,
    afterstates: Sequence[str] | None = None,
) -> str:
    """The token-plane prompt: same fields, the legal list (and afterstates) when the
    interface shows them, ending where the command text is generated.

    ``legal_actions`` / ``afterstates`` default to ``info["legal_actions"]`` /
    ``info["afterstates"]``. With ``interface.legal_list == "groups"`` the list is the
    label tree's first menu in the legal order (``info["action_templates"]`` group it).
    With ``interface.layout == "glam"`` it is GLAM's prompt, ending at ``"Action N:"``.
    """
    if interface.layout == "glam":
        context, _ = command_context(interface, tokenizer)
        return _finish(glam_prompt(obs, info, memory_text, with_cue=True), interface, tokenizer,
                       context)  # fmt: skip
    lines = _fields(obs, info, interface, memory_text)
    if interface.show_legal_to_token_plane:
        legal = list(info["legal_actions"] if legal_actions is None else legal_actions)
        shown_afterstates: list[str] | None = None
        if interface.show_afterstates_to_token_plane:
            source = info.get("afterstates") if afterstates is None else afterstates
            if source is None or len(source) != len(legal):
                raise ValueError(
                    "Interface.show_afterstates_to_token_plane=True needs afterstates aligned "
                    "with the legal actions (env built with afterstates=True)"
                )
            shown_afterstates = [one_line(str(text)) for text in source]
        lines.append(ACTIONS_HEADER)
        shown: list[int] = list(range(len(legal)))
        texts = list(legal)
        if interface.legal_list == "groups":
            rows = _first_menu(legal, info.get("action_templates"), interface)
            shown = [-1 if row.action is None else row.action for row in rows]
            texts = [row.text for row in rows]
        for i, text in zip(shown, texts):
            line = TOKEN_PLANE_BULLET + text
            if shown_afterstates is not None and i >= 0 and shown_afterstates[i]:  # "": nothing
                line += AFTERSTATE_ARROW + shown_afterstates[i]
            lines.append(line)
    lines.append(COMMAND_CUE)
    context, _ = command_context(interface, tokenizer)
    return _finish("\n".join(lines), interface, tokenizer, context)


def _first_menu(legal: Sequence[str], templates: Sequence[str] | None, interface: Interface) -> Any:
    """The label tree's first menu in the legal order (``legal_list="groups"``)."""
    fanout = interface.fanout(len(parse_alphabet(interface.labels)))
    root = build_tree_root(
        list(legal), None if templates is None else list(templates), range(len(legal)), fanout,
        interface.tree_grouping,
    )  # fmt: skip
    return root.children


def check_step(
    info: Mapping[str, Any], interface: Interface, rng: np.random.Generator | None
) -> None:
    """Refuse a step the interface cannot compile: a shuffle without an rng, or
    afterstates asked for where the env gives none."""
    if interface.shuffle and rng is None:
        raise ValueError("Interface.shuffle=True needs an rng (numpy.random.default_rng(seed))")
    if interface.afterstates and info.get("afterstates") is None:
        raise ValueError(
            "Interface.afterstates=True but info['afterstates'] is None; build the env with "
            "afterstates=True or set Interface(afterstates=False)"
        )


def menu_for_step(
    info: Mapping[str, Any],
    interface: Interface,
    labels: LabelSet | Sequence[str],
    memory: str | MemoryProvider | None = None,
    rng: np.random.Generator | None = None,
) -> Menu:
    """Compile the menu of one env step as ``interface`` says: afterstates only when
    shown, rows shuffled with ``rng`` only when ``interface.shuffle``, its overflow
    policy, and the memory line only when the interface has a memory."""
    check_step(info, interface, rng)
    return compile_menu(
        info["legal_actions"],
        info.get("afterstates") if interface.afterstates else None,
        memory if interface.memory != "none" else None,
        labels=labels,
        rng=rng if interface.shuffle else None,
        overflow=interface.overflow,
    )
