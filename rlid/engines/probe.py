"""The probe check: does the engine serve the trainer's current weights?

A stale engine (a sync that was skipped, failed silently, or reached the wrong copy)
samples from an old policy while every number still looks plausible. After each sync
the engine reads one fixed decision prompt, the **probe**, and its label distribution
is compared with the trainer's readout of the same ids (:func:`rlid.lm.readout.readout_from_ids`,
float32); a difference beyond the tolerance stops the run with :class:`StaleEngineError`.

The default probe (:func:`decision_probe`) is the first state of a small keydoor game
rendered through the project's own menu and prompt code, so it exercises the label
tokens a run reads. The tolerance must sit above the engine/trainer numerical gap and
below what one update moves the probe's log-probs; :data:`DEFAULT_TOLERANCE` gives a value per engine dtype. Only
the float32 value rests on a measurement at the scale rlid runs (float32 engine vs
float32 trainer: ~1e-6 on the tiny and 28.5M models); the bfloat16 / float16 ones are
generous guesses (a bfloat16 engine vs a bfloat16 torch tiny model: 1.5e-3) until a run
on a real model calibrates them: pass ``probe_tolerance`` to set one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from rlid import envs
from rlid.lm.readout import left_pad_ids, model_vocab_size, pad_label_ids, readout_from_ids
from rlid.menus import Interface, menu_for_step
from rlid.menus.prompt import label_set_for, render_decision_prompt
from rlid.menus.tokens import encode_prompt

DEFAULT_TOLERANCE = {"float32": 1e-3, "bfloat16": 0.1, "float16": 0.05}
"""Largest |log π_engine − log π_trainer| on the probe accepted, by engine dtype."""


class StaleEngineError(ValueError):
    """The engine's probe distribution differs from the trainer's beyond the tolerance (a
    ValueError, as a non-finite loss is: the run stops with one line, its last checkpoint
    kept)."""


@dataclass(frozen=True)
class Probe:
    """One decision prompt and its labels' token ids, read by both engine and trainer.

    Example::

        >>> Probe(prompt_ids=(5, 6, 7), label_ids=(40, 41)).label_ids
        (40, 41)
    """

    prompt_ids: tuple[int, ...]
    label_ids: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompt_ids", tuple(int(i) for i in self.prompt_ids))
        object.__setattr__(self, "label_ids", tuple(int(i) for i in self.label_ids))
        if not self.prompt_ids or len(self.label_ids) < 2:
            raise ValueError("a probe needs a non-empty prompt and at least two labels")
        if len(set(self.label_ids)) != len(self.label_ids):
            raise ValueError(f"probe label ids {self.label_ids} repeat a token")


def decision_probe(tokenizer: Any, interface: Any = None) -> Probe:
    """The probe of a run: keydoor (size 3, seed 0)'s first state as a decision prompt.

    ``interface`` is the run's :class:`menus.Interface` (default ``Interface()``), so the
    probe is rendered, and its labels tokenised, exactly as the run's prompts are; the
    menu is not shuffled (a fixed prompt).
    """

    interface = replace(interface or Interface(), shuffle=False, memory="none")
    obs, info = envs.make("keydoor", size=3, afterstates=interface.afterstates).reset(seed=0)
    labels = label_set_for(interface, tokenizer)
    menu = menu_for_step(info, interface, labels)
    prompt = render_decision_prompt(obs, info, menu, interface, tokenizer)
    return Probe(tuple(encode_prompt(tokenizer, prompt)), labels.token_ids[: len(menu.rows)])


def trainer_probe_logp(model: Any, probe: Probe) -> torch.Tensor:
    """The trainer's float32 label log-probs (K,) on the probe (no gradient)."""

    input_ids, attention_mask = left_pad_ids([list(probe.prompt_ids)], pad_id=0)
    label_ids, label_valid = pad_label_ids([list(probe.label_ids)], model_vocab_size(model))
    with torch.no_grad():
        result = readout_from_ids(model, input_ids, attention_mask, label_ids, label_valid)
    return result.logp[0].float().cpu()


def compare_probe(
    engine_logp: Sequence[float] | torch.Tensor,
    trainer_logp: Sequence[float] | torch.Tensor,
    tolerance: float,
) -> float:
    """max_k |engine − trainer| over the probe's labels; raises :class:`StaleEngineError`
    above ``tolerance`` (or on a non-finite value).

    >>> compare_probe([-0.5, -1.0], [-0.5, -1.0], 1e-3)
    0.0
    """
    engine = torch.as_tensor(engine_logp, dtype=torch.float64)
    trainer = torch.as_tensor(trainer_logp, dtype=torch.float64)
    if engine.shape != trainer.shape:
        raise ValueError(f"probe shapes differ: engine {engine.shape}, trainer {trainer.shape}")
    gap = float((engine - trainer).abs().max())
    if not gap <= tolerance:  # also catches NaN
        raise StaleEngineError(
            f"the engine's label log-probs on the probe differ from the trainer's by {gap:.3g} "
            f"(tolerance {tolerance:g}): the engine does not serve the trainer's weights "
            "(a skipped or failed weight sync, or a dtype gap above the tolerance: then "
            "raise --vllm-probe-tolerance)"
        )
    return gap
