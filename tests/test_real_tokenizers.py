"""Real vocabularies: BOS, label ids and in-text continuations under SentencePiece and BPE.

The tokenizers are built at test time from files shipped inside registry packages
(no downloads): the Mistral-7B v0.1 SentencePiece model in the ``mistral-common``
wheel (wrapped as a Llama tokenizer, BOS on, as Mistral's tokenizer_config says) and
Qwen's byte-level BPE ranks in the ``dashscope`` wheel (wrapped as a
``PreTrainedTokenizerFast`` with Qwen's split pattern and special tokens). Each is
saved with a small random causal LM of its architecture in pytest's cache, so the
rlid loading path (``load_policy_model``) is the one a user takes. Token ids below
are facts of these vocabularies, read off once by hand.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from rlid import envs
from rlid.audit.exact import continuation_ids as audit_continuation_ids
from rlid.baselines.scoring import ScoringPolicy
from rlid.baselines.token.policy import TokenPolicy
from rlid.decision.policy import DecisionPolicy
from rlid.lm.readout import tokenize_prompts
from rlid.lm.starts import load_policy_model
from rlid.lm.tokenizer import CHATML_TEMPLATE, qwen_bpe_tokenizer
from rlid.menus import (
    Interface,
    command_completion,
    command_context,
    label_context,
    label_set_for,
    render_decision_prompt,
    render_token_prompt,
)
from rlid.menus.tokens import (
    adds_special_tokens,
    continuation_ids,
    encode,
    encode_prompt,
    special_prefix,
)

# Llama-2's chat format: the answer follows "[/INST]" after a space ("[/INST] A</s>").
LLAMA2_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}"
    "{{ '[INST] ' + m['content'] + ' [/INST]' }}{% else %}"
    "{{ ' ' + m['content'] + ' ' + eos_token }}{% endif %}{% endfor %}"
)
# Mistral-Instruct v0.1's: the answer is written right after "[/INST]".
MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}"
    "{{ '[INST] ' + m['content'] + ' [/INST]' }}{% else %}"
    "{{ m['content'] + eos_token }}{% endif %}{% endfor %}"
)
GAME = {"size": 3, "keys": 1, "distractors": 1, "max_episode_steps": 6}


def _save(tokenizer, config, out: Path) -> None:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    tmp = _scratch(out, "tmp")
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        tmp.rename(out)
    except OSError:  # another pytest worker (-n 2) finished the same build first
        if not (out / "config.json").exists():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _scratch(out: Path, what: str) -> Path:
    """A fresh directory beside `out` that no other pytest worker writes."""
    path = out.with_name(f"{out.name}.{what}-{os.getpid()}")
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def build_mistral(out: Path) -> None:
    mistral_common = pytest.importorskip("mistral_common")
    pytest.importorskip("sentencepiece")
    from transformers import LlamaConfig, LlamaTokenizerFast

    model_file = Path(mistral_common.__file__).parent / "data" / "tokenizer.model.v1"
    src = _scratch(out, "spm")
    shutil.copy(model_file, src / "tokenizer.model")
    tokenizer = LlamaTokenizerFast.from_pretrained(src, add_bos_token=True, legacy=False)
    shutil.rmtree(src, ignore_errors=True)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    _save(tokenizer, config, out)


def build_qwen(out: Path) -> None:
    pytest.importorskip("dashscope")
    pytest.importorskip("tiktoken")
    from transformers import Qwen2Config

    tokenizer = qwen_bpe_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, eos_token_id=151645,
    )  # fmt: skip
    _save(tokenizer, config, out)


def _cached(request, name, build):
    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    if cache is not None:
        root = Path(cache.mkdir("rlid-real-vocabularies"))
    else:
        root = request.getfixturevalue("tmp_path_factory").mktemp("rlid-real-vocabularies")
    out = root / name
    if not (out / "config.json").exists():
        build(out)
    torch.set_num_threads(1)
    return load_policy_model(out)


@pytest.fixture(scope="module")
def mistral(request):
    return _cached(request, "mistral-v0.1-random", build_mistral)


@pytest.fixture(scope="module")
def qwen(request):
    return _cached(request, "qwen-bpe-random", build_qwen)


def _with_template(tokenizer, template):
    tokenizer = tokenizer.__class__.from_pretrained(tokenizer.name_or_path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.chat_template = template
    return tokenizer


def _start(seed=0):
    env = envs.make("keydoor", **GAME)
    obs, info = env.reset(seed=seed)
    return obs, info


# --------------------------------------------------------------------------- BOS
def test_prompts_get_the_bos_the_tokenizer_uses(mistral, qwen):
    (model, tok), qtok = mistral, qwen[1]
    assert tok.bos_token_id == 1
    assert encode_prompt(tok, "Answer:") == [1] + encode(tok, "Answer:")
    # a chat template that writes <s> itself does not get a second one
    chat = _with_template(tok, LLAMA2_TEMPLATE)
    text = chat.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert text.startswith("<s>[INST]")
    assert encode_prompt(chat, text).count(1) == 1 and encode_prompt(chat, text)[0] == 1
    # Qwen's BPE uses no BOS: its prompts are the text's tokens only
    assert encode_prompt(qtok, "Answer:") == encode(qtok, "Answer:") == [16141, 25]

    # encode_prompt is the text's ids after special_prefix(text) unless they start with it
    from rlid.lm.tokenizer import build_tiny_tokenizer

    tiny = build_tiny_tokenizer()
    samples = [(tok, "Answer:"), (chat, text), (tok, "<s> A"), (qtok, "Answer:"), (tok, ""),
               (qtok, "<|im_start|>user\nhi"), (tiny, "Answer: A")]  # fmt: skip
    for t, sample in samples:
        full = encode(t, sample, add_special_tokens=True)
        plain = encode(t, sample)
        prefix = next(
            (full[:i] for i in range(len(full) - len(plain) + 1) if full[i:][: len(plain)] == plain),
            [],
        ) if sample else []  # fmt: skip
        wanted = plain if plain[: len(prefix)] == prefix else prefix + plain
        assert encode_prompt(t, sample) == wanted, sample
        if sample:
            assert special_prefix(t, sample) == prefix, sample
    # a post-processor that adds nothing to one sequence: one encoding per prompt
    assert adds_special_tokens(tok) and adds_special_tokens(chat)  # Mistral's BOS
    assert not adds_special_tokens(qtok) and not adds_special_tokens(tiny)
    assert not adds_special_tokens(tiny.backend_tokenizer)  # a bare Rust tokenizer too

    ids, mask = tokenize_prompts(tok, ["Answer:", "Now: a hall\nAnswer:"])
    first = mask.int().argmax(dim=1)
    assert ids[torch.arange(2), first].tolist() == [1, 1]

    obs, info = _start()
    rng, gen = np.random.default_rng(0), torch.Generator().manual_seed(0)
    interface = Interface(memory="none")
    decision = DecisionPolicy(model, tok, interface).act([obs], [info], [None], rng=rng,
                                                         generator=gen)[0]  # fmt: skip
    scored = ScoringPolicy(model, tok, interface).act([obs], [info], [None], rng=rng,
                                                      generator=gen)[0]  # fmt: skip
    token_ids = TokenPolicy(model, tok, interface, max_new_tokens=2).prompt_ids([obs], [info],
                                                                                [None])[0]  # fmt: skip
    for prompt_ids in (decision.prompt_ids, scored.prompt_ids, token_ids):
        assert prompt_ids[0] == 1 and prompt_ids[1] != 1


# --------------------------------------------------------------------------- labels
@pytest.mark.parametrize(
    "vocab,template,expected",
    [
        ("mistral", None, 330),  # "Answer: A" -> ▁A
        ("mistral", LLAMA2_TEMPLATE, 330),  # "[/INST] A" -> ▁A, not the bare A (28741)
        ("qwen", None, 362),  # "Answer: A" -> " A"
        ("qwen", CHATML_TEMPLATE, 32),  # "<|im_start|>assistant\nA" -> "A"
    ],
)
def test_label_ids_are_the_tokens_the_model_would_emit(request, vocab, template, expected):
    _, tok = request.getfixturevalue(vocab)
    if template is not None:
        tok = _with_template(tok, template)
    interface = Interface(memory="none")
    labels = label_set_for(interface, tok, strict=True)  # every A-Z label validates
    assert len(labels) == 26 and labels.token_ids[0] == expected
    assert len(set(labels.token_ids)) == 26
    obs, info = _start()
    rng, gen = np.random.default_rng(0), torch.Generator().manual_seed(0)
    model = request.getfixturevalue(vocab)[0]
    decision = DecisionPolicy(model, tok, interface).act([obs], [info], [None], rng=rng,
                                                         generator=gen)[0]  # fmt: skip
    user = _user_message(interface, obs, info, decision.menu, tok)
    for label, label_id in zip(decision.menu.labels, decision.label_ids):
        if template is None:
            written = user + " " + label  # the plain template's answer: "Answer: A"
        else:
            written = tok.apply_chat_template(
                [{"role": "user", "content": user}, {"role": "assistant", "content": label}],
                tokenize=False,
            )
        emitted = encode_prompt(tok, written)
        assert emitted[: len(decision.prompt_ids)] == decision.prompt_ids
        assert emitted[len(decision.prompt_ids)] == label_id


def _user_message(interface, obs, info, menu, tok):
    """The plain prompt: the whole text in the plain template, the user turn in chat."""
    plain = Interface(**{**interface.to_dict(), "template": "plain"})
    return render_decision_prompt(obs, info, menu, plain, tok)


# --------------------------------------------------------------------------- continuations
@pytest.mark.parametrize(
    "vocab,template",
    [
        ("mistral", None),
        ("mistral", LLAMA2_TEMPLATE),
        ("mistral", MISTRAL_TEMPLATE),
        ("qwen", None),
        ("qwen", CHATML_TEMPLATE),
    ],
)
def test_continuations_are_tokenised_as_in_the_text(request, vocab, template):
    model, tok = request.getfixturevalue(vocab)
    if template is not None:
        tok = _with_template(tok, template)
    interface = Interface(memory="none")
    obs, info = _start()
    _, prefix = command_context(interface, tok)
    prompt = render_token_prompt(obs, info, interface, tok)
    rng, gen = np.random.default_rng(0), torch.Generator().manual_seed(0)
    scored = ScoringPolicy(model, tok, interface).act([obs], [info], [None], rng=rng,
                                                      generator=gen)[0]  # fmt: skip
    audit = audit_continuation_ids(tok, info["legal_actions"], prefix, prompt)
    for action, ids, audit_ids in zip(
        scored.extra["actions"], scored.extra["completion_ids"], audit
    ):
        in_text = encode_prompt(tok, prompt + command_completion(action, prefix))
        assert scored.prompt_ids + ids == in_text
        assert audit_ids == ids


def test_sentencepiece_continuation_after_inst_is_go_west_not_space_go(mistral):
    tok = _with_template(mistral[1], MISTRAL_TEMPLATE)
    interface = Interface(memory="none")
    assert command_context(interface, tok) == (" [/INST]", "")
    assert label_context(interface, tok) == (" [/INST]", "")
    _, [ids] = continuation_ids(tok, "[INST] go? [/INST]", ["go west\n"])
    assert tok.convert_ids_to_tokens(ids) == ["go", "▁west", "<0x0A>"]
    # alone, the same text would be "▁go ▁west": a different event
    assert tok.convert_ids_to_tokens(encode(tok, "go west\n"))[0] == "▁go"
    llama2 = _with_template(mistral[1], LLAMA2_TEMPLATE)
    assert command_context(interface, llama2) == (" [/INST]", " ")


# --------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def qwen_chat_dir(qwen, tmp_path_factory):
    """The Qwen-vocabulary model saved with ChatML, as a user's local model directory."""
    model, tok = qwen
    out = tmp_path_factory.mktemp("qwen-chat") / "model"
    model.save_pretrained(out)
    _with_template(tok, CHATML_TEMPLATE).save_pretrained(out)
    return out


