"""Label-tree readout: the labels of every level of a path (docs/large-menus.md).

A decision over a label tree (``rlid.menus.tree``) reads one label per level. Its tokens are

    prompt | label_1 + continuation_2 | label_2 + continuation_3 | ...

where ``continuation_l`` shows level l's menu and ends where its label is read
(``rlid.menus.tree_prompt``). Level l's policy is the label readout at the end of block l:
``log pi_l(row | s, path_<l) = log_softmax(logits[end of block l, label ids of level l])``
and ``log pi(a | s) = sum_l log pi_l(row_l | s, path_<l)``.

Two ways to read it, equal up to float rounding (tested within 1e-6):

* :class:`LevelReader` (rollouts, no gradient): level l+1's menu depends on the label
  sampled at level l, so each level is one forward over its new tokens only, on the KV
  cache the previous levels left (``batch_select_indices`` keeps the rows still walking).
* :func:`path_logprobs` (updates, with gradients): the path is known, so ONE forward over
  the whole sequence gives every level's answer position at once.

Layout of a batch: block 0 holds the prompts, left-padded; block l holds every row's
level-(l+1) segment, left-padded to the block's width (a row whose path is shorter has
only padding there). Padding in the middle of a row is masked out and position ids
count real tokens only (``cumsum(mask) - 1``), so a row reads as if it were alone; the
answer positions are the last column of each block, the same for every row.

:func:`path_logprobs` packs the batch instead where the model allows it
(``rlid.lm.packed``): each path's prompt and segments one after another in one row of
every path, no padding, each path's attention causal on its own tokens; the same
numbers up to float rounding.

Only those positions' logits are computed (``logits_to_keep`` as a tensor of columns);
label logits, the per-level log-softmax and the label mass are float32 (float64 for a
float64 model, as the audit runs it).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from rlid.lm import packed
from rlid.lm.models import CausalLM
from rlid.lm.readout import (
    capture_final_hidden,
    context_limit,
    left_pad_ids,
    model_vocab_size,
    pad_label_ids,
)

Ids = list[int]


@dataclass(frozen=True)
class PathReadout:
    """The labels of every level of a batch of paths.

    Attributes:
        logp: (B, D, W) float32 log pi_l over level l's rows, ``-inf`` on padded rows
            and on every row of a level the path does not have.
        label_mass: (B, D) float32 mass the vocabulary puts on level l's labels; 1.0
            where the path has no level l.
        present: (B, D) bool, the levels each path has.
        hidden: (B, d) final hidden state where level 1 is read (the state's value), or None.
        num_tokens: non-pad tokens processed.
    """

    logp: torch.Tensor
    label_mass: torch.Tensor
    present: torch.Tensor
    hidden: torch.Tensor | None
    num_tokens: int


def cache_kwarg(model: torch.nn.Module) -> str:
    """transformers >= 5 calls the KV cache ``cache``; earlier versions ``past_key_values``."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def returned_cache(output: Any) -> Any:
    """The output's KV cache, or None."""
    names = {f.name for f in dataclasses.fields(output)} if dataclasses.is_dataclass(output) else ()
    if "cache" in names:
        return output.cache
    return getattr(output, "past_key_values", None)


def label_scores(
    logits: torch.Tensor,
    label_ids: torch.Tensor,
    label_valid: torch.Tensor,
    temperature: float | torch.Tensor = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Menu log-probs and label mass from logits (..., V) and labels (..., W): the
    readout's arithmetic (``rlid.lm.readout.readout_from_ids``) on any leading shape.

    ``temperature`` is a float or one value per leading row (B,). A level with no
    valid label gets ``-inf`` everywhere and mass 1.
    """
    logits = logits if logits.dtype == torch.float64 else logits.float()  # float64 stays
    vocab = logits.shape[-1]
    any_valid = label_valid.any(-1, keepdim=True)  # (..., 1)
    label_logits = logits.gather(-1, label_ids.clamp(0, vocab - 1))  # (..., W)
    label_logits = label_logits.masked_fill(~label_valid, float("-inf"))
    # a level the path lacks: a finite stand-in keeps log_softmax free of NaN
    safe = torch.where(any_valid, label_logits, torch.zeros_like(label_logits))
    log_mass = torch.logsumexp(safe, -1) - torch.logsumexp(logits, -1)
    if isinstance(temperature, torch.Tensor):
        temperature = temperature.to(device=logits.device, dtype=torch.float32)
        temperature = temperature.view(-1, *([1] * (logits.dim() - 1)))
    logp = torch.log_softmax(safe / temperature, dim=-1).masked_fill(~label_valid, float("-inf"))
    mass = torch.where(any_valid.squeeze(-1), log_mass.exp(), torch.ones_like(log_mass))
    return logp, mass


def path_layout(
    prompts: Sequence[Ids], segments: Sequence[Sequence[Ids]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token blocks of a batch of paths: input_ids (B, T), attention_mask (B, T) and the
    D answer columns (D,) (module docstring). ``segments[b]`` are row b's tokens after
    its prompt, one list per later level (each starts with the label chosen before it)."""
    depth = 1 + max((len(s) for s in segments), default=0)
    ids, mask = left_pad_ids(prompts, pad_id)
    id_blocks, mask_blocks = [ids], [mask]
    for level in range(1, depth):
        rows = [s[level - 1] if len(s) >= level else [] for s in segments]
        width = max(len(r) for r in rows)
        block_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        block_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for b, row in enumerate(rows):
            if row:
                block_ids[b, width - len(row) :] = torch.as_tensor(row, dtype=torch.long)
                block_mask[b, width - len(row) :] = 1
        id_blocks.append(block_ids)
        mask_blocks.append(block_mask)
    ends = torch.tensor([block.shape[1] for block in id_blocks]).cumsum(0) - 1  # (D,)
    return torch.cat(id_blocks, 1), torch.cat(mask_blocks, 1), ends


def _check_context(model: Any, attention_mask: torch.Tensor) -> None:
    longest = int(attention_mask.sum(-1).max())
    limit = context_limit(model)
    if limit is not None and longest > limit:
        raise ValueError(
            f"a label-tree path has {longest} tokens, more than the model's "
            f"max_position_embeddings={limit}; use a larger fan-out (fewer levels), a "
            "shorter prompt (--max-obs-chars, --afterstates false) or a longer-context model"
        )


def _device(model: torch.nn.Module) -> torch.device:
    compute = getattr(model, "compute_device", None)
    return compute if compute is not None else next(model.parameters()).device


def pad_levels(
    label_ids: Sequence[Sequence[Ids]], depth: int, vocab_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Label ids per row and level: (B, D, W) ids and validity (``pad_label_ids`` per level;
    a level a row lacks is all invalid)."""
    width = max(len(level) for row in label_ids for level in row)
    ids = torch.zeros((len(label_ids), depth, width), dtype=torch.long)
    valid = torch.zeros((len(label_ids), depth, width), dtype=torch.bool)
    for b, row in enumerate(label_ids):
        level_ids, level_valid = pad_label_ids(row, vocab_size)  # checks every level's ids
        ids[b, : len(row), : level_ids.shape[1]] = level_ids
        valid[b, : len(row), : level_valid.shape[1]] = level_valid
    return ids, valid


def path_logprobs(
    model: CausalLM,
    prompts: Sequence[Ids],
    segments: Sequence[Sequence[Ids]],
    label_ids: Sequence[Sequence[Ids]],
    pad_id: int,
    *,
    temperature: float | torch.Tensor = 1.0,
    return_hidden: bool = False,
    autocast: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> PathReadout:
    """Every level of every path from ONE forward, with gradients.

    Args:
        model: a Hugging Face causal LM.
        prompts: B first-level prompts (token ids), each ending where level 1 is read.
        segments: per row, the tokens appended for each later level (label + continuation).
        label_ids: per row, one list of label token ids per level (``len(segments[b]) + 1``).
        pad_id: the padding id (masked out).
        temperature: float or (B,): ``log_softmax(label_logits / T)`` at every level.
        return_hidden: also return the hidden state where level 1 is read.
        autocast: context-manager factory around the forward only.
    """
    if not (len(prompts) == len(segments) == len(label_ids)) or not prompts:
        raise ValueError("need the same number (>= 1) of prompts, segment lists and label lists")
    for b, (segs, levels) in enumerate(zip(segments, label_ids)):
        if len(levels) != len(segs) + 1 or any(len(s) == 0 for s in segs):
            raise ValueError(
                f"path {b}: {len(levels)} label lists for {len(segs)} non-empty segments; "
                "give one list of labels per level (segments + 1)"
            )
    device = _device(model)
    if packed.packs(model):
        read = _packed_paths(
            model, prompts, segments, label_ids, device, temperature, return_hidden, autocast
        )
        if read is not None:
            return read
    input_ids, attention_mask, ends = path_layout(prompts, segments, pad_id)
    _check_context(model, attention_mask)
    depth = len(ends)
    ids, valid = pad_levels(label_ids, depth, model_vocab_size(model))
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (B, T)
    with capture_final_hidden(model, enabled=return_hidden) as captured, autocast():
        out = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=positions,
            logits_to_keep=ends.to(device),
            use_cache=False,
        )
    logits = out.logits  # (B, D, V)
    logp, mass = label_scores(logits, ids.to(device), valid.to(device), temperature)
    hidden = captured[-1][:, 0] if return_hidden else None  # (B, d)
    return PathReadout(
        logp=logp,
        label_mass=mass,
        present=valid.any(-1).to(device),
        hidden=hidden,
        num_tokens=int(attention_mask.sum()),
    )


def _packed_paths(
    model: CausalLM,
    prompts: Sequence[Ids],
    segments: Sequence[Sequence[Ids]],
    label_ids: Sequence[Sequence[Ids]],
    device: torch.device,
    temperature: float | torch.Tensor,
    return_hidden: bool,
    autocast: Callable[[], AbstractContextManager[Any]],
) -> PathReadout | None:
    """:func:`path_logprobs` with each path's tokens (prompt, then its segments) packed
    into one row (``rlid.lm.packed``): no padding, neither before the prompts nor between
    the levels. The answer positions are the ends of each path's blocks; a level a path
    lacks reads its first answer's logits and is masked out. None: the model's attention
    does not take packed rows (the caller reads the padded layout)."""
    depth = 1 + max((len(s) for s in segments), default=0)
    sequences = [list(p) + [t for seg in segs for t in seg] for p, segs in zip(prompts, segments)]
    limit = context_limit(model)
    longest = max(len(q) for q in sequences)
    if limit is not None and longest > limit:
        _check_context(model, torch.ones(1, longest, dtype=torch.long))  # raises
    answers = torch.zeros((len(prompts), depth), dtype=torch.long)  # (B, D) packed columns
    start = 0
    for b, (prompt, segs) in enumerate(zip(prompts, segments)):
        ends = torch.tensor([len(prompt)] + [len(seg) for seg in segs]).cumsum(0) - 1 + start
        answers[b] = ends[0]
        answers[b, : len(ends)] = ends
        start += len(sequences[b])
    ids, valid = pad_levels(label_ids, depth, model_vocab_size(model))
    with capture_final_hidden(model, enabled=return_hidden) as captured, autocast():
        out = packed.packed_forward(model, sequences, answers.flatten(), device)
    if out is None:
        return None
    logits = out.logits[0].reshape(len(prompts), depth, -1)  # (B, D, V)
    logp, mass = label_scores(logits, ids.to(device), valid.to(device), temperature)
    hidden = captured[-1][0].reshape(len(prompts), depth, -1)[:, 0] if return_hidden else None
    return PathReadout(
        logp=logp,
        label_mass=mass,
        present=valid.any(-1).to(device),
        hidden=hidden,
        num_tokens=sum(len(q) for q in sequences),
    )


@dataclass
class LevelStep:
    """One level's readout of the rows still walking: logp (n, W) float32 (-inf padded),
    label_mass (n,), hidden (n, d) or None (level 1 only), num_tokens processed."""

    logp: torch.Tensor
    label_mass: torch.Tensor
    hidden: torch.Tensor | None
    num_tokens: int


class LevelReader:
    """Reads a batch of paths level by level, each level one forward over its new tokens
    on the KV cache of the levels before (rollouts: call it under ``torch.no_grad()``).

    A model that returns no cache (or one without ``batch_select_indices``) reads each
    later level by a forward over the row's whole sequence instead (the same numbers).

        reader = LevelReader(model, pad_id)
        step = reader.first(prompt_ids, label_ids)           # level 1 of every row
        step = reader.next(rows, segments, next_label_ids)   # level 2 of rows `rows`
    """

    def __init__(
        self,
        model: CausalLM,
        pad_id: int,
        autocast: Callable[[], AbstractContextManager[Any]] = nullcontext,
    ) -> None:
        self.model = model
        self.pad_id = pad_id
        self.autocast = autocast
        self.device = _device(model)
        self.vocab_size = model_vocab_size(model)
        self.cache: Any = None
        self.mask: torch.Tensor | None = None  # (n, T) of the rows still walking
        self.sequences: list[Ids] = []  # each row's tokens so far (the no-cache path)

    def _read(self, logits: torch.Tensor, label_ids: Sequence[Ids], temperature: Any) -> Any:
        ids, valid = pad_label_ids(label_ids, self.vocab_size)
        temp = temperature
        if isinstance(temp, torch.Tensor) and temp.dim() > 0 and len(temp) != len(label_ids):
            raise ValueError("one temperature per row")
        return label_scores(logits, ids.to(self.device), valid.to(self.device), temp)

    def first(
        self,
        prompts: Sequence[Ids],
        label_ids: Sequence[Ids],
        *,
        temperature: float | torch.Tensor = 1.0,
        return_hidden: bool = False,
    ) -> LevelStep:
        """Level 1 of every row: one forward over the prompts, keeping their cache."""
        input_ids, mask = left_pad_ids(prompts, self.pad_id)
        _check_context(self.model, mask)
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        with capture_final_hidden(self.model, enabled=return_hidden) as captured, self.autocast():
            out = self.model(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                logits_to_keep=1,
                use_cache=True,
            )
        cache = returned_cache(out)
        self.cache = cache if hasattr(cache, "batch_select_indices") else None
        self.mask = mask
        self.sequences = [list(p) for p in prompts]
        logp, mass = self._read(out.logits[:, -1], label_ids, temperature)
        hidden = captured[-1][:, -1] if return_hidden else None
        return LevelStep(logp, mass, hidden, int(mask.sum()))

    def next(
        self,
        rows: Sequence[int],
        segments: Sequence[Ids],
        label_ids: Sequence[Ids],
        *,
        temperature: float | torch.Tensor = 1.0,
    ) -> LevelStep:
        """The next level of rows ``rows`` (indices among the rows of the previous call),
        each extended by its segment (the chosen label and the next menu's tokens)."""
        if self.mask is None:
            raise RuntimeError("call first() before next()")
        if not rows or len(rows) != len(segments) or any(not s for s in segments):
            raise ValueError("need one non-empty segment per continuing row")
        self.sequences = [self.sequences[r] + list(s) for r, s in zip(rows, segments)]
        index = torch.tensor(list(rows), device=self.device)
        seg_ids, seg_mask = left_pad_ids(segments, self.pad_id)
        seg_ids, seg_mask = seg_ids.to(self.device), seg_mask.to(self.device)
        mask = torch.cat([self.mask[index], seg_mask], 1)  # (n, T + S)
        _check_context(self.model, mask)
        self.mask = mask
        if self.cache is None:  # no reusable cache: each row's whole sequence again
            full_ids, full_mask = left_pad_ids(self.sequences, self.pad_id)
            full_ids, full_mask = full_ids.to(self.device), full_mask.to(self.device)
            with self.autocast():
                out = self.model(
                    input_ids=full_ids,
                    attention_mask=full_mask,
                    position_ids=(full_mask.cumsum(-1) - 1).clamp(min=0),
                    logits_to_keep=1,
                    use_cache=False,
                )
            tokens = int(full_mask.sum())
        else:
            self.cache.batch_select_indices(index)
            positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -seg_ids.shape[1] :]
            with self.autocast():
                out = self.model(
                    input_ids=seg_ids,
                    attention_mask=mask,
                    position_ids=positions,
                    logits_to_keep=1,
                    use_cache=True,
                    **{cache_kwarg(self.model): self.cache},
                )
            tokens = int(seg_mask.sum())
        logp, mass = self._read(out.logits[:, -1], label_ids, temperature)
        return LevelStep(logp, mass, None, tokens)
