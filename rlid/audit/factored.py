"""The marginalization identity on a factored decision (a label tree, docs/large-menus.md).

A label tree reads an action as a path: level 1 chooses a row G (a group or an action),
the levels below choose the action a inside it, and
pi(a|s) = pi_1(G(a)|s) * pi_rest(a | s, G(a)). The first row is then a coarse event of
the action, as an action is of a wording: pi_1(G) = sum_{G(a)=G} pi(a). With an
advantage that depends on the first row only, A(G), the per-action estimator
g_a = A(G(a)) grad log pi(a|s) and the per-row estimator g_G = A(G) grad log pi_1(G|s)
satisfy E[g_a | G] = g_G, and by the law of total variance

    tr Cov[g_a] = tr Cov[g_G] + E_G[ tr Cov[g_a | G] ].

Unlike the text policy's case this holds by construction of the tree: it checks, in
float64 and on the model's own gradients, that the tree's levels multiply to the
policy the update trains (``rlid.decision.tree_walk.tree_logprobs``: every menu read) and that
the first level is its marginal. :func:`factored_identity` enumerates every action.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch

from rlid.audit.exact import TextScores, select_parameters
from rlid.audit.moments import EstimatorAtoms, decompose
from rlid.audit.states import AuditState
from rlid.decision.tree_walk import tree_logprobs
from rlid.lm.tree_readout import path_logprobs
from rlid.menus import Interface, LabelSet, label_context, render_decision_prompt
from rlid.menus.tokens import encode_prompt
from rlid.menus.tree import build_label_tree


def _scores(values: torch.Tensor, params: list[torch.nn.Parameter]) -> torch.Tensor:
    """(N, D) float64 gradients of each entry of ``values`` (N,) over ``params``."""
    rows = []
    for value in values:
        grads = torch.autograd.grad(value, params, retain_graph=True, allow_unused=True)
        flat = [
            (g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, params)
        ]
        rows.append(torch.cat(flat))
    return torch.stack(rows).to(device="cpu", dtype=torch.float64)


def factored_identity(
    model: torch.nn.Module,
    tokenizer: Any,
    state: AuditState,
    interface: Interface,
    *,
    params: Sequence[str] | None = None,
    fanout: int = 2,
) -> dict[str, Any]:
    """Check the identity on the label tree of ``state.actions`` with ``fanout`` rows per
    menu (a float64 ``model``: ``rlid.audit.exact.float64_copy``). The advantage of a
    first row is the mean of its actions' advantages (``state.advantages``)."""
    interface = replace(interface, shuffle=False, afterstates=False, overflow="tree")
    context, prefix = label_context(interface, tokenizer)
    labels = LabelSet.for_tokenizer(tokenizer, interface.labels, context=context, prefix=prefix)
    tree = build_label_tree(
        list(state.actions), labels=labels, fanout=fanout, grouping=interface.tree_grouping
    )
    prompt = render_decision_prompt(state.observation, state.info, tree, interface, tokenizer)
    prompt_ids = encode_prompt(tokenizer, prompt)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    leaf_logp, _, _, _, _ = tree_logprobs(
        model, tokenizer, [tree], [prompt_ids], labels=labels, interface=interface, pad_id=pad
    )
    rows = len(tree.root.children)
    first = path_logprobs(model, [prompt_ids], [[]], [[list(labels.token_ids[:rows])]], pad)
    first_logp = first.logp[0, 0, :rows]  # (G,) log pi_1
    order = tree.menu.permutation  # leaf k of leaf_logp is legal action order[k]
    group = torch.tensor([tree.path_to(i)[0] for i in order])  # (K,) first row of each leaf
    adv_action = torch.tensor(state.advantages, dtype=torch.float64)
    adv_group = torch.stack(
        [
            adv_action[[order[k] for k in range(len(order)) if group[k] == g]].mean()
            for g in range(rows)
        ]
    )  # (G,)
    if bool((adv_group == adv_group[0]).all()):
        raise ValueError("every first row of the tree has the same advantage: no gradient to check")
    selected = [p for _, p in select_parameters(model, params)]
    logp_leaf = leaf_logp[0, : len(order)]
    scores = TextScores(
        logp_raw=logp_leaf.detach().double(),
        logp_text=logp_leaf.detach().double(),
        logp_action=first_logp.detach().double(),
        score_text=_scores(logp_leaf, selected),
        score_action=_scores(first_logp, selected),
        n_tokens=(0,) * len(order),
    )
    atoms = EstimatorAtoms(
        prob=scores.logp_text.exp(),
        text_row=torch.arange(len(order)),
        adv_text=adv_group[group],
        group=group,
        action_row=torch.arange(rows),
        adv_action=adv_group,
    )
    moments = decompose(atoms, scores)
    return {
        "fanout": fanout,
        "depth": tree.depth,
        "first_menu": [row.text for row in tree.root.children],
        "prob_sum": float(scores.logp_text.exp().sum()),
        "first_level_is_marginal_gap": float(
            (atoms.group_prob - scores.logp_action.exp()).abs().max()
        ),
        "trace_cov_action": moments.trace_cov_text,
        "trace_cov_first_row": moments.trace_cov_action,
        "within_row_term": moments.wording_term,
        "identity_residual_rel": moments.identity_residual_rel,
        "mean_gap_rel": moments.mean_gap_rel,
        "identity_applies": True,
    }