@pytest.mark.parametrize("plane", ["decision", "scoring", "token"])
def test_a_local_chat_model_with_a_real_vocabulary_trains_and_evaluates(
    qwen_chat_dir, tmp_path, plane
):
    """`rlid train --model DIR` then `rlid eval --run`: a 151,646-token byte-level BPE,
    its chat template resolved by `--template auto` and recorded with the run."""
    from rlid.cli.main import main as cli_main
    from rlid.runs.dir import read_metrics

    out = tmp_path / "run"
    flags = ["--max-new-tokens", "4"] if plane == "token" else []
    options = [x for k, v in GAME.items() for x in ("-o", f"{k}={v}")]
    code = cli_main(
        ["train", "--model", str(qwen_chat_dir), "--plane", plane, "--env", "keydoor",
         *options, "--steps", "20", "--groups-per-iter", "2", "--group-size", "2",
         "--eval-episodes", "2", "--threads", "1", "--quiet", "--out", str(out), *flags]
    )  # fmt: skip
    assert code == 0
    rows = read_metrics(out)
    assert rows and all(np.isfinite(r["return"]) for r in rows)
    assert all(np.isfinite(r["loss"]) for r in rows if "loss" in r)  # no update: no loss
    evals = json.loads((out / "eval.json").read_text())
    assert evals["prompt_template"] == "chat" and evals["model_origin"] == "local"
    assert "prompt template chat" in (out / "summary.md").read_text()
    assert cli_main(["eval", "--run", str(out), "--episodes", "2", "--json"]) == 0


