"""``rlid audit``: the marginalization variance identity, checked exactly (docs/design.md §7).

A text policy π(y|s) writes wordings y; each maps to an action a = f(y); the
advantage A(a) depends on the action only. The token-plane estimator is
g_y = A(f(y)) ∇log π(y|s), y ~ π; the decision estimator is g_a = A(a) ∇log π(a|s)
with π(a|s) = Σ_{f(y)=a} π(y|s). Then E[g_y | a] = g_a, so both have the same mean
and, by the law of total variance (traces of covariance matrices),

    tr Cov[g_y] = tr Cov[g_a] + E_a[ tr Cov[g_y | a] ].

The audit enumerates the wordings of every action exactly in float64 on a real
model (``rlid.audit.exact``: the text policy is the model's command distribution
renormalised over the enumerated wordings), shows the Monte-Carlo picture with
bootstrap intervals (``rlid.audit.mc``), and runs three negative controls that bound
the claim: (1) an advantage that depends on the wording, (2) the label-readout policy
of the same weights, a different parameterisation the identity says nothing about,
(3) noise in the advantage itself, which marginalising does not remove.

    >>> from rlid.lm.starts import load_policy_model
    >>> model, tokenizer = load_policy_model("tiny-random")
    >>> report = audit(model, tokenizer, AuditConfig(mc_sizes=(4,), n_boot=50))
    >>> report["identity_residual_rel"] < 1e-9
    True
"""

from __future__ import annotations

import json
import math
import time
import unicodedata
from pathlib import Path
from typing import Any

import torch

from rlid.audit.config import AuditConfig
from rlid.audit.exact import (
    WordingSet,
    float64_copy,
    score_mean_rel,
    select_parameters,
    text_scores,
)
from rlid.audit.factored import factored_identity
from rlid.audit.label import label_policy_control
from rlid.audit.mc import estimator_grams, monte_carlo
from rlid.audit.moments import decompose, noisy_atoms, plain_atoms, wording_bonus_atoms
from rlid.audit.paraphrases import WORDING_STYLES
from rlid.audit.report import verdicts
from rlid.audit.states import BUILTIN_STATES, AuditState
from rlid.lm.starts import load_policy_model
from rlid.menus import Interface
from rlid.menus.prompt import command_context, render_token_prompt

AUDIT_INTERFACE = Interface(memory="none", afterstates=False, shuffle=False)
"""Both prompts of the audit: goal, observation and the legal list; no memory, no
afterstates, rows in the given order (one fixed state, nothing to shuffle against)."""


