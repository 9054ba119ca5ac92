"""Prompt rendering for both planes: plain vs chat, omitted fields, reading contexts."""

from __future__ import annotations

import string

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from rlid.menus import (
    ANSWER_CUE,
    COMMAND_CUE,
    Interface,
    command_completion,
    command_context,
    compile_menu,
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

SPACE = "\u0120"
CHAT_TEMPLATE = (
    "{% for m in messages %}<|user|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
INFO = {
    "legal_actions": ["go east", "take key"],
    "afterstates": ["you will be in the studio", "you will carry the key"],
    "objective": "Find the key and open the door.",
}
OBS = "You are in the hall.\nA key lies here."


def byte_bpe(chat: bool = False) -> PreTrainedTokenizerFast:
    """Byte-level BPE: 256 byte symbols plus merged " X" for letters and digits."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {symbol: i for i, symbol in enumerate(alphabet)}
    merges = []
    for char in string.ascii_letters + string.digits:
        vocab[SPACE + char] = len(vocab)
        merges.append((SPACE, char))
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(["<|user|>", "<|end|>", "<|assistant|>"])
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer)
    if chat:
        fast.chat_template = CHAT_TEMPLATE
    return fast


@pytest.fixture(scope="module")
def plain_tok():
    return byte_bpe()


@pytest.fixture(scope="module")
def chat_tok():
    return byte_bpe(chat=True)


def menu_for(afterstates=True):
    return compile_menu(
        INFO["legal_actions"],
        INFO["afterstates"] if afterstates else None,
        "go west -> You are in the hall.",
        labels="A-Z",
    )


def encode(tokenizer, text):
    return tokenizer.encode(text, add_special_tokens=False)


def test_plain_decision_prompt_exact(plain_tok):
    prompt = render_decision_prompt(OBS, INFO, menu_for(), Interface(), plain_tok)
    assert prompt == (
        "Goal: Find the key and open the door.\n"
        "Memory: go west -> You are in the hall.\n"
        "Now: You are in the hall. A key lies here.\n"
        "Actions:\n"
        "A) go east -> you will be in the studio\n"
        "B) take key -> you will carry the key\n"
        "Answer:"
    )
    assert label_context(Interface(), plain_tok) == (ANSWER_CUE, " ")


def test_label_is_read_right_after_the_prompt(plain_tok, chat_tok):
    for tokenizer in (plain_tok, chat_tok):
        interface = Interface()
        labels = label_set_for(interface, tokenizer)
        context, prefix = label_context(interface, tokenizer)
        prompt = render_decision_prompt(OBS, INFO, menu_for(), interface, tokenizer)
        assert prompt.endswith(context)
        if tokenizer is plain_tok:
            assert prompt.endswith("\nAnswer:")  # nothing after the cue
        prompt_ids = encode(tokenizer, prompt)
        for label, token_id in zip(labels.labels[:2], labels.token_ids[:2]):
            completed = prompt + label_completion(label, prefix)
            assert encode(tokenizer, completed) == prompt_ids + [token_id]


@pytest.mark.parametrize(
    ("kwargs", "absent"),
    [
        ({"objective": False}, "Goal:"),
        ({"memory": "none"}, "Memory:"),
        ({"observation": False}, "Now:"),
        ({"afterstates": False}, " -> you will"),
    ],
)
def test_disabled_fields_are_omitted(plain_tok, kwargs, absent):
    interface = Interface(**kwargs)
    decision = render_decision_prompt(OBS, INFO, menu_for(), interface, plain_tok)
    token = render_token_prompt(OBS, INFO, interface, plain_tok, memory_text="m")
    assert absent not in decision and absent not in token
    assert decision.endswith("\nAnswer:") and token.endswith("\nCommand:")


def test_memory_placeholder_and_observation_cap(plain_tok):
    interface = Interface(max_obs_chars=20, afterstates=False)
    menu = compile_menu(["look"], labels="A-Z")
    prompt = render_decision_prompt("word " * 50, INFO, menu, interface, plain_tok)
    assert "Memory: none yet\n" in prompt
    assert "Now: word word word...\n" in prompt
    prompt = render_decision_prompt("", {"objective": "x"}, menu, interface, plain_tok, "seen")
    assert "Memory: seen\nNow: (nothing)\n" in prompt
    with pytest.raises(KeyError, match="objective=False"):
        render_decision_prompt(OBS, {}, menu, interface, plain_tok)
    with pytest.raises(ValueError, match="compiled without them"):
        render_decision_prompt(OBS, INFO, menu_for(afterstates=False), Interface(), plain_tok)


def test_token_prompt_plain(plain_tok):
    interface = Interface(show_afterstates_to_token_plane=True)
    prompt = render_token_prompt(OBS, INFO, interface, plain_tok, memory_text="")
    assert prompt == (
        "Goal: Find the key and open the door.\n"
        "Memory: none yet\n"
        "Now: You are in the hall. A key lies here.\n"
        "Actions:\n"
        "- go east -> you will be in the studio\n"
        "- take key -> you will carry the key\n"
        "Command:"
    )
    assert command_context(interface, plain_tok) == (COMMAND_CUE, " ")
    bare = render_token_prompt(OBS, INFO, Interface(show_legal_to_token_plane=False), plain_tok)
    assert "Actions:" not in bare and "go east" not in bare
    listed = render_token_prompt(OBS, INFO, Interface(), plain_tok, legal_actions=["look"])
    assert listed.endswith("Actions:\n- look\nCommand:")
    with pytest.raises(ValueError, match="afterstates aligned"):
        render_token_prompt(OBS, {**INFO, "afterstates": None}, interface, plain_tok)
    silent = render_token_prompt(OBS, {**INFO, "afterstates": ["", ""]}, interface, plain_tok)
    assert silent.endswith("Actions:\n- go east\n- take key\nCommand:")  # "" is not shown


def test_chat_template_wraps_the_same_body(chat_tok, plain_tok):
    interface = Interface()
    assert resolve_template(interface, chat_tok) == "chat"
    assert resolve_template(Interface(template="plain"), chat_tok) == "plain"
    assert resolve_template(interface, plain_tok) == "plain"
    body = render_decision_prompt(OBS, INFO, menu_for(), Interface(template="plain"), chat_tok)
    prompt = render_decision_prompt(OBS, INFO, menu_for(), interface, chat_tok)
    assert prompt == f"<|user|>\n{body}<|end|>\n<|assistant|>\n"
    assert label_context(interface, chat_tok) == ("<|end|>\n<|assistant|>\n", "")
    token = render_token_prompt(OBS, INFO, interface, chat_tok)
    assert token.startswith("<|user|>\n") and token.endswith("Command:<|end|>\n<|assistant|>\n")
    assert command_context(interface, chat_tok) == ("<|end|>\n<|assistant|>\n", "")
    with pytest.raises(ValueError, match="no chat_template"):
        render_decision_prompt(OBS, INFO, menu_for(), Interface(template="chat"), plain_tok)


def test_completions_share_one_definition(plain_tok):
    assert render_decision_target("B", "go east") == " B\nCommand: go east\n"
    assert render_decision_target("B", "go east", label_prefix="") == "B\nCommand: go east\n"
    assert label_completion("B") == " B"
    assert command_completion("go east") == " go east\n"
    assert parse_command(" go east\nA) look") == "go east"
    # a pretraining transcript continues the decision prompt with the label token
    interface = Interface()
    labels = label_set_for(interface, plain_tok)
    prompt = render_decision_prompt(OBS, INFO, menu_for(), interface, plain_tok)
    ids = encode(plain_tok, prompt + render_decision_target("B", "take key"))
    assert ids[: len(encode(plain_tok, prompt)) + 1] == encode(plain_tok, prompt) + [
        labels.token_ids[1]
    ]


def test_menu_for_step_follows_the_interface():
    interface = Interface()
    with pytest.raises(ValueError, match="needs an rng"):
        menu_for_step(INFO, interface, "A-Z")
    with pytest.raises(ValueError, match="afterstates=True"):
        menu_for_step({**INFO, "afterstates": None}, interface, "A-Z", rng=np.random.default_rng(0))
    menu = menu_for_step(INFO, interface, "A-Z", "mem", rng=np.random.default_rng(0))
    assert menu.has_afterstates and menu.memory == "mem"
    still = Interface(shuffle=False, afterstates=False, memory="none")
    menu = menu_for_step(INFO, still, "A-Z", "mem")
    assert menu.actions == tuple(INFO["legal_actions"])
    assert menu.memory is None and not menu.has_afterstates


def test_steps_left_is_shown_to_both_planes_only_when_asked(plain_tok):
    from rlid import envs

    env = envs.make("keydoor", size=3, keys=0, distractors=0, max_episode_steps=5)
    obs, info = env.reset(seed=0)
    assert info["steps_left"] == 5
    obs, _, _, _, info = env.step("look")
    assert info["steps_left"] == 4
    timed = Interface(steps_left=True, memory="none")
    menu = menu_for_step(info, timed, "A-Z", rng=np.random.default_rng(0))
    decision = render_decision_prompt(obs, info, menu, timed, plain_tok)
    token = render_token_prompt(obs, info, timed, plain_tok)
    for prompt in (decision, token):
        lines = prompt.split("\n")
        assert lines[0].startswith("Goal: ") and lines[1] == "Steps left: 4"
    # off by default: the prompts recorded runs saw are unchanged
    untimed = Interface(memory="none")
    assert "Steps left" not in render_decision_prompt(obs, info, menu, untimed, plain_tok)
    assert "Steps left" not in render_token_prompt(obs, info, untimed, plain_tok)
    # recorded in the interface like every other field
    assert timed.to_dict()["steps_left"] is True
    assert Interface().diff(timed) == {"memory": ("last_k", "none"), "steps_left": (False, True)}
    with pytest.raises(KeyError, match="steps_left"):
        render_token_prompt(OBS, INFO, timed, plain_tok)
