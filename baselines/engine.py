"""Rollout engines: who samples the token plane's completions, and with which log-probs.

An engine is a small object (docs/design.md §6, §10)::

    engine.generate(prompt_ids, max_new_tokens, generator, stop_ids)
        -> (completion_ids, logp_rollout)      # ragged lists, one per prompt

``logp_rollout`` is log μ of each sampled token under the distribution it was
drawn from, the engine's softmax(logits / temperature) (as the decision plane
stores log π of its behaviour policy, and as verl does); the trainer re-scores
with the same temperature (:func:`completion_logprobs`), so ratios compare one
event. Greedy decoding stores log-probs at the given temperature too. A completion
ends with (and includes) its first stop token, or after ``max_new_tokens``.
Sampling is token by token with a KV cache, left-padded prompts and explicit
position ids (so a row's numbers do not depend on its padding); everything is
deterministic given the ``torch.Generator``.

Engines (``ENGINES``):

* ``trainer``   — the trainer's model in float32: μ = π_old, so ρ = π_old/μ ≡ 1
  and the policy copies ``logp_rollout`` into ``logp_old``.
* ``perturbed`` — the trainer's model plus a seeded, deterministic logit
  perturbation ``noise · z``, ``z ~ N(0, 1)^V`` drawn from (seed, position,
  previous token): a stand-in for another kernel or engine, so μ ≠ π_old on a
  CPU and TIS / IcePop have something to correct.
* ``bf16``      — the trainer's model run under bfloat16 autocast (the dtype gap
  of a production inference engine).

For engines with ``same_as_trainer = False`` the token policy recomputes
``logp_old`` with a teacher-forced float32 trainer forward, as a system with a
separate inference engine must (:func:`completion_logprobs`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

import numpy as np
import torch

from rlid.lm.readout import capture_final_hidden, left_pad_ids
from rlid.lm.tree_readout import cache_kwarg, returned_cache

Ragged = list[list[int]]


class RolloutEngine(Protocol):
    """What the token policy needs from a sampler."""

    name: str
    same_as_trainer: bool
    """True when ``logp_rollout`` *is* the trainer's log π_old (no recompute needed)."""

    def generate(
        self,
        prompt_ids: Sequence[Sequence[int]],
        max_new_tokens: int,
        generator: torch.Generator,
        stop_ids: Sequence[int],
        *,
        temperature: float = 1.0,
        greedy: bool = False,
    ) -> tuple[Ragged, list[list[float]]]: ...


# --------------------------------------------------------------------------- forwards
def _checkpointing(model: torch.nn.Module) -> bool:
    """Whether activation (gradient) checkpointing is on (transformers >= 5 renamed it)."""
    flag = getattr(model, "is_activation_checkpointing", None)
    if flag is None:
        flag = getattr(model, "is_gradient_checkpointing", False)
    return bool(flag)


def _device(model: torch.nn.Module) -> torch.device:
    """Where the model computes (an offloaded model says so with ``compute_device``)."""
    compute = getattr(model, "compute_device", None)
    return compute if compute is not None else next(model.parameters()).device


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that ignore left padding: (B, T) mask -> (B, T), pads at 0."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


LOGPROB_BLOCK = 1 << 23
"""Logit entries (rows x vocabulary) :func:`token_logprobs` turns into float32 at once."""


class _TokenLogprobs(torch.autograd.Function):
    """log_softmax(logits / T)[target] in float32 blocks of rows; see :func:`token_logprobs`."""

    @staticmethod
    def _normalised(rows: torch.Tensor, temperature: float, *, log: bool) -> torch.Tensor:
        if temperature != 1.0:
            rows = rows.float() / temperature
        norm = torch.log_softmax if log else torch.softmax
        return norm(rows, dim=-1, dtype=torch.float32)  # fused, upcast inside the kernel

    @staticmethod
    def forward(
        ctx: Any, logits: torch.Tensor, targets: torch.Tensor, temperature: float, block: int
    ) -> torch.Tensor:
        flat = logits.reshape(-1, logits.shape[-1])
        chosen = targets.reshape(-1, 1)
        logp = torch.empty(flat.shape[0], dtype=torch.float32, device=flat.device)
        for start in range(0, flat.shape[0], block):
            rows = slice(start, start + block)
            full = _TokenLogprobs._normalised(flat[rows], temperature, log=True)
            logp[rows] = full.gather(-1, chosen[rows]).squeeze(-1)
        ctx.save_for_backward(logits, targets)
        ctx.temperature, ctx.block = temperature, block
        return logp.view(targets.shape)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        logits, targets = ctx.saved_tensors
        temperature, block = ctx.temperature, ctx.block
        flat = logits.reshape(-1, logits.shape[-1])
        chosen = targets.reshape(-1, 1)
        g = grad.reshape(-1, 1).float()
        out = torch.empty_like(flat)
        for start in range(0, flat.shape[0], block):
            rows = slice(start, start + block)
            # d/dx [log softmax(x)_t] = onehot(t) - softmax(x), x = logits / T
            step = _TokenLogprobs._normalised(flat[rows], temperature, log=False).mul_(-g[rows])
            step.scatter_add_(-1, chosen[rows], g[rows])
            out[rows] = step.div_(temperature) if temperature != 1.0 else step
        return out.view_as(logits), None, None, None