# --------------------------------------------------------------------- inputs
def load_wordings(path: str | Path) -> dict[str, tuple[str, ...]]:
    """Read ``{"action": ["wording", ...]}`` from JSON, with errors that name the problem."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"wordings file {str(path)!r} does not exist")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"wordings file {str(path)!r} is not valid JSON: {err}") from None
    if not isinstance(data, dict) or not data:
        raise ValueError(
            f'wordings file {str(path)!r} must hold a non-empty object {{"action": ["wording", '
            f"...]}}, got {type(data).__name__}"
        )
    wordings: dict[str, tuple[str, ...]] = {}
    for raw_action, listed in data.items():
        action = " ".join(raw_action.split())
        if not action or action in wordings:
            raise ValueError(f"action {raw_action!r} in {str(path)!r} is empty or listed twice")
        if not isinstance(listed, list) or not all(isinstance(w, str) for w in listed):
            raise ValueError(f"wordings of {action!r} must be a list of strings, got {listed!r}")
        if not listed:
            raise ValueError(f"action {action!r} has zero wordings in {str(path)!r}")
        wordings[action] = tuple(" ".join(w.split()) for w in listed)
    return wordings


def parse_advantages(pairs: tuple[str, ...], actions: tuple[str, ...]) -> dict[str, float]:
    """``"ACTION=VALUE"`` strings -> {action: value}; unknown actions are an error."""
    parsed: dict[str, float] = {}
    for pair in pairs:
        action, sep, value = pair.rpartition("=")
        action = " ".join(action.split())
        if not sep or not action:
            raise ValueError(f"advantage {pair!r} is not ACTION=VALUE (e.g. 'go east=0.5')")
        if action not in actions:
            raise ValueError(f"advantage given for unknown action {action!r}; actions: {actions}")
        try:
            parsed[action] = float(value)
        except ValueError:
            raise ValueError(f"advantage {pair!r}: {value!r} is not a number") from None
        if not math.isfinite(parsed[action]):
            raise ValueError(f"advantage {pair!r} is not finite")
    return parsed


# Limits on user text: the audit enumerates every wording exactly through a float64
# copy of the model, so memory grows with (wordings x tokens); one 100,000-character
# wording was enough to exhaust 24 GB. These are far above any real action text.
MAX_TEXT_CHARS = {"wording": 300, "action": 300, "goal": 4000, "observation": 4000}
MAX_WORDINGS = 2000
_CONTROL = ("Cc", "Cf", "Cs", "Co", "Cn")  # control, format, surrogate, private, unassigned


def check_text_limits(
    config: AuditConfig, wordings: dict[str, tuple[str, ...]] | None = None
) -> None:
    """Refuse user text beyond :data:`MAX_TEXT_CHARS` / :data:`MAX_WORDINGS`, naming the limit."""
    texts = [("goal", config.goal or ""), ("observation", config.observation or "")]
    texts += [("action", a) for a in config.actions]
    if wordings:
        texts += [("action", a) for a in wordings]
        texts += [("wording", w) for listed in wordings.values() for w in listed]
        count = sum(len(listed) for listed in wordings.values())
        if count > MAX_WORDINGS:
            raise ValueError(
                f"{count} wordings given; the audit enumerates at most {MAX_WORDINGS} "
                "(use fewer wordings per action)"
            )
    for kind, text in texts:
        limit = MAX_TEXT_CHARS[kind]
        article = "an" if kind[0] in "aeiou" else "a"
        if len(text) > limit:
            raise ValueError(
                f"{article} {kind} of {len(text):,} characters "
                f"({text[:40]!r}...) is over the limit of {limit:,} characters; shorten it"
            )
        control = next((c for c in text if unicodedata.category(c) in _CONTROL), None)
        if control is not None:  # printed as given, it could drive the terminal
            raise ValueError(
                f"{article} {kind} ({text[:40]!r}) holds the control character "
                f"U+{ord(control):04X}; the audit takes printable text only"
            )


def resolve_problem(
    config: AuditConfig, wordings: dict[str, tuple[str, ...]] | None = None
) -> tuple[AuditState, WordingSet]:
    """The state shown to the model and the wording set to enumerate, from ``config``
    (``wordings`` is the already-loaded ``--wordings`` file, if any)."""
    check_text_limits(config, wordings)
    base = BUILTIN_STATES[config.state]
    if wordings:
        actions, listed = tuple(wordings), tuple(wordings.values())
    else:
        actions = tuple(" ".join(a.split()) for a in config.actions) or base.actions
        listed = tuple(WORDING_STYLES[config.wording_style](a) for a in actions)
    if actions == base.actions:
        defaults = dict(zip(base.actions, base.advantages))
    else:
        defaults = {a: (1.0 if i == 0 else 0.0) for i, a in enumerate(actions)}
    advantages = {**defaults, **parse_advantages(config.advantages, actions)}
    values = tuple(advantages[a] for a in actions)
    if len(set(values)) == 1:
        raise ValueError(
            f"all advantages equal {values[0]}: then E[g] = A·E[∇log π] = 0 and no relative "
            "gap is defined; give differing values with --advantages"
        )
    state = AuditState(
        objective=config.goal if config.goal is not None else base.objective,
        observation=config.observation if config.observation is not None else base.observation,
        actions=actions,
        advantages=values,
    )
    return state, WordingSet(actions, listed, values)


# ----------------------------------------------------------------------- audit
def audit(
    model: torch.nn.Module,
    tokenizer: Any,
    config: AuditConfig,
    wordings: dict[str, tuple[str, ...]] | None = None,
    interface: Interface = AUDIT_INTERFACE,
) -> dict[str, Any]:
    """Run the whole audit on ``model`` (left untouched: a float64 copy is used) and
    return the report as a JSON-serialisable dict (see ``docs/audit.md``)."""
    state, wording_set = resolve_problem(config, wordings)
    exact = float64_copy(model)
    params = config.params or None
    selected = select_parameters(exact, params)
    prompt = render_token_prompt(state.observation, state.info, interface, tokenizer)
    _, prefix = command_context(interface, tokenizer)
    scores = text_scores(exact, tokenizer, prompt, wording_set, params=params, prefix=prefix)

    atoms = plain_atoms(scores, wording_set)
    main = decompose(atoms, scores)
    bonus = decompose(
        wording_bonus_atoms(atoms, wording_set.canonical_mask, config.wording_bonus), scores
    )
    noisy = decompose(noisy_atoms(atoms, config.noise_sigma), scores)
    label = label_policy_control(
        exact, tokenizer, state, interface, params=params, text_action=main, scores=scores
    )
    k_text, k_action = estimator_grams(atoms, scores)
    generator = torch.Generator().manual_seed(config.seed)
    mc_rows = monte_carlo(
        atoms.prob,
        k_text,
        k_action,
        sizes=config.mc_sizes,
        n_boot=config.n_boot,
        generator=generator,
    )

    prob_text = scores.logp_text.exp()
    sigma2 = config.noise_sigma**2
    index = wording_set.action_index
    report: dict[str, Any] = {
        "model": {
            "name": config.model,
            "origin": getattr(model, "rlid_origin", "given"),
            "architecture": type(model).__name__,
            "num_parameters": sum(p.numel() for p in exact.parameters()),
            "audited_parameters": int(scores.score_text.shape[1]),
            "param_globs": list(config.params) or ["*"],
            "param_tensors": len(selected),
            "dtype": "float64",
        },
        "state": {
            "name": config.state,
            "objective": state.objective,
            "observation": state.observation,
            "token_prompt": prompt,
            "completion": f"{prefix!r} + wording + '\\n'",
            "wording_style": "file" if wordings else config.wording_style,
        },
        "text_policy": {
            "definition": (
                "pi~(y|s) = pi(y|s) / sum of pi(y'|s) over the enumerated wordings; "
                "log pi(y|s) = sum of the log-probs of the tokens of prefix + wording + newline "
                "after the prompt; pi~(a|s) = sum of pi~(y|s) over the action's wordings"
            ),
            "enumerated_mass": scores.enumerated_mass,
            "wordings": [
                {
                    "wording": w,
                    "action": wording_set.actions[int(index[i])],
                    "logp_model": float(scores.logp_raw[i]),
                    "prob": float(prob_text[i]),
                    "advantage": wording_set.advantages[int(index[i])],
                    "num_tokens": scores.n_tokens[i],
                }
                for i, w in enumerate(wording_set.flat_wordings)
            ],
            "actions": [
                {
                    "action": a,
                    "prob": float(scores.logp_action[m].exp()),
                    "advantage": wording_set.advantages[m],
                    "num_wordings": len(wording_set.wordings[m]),
                    "wording_term": main.wording_term_by_group[m],
                }
                for m, a in enumerate(wording_set.actions)
            ],
        },
        "trace_cov_text": main.trace_cov_text,
        "trace_cov_action": main.trace_cov_action,
        "wording_term": main.wording_term,
        "identity_residual_rel": main.identity_residual_rel,
        "mean_gap_rel": main.mean_gap_rel,
        "mean_gradient_norm": float(torch.linalg.vector_norm(main.mean_text)),
        "score_mean_rel": score_mean_rel(scores),
        "variance_removed_frac": main.wording_term / main.trace_cov_text,
        "monte_carlo": {
            "seed": config.seed,
            "n_boot": config.n_boot,
            "level": 0.95,
            "rows": [_mc_row(row, main) for row in mc_rows],
        },
        "controls": {
            "wording_dependent_advantage": {
                "bonus": config.wording_bonus,
                "advantage": (
                    "A(y) = A(a) + bonus * (1[y canonical] - pi~(canonical | a)): zero mean "
                    "within each action, so E[A(y)|a] = A(a) and g_a is unchanged"
                ),
                "mean_gap_rel": bonus.mean_gap_rel,
                "identity_residual_rel": bonus.identity_residual_rel,
                "trace_cov_text": bonus.trace_cov_text,
                "trace_cov_action": bonus.trace_cov_action,
                "wording_term": bonus.wording_term,
                "premise_holds": False,
            },
            "label_policy": label,
            "advantage_noise": {
                "sigma": config.noise_sigma,
                "noise": "+-sigma equiprobable, independent of the wording (exact enumeration)",
                "trace_cov_text": noisy.trace_cov_text,
                "trace_cov_action": noisy.trace_cov_action,
                "wording_term": noisy.wording_term,
                "identity_residual_rel": noisy.identity_residual_rel,
                "extra_text": noisy.trace_cov_text - main.trace_cov_text,
                "extra_action": noisy.trace_cov_action - main.trace_cov_action,
                "analytic_extra_text": sigma2 * main.fisher_text,
                "analytic_extra_action": sigma2 * main.fisher_action,
                "noise_removed_by_marginalising": sigma2 * (main.fisher_text - main.fisher_action),
                "fisher_trace_text": main.fisher_text,
                "fisher_trace_action": main.fisher_action,
            },
        },
    }
    noise = report["controls"]["advantage_noise"]
    for plane in ("text", "action"):
        measured, analytic = noise[f"extra_{plane}"], noise[f"analytic_extra_{plane}"]
        noise[f"analytic_rel_error_{plane}"] = abs(measured - analytic) / analytic
    # the identity on a label tree of the same actions (rlid.audit.factored)
    report["factored_decision"] = factored_identity(
        exact, tokenizer, state, interface, params=params
    )
    report["verdicts"] = verdicts(report)
    return report


def _mc_row(row, exact) -> dict[str, Any]:
    def entry(interval, value: float) -> dict[str, Any]:
        return {
            "estimate": interval.estimate,
            "ci": [interval.low, interval.high],
            "exact": value,
            "covers_exact": interval.covers(value),
        }

    return {
        "n": row.n,
        "trace_cov_text": entry(row.trace_cov_text, exact.trace_cov_text),
        "trace_cov_action": entry(row.trace_cov_action, exact.trace_cov_action),
        "difference": entry(row.difference, exact.wording_term),
    }


def audit_model(
    config: AuditConfig, wordings: dict[str, tuple[str, ...]] | None, *, threads: int
) -> dict[str, Any]:
    """``rlid audit``: load ``config.model`` (:func:`rlid.lm.starts.load_policy_model`) and run
    :func:`audit` on it with ``threads`` torch threads; ``seconds`` is the audit's time."""
    torch.set_num_threads(threads)
    model, tokenizer = load_policy_model(config.model)
    start = time.perf_counter()
    report = audit(model, tokenizer, config, wordings)
    report["seconds"] = time.perf_counter() - start
    return report
