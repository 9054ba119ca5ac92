"""Advantage estimators for decision-level PPO: GAE with a critic, or group-relative.

All functions treat their inputs as constants (no gradient flows through an
advantage) and return new tensors.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch
from torch import Tensor

from rlid.names import AdvantageScale


def next_values_from(values: Tensor, last_value: Tensor) -> Tensor:
    """V(s_{t+1}) for every step of a rollout: values shifted by one, then last_value.

    values (T, N), last_value (N,) -> (T, N). Right for steps whose episode goes
    on and for terminated steps (their next value is ignored). For a truncated
    step in an auto-resetting env, values[t + 1] belongs to the next episode:
    overwrite that entry with V(final observation) before calling ``gae``.
    """
    if values.dim() != 2 or last_value.shape != values.shape[1:]:
        raise ValueError(
            f"need values (T, N) and last_value (N,), got {tuple(values.shape)} "
            f"and {tuple(last_value.shape)}"
        )
    return torch.cat([values[1:], last_value[None]], dim=0).detach()


@torch.no_grad()
def gae(
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    *,
    gamma: float,
    lam: float,
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over time-major (T, N) tensors.

    Row t describes the transition s_t --a_t--> (r_t, s_{t+1}):

    * ``rewards[t]``     r_t;
    * ``values[t]``      V(s_t);
    * ``next_values[t]`` V(s_{t+1}), the observation that actually followed
      (for a truncated step: the final observation, before any reset; for the
      last row: the bootstrap value of the state the rollout stopped in);
    * ``terminated[t]``  s_{t+1} is terminal (game won or lost): no bootstrap;
    * ``truncated[t]``   the episode was cut (step limit) at s_{t+1}: bootstrap
      from V(s_{t+1}), but the λ-trace stops there, as for termination.

        δ_t = r_t + γ·V(s_{t+1})·(1 − terminated_t) − V(s_t)
        A_t = δ_t + γλ·(1 − terminated_t)(1 − truncated_t)·A_{t+1},  A_T = 0
        returns = A + values

    Source: Schulman et al. 2016, "High-Dimensional Continuous Control Using
    Generalized Advantage Estimation" (arXiv:1506.02438), in the backward
    recursion of CleanRL's ``ppo.py``. Departure from CleanRL: CleanRL passes
    ``dones`` shifted by one step and one ``next_value`` for the last row, so a
    time-limit truncation is treated as termination (no bootstrap). Passing
    ``next_values`` per step and separate ``terminated`` / ``truncated`` flags
    bootstraps truncated episodes correctly; ``next_values_from`` rebuilds
    CleanRL's layout (values shifted by one, then the last value).

    Returns:
        (advantages, returns), both (T, N).
    """
    shape = rewards.shape
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be time-major (T, N), got shape {tuple(shape)}")
    for name, tensor in [
        ("values", values),
        ("next_values", next_values),
        ("terminated", terminated),
        ("truncated", truncated),
    ]:
        if tensor.shape != shape:
            raise ValueError(
                f"{name} must be {tuple(shape)} like rewards, got {tuple(tensor.shape)}"
            )
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"gamma and lam must lie in [0, 1], got gamma={gamma}, lam={lam}")
    terminal = terminated.bool()
    ended = terminal | truncated.bool()
    # next_values may hold anything where terminated (nothing to bootstrap from)
    bootstrap = torch.where(terminal, torch.zeros_like(next_values), next_values)
    deltas = rewards + gamma * bootstrap - values  # (T, N)
    carry = gamma * lam * (~ended).to(deltas.dtype)  # (T, N)
    advantages = torch.empty_like(deltas)
    running = torch.zeros_like(deltas[0])  # (N,)
    for t in reversed(range(shape[0])):
        running = deltas[t] + carry[t] * running
        advantages[t] = running
    return advantages, advantages + values


