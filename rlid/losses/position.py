"""The position penalty: a preference for menu positions, measured without bias and
penalised through per-decision directions (``position_coef``, off by default).

The decision update calls it in one place (:class:`rlid.core.train.PositionTerm`): a
no-grad pass over the minibatch gives the sums, each micro-batch its directions.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from rlid.losses.decision import _menu_probs


def _deviations(logp_all: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(valid, uniform u_b, deviation d_b = π_b − u_b), all (B, K) float64 on the CPU,
    detached; u_b is uniform over menu b's valid rows, both 0 on padded rows."""
    valid, _, probs = _menu_probs(logp_all.detach().to("cpu", torch.float64))
    uniform = valid / valid.sum(-1, keepdim=True).clamp(min=1)
    return valid, uniform, probs - uniform


class PositionSums(NamedTuple):
    """Sums over a batch of menus from which the position bias is computed; each field
    adds up over micro-batches and processes (float64, on the CPU).

    With d_b(k) = π_b(k) − u_b(k), u_b uniform over menu b's n_b rows (positions
    0..n_b−1, padded at the end; both 0 beyond): ``dev`` = Σ_b d_b (W,), ``sq`` =
    Σ_b d_b² (W,), ``uniform`` = Σ_b u_b (W,), ``batch`` = B (0-d).
    """

    dev: Tensor
    sq: Tensor
    uniform: Tensor
    batch: Tensor

    @classmethod
    def zeros(cls, width: int) -> PositionSums:
        z = torch.zeros(width, dtype=torch.float64)
        return cls(z, z.clone(), z.clone(), torch.zeros((), dtype=torch.float64))

    @classmethod
    def of(cls, logp_all: Tensor, width: int) -> PositionSums:
        """The sums of one batch (B, K ≤ width) of menu log-probs (−inf padded)."""
        _, uniform, dev = _deviations(logp_all)
        pad = (0, width - logp_all.shape[1])
        return cls(
            F.pad(dev.sum(0), pad),
            F.pad((dev * dev).sum(0), pad),
            F.pad(uniform.sum(0), pad),
            torch.tensor(float(logp_all.shape[0]), dtype=torch.float64),
        )

    def __add__(self, other: object) -> PositionSums:
        assert isinstance(other, PositionSums)
        return PositionSums(*(a + b for a, b in zip(self, other)))

    def flat(self) -> Tensor:
        return torch.cat([self.dev, self.sq, self.uniform, self.batch[None]])

    @classmethod
    def unflat(cls, values: Tensor) -> PositionSums:
        width = (len(values) - 1) // 3
        v = values.to(torch.float64)
        return cls(v[:width], v[width : 2 * width], v[2 * width : 3 * width], v[-1])

    def weights(self) -> Tensor:
        """w(k) = 1 / (2 ū(k)), ū = uniform / B: the χ²/2 weights (0 where ū = 0)."""
        u_bar = self.uniform / self.batch.clamp(min=1)
        return torch.where(u_bar > 0, 0.5 / torch.where(u_bar > 0, u_bar, 1.0), 0.0)


def position_bias(sums: PositionSums) -> float:
    """Unbiased estimate of Σ_k (p(k) − ū(k))² / (2 ū(k)) (≈ KL(p ‖ ū)), where p is the
    policy's *expected* probability on menu position k and ū that of uniform rows,
    menu sizes pooled.

    The plug-in statistic of the batch mean p̄ = ū + Σ_b d_b / B has a noise floor that
    grows with confidence (each decision's own deviation enters squared), so a
    penalty on it pushes every row toward uniform like an entropy bonus (measured:
    row entropy 1.3 -> 1.9 in five iterations), and grouping menus by size makes it
    worse (a size with one menu gives log n − H). The U-statistic keeps only the
    cross terms, P = Σ_k w(k) (dev(k)² − sq(k)) / (B(B−1)) = Σ_{b≠c} Σ_k w(k) d_b(k)
    d_c(k) / (B(B−1)): with shuffled menus a policy that reads only the rows' content
    has E[d_b] = 0, so E[P] = 0 whatever its confidence; a real preference for a
    position gives P > 0. (A single batch's P can be negative.) B < 2: 0.
    """
    if float(sums.batch) < 2:
        return 0.0
    w = sums.weights()
    b = float(sums.batch)
    return float((w * (sums.dev * sums.dev - sums.sq)).sum() / (b * (b - 1)))


def position_directions(logp_all: Tensor, sums: PositionSums) -> Tensor:
    """(B, K) per-decision directions g_b of the position penalty P = position_bias(sums).

    ∂P/∂π_b(k) = 2 w(k) (dev(k) − d_b(k)) / (B(B−1)): the other decisions'
    deviations only. With g_b(k) = 2 w(k) (dev(k) − d_b(k)) / (B − 1) the per-decision
    term Σ_k π_b(k) g_b(k), summed and divided by B like every other loss term, has
    P's gradient, so micro-batches and processes add up to the one-batch step; ``sums``
    must cover the whole minibatch at the current parameters (a no-grad pass first)
    and ``logp_all`` are this micro-batch's rows (detached here). 0 on padded rows.
    """
    b = float(sums.batch)
    if b < 2:
        return torch.zeros(logp_all.shape, dtype=torch.float32, device=logp_all.device)
    width = logp_all.shape[1]
    valid, _, own = _deviations(logp_all)
    g = 2.0 * sums.weights()[:width] * (sums.dev[:width] - own) / (b - 1)
    return torch.where(valid, g, 0.0).to(device=logp_all.device, dtype=torch.float32)
