"""Label readout: log pi(a|s) over a menu's labels from ONE forward pass per batch.

Each prompt ends where the answer label is read (``"...\\nAnswer:"``); the next
token's logits at the last position, gathered at the legal labels' token ids and
normalised over them, are the policy over the menu's rows (docs/design.md §5):

    log pi(a_k | s) = log_softmax_k( logits[T-1, label_id_k] ),  k < K_b

The mass the full vocabulary puts on the legal labels (1 - leakage) is reported
beside it: ``label_mass = exp(logsumexp(label logits) - logsumexp(all logits))``.

Prompts are left-padded, with an attention mask and explicit position ids
(``cumsum(mask) - 1``), so a padded row gives the same result as that prompt
alone. Only the last position's logits are computed (``logits_to_keep=1``):
the (B, T, V) logit tensor of a plain forward is never built, and the hidden state
for a value head is the LM head's input at that position (captured with a hook,
:func:`capture_final_hidden`), so no layer's full hidden states are kept
(``output_hidden_states`` is never asked for). Gradients flow; callers that only
act wrap the call in ``torch.no_grad()``.

Batches read from token id lists (:func:`readout_from_lists`, the decision plane's
acting and re-scoring) are packed into one row instead, without padding or mask
(``rlid.lm.packed``): the same numbers up to float rounding, less work.

Precision: only the model forward runs under the caller's ``autocast``; the logits
are cast to float32 before the label gather, the menu log-softmax and the label
mass, whatever the weights' dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from rlid.lm import packed
from rlid.lm.models import CausalLM
from rlid.menus.tokens import encode_prompt


@dataclass(frozen=True)
class ReadoutResult:
    """Result of one batched label readout.

    Attributes:
        logp: (B, K_max) float32 log pi(a|s) over each row's labels; row b has
            its ``K_b`` valid entries first (in the order given), then ``-inf``.
        label_mass: (B,) float32 probability the full vocabulary puts on the row's
            labels, in (0, 1]; the leakage is ``1 - label_mass``.
        hidden: (B, d) last-layer hidden state at the last position (after the
            final norm, the input of the LM head), or ``None`` when not requested.
        num_tokens: non-pad tokens processed by the forward (budget accounting).
    """

    logp: torch.Tensor
    label_mass: torch.Tensor
    hidden: torch.Tensor | None
    num_tokens: int


def left_pad_ids(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token id lists: returns input_ids (B, T) and attention_mask (B, T), both int64."""
    if not seqs:
        raise ValueError("need at least one sequence")
    for b, seq in enumerate(seqs):
        if len(seq) == 0:
            raise ValueError(f"sequence {b} is empty; every prompt needs at least one token")
    t_max = max(len(seq) for seq in seqs)
    input_ids = torch.full((len(seqs), t_max), pad_id, dtype=torch.long)  # (B, T)
    attention_mask = torch.zeros((len(seqs), t_max), dtype=torch.long)  # (B, T)
    for b, seq in enumerate(seqs):
        input_ids[b, t_max - len(seq) :] = torch.as_tensor(list(seq), dtype=torch.long)
        attention_mask[b, t_max - len(seq) :] = 1
    return input_ids, attention_mask


