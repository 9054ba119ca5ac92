"""Prompt and continuation token ids under a real tokenizer's own conventions.

Every plane encodes text through these helpers, so all of them see the same ids:

* **BOS.** Prompts are complete text and are encoded without *automatic* special
  tokens, but a SentencePiece / Llama-family model was trained with a BOS in front
  of every sequence. :func:`encode_prompt` puts in front exactly the special tokens
  the tokenizer itself adds (``encode(text, add_special_tokens=True)``; ``[<s>]`` for
  Llama / Mistral, nothing for GPT-2 or Qwen), unless the text already starts with
  them (a chat template that writes ``<s>`` itself).
* **In-text continuations.** A SentencePiece tokenizer encodes ``"go west"`` alone
  as ``▁go ▁west`` but after ``"[/INST]"`` as ``go ▁west``: a continuation's ids
  depend on what precedes it. :func:`continuation_ids` encodes prompt + continuation
  together and takes the new tokens, after checking that the prompt's own ids are
  unchanged, so the scored event is the one the model reads in the text.

Example::

    >>> from rlid.lm.tokenizer import build_tiny_tokenizer
    >>> tok = build_tiny_tokenizer()
    >>> prompt_ids, [cont] = continuation_ids(tok, "Command:", [" look\\n"])
    >>> prompt_ids + cont == encode_prompt(tok, "Command: look\\n")
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def encode(tokenizer: Any, text: str, *, add_special_tokens: bool = False) -> list[int]:
    """Token ids of ``text``; a ``transformers`` tokenizer or a raw ``tokenizers.Tokenizer``.

    No ``transformers`` warning for a text longer than the model's context: callers
    measure prompts to shorten them or refuse them with their length."""
    quiet = {"verbose": False} if hasattr(tokenizer, "model_max_length") else {}
    ids = tokenizer.encode(text, add_special_tokens=add_special_tokens, **quiet)
    return list(getattr(ids, "ids", ids))


def special_prefix(tokenizer: Any, text: str = "a") -> list[int]:
    """The special-token ids ``tokenizer`` puts before ``text`` by its own convention
    (``encode(text, add_special_tokens=True)`` minus the text's own ids).

    ``[bos_token_id]`` for Llama / Mistral (SentencePiece), ``[]`` for GPT-2-style
    and Qwen tokenizers and for rlid's tiny tokenizer.
    """
    if not adds_special_tokens(tokenizer):
        return []
    return _prefix_of(encode(tokenizer, text), encode(tokenizer, text, add_special_tokens=True))


def adds_special_tokens(tokenizer: Any) -> bool:
    """Whether ``encode(text, add_special_tokens=True)`` may hold ids beyond the text's
    own. False only where that cannot be: a ``tokenizers`` (Rust) tokenizer, or a
    ``transformers`` tokenizer backed by one, whose post-processor (the one step that
    special tokens switch on) adds no token to a single sequence, as rlid's tiny
    tokenizer and Qwen's. Then every prompt's special prefix is empty and
    :func:`encode_prompt` encodes a text once; a Python ("slow") tokenizer is asked text
    by text."""
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    if not hasattr(backend, "post_processor"):
        return True
    post = backend.post_processor
    return post is not None and post.num_special_tokens_to_add(False) != 0


def _prefix_of(plain: list[int], full: list[int]) -> list[int]:
    """The ids ``full`` holds before ``plain`` (``[]`` where ``plain`` is not in it)."""
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            return full[:start]
    return []


def encode_prompt(tokenizer: Any, text: str) -> list[int]:
    """Ids of a complete prompt: the tokenizer's :func:`special_prefix` (unless ``text``
    already starts with it, as a chat template may write it), then the text's own ids."""
    ids = encode(tokenizer, text)
    if not text or not adds_special_tokens(tokenizer):
        return ids
    # special_prefix(tokenizer, text), reusing the text's ids: one encoding fewer
    prefix = _prefix_of(ids, encode(tokenizer, text, add_special_tokens=True))
    if prefix and ids[: len(prefix)] != prefix:
        ids = prefix + ids
    return ids


def _last_line(tokenizer: Any, prompt: str, prompt_ids: list[int]) -> tuple[str, list[int]] | None:
    """The prompt's last line (with its own newline where the prompt ends in one, as a
    chat template's ``"assistant\n"``) and its ids on their own, when the prompt's ids
    are its other lines' ids followed by exactly those (the newline is a clean token
    boundary); else None."""
    cut = prompt.rfind("\n", 0, len(prompt) - 1) + 1
    if cut == 0:
        return None
    line = prompt[cut:]
    line_ids = encode(tokenizer, line)
    head = encode_prompt(tokenizer, prompt[:cut])
    return (line, line_ids) if head + line_ids == prompt_ids else None


def continuation_ids(
    tokenizer: Any,
    prompt: str,
    continuations: Sequence[str],
    *,
    prompt_ids: list[int] | None = None,
) -> tuple[list[int], list[list[int]]]:
    """``(prompt_ids, [ids of each continuation as it appears after the prompt])``.

    Each continuation is encoded together with the prompt and its ids are the tokens
    after the prompt's; ``prompt_ids + ids == encode_prompt(prompt + continuation)``
    holds by construction. Raises ``ValueError`` when a continuation merges with the
    end of the prompt (then no token boundary separates them and the event is not
    well defined): end the prompt with a cue such as ``"Command:"``.

    Cost: K continuations after a long prompt (a scoring menu lists hundreds) would
    encode the prompt K times. Where the prompt's last newline is a clean token
    boundary (its ids are the earlier lines' ids, then the last line's ids encoded on
    their own), each of more than two continuations is encoded after the last line
    only; the first continuation is encoded both ways and must agree, else every one
    is encoded after the whole prompt (SentencePiece tokenizers that mark a text's
    start take that way). tests/test_real_tokenizers.py checks both ways on a real
    ScienceWorld menu of 404 actions. ``prompt_ids``: ``encode_prompt(tokenizer,
    prompt)`` where the caller has it already (not encoded again).
    """
    if prompt_ids is None:
        prompt_ids = encode_prompt(tokenizer, prompt)
    last = _last_line(tokenizer, prompt, prompt_ids) if len(continuations) > 2 else None

    def after_last_line(text: str) -> list[int] | None:
        """``text``'s ids after the last line alone; None where it merges with it."""
        assert last is not None
        line, line_ids = last
        ids = encode(tokenizer, line + text)
        return ids[len(line_ids) :] if ids[: len(line_ids)] == line_ids else None

    out: list[list[int]] = []
    for i, text in enumerate(continuations):
        short = after_last_line(text) if last is not None and i > 0 else None
        if short is not None:
            out.append(short)
            continue
        full = encode_prompt(tokenizer, prompt + text)
        if full[: len(prompt_ids)] != prompt_ids:
            raise ValueError(
                f"continuation {text!r} merges with the end of the prompt {prompt[-30:]!r}: "
                "the prompt's tokens change when it is appended, so its tokens are not "
                "separable; end the prompt with a cue the continuation cannot merge with"
            )
        out.append(full[len(prompt_ids) :])
        if last is not None and i == 0 and after_last_line(text) != out[0]:
            last = None  # the short way disagrees here: the whole prompt for every one
    return prompt_ids, out
