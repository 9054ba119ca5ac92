"""Acting on a menu, shared by the menu planes: draw rows from the behaviour log-probs,
and fit each step's prompt to the model's context.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

import torch

from rlid.config.budget import Budget
from rlid.core.records import ValueHead
from rlid.menus import Interface

T = TypeVar("T")


def sample_rows(logp: torch.Tensor, *, generator: torch.Generator, greedy: bool) -> torch.Tensor:
    """Sample one row per batch entry from the behaviour log-probs (B, K), -inf padded.

    ``logp`` is already the behaviour distribution (temperature applied by the
    readout). Sampling runs on the CPU with the run's CPU generator, whatever the
    model's device, so a seed draws the same rows on CPU and GPU; the result (B,)
    is on ``logp``'s device.
    """
    if greedy:
        return logp.argmax(dim=-1)
    probs = torch.softmax(logp, dim=-1)  # (B, K); padded rows get 0
    rows = torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(-1)
    return rows.to(logp.device)


def draw_rows(
    logp: torch.Tensor,
    hidden: torch.Tensor,
    value_head: ValueHead | None,
    *,
    generator: torch.Generator,
    greedy: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The rows a menu policy acts on, from the behaviour log-probs (B, K), -inf padded:
    ``(chosen, values, entropy)``, each (B,): the sampled (or greedy) row, V(s) from
    the value head on ``hidden`` (zeros without one) and the exact entropy of the rows.
    """
    chosen = sample_rows(logp, generator=generator, greedy=greedy)
    values = value_head(hidden) if value_head is not None else torch.zeros(len(logp))
    probs = logp.exp()
    entropy = -(probs * torch.where(probs > 0, logp, 0.0)).sum(-1)
    return chosen, values, entropy


def drawn_numbers(
    logp: torch.Tensor, chosen: torch.Tensor, entropy: torch.Tensor, values: torch.Tensor
) -> tuple[list[int], list[float], list[float], list[float]]:
    """``draw_rows``' results as Python numbers: the chosen rows, their log-probs, the
    entropies and values, with one device transfer each (not one per decision, each
    of which would wait for the device)."""
    picked = logp.gather(1, chosen[:, None]).squeeze(1)
    return chosen.tolist(), picked.tolist(), entropy.tolist(), values.tolist()


def fit_to_context(
    encode_step: Callable[[int, str | None, Interface], T],
    memory_texts: list[str | None],
    limit: int | None,
    interface: Interface,
    budget: Budget,
    length: Callable[[T], int] = len,  # type: ignore[assignment]
    *,
    lists: bool = False,
) -> tuple[list[T], list[str | None]]:
    """Each step's encoded prompt, ``encode_step(b, memory_text, interface)``.

    With ``interface.long_prompts == "shorten"`` a step whose ``length`` exceeds
    ``limit`` is encoded again without its memory line, then also without the
    observation (``observation=False``), then also without the menu's afterstates
    (the rows keep their labels and commands), stopping at the first that fits; each
    shortened step is counted in ``budget.shortened_prompts``. With ``lists`` (the token
    and scoring planes, whose prompts list every legal action) the first step is to show
    the list as the label tree's first menu (``legal_list="groups"``, counted in
    ``budget.grouped_lists`` where it changes the prompt). Returns the encodings and the
    memory text each one used (None where dropped). A step still too long is left for
    the model call to refuse with its length.
    """
    encoded: list[T] = []
    used: list[str | None] = []
    for b, memory in enumerate(memory_texts):
        step = encode_step(b, memory, interface)
        if limit is not None and length(step) > limit and interface.long_prompts == "shorten":
            budget.shortened_prompts += 1
            base = interface
            if lists and interface.legal_list == "all":
                base = replace(interface, legal_list="groups")
                grouped = encode_step(b, memory, base)
                budget.grouped_lists += int(grouped != step)
                step = grouped
            if length(step) > limit and memory is not None:
                memory = None
                step = encode_step(b, None, base)
            if length(step) > limit and interface.observation:
                step = encode_step(b, None, replace(base, observation=False))
            shows_afterstates = interface.afterstates or interface.show_afterstates_to_token_plane
            if length(step) > limit and shows_afterstates:
                bare = replace(
                    base, observation=False, afterstates=False,
                    show_afterstates_to_token_plane=False,
                )  # fmt: skip
                step = encode_step(b, None, bare)
        encoded.append(step)
        used.append(memory)
    return encoded, used


Scores = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def join_chunks(parts: list[Scores]) -> Scores:
    """Concatenate per-chunk ``(logp_all (b, K_b), label_mass (b,), hidden (b, d))``
    along the batch, padding each chunk's rows to the widest menu with -inf."""
    width = max(p[0].shape[1] for p in parts)
    logp = torch.cat(
        [torch.nn.functional.pad(p[0], (0, width - p[0].shape[1]), value=-torch.inf)
         for p in parts]
    )  # fmt: skip  # (B, K_max)
    return logp, torch.cat([p[1] for p in parts]), torch.cat([p[2] for p in parts])
