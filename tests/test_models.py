"""Tiny tokenizer and policy models: determinism, single-token labels, save/load, errors."""

from __future__ import annotations

import json
import logging
import os
import string

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM

from rlid.lm import start_files
from rlid.lm import tokenizer as tokenizer_mod
from rlid.lm.models import (
    build_model_from_config,
    build_tiny_model,
    model_config,
    save_policy_model,
)
from rlid.lm.start_files import play_cache_dir
from rlid.lm.starts import load_policy_model
from rlid.lm.tokenizer import build_tiny_tokenizer, required_single_tokens

TYPICAL_PROMPT = (
    "Goal: find the key and open the chest\n"
    "Memory: go north -> you are in the studio\n"
    "Now: You are in the kitchen. There is a key here. Exits: north, east.\n"
    "Actions:\n"
    "A) go east -> you will be in the studio\n"
    "B) take key -> you will carry the key\n"
    "Answer:"
)


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def encode(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False)


# ----------------------------------------------------------------- tokenizer
def test_tokenizer_training_is_deterministic():
    # Its speed is not asserted here: a timed unit test fails on a slow or busy machine.
    train = tokenizer_mod._tiny_tokenizer_json.__wrapped__  # bypass the per-process cache
    first = train()
    assert train() == first
    assert build_tiny_tokenizer().get_vocab() == build_tiny_tokenizer().get_vocab()


def test_tokenizer_special_tokens_and_size(tok):
    assert tok.eos_token == tok.pad_token == "<|endoftext|>"
    assert tok.pad_token_id == tok.eos_token_id
    assert tok.padding_side == "left"
    assert tok.bos_token is None
    assert encode(tok, "go east") == tok.encode("go east")  # no automatic special tokens
    assert 2000 <= len(tok) <= 4096


def test_labels_are_distinct_single_tokens(tok):
    for alphabet in (string.ascii_uppercase, string.ascii_lowercase, string.digits):
        for form in ("", " "):
            ids = [encode(tok, form + ch) for ch in alphabet]
            assert all(len(i) == 1 for i in ids), [form + ch for ch, i in zip(alphabet, ids)]
            assert len({i[0] for i in ids}) == len(alphabet)
    assert encode(tok, " A") != encode(tok, "A")


def test_game_words_are_single_tokens(tok):
    for word in ("go", "take", "unlock", "examine", "insert", "inventory", "->", "Answer"):
        assert word in required_single_tokens()
    multi = [w for w in required_single_tokens() if len(encode(tok, w)) != 1]
    assert multi == []


def test_typical_prompt_is_short_and_ends_before_the_label(tok):
    ids = encode(tok, TYPICAL_PROMPT)
    assert len(ids) <= 80
    with_label = encode(tok, TYPICAL_PROMPT + " B")
    assert with_label[:-1] == ids and with_label[-1] == encode(tok, " B")[0]


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=60))
def test_any_unicode_round_trips(tok, text):
    assert tok.decode(encode(tok, text), skip_special_tokens=False) == text


def test_byte_fallback_has_no_unknown_tokens(tok):
    text = "naïve café — 東京 🎲\x00\x7f"
    ids = encode(tok, text)
    assert tok.unk_token_id is None or tok.unk_token_id not in ids
    assert tok.decode(ids) == text


# -------------------------------------------------------------------- models
def test_tiny_model_is_deterministic_and_sized(tok):
    state = torch.random.get_rng_state()
    a, b, c = (
        build_tiny_model(tok, seed=0),
        build_tiny_model(tok, seed=0),
        build_tiny_model(tok, seed=1),
    )
    assert torch.equal(torch.random.get_rng_state(), state)  # global RNG untouched
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(pa, pb), name
    assert not torch.equal(a.model.embed_tokens.weight, c.model.embed_tokens.weight)
    assert 500_000 <= a.num_parameters() <= 1_500_000
    assert a.lm_head.weight is a.model.embed_tokens.weight  # tied
    assert a.config.max_position_embeddings == 1024
    assert a.config.vocab_size == len(tok)


def test_large_preset_is_about_30m_parameters(tok):
    config = model_config(tok, "large")
    with torch.device("meta"):
        large = AutoModelForCausalLM.from_config(config)
    assert 25_000_000 <= large.num_parameters() <= 35_000_000
    assert type(large) is type(build_model_from_config(model_config(tok, "tiny")))


def test_model_config_rejects_unknown_fields(tok):
    with pytest.raises(ValueError, match="hiden_size"):
        model_config(tok, hiden_size=64)
    with pytest.raises(ValueError, match="valid sizes"):
        model_config(tok, "huge")


def test_tiny_play_is_built_on_first_use_and_cached(cache_dir, capfd, caplog):
    recipe = start_files.play_recipe()
    assert recipe.steps <= 5  # conftest's tiny recipe: this test takes seconds
    assert play_cache_dir().parent == cache_dir / "models"
    assert play_cache_dir().name.startswith("tiny-warm-")  # never the real recipe's dir
    model, tok = load_policy_model("tiny-play")
    err = capfd.readouterr().err
    notice = [line for line in err.splitlines() if line.startswith("rlid: building")]
    assert len(notice) == 1 and str(play_cache_dir()) in notice[0]
    assert "pretrain" in err  # the progress bar
    assert model.rlid_origin == "warm"
    info = json.loads((play_cache_dir() / "pretrain.json").read_text())
    assert info["config"]["steps"] == recipe.steps
    assert tok.padding_side == "left" and tok.pad_token_id is not None
    fresh = build_tiny_model(build_tiny_tokenizer(), seed=0)
    assert not torch.equal(model.lm_head.weight, fresh.lm_head.weight)  # pretrained, not random
    # second use: loaded from the cache, no second build
    again, _ = load_policy_model("tiny-play")
    assert "rlid: building" not in capfd.readouterr().err
    assert torch.equal(again.lm_head.weight, model.lm_head.weight)
    # random only on explicit request
    for random_model in (
        load_policy_model("tiny-random")[0],
        load_policy_model("tiny-random")[0],
    ):
        assert random_model.rlid_origin == "fresh"
        assert torch.equal(random_model.lm_head.weight, fresh.lm_head.weight)


