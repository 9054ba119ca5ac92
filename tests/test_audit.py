"""Tests for ``rlid audit``: the identity to float64 precision, the controls, the CLI."""

from __future__ import annotations

import argparse
import json

import pytest
import torch

from rlid.audit import (
    AUDIT_INTERFACE,
    AuditConfig,
    audit,
    load_wordings,
    resolve_problem,
)
from rlid.audit.cli import add_audit_parser
from rlid.audit.exact import (
    TextScores,
    WordingSet,
    continuation_ids,
    float64_copy,
    score_mean_rel,
    text_scores,
)
from rlid.audit.mc import estimator_grams, monte_carlo, sample_trace_cov
from rlid.audit.moments import (
    EstimatorAtoms,
    decompose,
    noisy_atoms,
    plain_atoms,
    wording_bonus_atoms,
)
from rlid.audit.paraphrases import paraphrases, surface_variants
from rlid.audit.states import BUILTIN_STATES
from rlid.lm.models import build_model_from_config, build_tiny_model, model_config
from rlid.lm.tokenizer import build_tiny_tokenizer
from rlid.menus.prompt import render_token_prompt

torch.set_num_threads(1)
TOL = 1e-9
LAST_LAYER = ("model.layers.2.*",)  # cheap gradient subset of the tiny model


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer()


@pytest.fixture(scope="module")
def tiny64(tokenizer):
    return float64_copy(build_tiny_model(tokenizer, seed=0))


def _scores(model, tokenizer, state_name, wording_set=None, params=LAST_LAYER):
    state = BUILTIN_STATES[state_name]
    if wording_set is None:
        wording_set = WordingSet(
            state.actions, tuple(paraphrases(a) for a in state.actions), state.advantages
        )
    prompt = render_token_prompt(state.observation, state.info, AUDIT_INTERFACE, tokenizer)
    return wording_set, text_scores(model, tokenizer, prompt, wording_set, params=params)


# ------------------------------------------------------------------ the identity
@pytest.fixture(scope="module")
def tiny_scores(tokenizer, tiny64):
    """Scores of the built-in states under the tiny model (last block), computed once."""
    return {name: _scores(tiny64, tokenizer, name) for name in sorted(BUILTIN_STATES)}


@pytest.mark.parametrize("state_name", sorted(BUILTIN_STATES))
def test_identity_exact_on_tiny_model(tiny_scores, state_name):
    wording_set, scores = tiny_scores[state_name]
    d = decompose(plain_atoms(scores, wording_set), scores)
    assert d.identity_residual_rel <= TOL
    assert d.mean_gap_rel <= TOL
    assert score_mean_rel(scores) <= TOL
    assert d.wording_term > 0 and d.trace_cov_action > 0
    # the renormalised text policy and its marginal are distributions
    assert scores.logp_text.exp().sum().item() == pytest.approx(1.0, abs=1e-12)
    marginal = torch.zeros(len(wording_set.actions), dtype=torch.float64).index_add_(
        0, wording_set.action_index, scores.logp_text.exp()
    )
    torch.testing.assert_close(marginal, scores.logp_action.exp(), rtol=1e-12, atol=1e-15)


def test_identity_exact_on_custom_wordings_all_params(tokenizer, tiny64):
    """A hand-written wording set (one action with a single wording), all parameters."""
    wording_set = WordingSet(
        ("go west", "open drawer", "wait"),
        (("go west", "west", "walk to the west"), ("open drawer", "pull the drawer"), ("wait",)),
        (0.7, -0.2, 0.1),
    )
    wording_set, scores = _scores(tiny64, tokenizer, "hallway", wording_set, params=None)
    assert scores.score_text.shape[1] == sum(p.numel() for p in tiny64.parameters())
    d = decompose(plain_atoms(scores, wording_set), scores)
    assert d.identity_residual_rel <= TOL and d.mean_gap_rel <= TOL
    assert d.wording_term_by_group[2] == pytest.approx(0.0, abs=1e-20)  # single wording


