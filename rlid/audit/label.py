"""Negative control 2 of the audit: the label-readout policy of the same weights.

The decision plane's policy reads the label-token logits after a menu prompt
(``rlid.lm.readout``). It shares the weights with the text policy but is a different
function of them: π_label(a|s) is not the marginal π̃(a|s) = Σ_{f(y)=a} π̃(y|s), and
its gradient is not E[∇log π̃(y) | a]. The identity relates two estimators of one
policy's gradient; it says nothing about this policy, so the control only reports
its probabilities and its estimator's variance next to the marginal's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rlid.audit.exact import TextScores, select_parameters
from rlid.audit.moments import Decomposition
from rlid.audit.states import AuditState
from rlid.lm.readout import label_logprobs
from rlid.menus import Interface, LabelSet, compile_menu
from rlid.menus.prompt import label_context, render_decision_prompt


def label_policy_control(
    model: torch.nn.Module,
    tokenizer: Any,
    state: AuditState,
    interface: Interface,
    *,
    params: Sequence[str] | None,
    text_action: Decomposition,
    scores: TextScores,
) -> dict[str, Any]:
    """π_label over a menu of ``state.actions`` and the exact moments of
    g_label = A(a) ∇log π_label(a|s), a ~ π_label, over the same parameters.

    ``text_action`` and ``scores`` are the text policy's results, for comparison.
    """
    context, prefix = label_context(interface, tokenizer)
    labels = LabelSet.for_tokenizer(tokenizer, interface.labels, context=context, prefix=prefix)
    menu = compile_menu(
        list(state.actions), None, None, labels=labels, rng=None, overflow=interface.overflow
    )
    prompt = render_decision_prompt(state.observation, state.info, menu, interface, tokenizer)
    label_ids = list(labels.ids_for(menu.labels))
    result = label_logprobs(model, tokenizer, [prompt], [label_ids])
    logp = result.logp[0, : len(label_ids)]  # (K,) menu row order
    selected = [p for _, p in select_parameters(model, params)]
    score = torch.stack(
        [
            torch.cat(
                [
                    (g if g is not None else torch.zeros_like(p)).reshape(-1)
                    for g, p in zip(
                        torch.autograd.grad(lp, selected, retain_graph=True, allow_unused=True),
                        selected,
                    )
                ]
            )
            for lp in logp
        ]
    ).to(device="cpu", dtype=torch.float64)  # (K, D)

    row_action = [state.actions.index(a) for a in menu.actions]  # menu row -> action index
    prob = logp.detach().to(device="cpu", dtype=torch.float64).exp()  # (K,)
    adv = torch.tensor([state.advantages[m] for m in row_action], dtype=torch.float64)
    values = adv[:, None] * score  # (K, D) g_label on each row
    mean = prob @ values  # (D,)
    trace_cov = float(prob @ (values - mean).square().sum(-1))
    marginal = scores.logp_action.exp()[row_action]  # (K,) π̃(a) in menu row order
    cosine = torch.nn.functional.cosine_similarity(mean, text_action.mean_action, dim=0)
    return {
        "decision_prompt": prompt,
        "labels": list(menu.labels),
        "probs": {state.actions[m]: float(p) for m, p in zip(row_action, prob)},
        "text_marginal": {state.actions[m]: float(p) for m, p in zip(row_action, marginal)},
        "total_variation": float((prob - marginal).abs().sum() / 2),
        "label_mass": float(result.label_mass[0].detach()),
        "trace_cov": trace_cov,
        "trace_cov_text_marginal": text_action.trace_cov_action,
        "mean_gradient_norm": float(torch.linalg.vector_norm(mean)),
        "mean_cosine_with_marginal": float(cosine),
        "readout_precision": f"logits read in {result.logp.dtype} by rlid.lm.readout",
        "identity_applies": False,
    }
