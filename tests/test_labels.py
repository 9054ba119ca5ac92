"""Label sets: single-token labels in the exact reading context, distinct ids."""

from __future__ import annotations

import json
import string

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from rlid.menus import AUTO_ALPHABET, LabelError, LabelSet, label_token, parse_alphabet

SPACE = "\u0120"  # byte-level BPE's visible form of " "
LABEL_CHARS = string.ascii_uppercase + string.ascii_lowercase + string.digits


def byte_bpe(
    spaced: str = LABEL_CHARS,
    *,
    extra_tokens: tuple[str, ...] = (),
    lowercase: bool = False,
) -> PreTrainedTokenizerFast:
    """A byte-level BPE whose vocabulary is the 256 byte symbols plus one merged
    token ``" X"`` for every character X of ``spaced``; every other space+char pair
    stays two tokens. ``lowercase`` adds a Lowercase normaliser (so "A" and "a"
    become the same token)."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {symbol: i for i, symbol in enumerate(alphabet)}
    merges = []
    for char in spaced:
        vocab[SPACE + char] = len(vocab)
        merges.append((SPACE, char))
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    if lowercase:
        tokenizer.normalizer = normalizers.Lowercase()
    if extra_tokens:
        tokenizer.add_special_tokens(list(extra_tokens))
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer)


class GreedyTokenizer:
    """A duck-typed tokenizer: greedy longest match over a small vocabulary."""

    def __init__(self, vocab: list[str]) -> None:
        self.vocab = {piece: i for i, piece in enumerate(vocab)}

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids, i = [], 0
        while i < len(text):
            for j in range(len(text), i, -1):
                if text[i:j] in self.vocab:
                    ids.append(self.vocab[text[i:j]])
                    i = j
                    break
            else:
                raise ValueError(f"cannot encode {text[i]!r}")
        return ids


@pytest.fixture(scope="module")
def good():
    return byte_bpe()


def test_parse_alphabet_ranges_lists_and_auto():
    assert parse_alphabet("A-Z") == tuple(string.ascii_uppercase)
    assert parse_alphabet("a-c0-2") == ("a", "b", "c", "0", "1", "2")
    assert parse_alphabet("auto") == parse_alphabet(AUTO_ALPHABET)
    assert len(parse_alphabet("auto")) == 62
    assert parse_alphabet("yes, no") == ("yes", "no")
    assert parse_alphabet(["x", "y"]) == ("x", "y")


@pytest.mark.parametrize("spec", ["", "A-z", "Z-A", "A-", "AB", "x,x", "a, ,b"])
def test_parse_alphabet_rejects_bad_specs(spec):
    with pytest.raises(ValueError):
        parse_alphabet(spec)


def test_for_tokenizer_reads_labels_in_context(good):
    labels = LabelSet.for_tokenizer(good, "A-Z")
    assert labels.labels == tuple(string.ascii_uppercase)
    assert labels.rejected == ()
    context_ids = good.encode("Answer:", add_special_tokens=False)
    for label, token_id in zip(labels.labels, labels.token_ids):
        assert good.encode("Answer: " + label, add_special_tokens=False) == context_ids + [token_id]
    assert labels.ids_for(["C", "A"]) == (labels.token_ids[2], labels.token_ids[0])
    with pytest.raises(KeyError, match="not in this label set"):
        labels.ids_for(["?"])


def test_default_candidates_take_the_whole_pool(good):
    labels = LabelSet.for_tokenizer(good)
    assert labels.labels == parse_alphabet("auto")
    assert len(set(labels.token_ids)) == 62


def test_leading_space_variants_are_different_tokens():
    # " A" is not merged: the bare "A" is one token but " A" is two.
    tokenizer = byte_bpe(spaced="BCD")
    spaced = LabelSet.for_tokenizer(tokenizer, "A-D", prefix=" ")
    bare = LabelSet.for_tokenizer(tokenizer, "A-D", prefix="")
    assert spaced.labels == ("B", "C", "D")
    assert bare.labels == ("A", "B", "C", "D")
    assert set(spaced.token_ids).isdisjoint(bare.token_ids)


def test_two_token_label_is_left_out_and_named():
    broken = byte_bpe(spaced=LABEL_CHARS.replace("Q", ""))
    labels = LabelSet.for_tokenizer(broken, "A-Z")
    assert "Q" not in labels.labels and len(labels) == 25  # the largest valid subset
    assert [label for label, _ in labels.rejected] == ["Q"]
    assert "2 tokens" in labels.rejected[0][1]
    with pytest.raises(LabelError, match="'Q' is 2 tokens"):
        LabelSet.for_tokenizer(broken, "A-Z", strict=True)
    assert len(LabelSet.for_tokenizer(broken, "auto")) == 61


def test_colliding_labels_keep_the_first_and_name_the_pair():
    collide = byte_bpe(lowercase=True)
    labels = LabelSet.for_tokenizer(collide, "A-Za-z")
    assert labels.labels == tuple(string.ascii_uppercase)
    assert ("a", f"collides with 'A' (token {labels.token_ids[0]})") in labels.rejected
    with pytest.raises(LabelError, match="'b' collides with 'B'"):
        LabelSet.for_tokenizer(collide, "A-Za-z", strict=True)


def test_no_valid_label_raises_with_advice():
    with pytest.raises(LabelError, match="No valid label is left"):
        LabelSet.for_tokenizer(byte_bpe(spaced=""), "A-Z")


def test_validate_names_two_token_and_colliding_labels(good):
    labels = LabelSet.for_tokenizer(good, "A-Za-z")
    labels.validate(good)
    with pytest.raises(LabelError, match="'Q' is 2 tokens"):
        labels.validate(byte_bpe(spaced=LABEL_CHARS.replace("Q", "")))
    with pytest.raises(LabelError, match="colliding labels 'A' = 'a'"):
        labels.validate(byte_bpe(lowercase=True))
    renumbered = LabelSet(labels.labels, tuple(i + 1000 for i in labels.token_ids))
    with pytest.raises(LabelError, match="token ids differ"):
        renumbered.validate(good)


def test_label_merging_into_the_context_is_rejected():
    tokenizer = GreedyTokenizer(["Answer", ":", ": A", " A", " B", "A", "B", " "])
    token_id, problem = label_token(tokenizer, "A", "Answer:", " ")
    assert token_id is None and "merges with the end" in problem
    labels = LabelSet.for_tokenizer(tokenizer, ["A", "B"])
    assert labels.labels == ("B",)


def test_raw_tokenizers_object_is_accepted(good):
    raw = Tokenizer.from_str(good.backend_tokenizer.to_str())
    assert LabelSet.for_tokenizer(raw, "A-Z") == LabelSet.for_tokenizer(good, "A-Z")


def test_serialisation_round_trips_and_checks_the_tokenizer(good):
    labels = LabelSet.for_tokenizer(good, "A-Z", context="Pick:", prefix=" ")
    data = json.loads(json.dumps(labels.to_dict()))
    assert LabelSet.from_dict(data, good) == labels
    with pytest.raises(LabelError, match="'Q' is 2 tokens"):
        LabelSet.from_dict(data, byte_bpe(spaced=LABEL_CHARS.replace("Q", "")))
    data["token_ids"] = [i + 1 for i in data["token_ids"]]
    with pytest.raises(LabelError, match="token ids differ"):
        LabelSet.from_dict(data, good)


def test_direct_construction_is_checked():
    with pytest.raises(LabelError, match="2 labels but 1 token ids"):
        LabelSet(("A", "B"), (1,))
    with pytest.raises(LabelError, match="'A' = 'B'"):
        LabelSet(("A", "B"), (1, 1))
    with pytest.raises(LabelError, match="distinct"):
        LabelSet(("A", "A"), (1, 2))
