"""Label readout: batched, left-padded, last-position-only == one un-padded forward per prompt."""

from __future__ import annotations

import random
import string

import pytest
import torch

from rlid.lm.models import build_tiny_model
from rlid.lm.readout import label_logprobs, pad_label_ids, readout_from_ids, tokenize_prompts
from rlid.lm.tokenizer import build_tiny_tokenizer

ACTIONS = [
    ("go east", "you will be in the studio"),
    ("take key", "you will carry the key"),
    ("open chest", "the chest will be open"),
    ("unlock door with key", "the door will be unlocked"),
    ("examine bureau", "nothing changes"),
    ("put apple on table", "the apple will be on the table"),
    ("go north", "you will be in the kitchen"),
    ("eat apple", "you will have eaten the apple"),
]


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    return build_tiny_model(tok, seed=0)


def make_batch(tok, batch: int, seed: int) -> tuple[list[str], list[list[int]]]:
    """Menu prompts of ragged length with ragged label counts (1..8 rows)."""
    rng = random.Random(seed)
    prompts, label_ids = [], []
    for _ in range(batch):
        k = rng.randint(1, len(ACTIONS))
        rows = rng.sample(ACTIONS, k)
        memory = " ; ".join(f"{a} -> {s}" for a, s in rng.sample(ACTIONS, rng.randint(0, 4)))
        menu = "\n".join(
            f"{string.ascii_uppercase[i]}) {a} -> {s}" for i, (a, s) in enumerate(rows)
        )
        prompts.append(
            f"Goal: open the chest\nMemory: {memory}\nNow: You are in the kitchen.\n"
            f"Actions:\n{menu}\nAnswer:"
        )
        letters = [" " + string.ascii_uppercase[i] for i in range(k)]
        label_ids.append([tok.convert_tokens_to_ids(tok.tokenize(t))[0] for t in letters])
    return prompts, label_ids


def reference(model, tok, prompts, label_ids):
    """One un-batched, un-padded full forward per prompt; log_softmax over gathered labels."""
    logps, masses, hiddens = [], [], []
    for prompt, labels in zip(prompts, label_ids):
        ids = torch.tensor([tok.encode(prompt, add_special_tokens=False)])
        out = model(ids, output_hidden_states=True)
        logits = out.logits[0, -1]  # (V,)
        label_logits = logits[torch.tensor(labels)]  # (K_b,)
        logps.append(torch.log_softmax(label_logits, -1))
        masses.append((torch.logsumexp(label_logits, -1) - torch.logsumexp(logits, -1)).exp())
        hiddens.append(out.hidden_states[-1][0, -1])
    return logps, torch.stack(masses), torch.stack(hiddens)


@pytest.mark.parametrize("batch", [1, 8])
def test_readout_matches_unbatched_reference(model, tok, batch):
    prompts, label_ids = make_batch(tok, batch, seed=batch)
    lengths = [len(tok.encode(p, add_special_tokens=False)) for p in prompts]
    assert batch == 1 or len(set(lengths)) > 1  # padding is exercised
    with torch.no_grad():
        result = label_logprobs(model, tok, prompts, label_ids, return_hidden=True)
        ref_logp, ref_mass, ref_hidden = reference(model, tok, prompts, label_ids)

    k_max = max(len(r) for r in label_ids)
    assert result.logp.shape == (batch, k_max)
    for b, ref in enumerate(ref_logp):
        k = len(label_ids[b])
        torch.testing.assert_close(result.logp[b, :k], ref, atol=1e-5, rtol=0)
        assert torch.isneginf(result.logp[b, k:]).all()
        torch.testing.assert_close(result.logp[b, :k].exp().sum(), torch.tensor(1.0))
    torch.testing.assert_close(result.label_mass, ref_mass, atol=1e-5, rtol=0)
    assert ((result.label_mass > 0) & (result.label_mass <= 1)).all()
    assert result.hidden.shape == (batch, model.config.hidden_size)
    torch.testing.assert_close(result.hidden, ref_hidden, atol=1e-5, rtol=0)
    assert result.num_tokens == sum(lengths)


def test_readout_from_ids_rescores_exactly(model, tok):
    prompts, label_ids = make_batch(tok, 5, seed=7)
    with torch.no_grad():
        direct = label_logprobs(model, tok, prompts, label_ids)
        input_ids, attention_mask = tokenize_prompts(tok, prompts)
        labels, valid = pad_label_ids(label_ids, len(tok))
        stored = readout_from_ids(model, input_ids, attention_mask, labels, valid)
    assert torch.equal(direct.logp, stored.logp)
    assert torch.equal(direct.label_mass, stored.label_mass)
    assert direct.hidden is None and stored.hidden is None
    # left padding: zeros then ones, the last column is all real tokens
    assert attention_mask[:, -1].all() and (attention_mask.diff(dim=-1) >= 0).all()


def test_gradients_flow_to_parameters(tok):
    model = build_tiny_model(tok, seed=1)
    prompts, label_ids = make_batch(tok, 3, seed=3)
    result = label_logprobs(model, tok, prompts, label_ids, return_hidden=True)
    loss = -result.logp[:, 0].sum() + result.hidden.pow(2).mean() - result.label_mass.sum()
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert model.model.layers[0].self_attn.q_proj.weight.grad.abs().sum() > 0
    assert model.lm_head.weight.grad.abs().sum() > 0


def test_invalid_inputs_fail_clearly(model, tok):
    prompt = "Actions:\nA) look\nAnswer:"
    a, b = tok.convert_tokens_to_ids(["ĠA", "ĠB"])
    with pytest.raises(ValueError, match="2 prompts but 1 rows"):
        label_logprobs(model, tok, [prompt, prompt], [[a]])
    with pytest.raises(ValueError, match="no labels"):
        label_logprobs(model, tok, [prompt], [[]])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        label_logprobs(model, tok, [prompt], [[a, len(tok) + 5]])
    with pytest.raises(ValueError, match="repeat"):
        label_logprobs(model, tok, [prompt], [[a, a]])
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        label_logprobs(model, tok, [prompt, ""], [[a], [b]])
    with pytest.raises(ValueError, match="non-empty list"):
        label_logprobs(model, tok, [], [])
    input_ids, mask = tokenize_prompts(tok, [prompt, "Answer:"])
    labels, valid = pad_label_ids([[a], [a, b]], len(tok))
    with pytest.raises(ValueError, match="left-padded"):
        readout_from_ids(model, input_ids, mask.flip(-1), labels, valid)
    with pytest.raises(ValueError, match="at least one valid label"):
        readout_from_ids(model, input_ids, mask, labels, torch.zeros_like(valid))
    too_long = torch.ones((1, model.config.max_position_embeddings + 1), dtype=torch.long)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        readout_from_ids(model, too_long, too_long, labels[:1], valid[:1])
