"""The tiny tokenizer: byte-level BPE trained offline on a shipped text-game corpus.

``build_tiny_tokenizer()`` trains a byte-level BPE (GPT-2 style pre-tokenizer,
all 256 bytes in the initial alphabet, so any unicode string round-trips and
there is no unknown token) on ``rlid/data/corpus.txt``, with every word of
``rlid/data/game_words.txt`` and every single letter and digit boosted so that
they are single tokens both as written (``"go"``) and with a leading space
(``" go"``). The menu labels are read as the leading-space letters ``" A"`` ..
``" Z"``, which this guarantees to be single, distinct tokens.

Why the boost works: each required form is fed ``_BOOST`` extra times, so every
pair still needed to merge it has a count >= ``_BOOST`` until it is a single
token, and BPE merges by decreasing count; the vocabulary budget is sized to
cover those merges (the tests check every required form).

``qwen_bpe_tokenizer()`` is a real vocabulary built offline: Qwen's byte-level BPE
ranks as shipped inside the ``dashscope`` wheel (an optional package, in the test
extra), wrapped as a fast tokenizer with ChatML; the tests and the benchmarks use it
with small random models, so real tokenizer conventions are checked without a download.

Training takes well under a second and is deterministic (the BPE trainer breaks
count ties by pair order, not by hash order); the trained tokenizer is kept as
JSON in-process so repeated builds are instant. Changing the corpus or the word
list changes the vocabulary and invalidates any cached warm-started tiny model.
"""

from __future__ import annotations

import functools
import string
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
from transformers.convert_slow_tokenizer import TikTokenConverter

EOS_TOKEN = "<|endoftext|>"
TINY_VOCAB_SIZE = 3072
"""Vocabulary cap (256 bytes + 1 special token + merges). The shipped corpus reaches
2400 tokens: training stops when no pair occurs at least ``min_frequency=2`` times."""
TINY_MAX_LENGTH = 1024
"""Longest prompt the tiny model accepts (its ``max_position_embeddings``)."""

_DATA_DIR = Path(__file__).resolve().parent.parent / "data"
_CORPUS_PATH = _DATA_DIR / "corpus.txt"
_WORDS_PATH = _DATA_DIR / "game_words.txt"
_BOOST = 400
"""Extra occurrences of each required form; above any corpus-only pair count that matters."""


def game_words() -> list[str]:
    """The words kept as single tokens (as written and with a leading space), in file order."""
    words: list[str] = []
    for line in _WORDS_PATH.read_text(encoding="utf-8").splitlines():
        word = line.strip()
        if word and not word.startswith("#") and word not in words:
            words.append(word)
    return words


def required_single_tokens() -> list[str]:
    """Every string the tiny tokenizer must encode as exactly one token.

    The game words and the letters A-Z, a-z and digits 0-9, each as written and
    with one leading space (``"A"`` and ``" A"`` are two distinct tokens).
    """
    atoms = list(string.ascii_uppercase + string.ascii_lowercase + string.digits)
    forms: list[str] = []
    for word in [*atoms, *game_words()]:
        forms.extend([word, " " + word])
    return list(dict.fromkeys(forms))


def _training_text() -> list[str]:
    """Corpus lines plus the boosted required forms, one pre-token group per line."""
    lines = _CORPUS_PATH.read_text(encoding="utf-8").splitlines()
    # "w w w ..." pre-tokenizes into "w" once and " w" many times; a bare "w"
    # line per repetition keeps the no-space form equally frequent.
    for word in [*string.ascii_letters, *string.digits, *game_words()]:
        lines.append(" ".join([word] * _BOOST))
        lines.extend([word] * _BOOST)
    return lines


@functools.lru_cache(maxsize=1)
def _tiny_tokenizer_json() -> str:
    """Train the BPE once per process and keep its serialised form."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TINY_VOCAB_SIZE,
        min_frequency=2,
        special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_training_text(), trainer=trainer)
    return tokenizer.to_str()


def build_tiny_tokenizer() -> PreTrainedTokenizerFast:
    """Build the tiny model's tokenizer (a fresh object each call, same vocabulary every time).

    Returns a ``PreTrainedTokenizerFast`` with ``eos_token == pad_token ==
    "<|endoftext|>"``, left padding, no BOS and no automatic special tokens, and
    ``clean_up_tokenization_spaces=False`` so ``decode(encode(s)) == s``.

    Example::

        >>> tok = build_tiny_tokenizer()
        >>> len(tok.encode(" A", add_special_tokens=False))
        1
    """
    backend = Tokenizer.from_str(_tiny_tokenizer_json())
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=TINY_MAX_LENGTH,
    )


# Qwen's pre-tokenizer split pattern (its tiktoken regex)
QWEN_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"""
    r"""[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
CHATML_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
    "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def qwen_bpe_tokenizer(*, chat_template: str | None = None) -> PreTrainedTokenizerFast:
    """Qwen's byte-level BPE (151,646 tokens) from the ranks file inside ``dashscope``.

    Args:
        chat_template: set as the tokenizer's chat template (e.g. ``CHATML_TEMPLATE``);
            None leaves it without one (prompts use the plain template).

    Raises:
        ImportError: ``dashscope`` or ``tiktoken`` is not installed (``pip install -e
            '.[test]'``).
    """
    try:
        # optional dependencies: real vocabularies for tests (the test extra)
        import dashscope
        import tiktoken  # noqa: F401  (the converter reads the ranks with it)
    except ImportError as err:
        raise ImportError(
            f"Qwen's BPE is read from the dashscope wheel with tiktoken ({err.name} is "
            "missing): pip install -e '.[test]'"
        ) from None

    ranks = Path(dashscope.__file__).parent / "resources" / "qwen.tiktoken"
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    raw = TikTokenConverter(
        vocab_file=str(ranks), pattern=QWEN_PATTERN, extra_special_tokens=specials
    ).converted()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return tokenizer
