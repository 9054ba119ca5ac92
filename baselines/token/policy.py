"""The token-plane policy: write a command as free text, parse it, act.

For each env the prompt is rendered from the same :class:`menus.Interface` as the
decision plane (observation, objective, memory; the legal list and afterstates
when the interface shows them to the token plane, ``rlid.menus.render_token_prompt``).
A rollout engine (``rlid.baselines.engine``) samples the completion token by token
until a newline / EOS or ``max_new_tokens``; the text is mapped to a legal action
by the rule in ``rlid.baselines.token.parse``. A command that does not parse is sent to the
env verbatim: a no-op step with ``info["invalid_action"]``.

Each call returns one :class:`Generation` per env with the token ids and the two
rollout-time log-probs the update needs (docs/design.md §6):

Both are log-probs of the behaviour event: softmax(logits / T) at the sampling
temperature T (kept in ``Generation.temperature``; the update re-scores at it).

* ``logp_rollout`` — log μ per completion token, from the engine;
* ``logp_old``     — log π_old per completion token, the trainer model at rollout
  time. For the ``trainer`` engine it is the same number, copied; for any other
  engine it is recomputed with one teacher-forced float32 trainer forward per
  batch (counted in the budget), as with a separate inference engine.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from rlid.baselines.engine import RolloutEngine, TrainerEngine, completion_logprobs, stop_token_ids
from rlid.baselines.token.parse import parse_action
from rlid.config.budget import Budget, Timers
from rlid.config.planes import TokenConfig
from rlid.core.acting import fit_to_context
from rlid.core.records import ValueHead
from rlid.lm.optim import chunks
from rlid.lm.readout import context_limit
from rlid.menus import COMMAND_END, Interface, parse_command, render_token_prompt
from rlid.menus.tokens import encode_prompt


@dataclass
class Generation:
    """One token-plane decision, as stored for the update."""

    action: str  # sent to the env: the legal action parsed, or the raw command
    text: str  # the decoded completion, stop token excluded
    valid: bool  # the text parsed to exactly one legal action
    prompt_ids: list[int]
    completion_ids: list[int]  # generated tokens, the stop token included when reached
    logp_rollout: list[float]  # log μ per completion token (rollout engine)
    logp_old: list[float]  # log π_old per completion token (trainer at rollout time)
    stopped: bool  # ended on a stop token (False: cut at max_new_tokens)
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. "logp_ref" (trainer)
    temperature: float = 1.0  # sampled from softmax(logits / T); logp_* are of that event

    @property
    def num_tokens(self) -> int:
        return len(self.completion_ids)


class TokenPolicy:
    """Free-text command policy over a batch of envs (one engine call per step).

    Args:
        model, tokenizer: the trainer's causal LM and its tokenizer.
        interface: what the policy sees (the same spec as the decision plane).
        max_new_tokens: longest completion, stop token included.
        engine: the sampler; default the trainer engine (μ = π_old).
        budget, timers: where generated samples / tokens and time are counted.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        interface: Interface,
        *,
        max_new_tokens: int = 8,
        engine: RolloutEngine | None = None,
        budget: Budget | None = None,
        timers: Timers | None = None,
        autocast: Callable[[], AbstractContextManager[Any]] = nullcontext,
        micro_batch_size: int | None = None,
    ) -> None:
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        self.model = model
        self.tokenizer = tokenizer
        self.interface = interface
        self.max_new_tokens = max_new_tokens
        self.pad_id = tokenizer.pad_token_id
        self.engine = engine if engine is not None else TrainerEngine(model, self.pad_id)
        self.budget = budget if budget is not None else Budget()
        self.timers = timers if timers is not None else Timers()
        self.stop_ids = stop_token_ids(tokenizer, COMMAND_END)
        self.autocast = autocast
        self.micro_batch_size = micro_batch_size  # most prompts per generate call

    def prompt_ids(
        self, observations: list[str], infos: list[dict[str, Any]], memory_texts: list[str | None]
    ) -> list[list[int]]:
        def encode_step(b: int, memory: str | None, interface: Interface) -> list[int]:
            prompt = render_token_prompt(
                observations[b], infos[b], interface, self.tokenizer, memory_text=memory
            )
            return encode_prompt(self.tokenizer, prompt)

        limit = context_limit(self.model)  # the completion needs room after the prompt
        room = None if limit is None else limit - self.max_new_tokens
        return fit_to_context(
            encode_step, memory_texts, room, self.interface, self.budget, lists=True
        )[0]

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
    ) -> list[Generation]:
        """One generated command per env."""
        del rng  # the token plane has no menu to shuffle
        with self.timers.time("menu"):
            prompt_ids = self.prompt_ids(observations, infos, memory_texts)
        completion_ids: list[list[int]] = []
        logp_rollout: list[list[float]] = []
        with self.timers.time("generate"):
            for part in chunks(len(prompt_ids), self.micro_batch_size):
                part_ids, part_logps = self.engine.generate(
                    prompt_ids[part], self.max_new_tokens, generator, self.stop_ids,
                    temperature=temperature, greedy=greedy,
                )  # fmt: skip
                completion_ids += part_ids
                logp_rollout += part_logps
        if self.engine.same_as_trainer:
            logp_old = [list(row) for row in logp_rollout]
        else:
            with self.timers.time("forward"), torch.no_grad():
                logp_old = []
                for part in chunks(len(prompt_ids), self.micro_batch_size):
                    logp, mask, _ = completion_logprobs(
                        self.model, prompt_ids[part], completion_ids[part], self.pad_id,
                        temperature=temperature, autocast=self.autocast,
                    )  # fmt: skip
                    logp_old += [logp[b][mask[b]].tolist() for b in range(len(logp))]
            self.budget.forward_passes += len(chunks(len(prompt_ids), self.micro_batch_size))
            self.budget.tokens_processed += sum(map(len, prompt_ids)) + sum(
                map(len, completion_ids)
            )
        stop = set(self.stop_ids)
        records = []
        for b, info in enumerate(infos):
            ids = completion_ids[b]
            stopped = ids[-1] in stop
            text = self.tokenizer.decode(ids[:-1] if stopped else ids, skip_special_tokens=True)
            action = parse_action(text, info["legal_actions"])
            records.append(
                Generation(
                    action=parse_command(text) if action is None else action,
                    text=text,
                    valid=action is not None,
                    prompt_ids=prompt_ids[b],
                    completion_ids=ids,
                    logp_rollout=logp_rollout[b],
                    logp_old=logp_old[b],
                    stopped=stopped,
                    temperature=temperature,
                )
            )
        generated = sum(map(len, completion_ids))
        self.budget.decisions += len(records)
        self.budget.generated_samples += len(records)
        self.budget.generated_tokens += generated
        # KV-cached decoding: one batched forward per generated position (per chunk)
        self.budget.forward_passes += sum(
            max(map(len, completion_ids[part]))
            for part in chunks(len(completion_ids), self.micro_batch_size)
        )
        self.budget.tokens_processed += sum(map(len, prompt_ids)) + generated
        return records


def make_token_policy(
    config: TokenConfig,
    model: Any,
    tokenizer: Any,
    *,
    value_head: ValueHead | None = None,
    budget: Budget | None = None,
    timers: Timers | None = None,
    autocast: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> TokenPolicy:
    """The token plane's acting policy for ``config`` around ``model`` (``rlid.config.registry``)."""
    if value_head is not None:
        raise ValueError("the token plane is critic-free: it takes no value head")
    return TokenPolicy(
        model, tokenizer, config.interface, max_new_tokens=config.max_new_tokens,
        budget=budget, timers=timers, autocast=autocast,
    )  # fmt: skip