def tokenize_prompts(
    tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokenize prompts as complete text (``rlid.menus.tokens.encode_prompt``: the text's
    own tokens after the tokenizer's BOS, if it uses one) and left-pad them.

    Returns input_ids (B, T) and attention_mask (B, T). The pad id is the
    tokenizer's pad token (else its eos, else 0); it is masked out either way.
    """
    if isinstance(prompts, str) or not prompts:
        raise ValueError("prompts must be a non-empty list of strings")
    for b, prompt in enumerate(prompts):
        if not isinstance(prompt, str):
            raise TypeError(f"prompt {b} is {type(prompt).__name__}, not str")
        if not prompt:
            raise ValueError(f"prompt {b} is empty; the label is read after a non-empty prompt")
    encoded = [encode_prompt(tokenizer, prompt) for prompt in prompts]
    pad_id = tokenizer.pad_token_id
    if pad_id is None:
        pad_id = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    return left_pad_ids(encoded, pad_id)


def pad_label_ids(
    label_token_ids: Sequence[Sequence[int]], vocab_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad ragged label id rows: label_ids (B, K_max) int64 and label_valid (B, K_max) bool.

    Every row needs at least one label; ids must lie in ``[0, vocab_size)`` and
    be distinct within a row (two rows of a menu sharing a label token would
    make the readout ambiguous).
    """
    if not label_token_ids:
        raise ValueError("need at least one row of label ids")
    for b, row in enumerate(label_token_ids):
        if len(row) == 0:
            raise ValueError(f"row {b} has no labels; every menu needs at least one legal row")
        bad = [i for i in row if not 0 <= int(i) < vocab_size]
        if bad:
            raise ValueError(f"row {b}: label ids {bad} outside the vocabulary [0, {vocab_size})")
        if len(set(row)) != len(row):
            raise ValueError(f"row {b}: label ids {list(row)} repeat a token; labels must differ")
    k_max = max(len(row) for row in label_token_ids)
    label_ids = torch.zeros((len(label_token_ids), k_max), dtype=torch.long)  # (B, K)
    label_valid = torch.zeros((len(label_token_ids), k_max), dtype=torch.bool)  # (B, K)
    for b, row in enumerate(label_token_ids):
        label_ids[b, : len(row)] = torch.as_tensor([int(i) for i in row], dtype=torch.long)
        label_valid[b, : len(row)] = True
    return label_ids, label_valid


def label_logprobs(
    model: CausalLM,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    label_token_ids: Sequence[Sequence[int]],
    *,
    return_hidden: bool = False,
) -> ReadoutResult:
    """Read log pi(a|s) over each prompt's labels with one batched forward.

    Args:
        model: a Hugging Face causal LM.
        tokenizer: its tokenizer; prompts are encoded without special tokens.
        prompts: B prompt strings, each ending where the label is read.
        label_token_ids: B rows; row b lists the token id of each legal row's label.
        return_hidden: also return the (B, d) last hidden state (for a value head).

    Example::

        >>> from rlid.lm.models import build_tiny_model
        >>> from rlid.lm.tokenizer import build_tiny_tokenizer
        >>> tok = build_tiny_tokenizer()
        >>> model = build_tiny_model(tok)
        >>> ids = [tok.convert_tokens_to_ids(t) for t in ("ĠA", "ĠB")]
        >>> res = label_logprobs(model, tok, ["Actions:\\nA) look\\nB) wait\\nAnswer:"], [ids])
        >>> res.logp.exp().sum().item()  # doctest: +ELLIPSIS
        1.0...
    """
    if len(prompts) != len(label_token_ids):
        raise ValueError(
            f"got {len(prompts)} prompts but {len(label_token_ids)} rows of label ids; "
            "pass one row of label ids per prompt"
        )
    input_ids, attention_mask = tokenize_prompts(tokenizer, prompts)
    label_ids, label_valid = pad_label_ids(label_token_ids, model_vocab_size(model))
    return readout_from_ids(
        model, input_ids, attention_mask, label_ids, label_valid, return_hidden=return_hidden
    )


def readout_from_ids(
    model: CausalLM,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    label_ids: torch.Tensor,
    label_valid: torch.Tensor,
    return_hidden: bool = False,
    *,
    temperature: float | torch.Tensor = 1.0,
    autocast: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> ReadoutResult:
    """Label readout over stored, left-padded token ids (exact re-scoring, no re-tokenizing).

    Args:
        model: a Hugging Face causal LM.
        input_ids: (B, T) left-padded prompt token ids.
        attention_mask: (B, T) 1 for prompt tokens, 0 for left padding.
        label_ids: (B, K) label token ids; entries where ``label_valid`` is False
            are ignored (any in-range id, e.g. 0).
        label_valid: (B, K) bool, True for the row's legal labels.
        return_hidden: also return the last hidden state (B, d).
        temperature: the behaviour policy's temperature, a float or (B,) per row:
            ``logp = log_softmax(label_logits / T)``, the distribution actions are
            sampled from (so stored and re-scored log-probs are the same event).
            ``label_mass`` is always measured at temperature 1.
        autocast: context-manager factory around the model forward only
            (``rlid.lm.hardware.Precision.autocast``).
    """
    _check_ids(input_ids, attention_mask, label_ids, label_valid)
    device = _device(model)
    input_ids = input_ids.to(device)
    attention_mask = attention_mask.to(device=device, dtype=torch.long)
    label_ids = label_ids.to(device)
    label_valid = label_valid.to(device=device, dtype=torch.bool)

    vocab_size = model_vocab_size(model)
    valid_ids = label_ids[label_valid]
    if valid_ids.numel() and (valid_ids.min() < 0 or valid_ids.max() >= vocab_size):
        raise ValueError(f"label ids must lie in [0, {vocab_size}) for this model")
    lengths = attention_mask.sum(-1)  # (B,)
    max_positions = context_limit(model)
    if max_positions is not None and int(lengths.max()) > max_positions:
        raise ValueError(
            f"a prompt has {int(lengths.max())} tokens, more than the model's "
            f"max_position_embeddings={max_positions}; shorten it (less memory, a lower "
            "--max-obs-chars, --afterstates false, fewer legal actions) or use a model with a "
            "longer context"
        )

    # Left padding: the first real token of every row gets position 0.
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (B, T)
    with capture_final_hidden(model, enabled=return_hidden) as captured, autocast():
        out = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            logits_to_keep=1,
            use_cache=False,
        )
    hidden = captured[-1][:, -1] if return_hidden else None  # (B, d)
    return _label_readout(
        out.logits[:, -1], label_ids, label_valid, hidden, int(lengths.sum()), temperature
    )


def readout_from_lists(
    model: CausalLM,
    prompt_ids: Sequence[Sequence[int]],
    label_ids: torch.Tensor,
    label_valid: torch.Tensor,
    pad_id: int,
    return_hidden: bool = False,
    *,
    temperature: float | torch.Tensor = 1.0,
    autocast: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> ReadoutResult:
    """:func:`readout_from_ids` over token id lists: the prompts packed into one row
    without padding (``rlid.lm.packed``) where the model allows it, else left-padded
    with ``pad_id``. The same numbers either way, up to float rounding."""
    if not packed.packs(model):
        input_ids, attention_mask = left_pad_ids(prompt_ids, pad_id)
        return readout_from_ids(
            model, input_ids, attention_mask, label_ids, label_valid, return_hidden,
            temperature=temperature, autocast=autocast,
        )  # fmt: skip
    if len(prompt_ids) != label_ids.shape[0] or label_ids.shape != label_valid.shape:
        raise ValueError(
            f"{len(prompt_ids)} prompts but label ids {tuple(label_ids.shape)} and validity "
            f"{tuple(label_valid.shape)}; pass one row of label ids per prompt"
        )
    if not bool(label_valid.any(-1).all()):
        raise ValueError("every row needs at least one valid label")
    device = _device(model)
    label_ids = label_ids.to(device)
    label_valid = label_valid.to(device=device, dtype=torch.bool)
    vocab_size = model_vocab_size(model)
    valid_ids = label_ids[label_valid]
    if valid_ids.numel() and (valid_ids.min() < 0 or valid_ids.max() >= vocab_size):
        raise ValueError(f"label ids must lie in [0, {vocab_size}) for this model")
    lengths = [len(p) for p in prompt_ids]
    max_positions = context_limit(model)
    if lengths and max_positions is not None and max(lengths) > max_positions:
        raise ValueError(
            f"a prompt has {max(lengths)} tokens, more than the model's "
            f"max_position_embeddings={max_positions}; shorten it (less memory, a lower "
            "--max-obs-chars, --afterstates false, fewer legal actions) or use a model with a "
            "longer context"
        )
    with capture_final_hidden(model, enabled=return_hidden) as captured, autocast():
        out = packed.packed_forward(model, prompt_ids, packed.ends(lengths), device)
    if out is None:  # the model's attention does not take packed rows: padded
        return readout_from_lists(
            model, prompt_ids, label_ids, label_valid, pad_id, return_hidden,
            temperature=temperature, autocast=autocast,
        )  # fmt: skip
    hidden = captured[-1][0] if return_hidden else None  # (B, d)
    return _label_readout(out.logits[0], label_ids, label_valid, hidden, sum(lengths), temperature)


def _label_readout(
    logits: torch.Tensor,
    label_ids: torch.Tensor,
    label_valid: torch.Tensor,
    hidden: torch.Tensor | None,
    num_tokens: int,
    temperature: float | torch.Tensor,
) -> ReadoutResult:
    """The menu log-probs and label mass from the answer positions' logits (B, V)."""
    # float32 from here on, whatever the weights or the autocast dtype
    logits = logits.float()  # (B, V)
    vocab_size = logits.shape[-1]
    label_logits = logits.gather(1, label_ids.clamp(0, vocab_size - 1))  # (B, K)
    label_logits = label_logits.masked_fill(~label_valid, float("-inf"))  # (B, K)
    log_mass = torch.logsumexp(label_logits, -1) - torch.logsumexp(logits, -1)  # (B,)
    if isinstance(temperature, torch.Tensor):
        temperature = temperature.to(device=logits.device, dtype=torch.float32)[:, None]
    logp = torch.log_softmax(label_logits / temperature, dim=-1)  # (B, K)
    return ReadoutResult(
        logp=logp,
        label_mass=log_mass.exp(),
        hidden=hidden,
        num_tokens=num_tokens,
    )


def _check_ids(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    label_ids: torch.Tensor,
    label_valid: torch.Tensor,
) -> None:
    """Shape and padding checks with messages that say what is wrong."""
    if input_ids.dim() != 2 or input_ids.shape != attention_mask.shape:
        raise ValueError(
            f"input_ids {tuple(input_ids.shape)} and attention_mask "
            f"{tuple(attention_mask.shape)} must both be (B, T)"
        )
    if label_ids.dim() != 2 or label_ids.shape != label_valid.shape:
        raise ValueError(
            f"label_ids {tuple(label_ids.shape)} and label_valid {tuple(label_valid.shape)} "
            "must both be (B, K)"
        )
    if label_ids.shape[0] != input_ids.shape[0]:
        raise ValueError(f"{input_ids.shape[0]} prompts but {label_ids.shape[0]} rows of label ids")
    if input_ids.shape[0] == 0 or input_ids.shape[1] == 0:
        raise ValueError("empty batch or empty prompts")
    if not bool(label_valid.any(-1).all()):
        raise ValueError("every row needs at least one valid label")
    mask = attention_mask.bool()
    if not bool(mask[:, -1].all()) or not bool((mask[:, 1:] >= mask[:, :-1]).all()):
        raise ValueError(
            "attention_mask must be left-padded (zeros, then ones; last column all ones), "
            "so that the label is read at the last position of every row"
        )


@contextmanager
def capture_final_hidden(model: torch.nn.Module, enabled: bool = True) -> Iterator[list[Any]]:
    """Collect the LM head's input (the final hidden state, after the last norm) of each
    forward inside the block: a list of (B, T_kept, d) tensors, with gradients.

    A pre-hook on ``model.get_output_embeddings()`` works for any Hugging Face causal
    LM (also peft-wrapped), and sees only the positions ``logits_to_keep`` keeps.
    """
    captured: list[Any] = []
    if not enabled:
        yield captured
        return
    head: Any = getattr(model, "get_output_embeddings")()  # noqa: B009 - nn.Module typing
    handle = head.register_forward_pre_hook(lambda module, args: captured.append(args[0]))
    try:
        yield captured
    finally:
        handle.remove()


def context_limit(model: Any) -> int | None:
    """The longest sequence ``model`` takes (``config.max_position_embeddings``), or None."""
    value = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    return int(value) if value is not None else None


def model_vocab_size(model: CausalLM) -> int:
    """Rows of the output embedding (the logit dimension)."""
    return model.get_output_embeddings().weight.shape[0]


def _device(model: torch.nn.Module) -> torch.device:
    """Where the model computes (an offloaded model says so with ``compute_device``)."""
    compute = getattr(model, "compute_device", None)
    return compute if compute is not None else next(model.parameters()).device
