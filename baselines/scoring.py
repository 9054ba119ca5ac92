"""Action-scoring policies (TWOSOME-style): π(a|s) from each legal action's likelihood.

Source: Tan et al. 2024, "True Knowledge Comes from Practice: Aligning LLMs with
Embodied Environments via Reinforcement Learning" (TWOSOME, arXiv:2401.14151).
For each legal action ``a`` the completion ``prefix + a + "\\n"``
(``rlid.menus.command_completion``: exactly what the token plane would write) is
scored after the token-plane prompt, tokenised together with it (its tokens as
they appear in the text, ``rlid.menus.tokens.continuation_ids``); its log-likelihood is normalised

* ``sum``   — Σ_t log π(y_t | s, y_<t) (the plain sequence likelihood);
* ``token`` — the sum divided by the completion's token count;
* ``word``  — the sum divided by the action's word count (TWOSOME's word
  normalisation, against the penalty on long actions);

and π(a|s) = softmax over the legal actions of the normalised scores (divided by
the sampling temperature T: the stored ``logp`` and the update's re-scoring are
both the behaviour distribution softmax(score / T)). Departures:
the completion includes the end-of-command newline (it tells ``take key`` from a
prefix of ``take key from box``), and token normalisation counts those tokens too.

A decision costs K completions (one per legal action) instead of one label read.
By default the prompts run once, in one forward that keeps their KV cache, and all
K completions of all decisions run in a second forward on top of it (the prompt's
keys and values repeated per action, or, for menus of more than 64 actions, 64 times
with the completions packed side by side), so a prompt of P tokens with K completions
of C tokens costs P + K·C positions, not K·(P + C); ``tokens_processed`` counts the
positions actually run, so the price stays visible in the budget (docs/design.md §8).

:class:`ScoringPolicy` has the interface of :class:`rlid.decision.policy.DecisionPolicy`
(``act`` -> :class:`rlid.decision.policy.Decision`, ``score``, ``max_menu_size``,
``value_head``), so decision-level PPO trains it unchanged::

    train(config, out, make_policy=partial(ScoringPolicy, norm="token"))
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np
import torch
from torch import Tensor

from rlid.baselines.engine import (
    SHARED_COPIES,
    completion_logprobs,
    packs_completions,
    shared_prompt_logprobs,
)
from rlid.config.budget import Budget, Timers
from rlid.config.names import ScoreNorm
from rlid.config.planes import ScoringConfig
from rlid.core.acting import draw_rows, drawn_numbers, fit_to_context, join_chunks
from rlid.core.records import Decision, ValueHead, decision_temperatures
from rlid.lm.models import CausalLM
from rlid.lm.optim import chunks
from rlid.lm.readout import context_limit
from rlid.menus import Interface, command_completion, command_context, compile_menu
from rlid.menus.prompt import render_token_prompt
from rlid.menus.tokens import continuation_ids

Norm = ScoreNorm

# (sum of token log-probs (N,), completion token counts (N,), action word counts (N,)) -> (N,)
NORMS: dict[str, Callable[[Tensor, Tensor, Tensor], Tensor]] = {
    "sum": lambda total, tokens, words: total,
    "token": lambda total, tokens, words: total / tokens,
    "word": lambda total, tokens, words: total / words,
}

UNLIMITED_MENU = 10**9
"""Scoring needs no labels, so a menu of any size fits."""


def word_count(action: str) -> int:
    return max(len(action.split()), 1)


class ScoringPolicy:
    """π(a|s) = softmax_a normalised log-likelihood of the action's text after the prompt.

    Args:
        model, tokenizer: a causal LM and its tokenizer.
        interface: what the policy sees; the prompt is the token plane's
            (``render_token_prompt``).
        norm: ``"sum"``, ``"token"`` or ``"word"`` (see the module docstring).
        value_head: optional V(s) on the hidden state of the prompt's last token.
        micro_batch_size: most decisions (with all their actions) per rollout forward
            (None: all at once); the update is chunked by the trainer.
        share_prompt: run each prompt once and its K completions on its KV cache
            (:func:`rlid.baselines.engine.shared_prompt_logprobs`; the same numbers up to
            float rounding); False runs one prompt + completion sequence per action.
        copies: with ``share_prompt``, the most copies of a prompt's cache (default
            ``rlid.baselines.engine.SHARED_COPIES``, 64): larger menus pack their
            completions side by side (same numbers up to float rounding).
        engine: a rollout engine with ``score`` (:class:`rlid.engines.VLLMEngine`) that
            scores :meth:`act`'s completions instead of the model, as
            :class:`rlid.decision.policy.DecisionPolicy`'s ``engine`` reads its labels (μ in
            ``extra["logp_rollout"]`` / ``["logp_rollout_rows"]``, π_old re-scored by
            the trainer); :meth:`score` always uses the model.
    """

    def __init__(
        self,
        model: CausalLM,
        tokenizer: Any,
        interface: Interface,
        *,
        norm: Norm = "token",
        value_head: ValueHead | None = None,
        budget: Budget | None = None,
        timers: Timers | None = None,
        autocast: Callable[[], AbstractContextManager[Any]] = nullcontext,
        micro_batch_size: int | None = None,
        share_prompt: bool = True,
        copies: int | None = None,
        engine: Any = None,
    ) -> None:
        if norm not in NORMS:
            raise ValueError(f"unknown norm {norm!r}; valid: {', '.join(map(repr, NORMS))}")
        self.model = model
        self.engine = engine
        self.tokenizer = tokenizer
        self.interface = interface
        self.norm = norm
        self.value_head = value_head
        self.share_prompt = share_prompt
        if copies is not None and copies < 1:
            raise ValueError(f"copies must be at least 1, got {copies}")
        self.copies = copies
        self.micro_batch_size = micro_batch_size  # most decisions per rollout forward
        self.autocast = autocast
        self.budget = budget if budget is not None else Budget()
        self.timers = timers if timers is not None else Timers()
        self.pad_id = tokenizer.pad_token_id
        self.command_prefix = command_context(interface, tokenizer)[1]

    @property
    def max_menu_size(self) -> int:
        return UNLIMITED_MENU

    # ------------------------------------------------------------------ acting
    def completion_ids(self, prompt: str, actions: list[str]) -> tuple[list[int], list[list[int]]]:
        """Ids of ``prompt`` and of what the token plane writes after it for each action
        (``" go east\\n"``), tokenised in the text (``rlid.menus.tokens.continuation_ids``)."""
        texts = [command_completion(a, self.command_prefix) for a in actions]
        return continuation_ids(self.tokenizer, prompt, texts)

    def act(
        self,
        observations: list[str],
        infos: list[dict[str, Any]],
        memory_texts: list[str | None],
        *,
        rng: np.random.Generator,
        generator: torch.Generator,
        greedy: bool = False,
        temperature: float = 1.0,
    ) -> list[Decision]:
        """One decision per env, all legal actions of all envs scored in one forward."""
        del rng  # rows are scored independently: no order to shuffle
        with self.timers.time("menu"):
            actions = [list(info["legal_actions"]) for info in infos]

            def encode_step(
                b: int, memory: str | None, interface: Interface
            ) -> tuple[list[int], list[list[int]]]:
                prompt = render_token_prompt(
                    observations[b], infos[b], interface, self.tokenizer,
                    memory_text=memory,
                )  # fmt: skip
                return self.completion_ids(prompt, actions[b])

            encoded, memory_texts = fit_to_context(
                encode_step, memory_texts, context_limit(self.model), self.interface,
                self.budget, length=lambda e: len(e[0]) + max(map(len, e[1]), default=0),
                lists=True,
            )  # fmt: skip
            prompt_ids = [ids for ids, _ in encoded]
            completions = [conts for _, conts in encoded]
            menus = [
                compile_menu(
                    legal,
                    info.get("afterstates"),
                    memory,
                    labels=[str(k + 1) for k in range(len(legal))],
                )
                for legal, info, memory in zip(actions, infos, memory_texts)
            ]
        with self.timers.time("forward"), torch.no_grad():
            if self.engine is None:
                logp, _, hidden = join_chunks(
                    [
                        self.score_ids(
                            prompt_ids[part],
                            completions[part],
                            actions[part],
                            temperature=temperature,
                        )  # fmt: skip
                        for part in chunks(len(prompt_ids), self.micro_batch_size)
                    ]
                )
            else:
                logp = self.engine_scores(prompt_ids, completions, actions, temperature)
                hidden = torch.zeros(len(prompt_ids), 0)  # no value head: after the re-score
            value_head = self.value_head if self.engine is None else None
            chosen, values, entropy = draw_rows(
                logp, hidden, value_head, generator=generator, greedy=greedy
            )
        rows, picked, entropies, vs = drawn_numbers(logp, chosen, entropy, values)
        kept = logp.cpu() if greedy else None  # greedy play: every row's log-prob kept
        decisions = []
        for b, legal in enumerate(actions):
            c = rows[b]
            behaviour = (
                {}
                if self.engine is None
                else {
                    "logp_rollout": picked[b],
                    "logp_rollout_rows": logp[b, : len(legal)].tolist(),
                }
            )
            decisions.append(
                Decision(
                    action=legal[c],
                    chosen=c,
                    logp=picked[b],
                    entropy=entropies[b],
                    label_mass=1.0,
                    value=vs[b],
                    prompt_ids=prompt_ids[b],
                    # no labels here: each row's first completion token, so num_rows = K
                    label_ids=[ids[0] for ids in completions[b]],
                    menu=menus[b],
                    extra={
                        "completion_ids": completions[b],
                        "actions": legal,
                        **({} if kept is None else {"logp_rows": kept[b, : len(legal)]}),
                        **behaviour,
                    },  # fmt: skip
                    temperature=temperature,
                )
            )
        self.budget.decisions += len(decisions)
        return decisions

    # --------------------------------------------------------------- re-scoring
    def score_ids(
        self,
        prompt_ids: list[list[int]],
        completions: list[list[list[int]]],
        actions: list[list[str]],
        *,
        temperature: float | Tensor = 1.0,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """logp_all (B, K_max) with -inf padding, label_mass (B,) = 1, hidden (B, d).

        ``completions[b][k]`` are the token ids of action ``actions[b][k]``;
        ``logp_all = log_softmax(scores / temperature)`` (a float or (B,) per decision).
        ``hidden`` is the prompt's last-token state with a value head, else zeros.
        All on the model's device; scores and the log-softmax are float32.
        """
        rows = [(b, k) for b, comps in enumerate(completions) for k in range(len(comps))]
        flat_completions = [completions[b][k] for b, k in rows]
        shared = None
        if self.share_prompt:
            shared = shared_prompt_logprobs(
                self.model, prompt_ids, completions, self.pad_id,
                return_hidden=self.value_head is not None, autocast=self.autocast,
                copies=self.copies,
            )  # fmt: skip
        if shared is not None:
            token_logp, mask, prompt_hidden = shared
            processed = sum(map(len, prompt_ids)) + sum(map(len, flat_completions))
        else:  # one sequence per row: the prompt again for every action
            flat_prompts = [prompt_ids[b] for b, _ in rows]
            token_logp, mask, hidden_rows = completion_logprobs(
                self.model, flat_prompts, flat_completions, self.pad_id,
                return_hidden=self.value_head is not None, autocast=self.autocast,
            )  # fmt: skip
            prompt_hidden = None
            if hidden_rows is not None:
                counts = torch.tensor([len(c) for c in completions], device=hidden_rows.device)
                # each decision's row k = 0: every row of a decision shares its prompt
                prompt_hidden = hidden_rows[torch.cumsum(counts, 0) - counts]
            processed = sum(len(p) + len(c) for p, c in zip(flat_prompts, flat_completions))
        device = token_logp.device
        logp_all = self.menu_logp(token_logp, mask, completions, actions, temperature)
        batch = len(completions)
        if prompt_hidden is None:
            hidden = torch.zeros(batch, self.model.config.hidden_size, device=device)
        else:
            hidden = prompt_hidden  # (B, d)
        # model calls: the shared path runs the prompts, then the completions on their cache
        self.budget.forward_passes += 1 if shared is None else 2
        self.budget.tokens_processed += processed
        return logp_all, torch.ones(batch, device=device), hidden

    def menu_logp(
        self,
        token_logp: Tensor,
        mask: Tensor,
        completions: list[list[list[int]]],
        actions: list[list[str]],
        temperature: float | Tensor,
    ) -> Tensor:
        """The menus' log-probs (B, K_max), -inf padded, from the completions' token
        log-probs ``token_logp`` / ``mask`` (N, C) (the N = Σ_b K_b completions in order;
        any alignment): the normalised scores, softmax over each menu at ``temperature``."""
        rows = [(b, k) for b, comps in enumerate(completions) for k in range(len(comps))]
        device = token_logp.device
        total = token_logp.sum(-1)  # (N,) float32
        tokens = mask.sum(-1).to(total.dtype)
        words = torch.tensor(
            [word_count(actions[b][k]) for b, k in rows], dtype=total.dtype, device=device
        )
        scores = NORMS[self.norm](total, tokens, words)  # (N,)

        batch, width = len(completions), max(len(c) for c in completions)
        index = torch.tensor([b * width + k for b, k in rows], device=device)
        flat = torch.full((batch * width,), float("-inf"), dtype=scores.dtype, device=device)
        logits = flat.index_put((index,), scores).view(batch, width)  # (B, K_max)
        if isinstance(temperature, Tensor):
            temperature = temperature.to(device)[:, None]  # (B, 1)
        return torch.log_softmax(logits / temperature, dim=-1)

    def engine_scores(
        self,
        prompt_ids: list[list[int]],
        completions: list[list[list[int]]],
        actions: list[list[str]],
        temperature: float,
    ) -> Tensor:
        """The engine's menus: logp μ (B, K_max) at ``temperature``, from its scoring."""
        token_logp, mask = self.engine.score(prompt_ids, completions)
        self.budget.forward_passes += 1
        self.budget.tokens_processed += sum(map(len, prompt_ids)) + int(mask.sum())
        return self.menu_logp(token_logp, mask, completions, actions, temperature)

    def update_tokens(self, decision: Decision) -> int:
        """Token positions re-scoring ``decision`` runs, at most (``micro_batch_tokens``):
        every action's tokens, and its prompt once per copy of the prompt's cache (one
        per action, at most ``copies`` where continuations are packed: fewer where the
        decision's rows are wider than its own split needs; the whole prompt per action
        without ``share_prompt``)."""
        completions = decision.extra["completion_ids"]
        k, p = len(completions), len(decision.prompt_ids)
        shared = self.share_prompt and packs_completions(self.model)
        copies = min(k, self.copies or SHARED_COPIES) if shared else k
        return copies * p + sum(map(len, completions))

    def score(self, decisions: list[Decision]) -> tuple[Tensor, Tensor, Tensor]:
        """Re-score stored decisions with gradients (same outputs as :meth:`score_ids`),
        each at the temperature it was sampled at."""
        return self.score_ids(
            [d.prompt_ids for d in decisions],
            [d.extra["completion_ids"] for d in decisions],
            [d.extra["actions"] for d in decisions],
            temperature=decision_temperatures(decisions),
        )


def scoring_policy(
    config: ScoringConfig,
    model: Any,
    tokenizer: Any,
    *,
    value_head: ValueHead | None = None,
    budget: Budget | None = None,
    timers: Timers | None = None,
    autocast: Callable[[], AbstractContextManager[Any]] = nullcontext,
    engine: Any = None,
) -> ScoringPolicy:
    """The scoring plane's acting policy for ``config`` around ``model`` (``rlid.config.registry``);
    ``engine``: a rollout engine that scores its rollouts (:class:`ScoringPolicy`)."""
    return ScoringPolicy(
        model, tokenizer, config.interface, norm=config.norm, value_head=value_head,
        budget=budget, timers=timers, autocast=autocast,
        micro_batch_size=config.micro_batch_size, engine=engine,
    )  # fmt: skip