@torch.no_grad()
def discounted_returns(rewards: Tensor, gamma: float) -> Tensor:
    """G_t = Σ_k γ^k r_{t+k} within one episode; rewards (T, ...) -> (T, ...)."""
    if rewards.dim() == 0:
        raise ValueError("rewards must have a time dimension first, got a scalar")
    returns = torch.empty_like(rewards)
    running = torch.zeros_like(rewards[0]) if rewards.shape[0] else torch.zeros(())
    for t in reversed(range(rewards.shape[0])):
        running = rewards[t] + gamma * running
        returns[t] = running
    return returns


def episode_return(rewards: Sequence[float], gamma: float) -> float:
    """G_0 = Σ_t γ^t r_t of one episode: the return that group advantages compare.

    With γ < 1 two successes of different lengths get different returns, so the group
    advantage favours the shorter solution (and an all-success group still carries
    signal); γ = 1 is the plain undiscounted sum that single-turn GRPO uses.
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must lie in [0, 1], got {gamma}")
    total = 0.0
    for r in reversed(rewards):
        total = float(r) + gamma * total
    return total


def _as_group_index(group_ids: Tensor | Sequence[Hashable]) -> Tensor:
    if isinstance(group_ids, Tensor):
        if group_ids.dim() != 1 or group_ids.is_floating_point():
            raise ValueError(
                f"group_ids must be a 1-D integer tensor, got {group_ids.dtype} "
                f"of shape {tuple(group_ids.shape)}"
            )
        return torch.unique(group_ids, return_inverse=True)[1]
    index: dict[Hashable, int] = {}
    return torch.tensor([index.setdefault(g, len(index)) for g in group_ids], dtype=torch.long)


@torch.no_grad()
def group_relative_advantages(
    returns: Tensor,
    group_ids: Tensor | Sequence[Hashable],
    *,
    scale: AdvantageScale = "std",
    eps: float = 1e-6,
) -> Tensor:
    """Critic-free advantages: each episode's return against its group's.

    Episodes with the same group id (same game, same seed) form a group; the
    advantage is return − group mean, divided by (unbiased group std + eps)
    when ``scale="std"`` (GRPO) and not divided when ``scale="none"``
    (Dr. GRPO). This is the decision-plane counterpart of
    ``baselines.losses.group_advantages``, for groups of any sizes and order.
    Singleton groups and groups of equal returns get exactly 0, never NaN.

    Args:
        returns: (E,) one return per episode.
        group_ids: (E,) integer tensor, or a sequence of hashables such as
            (game, seed) tuples.

    Returns:
        (E,) advantages.
    """
    if scale not in ("std", "none"):
        raise ValueError(f"unknown scale {scale!r}; valid: 'std', 'none'")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    if returns.dim() != 1:
        raise ValueError(f"returns must be (E,), got shape {tuple(returns.shape)}")
    group = _as_group_index(group_ids).to(returns.device)  # (E,)
    if group.shape != returns.shape:
        raise ValueError(f"group_ids must have {returns.shape[0]} entries, got {group.shape[0]}")
    if returns.numel() == 0:
        return returns.clone()
    n_groups = int(group.max()) + 1
    counts = torch.zeros(n_groups, dtype=returns.dtype, device=returns.device)
    counts.index_add_(0, group, torch.ones_like(returns))
    sums = torch.zeros_like(counts).index_add_(0, group, returns)
    centred = returns - (sums / counts)[group]  # (E,)
    # rounding in the mean must not turn an all-equal group into ±eps-scaled noise
    low = torch.full_like(counts, torch.inf).scatter_reduce(0, group, returns, "amin")
    high = torch.full_like(counts, -torch.inf).scatter_reduce(0, group, returns, "amax")
    centred = torch.where((low == high)[group], 0.0, centred)
    if scale == "none":
        return centred
    squares = torch.zeros_like(counts).index_add_(0, group, centred.pow(2))
    scale_by = (squares / (counts - 1).clamp(min=1)).sqrt() + eps  # (groups,)
    # a zero std (eps = 0) only occurs where centred is already exactly 0
    return centred / torch.where(scale_by > 0, scale_by, 1.0)[group]