def test_identity_exact_on_larger_model(tokenizer):
    """A ~4M-parameter random Llama; the gradient over its last block and final norm."""
    config = model_config(tokenizer, hidden_size=256, intermediate_size=768, num_hidden_layers=4)
    model = float64_copy(build_model_from_config(config, seed=3))
    assert sum(p.numel() for p in model.parameters()) > 3_000_000
    for state_name in ("kitchen", "cellar"):
        wording_set, scores = _scores(
            model, tokenizer, state_name, params=("model.layers.3.*", "model.norm.weight")
        )
        d = decompose(plain_atoms(scores, wording_set), scores)
        assert d.identity_residual_rel <= TOL
        assert d.mean_gap_rel <= TOL


def test_identity_exact_on_qwen2(tokenizer):
    """Another architecture (Qwen2: grouped KV heads, untied head), all parameters."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
    )  # fmt: skip
    with torch.random.fork_rng():
        torch.manual_seed(5)
        model = float64_copy(Qwen2ForCausalLM(config))
    wording_set, scores = _scores(model, tokenizer, "hallway", params=None)
    d = decompose(plain_atoms(scores, wording_set), scores)
    assert d.identity_residual_rel <= TOL and d.mean_gap_rel <= TOL
    assert score_mean_rel(scores) <= TOL


def test_identity_check_is_not_tautological():
    """Scores that break E[∇log π̃(y) | a] = ∇log π̃(a) make the residual non-zero."""
    gen = torch.Generator().manual_seed(0)
    score_text = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    prob = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    index = torch.tensor([0, 0, 1, 1])
    score_text = score_text - prob @ score_text  # a valid score: E[s] = 0
    cond = torch.stack(
        [(prob[index == m] @ score_text[index == m]) / prob[index == m].sum() for m in (0, 1)]
    )
    atoms = EstimatorAtoms(
        prob,
        torch.arange(4),
        torch.tensor([1.0, 1.0, -1.0, -1.0], dtype=torch.float64),
        index,
        torch.arange(2),
        torch.tensor([1.0, -1.0], dtype=torch.float64),
    )

    def scores_with(score_action):
        return TextScores(
            prob.log(), prob.log(), torch.zeros(2), score_text, score_action, (1,) * 4
        )

    good = decompose(atoms, scores_with(cond))
    assert good.identity_residual_rel <= 1e-14 and good.mean_gap_rel <= 1e-14
    bad = decompose(atoms, scores_with(cond + 0.1))
    assert bad.identity_residual_rel > 1e-3 and bad.mean_gap_rel > 1e-3
    # brute force on explicit vectors
    g = torch.tensor([1.0, 1.0, -1.0, -1.0], dtype=torch.float64)[:, None] * score_text
    mean = prob @ g
    assert good.trace_cov_text == pytest.approx(float(prob @ (g - mean).square().sum(-1)))


# ------------------------------------------------------------------- controls
def test_control_wording_dependent_advantage_breaks_the_premise(tiny_scores):
    wording_set, scores = tiny_scores["kitchen"]
    atoms = plain_atoms(scores, wording_set)
    plain = decompose(atoms, scores)
    bonus = decompose(wording_bonus_atoms(atoms, wording_set.canonical_mask, 0.5), scores)
    # the wording part is centred within each action: the decision estimator is unchanged
    assert bonus.trace_cov_action == pytest.approx(plain.trace_cov_action, rel=1e-12)
    torch.testing.assert_close(bonus.mean_action, plain.mean_action)
    assert bonus.mean_gap_rel > 1e-2
    assert bonus.identity_residual_rel > 1e-6


@pytest.mark.parametrize("sigma", [0.1, 0.5, 2.0])
def test_control_advantage_noise_matches_analytic(tiny_scores, sigma):
    wording_set, scores = tiny_scores["hallway"]
    atoms = plain_atoms(scores, wording_set)
    clean = decompose(atoms, scores)
    noisy = decompose(noisy_atoms(atoms, sigma), scores)
    extra_text = noisy.trace_cov_text - clean.trace_cov_text
    extra_action = noisy.trace_cov_action - clean.trace_cov_action
    assert extra_text == pytest.approx(sigma**2 * clean.fisher_text, rel=1e-9)
    assert extra_action == pytest.approx(sigma**2 * clean.fisher_action, rel=1e-9)
    assert extra_action > 0  # marginalising does not remove the noise term
    assert noisy.identity_residual_rel <= TOL and noisy.mean_gap_rel <= TOL


def test_full_audit_report(tokenizer):
    model = build_tiny_model(tokenizer, seed=1)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    report = audit(
        model, tokenizer, AuditConfig(params=LAST_LAYER, mc_sizes=(4, 64, 4096), n_boot=200)
    )
    for name, p in model.named_parameters():  # the caller's model is untouched
        assert p.dtype == torch.float32 and torch.equal(p, before[name])
    assert report["identity_residual_rel"] <= TOL and report["mean_gap_rel"] <= TOL
    assert report["trace_cov_text"] == pytest.approx(
        report["trace_cov_action"] + report["wording_term"], rel=1e-12
    )
    c = report["controls"]
    assert c["wording_dependent_advantage"]["mean_gap_rel"] > 1e-2
    assert c["advantage_noise"]["analytic_rel_error_text"] <= TOL
    assert c["advantage_noise"]["analytic_rel_error_action"] <= TOL
    label = c["label_policy"]
    assert sum(label["probs"].values()) == pytest.approx(1.0, abs=1e-5)
    assert label["identity_applies"] is False
    assert "says nothing" in report["verdicts"]["label_policy"]
    assert "premise violated" in report["verdicts"]["wording_dependent_advantage"]
    json.dumps(report)  # serialisable


# ------------------------------------------------------------------ Monte Carlo
def test_sample_trace_cov_matches_direct():
    gen = torch.Generator().manual_seed(1)
    vectors = torch.randn(5, 7, generator=gen, dtype=torch.float64)
    draws = torch.tensor([0, 0, 3, 4, 1, 3])
    counts = torch.bincount(draws, minlength=5).to(torch.float64)
    direct = vectors[draws].var(0, unbiased=True).sum()
    assert float(sample_trace_cov(counts, vectors @ vectors.T)) == pytest.approx(float(direct))


def test_monte_carlo_converges_to_exact():
    gen = torch.Generator().manual_seed(2)
    score_text = torch.randn(6, 10, generator=gen, dtype=torch.float64)
    prob = torch.softmax(torch.randn(6, generator=gen, dtype=torch.float64), 0)
    score_text = score_text - prob @ score_text
    index = torch.tensor([0, 0, 0, 1, 1, 2])
    cond = torch.stack(
        [(prob[index == m] @ score_text[index == m]) / prob[index == m].sum() for m in range(3)]
    )
    adv = torch.tensor([1.0, -0.5, 0.2], dtype=torch.float64)
    scores = TextScores(prob.log(), prob.log(), torch.zeros(3), score_text, cond, (1,) * 6)
    atoms = EstimatorAtoms(prob, torch.arange(6), adv[index], index, torch.arange(3), adv)
    exact = decompose(atoms, scores)
    k_text, k_action = estimator_grams(atoms, scores)
    rows = monte_carlo(
        prob,
        k_text,
        k_action,
        sizes=(4, 256, 16384),
        n_boot=300,
        generator=torch.Generator().manual_seed(0),
    )
    errors = [abs(r.trace_cov_text.estimate - exact.trace_cov_text) for r in rows]
    assert errors[-1] < 0.05 * exact.trace_cov_text
    assert rows[-1].trace_cov_text.covers(exact.trace_cov_text)
    assert rows[-1].trace_cov_action.covers(exact.trace_cov_action)
    widths = [r.trace_cov_text.high - r.trace_cov_text.low for r in rows]
    assert widths[0] > widths[-1]


# ------------------------------------------------------------------ inputs, CLI
def test_paraphrases():
    assert paraphrases("go east")[:4] == ("go east", "walk east", "head east", "move east")
    assert "east" in paraphrases("go east")
    assert paraphrases("take brass key")[2] == "pick up brass key"
    assert "look at table" in paraphrases("examine table")
    assert paraphrases("open chest")[0] == "open chest"
    assert paraphrases("dance wildly") == ("dance wildly",)
    assert paraphrases("east")[0] == "east" and "go east" in paraphrases("east")
    with pytest.raises(ValueError):
        paraphrases("  ")


def test_surface_variants_parse_to_their_action():
    from rlid.baselines.token.parse import parse_action

    for state in BUILTIN_STATES.values():
        for action in state.actions:
            variants = surface_variants(action)
            assert variants[0] == action and len(variants) >= 3
            assert all(parse_action(v, list(state.actions)) == action for v in variants)


def test_surface_style_audit(tokenizer, tiny64):
    state = BUILTIN_STATES["cellar"]
    wording_set = WordingSet(
        state.actions, tuple(surface_variants(a) for a in state.actions), state.advantages
    )
    wording_set, scores = _scores(tiny64, tokenizer, "cellar", wording_set)
    d = decompose(plain_atoms(scores, wording_set), scores)
    assert d.identity_residual_rel <= TOL and d.mean_gap_rel <= TOL


def test_wording_set_validation():
    with pytest.raises(ValueError, match="zero wordings"):
        WordingSet(("go east",), ((),), (1.0,))
    with pytest.raises(ValueError, match="exactly one action"):
        WordingSet(("go east", "go west"), (("go",), ("go",)), (1.0, 0.0))


def test_collisions_and_precision_are_rejected(tokenizer, tiny64):
    with pytest.raises(ValueError, match="same ids"):
        continuation_ids(tokenizer, ["go east", "go east"], " ")
    with pytest.raises(ValueError, match="float64"):
        text_scores(
            build_tiny_model(tokenizer),
            tokenizer,
            "Command:",
            WordingSet(("a",), (("a",),), (1.0,)),
        )
    with pytest.raises(ValueError, match="matches no parameter"):
        _scores(tiny64, tokenizer, "kitchen", params=("no.such.*",))


def _run(argv, capsys):
    parser = argparse.ArgumentParser(prog="rlid")
    add_audit_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["audit", *argv])
    code = args.func(args)
    return code, capsys.readouterr()


def test_cli_errors(tmp_path, capsys):
    missing = tmp_path / "none.json"
    code, out = _run(["--wordings", str(missing)], capsys)
    assert code == 2 and "does not exist" in out.err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, out = _run(["--wordings", str(bad)], capsys)
    assert code == 2 and "not valid JSON" in out.err
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"go east": ["go east"], "wait": []}))
    code, out = _run(["--wordings", str(empty)], capsys)
    assert code == 2 and "zero wordings" in out.err
    code, out = _run(["--advantages", "fly away=1.0"], capsys)
    assert code == 2 and "unknown action" in out.err
    code, out = _run(["--advantages", "go east"], capsys)
    assert code == 2 and "ACTION=VALUE" in out.err
    code, out = _run(["--mc-sizes", "1"], capsys)
    assert code == 2 and ">= 2" in out.err
    with pytest.raises(ValueError, match="all advantages equal"):
        resolve_problem(AuditConfig(actions=("go east", "look"), advantages=("go east=0",)))


def test_load_wordings_and_resolve(tmp_path):
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"go east": ["go east", "walk  east"], "look": ["look", "l"]}))
    wordings = load_wordings(path)
    assert wordings["go east"] == ("go east", "walk east")
    state, ws = resolve_problem(AuditConfig(advantages=("look=-1",)), wordings)
    assert ws.actions == ("go east", "look") and ws.advantages == (1.0, -1.0)
    assert state.objective == BUILTIN_STATES["kitchen"].objective


def test_cli_json_and_plot(tmp_path, capsys):
    plot = tmp_path / "audit.png"
    code, out = _run(
        [
            "--json",
            "--plot",
            str(plot),
            "--params",
            *LAST_LAYER,
            "--mc-sizes",
            "4",
            "16",
            "--n-boot",
            "50",
            "--state",
            "cellar",
        ],
        capsys,
    )
    assert code == 0
    report = json.loads(out.out)
    for key in (
        "trace_cov_text",
        "trace_cov_action",
        "wording_term",
        "identity_residual_rel",
        "mean_gap_rel",
    ):
        assert key in report
    assert set(report["controls"]) == {
        "wording_dependent_advantage",
        "label_policy",
        "advantage_noise",
    }
    assert report["identity_residual_rel"] <= TOL
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob(".audit.png.*"))  # no temporary file left behind
