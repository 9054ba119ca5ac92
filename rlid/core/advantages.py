"""Advantage estimators for decision-level PPO: GAE with a critic, or group-relative.

All functions treat their inputs as constants (no gradient flows through an
advantage) and return new tensors.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch
from torch import Tensor

from rlid.config import TrainConfig
from rlid.config.names import AdvantageScale
from rlid.core.records import Decision
from rlid.core.rollout import Episode


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
    (Dr. GRPO). Both planes use it: the decision and scoring planes over episodes
    (and decisions, for step-level groups), the token plane over episodes too (its
    (N, G) grid flattened), for groups of any sizes and order. Singleton groups and
    groups of equal returns get exactly 0, never NaN.

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


def equal_episode_weights(lengths: list[int], group_ids: torch.Tensor) -> torch.Tensor:
    """(E,) factors mean_g(T) / T_i that give every episode of a group the same weight.

    With every decision of episode i carrying A_i * mean_g(T) / T_i, the episode's
    decisions together weigh A_i * mean_g(T): a group's advantages sum to zero over its
    decisions, and the group's total weight (sum of T_i) is unchanged. Groups never
    span processes, so N processes compute what one does.
    """
    length = torch.tensor(lengths, dtype=torch.float32).clamp(min=1)
    group = torch.unique(group_ids, return_inverse=True)[1]
    sums = torch.zeros(int(group.max()) + 1).index_add_(0, group, length)
    counts = torch.zeros_like(sums).index_add_(0, group, torch.ones_like(length))
    return (sums / counts)[group] / length


def step_group_advantages(episodes: list[Episode], config: TrainConfig) -> torch.Tensor:
    """(N,) step-level group advantages, decision order (GiGPO's anchor-state groups).

    Decisions of one episode group (the same game) taken in the same state
    (:func:`rlid.core.rollout.state_key`) form a step group; each decision's discounted
    return-to-go G_t = sum_k gamma^k r_{t+k} is compared with its step group's, scaled
    as the episode advantages are (``adv_scale``). A decision whose state no other
    decision of its group met gets 0. Episode groups never span processes, so N
    processes compute what one does.
    """
    keys: list[tuple[int, str]] = []
    to_go: list[torch.Tensor] = []
    for e in episodes:
        if len(e.states) != e.length:
            raise ValueError(
                f"step_group_coef needs the state of every decision: an episode of group "
                f"{e.group} has {e.length} decisions but {len(e.states)} states"
            )
        keys += [(e.group, k) for k in e.states]
        to_go.append(discounted_returns(torch.tensor(e.rewards, dtype=torch.float32), config.gamma))
    if not keys:
        return torch.zeros(0)
    return group_relative_advantages(torch.cat(to_go), keys, scale=config.adv_scale)


def shared_states(episodes: list[Episode]) -> dict[int, list[bool]]:
    """Per episode (by ``id``), whether each decision's state was met by another decision
    of its group: the decisions whose step-level group advantage can be non-zero."""
    seen: dict[tuple[int, str], int] = {}
    for e in episodes:
        for key in e.states:
            seen[(e.group, key)] = seen.get((e.group, key), 0) + 1
    return {id(e): [seen[(e.group, key)] > 1 for key in e.states] for e in episodes}


def compute_advantages(
    episodes: list[Episode], config: TrainConfig
) -> tuple[list[Decision], torch.Tensor, torch.Tensor]:
    """Flatten episodes into decisions with advantages (N,) and value targets (N,)."""
    decisions = [d for e in episodes for d in e.decisions]
    if config.advantage == "group":
        returns = torch.tensor(
            [episode_return(e.rewards, config.gamma) for e in episodes], dtype=torch.float32
        )
        group_ids = torch.tensor([e.group for e in episodes])
        adv_ep = group_relative_advantages(returns, group_ids, scale=config.adv_scale)
        if config.resolved_episode_weight == "equal":  # adv_i * mean_g(T) / T_i per episode
            adv_ep = adv_ep * equal_episode_weights([e.length for e in episodes], group_ids)
        adv = torch.cat([adv_ep[i].repeat(e.length) for i, e in enumerate(episodes)])
        if config.step_group_coef > 0:
            adv = adv + config.step_group_coef * step_group_advantages(episodes, config)
        returns_per_step = torch.cat([returns[i].repeat(e.length) for i, e in enumerate(episodes)])
        return decisions, adv, returns_per_step
    advs: list[torch.Tensor] = []
    value_targets: list[torch.Tensor] = []
    for e in episodes:
        rewards = torch.tensor(e.rewards, dtype=torch.float32).unsqueeze(1)  # (T, 1)
        values = torch.tensor([d.value for d in e.decisions], dtype=torch.float32).unsqueeze(1)
        # The final state of an episode is never scored (envs list no legal actions there),
        # so truncated episodes bootstrap with 0 too: every episode end is terminal here.
        next_values = next_values_from(values, torch.zeros(1))  # (T, 1)
        ended = torch.zeros_like(rewards, dtype=torch.bool)
        ended[-1] = True
        a, r = gae(
            rewards, values, next_values, ended, torch.zeros_like(ended),
            gamma=config.gamma, lam=config.lam,
        )  # fmt: skip
        advs.append(a.squeeze(1))
        value_targets.append(r.squeeze(1))
    return decisions, torch.cat(advs), torch.cat(value_targets)
