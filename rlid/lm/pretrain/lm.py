"""The language-model step of pretraining: weighted loss over answers, token-budgeted batches."""

from __future__ import annotations

from typing import Any

import torch


def weighted_lm_loss(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    weights: torch.Tensor,
    *,
    normaliser: float | None = None,
) -> torch.Tensor:
    """``sum_i w_i * CE(token_i | tokens < i) / sum_i w_i`` over a batch: ``logits`` (B, T, V),
    ``input_ids`` and ``weights`` (B, T), weight 0 on padding and on the first token.
    ``normaliser`` replaces ``sum_i w_i`` (a piece of a larger batch divides by the
    whole batch's sum, so that the pieces' losses add up to the batch's)."""
    ce = torch.nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(), input_ids[:, 1:].flatten(), reduction="none"
    ).view(input_ids.shape[0], -1)  # (B, T-1)
    w = weights[:, 1:]
    if normaliser is not None:
        return (ce * w).sum() / max(normaliser, 1e-8)
    return (ce * w).sum() / w.sum().clamp_min(1e-8)


def length_pieces(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """A batch's indices in order of length, cut into pieces of at most ``max_tokens``
    padded tokens (pieces x longest; a longer sequence is a piece alone); 0: one piece
    in the batch's own order."""
    if not max_tokens:
        return [list(range(len(lengths)))]
    pieces: list[list[int]] = [[]]
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        if pieces[-1] and (len(pieces[-1]) + 1) * lengths[i] > max_tokens:
            pieces.append([])
        pieces[-1].append(i)
    return pieces


def _padded(
    batch: list[tuple[list[int], list[float]]], pad: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``(input_ids, attention_mask, weights)``, each (B, T), weight 0 on padding."""
    t_max = max(len(ids) for ids, _ in batch)
    input_ids = torch.full((len(batch), t_max), pad, dtype=torch.long)
    attention = torch.zeros((len(batch), t_max), dtype=torch.long)
    weights = torch.zeros((len(batch), t_max))
    for b, (ids, w) in enumerate(batch):
        input_ids[b, : len(ids)] = torch.tensor(ids)
        attention[b, : len(ids)] = 1
        weights[b, : len(ids)] = torch.tensor(w)
    return input_ids, attention, weights


def batch_backward(
    model: Any,
    batch: list[tuple[list[int], list[float]]],
    pad: int,
    answer_weight: float,
    max_batch_tokens: int = 0,
) -> torch.Tensor:
    """Back-propagate one step's loss over ``batch`` (``(ids, weights)`` pairs) and return
    it, detached: one padded batch, or pieces of at most ``max_batch_tokens`` padded
    tokens (:func:`length_pieces`) whose gradients add up to the one batch's."""
    pieces = length_pieces([len(ids) for ids, _ in batch], max_batch_tokens)
    if len(pieces) == 1:  # one padded batch (as before the option)
        input_ids, attention, weights = _padded(batch, pad)
        if answer_weight == 1.0:  # weights 0/1: the model's own loss
            labels = input_ids.masked_fill(weights == 0, -100)
            loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        else:
            logits = model(input_ids=input_ids, attention_mask=attention).logits
            loss = weighted_lm_loss(logits, input_ids, weights)
        loss.backward()
        return loss.detach()
    total = sum(sum(w[1:]) for _, w in batch)  # the whole batch's normaliser
    loss = torch.zeros(())
    for piece in pieces:  # the same loss, piece by piece: each adds its share of the sum
        input_ids, attention, weights = _padded([batch[b] for b in piece], pad)
        logits = model(input_ids=input_ids, attention_mask=attention).logits
        part = weighted_lm_loss(logits, input_ids, weights, normaliser=total)
        part.backward()
        loss = loss + part.detach()
    return loss
