"""Exact enumeration for the marginalization variance identity (docs/design.md §7).

The text policy is the model's distribution over complete commands after a
token-plane prompt, restricted to an enumerated set of wordings and renormalised:

    log π(y|s)  = Σ_t log p(c_t | prompt, c_<t),   c = tokens of " " + y + "\\n"
    π̃(y|s)      = π(y|s) / Σ_{y' enumerated} π(y'|s)
    π̃(a|s)      = Σ_{f(y)=a} π̃(y|s)

The continuation is tokenized on its own and appended to the prompt's ids, which is
what a sampler that continues the prompt produces (``rlid.menus.command_completion``:
the token plane writes " go east\\n" after "Command:"). The newline that ends a
command makes π a distribution over *complete* commands ("go" is not a prefix event
of "go east").
Renormalising makes π̃ a proper distribution on the enumerated set, so the identity
is exact for it; note ∇log π̃(y) = ∇log π(y) − E_π̃[∇log π(y')].

Scores are computed by autograd in float64: each ∇log π̃(y) by its own backward pass
and each ∇log π̃(a) by a backward pass through logsumexp over the action's wordings,
so E[g_y | a] = g_a is checked numerically, not assumed by construction.
"""

from __future__ import annotations

import copy
import fnmatch
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rlid.menus.prompt import COMMAND_PREFIX, command_completion
from rlid.menus.tokens import continuation_ids as in_text_ids
from rlid.menus.tokens import encode, encode_prompt


@dataclass(frozen=True)
class WordingSet:
    """Actions of one state, the wordings a text policy may write for each, and A(a)."""

    actions: tuple[str, ...]
    """Action texts, one per legal action; the event a = f(y)."""
    wordings: tuple[tuple[str, ...], ...]
    """Wordings per action (aligned with ``actions``); the first is the canonical one."""
    advantages: tuple[float, ...]
    """Advantage A(a) per action (aligned with ``actions``); depends on the action only."""

    def __post_init__(self) -> None:
        if not self.actions:
            raise ValueError("a wording set needs at least one action")
        if len(self.wordings) != len(self.actions) or len(self.advantages) != len(self.actions):
            raise ValueError(
                f"{len(self.actions)} actions but {len(self.wordings)} wording lists and "
                f"{len(self.advantages)} advantages: give one of each per action"
            )
        owner: dict[str, str] = {}
        for action, wordings in zip(self.actions, self.wordings):
            if not wordings:
                raise ValueError(f"action {action!r} has zero wordings: give at least one")
            for wording in wordings:
                if not wording.strip():
                    raise ValueError(f"action {action!r} has an empty wording")
                if owner.get(wording) == action:
                    raise ValueError(f"action {action!r} lists the wording {wording!r} twice")
                if wording in owner:
                    raise ValueError(
                        f"wording {wording!r} is listed for both {owner[wording]!r} and "
                        f"{action!r}: each wording must map to exactly one action"
                    )
                owner[wording] = action
        if len(set(self.actions)) != len(self.actions):
            raise ValueError(f"duplicate actions in {self.actions}")

    @property
    def flat_wordings(self) -> tuple[str, ...]:
        return tuple(w for ws in self.wordings for w in ws)

    @property
    def action_index(self) -> torch.Tensor:
        """(N,) index of each flat wording's action."""
        return torch.tensor([m for m, ws in enumerate(self.wordings) for _ in ws])

    @property
    def canonical_mask(self) -> torch.Tensor:
        """(N,) True for the first wording of each action."""
        return torch.tensor([j == 0 for ws in self.wordings for j in range(len(ws))])


@dataclass(frozen=True)
class TextScores:
    """The renormalised text policy on the enumerated wordings and its score vectors.

    N wordings, M actions, D selected parameters; all tensors float64.
    """

    logp_raw: torch.Tensor
    """(N,) log π(y|s) under the model, before renormalising."""
    logp_text: torch.Tensor
    """(N,) log π̃(y|s)."""
    logp_action: torch.Tensor
    """(M,) log π̃(a|s)."""
    score_text: torch.Tensor
    """(N, D) ∇θ log π̃(y|s)."""
    score_action: torch.Tensor
    """(M, D) ∇θ log π̃(a|s)."""
    n_tokens: tuple[int, ...]
    """Continuation tokens per wording (the closing newline included)."""

    @property
    def enumerated_mass(self) -> float:
        """Σ π(y|s) over the enumerated wordings: how much of the model's mass they hold."""
        return float(torch.logsumexp(self.logp_raw, 0).exp())