def _whole_prompt_ids(tok, prompt, texts):
    """The definition: each continuation encoded after the whole prompt."""
    prompt_ids = encode_prompt(tok, prompt)
    return prompt_ids, [encode_prompt(tok, prompt + text)[len(prompt_ids) :] for text in texts]


@pytest.mark.parametrize(
    "vocab,template,short_way",
    [
        ("tiny", None, True),
        ("mistral", None, False),  # SentencePiece marks a text's start: the whole prompt
        ("mistral", MISTRAL_TEMPLATE, False),
        ("qwen", None, True),
        ("qwen", CHATML_TEMPLATE, True),
    ],
)
def test_continuations_after_the_last_line_equal_the_whole_prompts(
    request, vocab, template, short_way
):
    """A scoring prompt over the 404 actions of a real ScienceWorld state: every
    continuation's ids equal those encoded after the whole prompt, whichever way
    continuation_ids took (the last line where the newline is a clean boundary)."""
    from rlid.lm.tokenizer import build_tiny_tokenizer
    from rlid.menus.tokens import _last_line

    tok = build_tiny_tokenizer() if vocab == "tiny" else request.getfixturevalue(vocab)[1]
    if template is not None:
        tok = _with_template(tok, template)
    fixture = Path(__file__).with_name("data") / "scienceworld_states.json"
    saved = max(json.loads(fixture.read_text())["states"], key=lambda s: len(s["legal_actions"]))
    info = {**saved, "afterstates": None}
    interface = Interface(memory="none")
    _, prefix = command_context(interface, tok)
    prompt = render_token_prompt(saved["observation"], info, interface, tok)
    texts = [command_completion(action, prefix) for action in saved["legal_actions"]]
    assert len(texts) > 400
    assert continuation_ids(tok, prompt, texts) == _whole_prompt_ids(tok, prompt, texts)
    assert (_last_line(tok, prompt, encode_prompt(tok, prompt)) is not None) == short_way