def test_default_recipe_uses_the_plain_cache_dir(cache_dir, monkeypatch):
    from rlid.lm.pretrain import PretrainConfig

    monkeypatch.setattr(start_files, "PLAY_RECIPE", None)
    assert start_files.play_recipe() == PretrainConfig()
    assert play_cache_dir() == cache_dir / "models" / "tiny-warm"


def test_saving_through_a_symbolic_link_writes_where_it_points(tmp_path, tok):
    # a link to a directory not made yet (an --out kept on another disk): before, the
    # final rename failed ("Not a directory") after the whole build
    model = build_tiny_model(tok, seed=3)
    link = tmp_path / "runs" / "start"
    link.parent.mkdir()
    link.symlink_to(tmp_path / "elsewhere" / "start")
    assert save_policy_model(model, tok, link) == tmp_path / "elsewhere" / "start"
    assert link.is_symlink() and (link / "config.json").is_file()
    save_policy_model(model, tok, link)  # and again, over the model it now points to
    assert link.is_symlink() and sorted(p.name for p in (tmp_path / "elsewhere").iterdir()) == [
        "start"
    ]
    assert [p.name for p in link.parent.iterdir()] == ["start"]  # no temp dirs left


def test_pretrain_refuses_a_file_as_its_output_before_building(tmp_path):
    from rlid.lm.pretrain import PretrainConfig
    from rlid.lm.pretrain.build import pretrain

    out = tmp_path / "model"
    out.write_text("not a directory")
    with pytest.raises(ValueError, match="is a file, not a model directory"):
        pretrain(PretrainConfig(steps=1), out=out, progress=False)
    assert out.read_text() == "not a directory" and list(tmp_path.iterdir()) == [out]


def test_save_then_load_round_trips(cache_dir, tok):
    model = build_tiny_model(tok, seed=3)
    ids = torch.tensor([encode(tok, TYPICAL_PROMPT)])
    save_policy_model(model, tok, play_cache_dir())
    save_policy_model(model, tok, play_cache_dir())  # overwriting an existing dir works
    assert [p.name for p in play_cache_dir().parent.iterdir()] == [play_cache_dir().name]
    umask = os.umask(0)
    os.umask(umask)
    assert play_cache_dir().stat().st_mode & 0o777 == 0o777 & ~umask  # not a private temp dir
    for path in play_cache_dir().iterdir():  # safetensors alone writes its file 0600
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask, path.name

    warm, warm_tok = load_policy_model("tiny-play")
    assert warm.rlid_origin == "warm"
    assert warm_tok.padding_side == "left" and warm_tok.pad_token == tok.pad_token
    assert encode(warm_tok, TYPICAL_PROMPT) == encode(tok, TYPICAL_PROMPT)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, warm(ids).logits)

    local, _ = load_policy_model(str(play_cache_dir()))
    assert local.rlid_origin == "local"
    fresh, _ = load_policy_model("tiny-random")
    assert fresh.rlid_origin == "fresh"
    half, _ = load_policy_model("tiny-play", dtype=torch.bfloat16)
    assert half.dtype == torch.bfloat16


def test_loading_shows_no_transformers_bar_even_when_it_is_on(cache_dir, tok, capfd):
    # A program that imported transformers before rlid has its bars on; our own
    # output and one-line errors must not get "Loading weights" in front of them.
    from transformers.utils import logging as hf_logging

    save_policy_model(build_tiny_model(tok, seed=3), tok, play_cache_dir())
    capfd.readouterr()
    hf_logging.enable_progress_bar()
    try:
        load_policy_model(str(play_cache_dir()))
        assert hf_logging.is_progress_bar_enabled()  # the caller's setting is restored
    finally:
        hf_logging.disable_progress_bar()
    assert "Loading weights" not in capfd.readouterr().err


def test_a_stale_tiny_play_cache_is_rebuilt_loudly(cache_dir, caplog):
    other = build_tiny_tokenizer()
    other.add_tokens(["<|other|>"])
    save_policy_model(build_tiny_model(other), other, play_cache_dir())
    with caplog.at_level(logging.WARNING, logger="rlid.lm.starts"):
        model, tok = load_policy_model("tiny-play")
    assert model.rlid_origin == "warm"
    assert "different tiny tokenizer" in caplog.text
    assert tok.get_vocab() == build_tiny_tokenizer().get_vocab()


def test_missing_and_invalid_paths_fail_clearly(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        load_policy_model(missing)
    with pytest.raises(FileNotFoundError, match="never downloads"):
        load_policy_model("some-org/some-model")
    with pytest.raises(ValueError, match="no config.json"):
        load_policy_model(tmp_path)
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(ValueError, match="not a Hugging Face model directory"):
        load_policy_model(tmp_path / "weights.bin")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="broken"):
        load_policy_model(broken)