def token_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, *, temperature: float = 1.0
) -> torch.Tensor:
    """``log_softmax(logits / T)`` at ``targets`` (float32, shape of ``targets``), a block
    of positions at a time.

    ``logits`` (..., V) in any dtype, ``targets`` (...) token ids. Written out it would
    keep a float32 copy of every logit and its log-softmax until the backward pass;
    here only the chosen entries are kept, each block of about :data:`LOGPROB_BLOCK`
    logits is normalised in float32 in turn, and the backward pass recomputes the
    block's softmax from the logits themselves (which it saves, in their own dtype).
    Same numbers as the written-out form, gradients included, up to float rounding
    (``benchmarks/logprob_memory.py`` measures both).
    """
    if logits.shape[:-1] != targets.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} do not match targets {tuple(targets.shape)}"
        )
    block = max(1, LOGPROB_BLOCK // max(1, logits.shape[-1]))
    out: torch.Tensor = _TokenLogprobs.apply(
        logits.contiguous(), targets.contiguous(), float(temperature), block
    )
    return out


def completion_logprobs(
    model: torch.nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    pad_id: int,
    *,
    return_hidden: bool = False,
    temperature: float = 1.0,
    autocast: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Teacher-forced log-probs of each completion token after its prompt (one forward).

    Sequences are ``prompt + completion``, left-padded, so completions are
    **right-aligned**: row b's tokens sit in the last ``len(completion_ids[b])``
    columns. ``temperature`` scores under softmax(logits / T), the distribution a
    sampler at T drew from; ``autocast`` wraps the model forward only (the
    log-softmax runs in float32, :func:`token_logprobs`). The hidden state is the LM
    head's input (a hook), so no layer's full hidden states are kept.

    Returns:
        logp (B, C) log π(token | prefix), 0 where ``mask`` is False;
        mask (B, C) bool, True on completion tokens;
        hidden (B, d) last-layer hidden state at each prompt's last token
        (``return_hidden=True``), else None.
    """
    lengths = [len(c) for c in completion_ids]
    if min(lengths, default=0) < 1 or any(len(p) < 1 for p in prompt_ids):
        raise ValueError("every prompt and every completion needs at least one token")
    width = max(lengths)
    device = _device(model)
    input_ids, attention_mask = left_pad_ids(
        [list(p) + list(c) for p, c in zip(prompt_ids, completion_ids)], pad_id
    )
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    with capture_final_hidden(model, enabled=return_hidden) as captured, autocast():
        out = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=positions_from_mask(attention_mask),
            use_cache=False,
            logits_to_keep=width + 1,
        )
    targets = input_ids[:, -width:]  # (B, C)
    # the kept positions predict the last C tokens and one past the end (a dummy target,
    # dropped): the whole (contiguous) logits go in without a copy
    following = torch.cat([targets, targets[:, -1:]], dim=1)  # (B, C + 1)
    logits = out.logits[:, -(width + 1) :]  # all of them where the model kept width + 1
    logp = token_logprobs(logits, following, temperature=temperature)[:, :-1]
    cols = torch.arange(width, device=device)
    mask = cols[None, :] >= (width - torch.tensor(lengths, device=device))[:, None]  # (B, C)
    logp = torch.where(mask, logp, 0.0)
    hidden = None
    if return_hidden:
        # the kept positions are the last width + 1: row b's last prompt token is at
        # column width - len_b of them
        last_prompt = width - torch.tensor(lengths, device=device)  # (B,)
        states = captured[-1]  # (B, width + 1, d)
        hidden = states[torch.arange(len(lengths), device=device), last_prompt]
    return logp, mask, hidden


def shared_prompt_logprobs(
    model: torch.nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[Sequence[int]]],
    pad_id: int,
    *,
    return_hidden: bool = False,
    autocast: Callable[[], AbstractContextManager[Any]] = nullcontext,
    copies: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None:
    """:func:`completion_logprobs` of several completions per prompt, each prompt run once.

    ``completion_ids[b]`` are prompt b's completions (rows are taken in that order,
    prompt by prompt). The prompts run in one forward that keeps their KV cache; the
    cache is then repeated (``batch_select_indices``) and every completion runs in a
    second forward on top of it, so a prompt of P tokens with K completions of C tokens
    costs P + K·C token positions instead of K·(P + C). The numbers are those of
    :func:`completion_logprobs` up to float rounding, gradients included (the cached
    keys and values carry them back into the prompt's forward).

    A prompt's cache is repeated at most ``copies`` times: with K <= ``copies`` each
    completion has a row of its own; once a menu is larger, completions sit side by
    side in rows (:func:`pack_rows`: as wide as splitting the largest menu over
    ``copies`` rows makes them, each menu on as few as its tokens need), each
    attending to the prompt and to its own earlier tokens only (a 4D attention mask,
    :func:`packed_mask`). Copying a
    1,000-token prompt's cache once per action is what made scoring large menus slow
    (benchmarks/large_menus.py). Models whose attention takes no 4D mask (``sdpa``
    and ``eager`` do) keep one row per completion.

    Returns:
        logp (N, C) and mask (N, C) for the N completions, **left-aligned** (token j of
        a completion in column j); hidden (B, d) at each *prompt's* last token
        (``return_hidden=True``), else None. ``None`` when the model returns no cache
        (e.g. gradient checkpointing switches it off): the caller then runs
        :func:`completion_logprobs`.
    """
    counts = [len(c) for c in completion_ids]
    rows = [list(c) for comps in completion_ids for c in comps]
    if len(prompt_ids) != len(counts) or min(counts, default=0) < 1:
        raise ValueError("need one list of at least one completion per prompt")
    if any(len(c) < 1 for c in rows) or any(len(p) < 1 for p in prompt_ids):
        raise ValueError("every prompt and every completion needs at least one token")
    copies = SHARED_COPIES if copies is None else copies
    if copies < 1:
        raise ValueError(f"copies must be at least 1, got {copies}")
    if model.training and _checkpointing(model):
        return None  # the model would drop the cache (and warn): no wasted prompt forward
    device = _device(model)
    cache_kw = cache_kwarg(model)
    prompt_input, prompt_mask = left_pad_ids(prompt_ids, pad_id)
    prompt_input, prompt_mask = prompt_input.to(device), prompt_mask.to(device)
    with capture_final_hidden(model, enabled=return_hidden) as captured, autocast():
        out = model(
            input_ids=prompt_input,
            attention_mask=prompt_mask,
            position_ids=positions_from_mask(prompt_mask),
            use_cache=True,
            logits_to_keep=1,
        )
    cache = returned_cache(out)
    if cache is None or not hasattr(cache, "batch_select_indices"):
        return None
    first = torch.log_softmax(out.logits[:, -1].float(), dim=-1)  # (B, V): token 0's
    hidden = captured[-1][:, -1] if return_hidden else None  # (B, d)

    owner = torch.repeat_interleave(
        torch.arange(len(counts), device=device), torch.tensor(counts, device=device)
    )  # (N,) prompt of each row
    lengths = torch.tensor([len(c) for c in rows], device=device)
    width = int(lengths.max())
    targets = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for n, ids in enumerate(rows):
        targets[n, : len(ids)] = torch.as_tensor(ids, dtype=torch.long)
    targets = targets.to(device)  # (N, C)
    mask = torch.arange(width, device=device)[None, :] < lengths[:, None]  # (N, C)
    logp = first[owner, targets[:, 0]][:, None]  # (N, 1), without an (N, V) copy
    if width > 1 and max(counts) > copies and packs_completions(model):
        later = _packed_completions(
            model, cache, cache_kw, prompt_mask, counts, targets, lengths, copies, autocast
        )
        logp = torch.cat([logp, later], dim=1)
    elif width > 1:
        # token j > 0 is predicted at token j - 1: feed all but the last column
        cache.batch_select_indices(owner)
        step_mask = mask[:, :-1].long()  # right padding: later columns are never read
        attention_mask = torch.cat([prompt_mask[owner], step_mask], dim=1)
        start = prompt_mask.sum(-1)[owner]  # (N,) position of token 0
        positions = start[:, None] + torch.arange(width - 1, device=device)[None, :]
        with autocast():
            rest = model(
                input_ids=targets[:, :-1],
                attention_mask=attention_mask,
                position_ids=positions,
                use_cache=True,
                **{cache_kw: cache},
            )
        later = token_logprobs(rest.logits, targets[:, 1:])  # (N, C - 1)
        logp = torch.cat([logp, later], dim=1)
    return torch.where(mask, logp, 0.0), mask, hidden


SHARED_COPIES = 64
"""The most copies of one prompt's KV cache :func:`shared_prompt_logprobs` makes (menus
of up to 64 actions, every menu but ScienceWorld's, keep one row per completion)."""


def _attention(model: torch.nn.Module) -> str | None:
    """The model's attention implementation (``sdpa``, ``eager``, ...), None if unknown."""
    return getattr(getattr(model, "config", None), "_attn_implementation", None)


def packs_completions(model: torch.nn.Module) -> bool:
    """Whether :func:`shared_prompt_logprobs` packs a large menu's completions for
    ``model`` (its attention takes a 4D mask as given: ``sdpa``, ``eager``)."""
    return _attention(model) in ("sdpa", "eager")


def packed_mask(
    prompt_mask: torch.Tensor, segments: torch.Tensor, *, additive: bool
) -> torch.Tensor:
    """The 4D attention mask of completions packed side by side after their prompt.

    ``prompt_mask`` (R, P) is each row's prompt (left padding 0); ``segments`` (R, T)
    numbers the completions of a row (0, 0, 0, 1, 1, 2, ...; -1 on right padding).
    A token attends to its prompt's tokens and to the earlier tokens of its own
    completion; a padding token to itself only (so no row is empty). Returns (R, 1, T,
    P + T): bool (True = attend) or, ``additive``, 0 / float32 min (eager attention).
    """
    width = segments.shape[1]
    causal = torch.ones(width, width, dtype=torch.bool, device=segments.device).tril()
    same = segments[:, :, None] == segments[:, None, :]
    real = segments[:, :, None] >= 0
    eye = torch.eye(width, dtype=torch.bool, device=segments.device)[None]
    own = (same & causal & real) | (eye & ~real)  # (R, T, T)
    prompt = prompt_mask.bool()[:, None, :] & real  # (R, T, P)
    allowed = torch.cat([prompt, own], dim=2)[:, None]
    if not additive:
        return allowed
    return torch.zeros(allowed.shape, device=allowed.device).masked_fill(
        ~allowed, torch.finfo(torch.float32).min
    )


def pack_rows(
    counts: Sequence[int], sizes: Sequence[int], copies: int
) -> tuple[list[int], list[int], list[int], list[int]]:
    """Where :func:`_packed_completions` puts each completion: the layout of the rows.

    ``counts[b]`` completions belong to prompt b (in order), completion n takes
    ``sizes[n]`` columns. The row width is that of splitting every menu into at most
    ``copies`` rows of ceil(K_b / ``copies``) completions each (the widest such row);
    each menu then fills rows of that width in order, a completion starting a new row
    where it would overflow the current one. So the largest menu keeps at most
    ``copies`` rows, and a smaller menu in the same batch takes as few rows as its
    tokens need instead of ``copies`` mostly padded ones (every row is as wide as the
    widest). Returns (prompt of each row, row of each completion, its first column
    there, tokens in each row (at least 1)).
    """
    width = 1
    first = 0
    for k in counts:
        per_row = -(-k // copies)  # ceil
        for start in range(first, first + k, per_row):
            width = max(width, sum(sizes[start : min(start + per_row, first + k)]))
        first += k
    owners: list[int] = []
    row_of: list[int] = []
    offset_of: list[int] = []
    spans: list[int] = []
    n = 0
    for b, k in enumerate(counts):
        used = width + 1  # no row of prompt b yet
        for size in sizes[n : n + k]:
            if used + size > width:  # starts a row: prompt b's first, or this one is full
                owners.append(b)
                spans.append(1)
                used = 0
            row_of.append(len(owners) - 1)
            offset_of.append(used)
            used += size
            spans[-1] = max(used, 1)
        n += k
    return owners, row_of, offset_of, spans


def _packed_completions(
    model: torch.nn.Module,
    cache: Any,
    cache_kw: str,
    prompt_mask: torch.Tensor,
    counts: list[int],
    targets: torch.Tensor,
    lengths: torch.Tensor,
    copies: int,
    autocast: Callable[[], AbstractContextManager[Any]],
) -> torch.Tensor:
    """log p of tokens 1.. of every completion (N, C - 1), completions packed side by
    side on at most ``copies`` copies of prompt b's cache (:func:`pack_rows`)."""
    device = targets.device
    count, width = targets.shape
    sizes = (lengths - 1).tolist()
    owners, row_of, offset_of, spans = pack_rows(counts, sizes, copies)
    rows, columns = len(owners), max(spans)
    # each completion token j < len - 1 sits at (row, offset + j) and predicts token j + 1
    n_idx = torch.repeat_interleave(torch.arange(count, device=device), lengths - 1)
    j_idx = torch.cat([torch.arange(s, device=device) for s in sizes])
    r_idx = torch.tensor(row_of, device=device)[n_idx]
    c_idx = torch.tensor(offset_of, device=device)[n_idx] + j_idx
    inputs = torch.zeros(rows, columns, dtype=torch.long, device=device)
    inputs[r_idx, c_idx] = targets[n_idx, j_idx]
    following = torch.zeros(rows, columns, dtype=torch.long, device=device)
    following[r_idx, c_idx] = targets[n_idx, j_idx + 1]
    segments = torch.full((rows, columns), -1, dtype=torch.long, device=device)
    segments[r_idx, c_idx] = n_idx
    owner = torch.tensor(owners, device=device)
    positions = torch.zeros(rows, columns, dtype=torch.long, device=device)
    positions[r_idx, c_idx] = prompt_mask.sum(-1)[owner][r_idx] + j_idx
    attention = packed_mask(prompt_mask[owner], segments, additive=_attention(model) == "eager")
    cache.batch_select_indices(owner)
    with autocast():
        out = model(
            input_ids=inputs,
            attention_mask=attention,
            position_ids=positions,
            use_cache=True,
            **{cache_kw: cache},
        )
    packed = token_logprobs(out.logits, following)  # (R, T)
    later = torch.zeros(count, width - 1, dtype=packed.dtype, device=device)
    return later.index_put((n_idx, j_idx), packed[r_idx, c_idx])


# --------------------------------------------------------------------------- engines
class TrainerEngine:
    """Samples from the trainer's own model: μ = π_old (ρ ≡ 1)."""

    name = "trainer"
    same_as_trainer = True

    def __init__(self, model: torch.nn.Module, pad_id: int) -> None:
        self.model = model
        self.pad_id = pad_id
        self._cache_kw = cache_kwarg(model)
        self.forward_autocast: Callable[[], AbstractContextManager[Any]] = nullcontext

    def autocast(self) -> AbstractContextManager[Any]:
        """Around each decoding forward: the run's mixed precision (``make_engine``)."""
        return self.forward_autocast()

    def adjust_logits(
        self, logits: torch.Tensor, positions: torch.Tensor, previous: torch.Tensor
    ) -> torch.Tensor:
        """Hook: the engine's logits (B, V) for the next token at ``positions`` (B,)."""
        return logits

    @torch.no_grad()
    def generate(
        self,
        prompt_ids: Sequence[Sequence[int]],
        max_new_tokens: int,
        generator: torch.Generator,
        stop_ids: Sequence[int],
        *,
        temperature: float = 1.0,
        greedy: bool = False,
    ) -> tuple[Ragged, list[list[float]]]:
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        batch = len(prompt_ids)
        device = _device(self.model)
        input_ids, attention_mask = left_pad_ids(prompt_ids, self.pad_id)
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        step_ids = input_ids  # (B, T) first, then (B, 1)
        step_positions = positions_from_mask(attention_mask)
        positions = step_positions[:, -1] + 1  # (B,) position of the next token
        previous = input_ids[:, -1]  # (B,)
        stop = set(stop_ids)
        completions: Ragged = [[] for _ in range(batch)]
        logps: list[list[float]] = [[] for _ in range(batch)]
        done = [False] * batch
        cache = None
        for _ in range(max_new_tokens):
            with self.autocast():
                out = self.model(
                    input_ids=step_ids,
                    attention_mask=attention_mask,
                    position_ids=step_positions,
                    use_cache=True,
                    logits_to_keep=1,
                    **{self._cache_kw: cache},
                )
            cache = returned_cache(out)
            logits = self.adjust_logits(out.logits[:, -1].float(), positions, previous)  # (B, V)
            # the behaviour distribution, float32: what is sampled is what is stored
            logp = torch.log_softmax(logits / temperature, dim=-1)
            if greedy:
                token = logp.argmax(dim=-1)
            else:
                # drawn on the CPU with the run's CPU generator, so a seed draws the same
                # tokens whatever the device
                probs = torch.softmax(logp, dim=-1)  # (B, V)
                token = torch.multinomial(probs.cpu(), 1, generator=generator)  # (B, 1)
                token = token.squeeze(-1).to(device)
            token_logp = logp.gather(-1, token[:, None]).squeeze(-1)
            # one transfer per step, not one per row
            tokens, token_logps = token.tolist(), token_logp.tolist()
            for b in range(batch):
                if not done[b]:
                    completions[b].append(tokens[b])
                    logps[b].append(token_logps[b])
                    done[b] = tokens[b] in stop
            if all(done):
                break
            # finished rows keep decoding padding; their outputs are never read
            finished = torch.tensor(done, device=device)
            token = torch.where(finished, self.pad_id, token)
            step_ids = token[:, None]
            step_positions = positions[:, None]
            attention_mask = torch.cat([attention_mask, torch.ones_like(attention_mask[:, :1])], 1)
            positions = positions + 1
            previous = token
        return completions, logps


class PerturbedEngine(TrainerEngine):
    """The trainer's model with a seeded deterministic logit perturbation (μ ≠ π_old).

    The noise added to the logits of the token at position p after token t is
    ``noise · z(seed, p, t)``, ``z`` standard normal over the vocabulary: it
    depends on the context only, never on the batch or the sampling generator,
    so the same completion always has the same ``logp_rollout``.
    """

    name = "perturbed"
    same_as_trainer = False

    def __init__(self, model: torch.nn.Module, pad_id: int, *, noise: float, seed: int) -> None:
        super().__init__(model, pad_id)
        if noise < 0:
            raise ValueError(f"engine noise must be >= 0, got {noise}")
        self.noise = noise
        self.seed = seed

    def adjust_logits(
        self, logits: torch.Tensor, positions: torch.Tensor, previous: torch.Tensor
    ) -> torch.Tensor:
        vocab = logits.shape[-1]
        rows = [
            np.random.default_rng([self.seed, int(p), int(t)]).standard_normal(vocab)
            for p, t in zip(positions, previous)
        ]
        z = torch.from_numpy(np.stack(rows)).to(logits)  # (B, V)
        return logits + self.noise * z


class Bf16Engine(TrainerEngine):
    """The trainer's model under bfloat16 autocast: the precision gap of an inference engine."""

    name = "bf16"
    same_as_trainer = False

    def autocast(self) -> AbstractContextManager[Any]:
        return torch.autocast(device_type=_device(self.model).type, dtype=torch.bfloat16)


ENGINES: dict[str, Callable[..., RolloutEngine]] = {
    "trainer": lambda model, pad_id, *, noise, seed: TrainerEngine(model, pad_id),
    "perturbed": PerturbedEngine,
    "bf16": lambda model, pad_id, *, noise, seed: Bf16Engine(model, pad_id),
}


def make_engine(
    name: str,
    model: torch.nn.Module,
    pad_id: int,
    *,
    noise: float = 0.0,
    seed: int = 0,
    autocast: Callable[[], AbstractContextManager[Any]] | None = None,
) -> RolloutEngine:
    """The engine called ``name`` around the trainer's ``model``; ``autocast`` (the run's
    mixed precision) wraps its forwards unless the engine has its own (``bf16``)."""
    if name not in ENGINES:
        raise ValueError(f"unknown rollout engine {name!r}; valid: {', '.join(map(repr, ENGINES))}")
    engine = ENGINES[name](model, pad_id, noise=noise, seed=seed)
    if autocast is not None and isinstance(engine, TrainerEngine):
        engine.forward_autocast = autocast
    return engine


def stop_token_ids(tokenizer: Any, stop_text: str = "\n") -> list[int]:
    """EOS and every token whose text contains ``stop_text`` (byte-level BPE merges newlines)."""
    ids = {i for i in range(len(tokenizer)) if stop_text in tokenizer.decode([i])}
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    if not ids:
        raise ValueError(f"the tokenizer has no token containing {stop_text!r} and no EOS")
    return sorted(ids)