def float64_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A float64 copy of ``model`` in eval mode whose forward really runs in float64.

    transformers' RMSNorm computes in float32 (an upcast meant for half precision) and
    its eager attention takes the softmax in float32; in a float64 model both are
    downcasts that round the gradients to float32 precision. The copy gets RMSNorm's
    own formula in the input dtype and the SDPA attention, which keeps float64.
    """
    exact: Any = copy.deepcopy(model).to(torch.float64).eval()
    for module in exact.modules():
        if type(module).__name__.endswith("RMSNorm") and hasattr(module, "variance_epsilon"):
            module.forward = types.MethodType(_rms_norm_in_input_dtype, module)
    if hasattr(exact, "set_attn_implementation"):
        exact.set_attn_implementation("sdpa")
    return exact


def _rms_norm_in_input_dtype(self, hidden_states: torch.Tensor) -> torch.Tensor:
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


def select_parameters(
    model: torch.nn.Module, patterns: Sequence[str] | None = None
) -> list[tuple[str, torch.nn.Parameter]]:
    """Named parameters matching any glob in ``patterns`` (all when None or empty)."""
    named = list(model.named_parameters())
    if not patterns:
        return named
    chosen = [(n, p) for n, p in named if any(fnmatch.fnmatchcase(n, pat) for pat in patterns)]
    if not chosen:
        examples = ", ".join(n for n, _ in named[:6])
        raise ValueError(
            f"--params {list(patterns)} matches no parameter; names look like: {examples}, ..."
        )
    return chosen


def continuation_ids(
    tokenizer, wordings: Sequence[str], prefix: str, prompt: str = ""
) -> list[list[int]]:
    """Token ids of what the token plane writes for each wording, ``prefix + y + "\\n"``
    (``rlid.menus.command_completion``), as they appear after ``prompt`` in the text
    (``rlid.menus.tokens.continuation_ids``); rejects collisions.

    Two wordings with the same ids are one event of the text policy, so counting both
    would double their probability.
    """
    texts = [command_completion(w, prefix) for w in wordings]
    if prompt:
        ids = in_text_ids(tokenizer, prompt, texts)[1]
    else:
        ids = [encode(tokenizer, text) for text in texts]
    seen: dict[tuple[int, ...], str] = {}
    for wording, seq in zip(wordings, ids):
        if not seq:
            raise ValueError(f"wording {wording!r} tokenizes to nothing")
        key = tuple(seq)
        if key in seen:
            raise ValueError(
                f"wordings {seen[key]!r} and {wording!r} tokenize to the same ids {seq}: "
                "they are one text event; drop one of them"
            )
        seen[key] = wording
    return ids


def text_scores(
    model: torch.nn.Module,
    tokenizer,
    prompt: str,
    wording_set: WordingSet,
    *,
    params: Sequence[str] | None = None,
    prefix: str = COMMAND_PREFIX,
) -> TextScores:
    """Exact π̃(y|s), π̃(a|s) and their float64 score vectors (see the module docstring).

    ``model`` must already be float64 (:func:`float64_copy`); ``params`` are globs over
    ``model.named_parameters()`` selecting the gradient coordinates; ``prompt`` is
    encoded as a complete prompt (``rlid.menus.tokens.encode_prompt``, as ``rlid.menus.prompt`` renders
    it, with the tokenizer's BOS) and ``prefix`` is the text before the command
    (``rlid.menus.command_context``); continuations are tokenised in the text.
    """
    dtype = next(model.parameters()).dtype
    if dtype != torch.float64:
        raise ValueError(f"the audit needs a float64 model, got {dtype}: cast a copy first")
    selected = [p for _, p in select_parameters(model, params)]
    device = selected[0].device
    prompt_ids = encode_prompt(tokenizer, prompt)
    conts = continuation_ids(tokenizer, wording_set.flat_wordings, prefix, prompt)
    n_prompt, width = len(prompt_ids), max(len(c) for c in conts)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    input_ids = torch.full((len(conts), n_prompt + width), pad_id, dtype=torch.long)
    attention = torch.zeros_like(input_ids)
    cont_mask = torch.zeros(len(conts), width, dtype=torch.float64)
    for i, cont in enumerate(conts):  # right padding: the shared prompt keeps its positions
        input_ids[i, : n_prompt + len(cont)] = torch.tensor(prompt_ids + cont)
        attention[i, : n_prompt + len(cont)] = 1
        cont_mask[i, : len(cont)] = 1.0
    input_ids, attention, cont_mask = (
        input_ids.to(device),
        attention.to(device),
        cont_mask.to(device),
    )

    # Logits at positions n_prompt-1 .. end-1 predict the continuation tokens.
    logits = model(input_ids=input_ids, attention_mask=attention, logits_to_keep=width + 1).logits[
        :, :-1
    ]  # (N, width, V)
    token_logp = torch.log_softmax(logits.to(torch.float64), -1)
    targets = input_ids[:, n_prompt:]  # (N, width)
    token_logp = token_logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1) * cont_mask
    logp_raw = token_logp.sum(-1)  # (N,)
    logp_text = logp_raw - torch.logsumexp(logp_raw, 0)  # (N,) renormalised
    action_index = wording_set.action_index.to(device)
    logp_action = torch.stack(
        [torch.logsumexp(logp_text[action_index == m], 0) for m in range(len(wording_set.actions))]
    )  # (M,)

    def flat_grad(output: torch.Tensor) -> torch.Tensor:
        grads = torch.autograd.grad(output, selected, retain_graph=True, allow_unused=True)
        return torch.cat(
            [
                (g if g is not None else torch.zeros_like(p)).reshape(-1)
                for g, p in zip(grads, selected)
            ]
        )

    score_text = torch.stack([flat_grad(lp) for lp in logp_text])  # (N, D)
    score_action = torch.stack([flat_grad(lp) for lp in logp_action])  # (M, D)
    return TextScores(
        logp_raw=logp_raw.detach().cpu(),
        logp_text=logp_text.detach().cpu(),
        logp_action=logp_action.detach().cpu(),
        score_text=score_text.cpu(),
        score_action=score_action.cpu(),
        n_tokens=tuple(len(c) for c in conts),
    )


def score_mean_rel(scores: TextScores) -> float:
    """‖E_π̃[∇log π̃(y)]‖ / sqrt(E_π̃‖∇log π̃(y)‖²): zero in exact arithmetic.

    A float64 sanity check of the whole gradient path: a hidden float32 step in the
    model shows here as ~1e-8 instead of ~1e-16.
    """
    prob = scores.logp_text.exp()
    mean = prob @ scores.score_text
    second = prob @ scores.score_text.square().sum(-1)
    return float(torch.linalg.vector_norm(mean) / second.sqrt())
