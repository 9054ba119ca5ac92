"""Packed forwards (rlid.lm.packed): the same decisions as the padded layout.

A fixed-seed rollout played with packed readouts samples the same actions, with log-probs
within 1e-5, as the same rollout played with left-padded readouts; the update's
re-scoring (flat menus and label-tree paths) gives the same log-probs, label masses,
values and gradients.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlid import envs
from rlid.core.records import ValueHead
from rlid.core.rollout import Sampling, collect_episodes
from rlid.decision.policy import DecisionPolicy
from rlid.lm import packed
from rlid.lm.models import build_tiny_model
from rlid.lm.tokenizer import build_tiny_tokenizer
from rlid.menus import Interface

TOL = 1e-5


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    return build_tiny_model(tok, seed=0)


def play(model, tok, interface, env_id, options, seeds, on: bool):
    policy = DecisionPolicy(model, tok, interface, value_head=_head(model))
    game = [envs.make(env_id, **options) for _ in seeds]
    sampling = Sampling(np.random.default_rng(7), torch.Generator().manual_seed(7))
    with packed.packing(on):
        episodes = collect_episodes(
            game, policy, list(seeds), list(range(len(seeds))), interface=interface,
            sampling=sampling,
        )  # fmt: skip
    return policy, [d for e in episodes for d in e.decisions]


def _head(model):
    torch.manual_seed(0)
    return ValueHead(model.config.hidden_size)


def test_packing_is_on_for_the_tiny_model(model):
    with packed.packing(True):
        assert packed.packs(model)
    with packed.packing(False):
        assert not packed.packs(model)


@pytest.mark.parametrize(
    "env_id, options",
    [("keydoor", {"size": 3, "max_episode_steps": 12}), ("lab", {})],
)
def test_a_fixed_seed_rollout_makes_the_same_decisions_packed_and_padded(
    model, tok, env_id, options
):
    """Flat menus (keydoor) and label trees (lab, fan-out 6): the same sampled actions,
    log-probs within 1e-5, over several lockstep episodes of ragged prompt lengths."""
    interface = Interface(tree_fanout=6) if env_id == "lab" else Interface()
    _, padded = play(model, tok, interface, env_id, options, [1, 2, 3], on=False)
    _, packed_ = play(model, tok, interface, env_id, options, [1, 2, 3], on=True)
    assert len(padded) == len(packed_) > 6
    assert [d.action for d in padded] == [d.action for d in packed_]
    assert [d.chosen for d in padded] == [d.chosen for d in packed_]
    assert [d.prompt_ids for d in padded] == [d.prompt_ids for d in packed_]
    np.testing.assert_allclose(
        [d.logp for d in packed_], [d.logp for d in padded], atol=TOL, rtol=0
    )
    np.testing.assert_allclose(
        [d.value for d in packed_], [d.value for d in padded], atol=TOL, rtol=0
    )


@pytest.mark.parametrize("env_id, trees", [("keydoor", False), ("lab", True)])
def test_the_update_rescores_the_same_numbers_and_gradients_packed(model, tok, env_id, trees):
    """``score`` / ``score_paths`` packed against padded, on the same recorded decisions:
    log-probs, label masses and values within 1e-5, gradients within 1e-4 of their largest
    entry (float32 sums over every token, in another order)."""
    interface = Interface(tree_fanout=6) if trees else Interface()
    options = {} if trees else {"size": 3, "max_episode_steps": 12}
    policy, decisions = play(model, tok, interface, env_id, options, [4, 5], on=False)
    decisions = decisions[:8]

    def read(on: bool):
        model.zero_grad()
        with packed.packing(on):
            if trees:
                out = policy.score_paths(decisions)
                logp, mass, hidden = out.logp, out.label_mass, out.hidden
            else:
                logp, mass, hidden = policy.score(decisions)
        loss = torch.where(torch.isfinite(logp), logp, 0.0).sum() + hidden.square().sum()
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        return logp.detach(), mass.detach(), hidden.detach(), grads

    a, b = read(False), read(True)
    for x, y in zip(a[:3], b[:3]):
        assert x.shape == y.shape
        finite = torch.isfinite(x)
        assert torch.equal(finite, torch.isfinite(y))
        torch.testing.assert_close(y[finite], x[finite], atol=TOL, rtol=0)
    assert len(a[3]) == len(b[3]) > 0
    for ga, gb in zip(a[3], b[3]):
        # float32 sums over every token in another order: 1e-4 of the largest entry
        torch.testing.assert_close(gb, ga, atol=1e-4 * max(1.0, float(ga.abs().max())), rtol=0)
    # the stored (padded-rollout) log-probs, re-scored packed
    stored = torch.tensor([d.logp for d in decisions])
    with packed.packing(True), torch.no_grad():
        if trees:
            out = policy.score_paths(decisions)
            picked = torch.stack([
                sum(out.logp[b, level, step.row] for level, step in enumerate(d.path))
                if d.path else out.logp[b, 0, d.chosen]
                for b, d in enumerate(decisions)
            ])  # fmt: skip
        else:
            logp, _, _ = policy.score(decisions)
            picked = logp.gather(1, torch.tensor([d.chosen for d in decisions])[:, None])[:, 0]
    torch.testing.assert_close(picked.float(), stored.float(), atol=TOL, rtol=0)


def test_a_model_that_ignores_the_attention_interface_is_read_padded(tok):
    """A model whose attention does not ask the interface would attend across packed
    prompts: the first packed call finds out, and it is read padded from then on."""
    from rlid.lm.readout import pad_label_ids, readout_from_lists

    model = build_tiny_model(tok, seed=1)

    class Plain(type(model)):  # a class of its own, so the memo does not leak to others
        pass

    model.__class__ = Plain
    for layer in model.model.layers:
        attention = layer.self_attn
        original = attention.forward

        def forward(*args, _original=original, _attention=attention, **kw):
            kw.pop(packed.LENGTHS, None)
            impl = _attention.config._attn_implementation
            _attention.config._attn_implementation = "sdpa"
            try:
                return _original(*args, **kw)
            finally:
                _attention.config._attn_implementation = impl

        attention.forward = forward
    prompts = [[5, 6, 7, 8], [9, 10]]
    labels, valid = pad_label_ids([[11, 12], [13]], model.config.vocab_size)
    with packed.packing(True):
        assert packed.packs(model)
        with torch.no_grad():
            result = readout_from_lists(model, prompts, labels, valid, 0)
        assert not packed.packs(model)
    with packed.packing(False), torch.no_grad():
        padded = readout_from_lists(model, prompts, labels, valid, 0)
    torch.testing.assert_close(result.logp, padded.logp)
