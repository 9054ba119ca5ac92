"""rliable-style aggregates across runs and envs (Agarwal et al., 2021, "Deep RL at the
Edge of the Statistical Precipice").

* **IQM**, the interquartile mean: the mean of the middle 50% of all run scores
  (``scipy.stats.trim_mean(scores, 0.25)``: ``floor(n / 4)`` scores cut from each end;
  with fewer than 4 runs nothing is cut and it is the plain mean). Robust to one
  outlying seed, less noisy than the median.
* **Stratified bootstrap** interval: resample the runs *within each env* (stratum)
  with replacement, recompute the aggregate, read the percentile interval.
* **Probability of improvement** ``P(X > Y)``: per env, the Mann-Whitney statistic
  ``mean_ij S(x_i, y_j)`` with ``S = 1`` if ``x_i > y_j``, ``1/2`` on ties, ``0`` otherwise,
  averaged over envs; its interval by the stratified bootstrap over both arms' runs.

Implemented here (a few lines of numpy) rather than with the ``rliable`` package: its
1.2.0 release, the latest, fails at import with the current ``arch``/``pandas``
(``TypeError: deprecate_kwarg() missing 1 required positional argument``), and it
would pull in pandas, seaborn and arch. The formulas follow ``rliable.metrics`` and
``rliable.library``; the tests check hand-computed values.

    >>> iqm([[0.0], [1.0], [2.0], [3.0]])  # runs x envs; the middle two: (1 + 2) / 2
    1.5
    >>> probability_of_improvement([[1.0], [2.0]], [[0.0], [2.0]])  # (1 + 0 + 1 + .5) / 4
    0.625
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

Scores = Sequence[Sequence[float]] | np.ndarray  # (runs, envs)


def _matrix(scores: Scores) -> np.ndarray:
    array = np.asarray(scores, dtype=np.float64)
    if array.ndim != 2 or array.size == 0:
        raise ValueError(f"scores must be a non-empty runs x envs matrix, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError("scores must be finite")
    return array


def iqm(scores: Scores) -> float:
    """Interquartile mean of all entries of a (runs, envs) score matrix."""
    flat = np.sort(_matrix(scores), axis=None)  # (runs * envs,)
    cut = int(0.25 * flat.size)
    return float(flat[cut : flat.size - cut].mean())


def probability_of_improvement(x: Scores, y: Scores) -> float:
    """``P(X > Y)``: per-env Mann-Whitney statistic of arm x's runs over arm y's, env-averaged."""
    xs, ys = _matrix(x), _matrix(y)  # (n, M), (m, M)
    if xs.shape[1] != ys.shape[1]:
        raise ValueError(f"both arms need the same envs, got {xs.shape[1]} and {ys.shape[1]}")
    diff = xs[:, None, :] - ys[None, :, :]  # (n, m, M)
    s = (diff > 0) + 0.5 * (diff == 0)
    return float(s.mean(axis=(0, 1)).mean())


@dataclass(frozen=True)
class Aggregate:
    """A point estimate with a stratified-bootstrap percentile interval."""

    value: float
    low: float
    high: float
    runs: int
    envs: int
    level: float

    def to_dict(self) -> dict[str, float]:
        return {"mean": self.value, "low": self.low, "high": self.high,
                "runs": self.runs, "envs": self.envs, "level": self.level}  # fmt: skip


def stratified_bootstrap(
    statistic: Callable[..., float],
    *score_sets: Scores,
    level: float = 0.95,
    resamples: int = 2_000,
    seed: int = 0,
) -> Aggregate:
    """``statistic(*score_sets)`` with a percentile interval from resampling runs per env.

    Each score set is a (runs, envs) matrix; within every env column the runs are
    resampled with replacement independently (and independently per score set).
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    mats = [_matrix(s) for s in score_sets]
    rng = np.random.default_rng(seed)
    stats = np.empty(resamples)
    for b in range(resamples):
        resampled = []
        for mat in mats:
            n, envs = mat.shape
            picks = rng.integers(0, n, size=(n, envs))  # (runs, envs): per-env resample
            resampled.append(np.take_along_axis(mat, picks, axis=0))
        stats[b] = statistic(*resampled)
    alpha = (1 - level) / 2
    low, high = np.quantile(stats, [alpha, 1 - alpha])
    return Aggregate(
        value=statistic(*mats), low=float(low), high=float(high),
        runs=mats[0].shape[0], envs=mats[0].shape[1], level=level,
    )  # fmt: skip


def arm_aggregates(
    scores: Mapping[str, Scores], *, seed: int = 0, resamples: int = 2_000
) -> dict[str, object]:
    """IQM and mean per arm, and P(row arm > column arm) for every ordered pair of arms.

    ``scores[arm]`` is that arm's (seeds, envs) matrix of one held-out metric.
    """
    out: dict[str, object] = {
        "iqm": {a: stratified_bootstrap(iqm, s, seed=seed, resamples=resamples).to_dict()
                for a, s in scores.items()},
        "mean": {a: stratified_bootstrap(lambda m: float(np.mean(m)), s, seed=seed,
                                         resamples=resamples).to_dict()
                 for a, s in scores.items()},
    }  # fmt: skip
    improvement: dict[str, dict[str, dict[str, float]]] = {}
    for a, sa in scores.items():
        improvement[a] = {}
        for b, sb in scores.items():
            if a != b:
                improvement[a][b] = stratified_bootstrap(
                    probability_of_improvement, sa, sb, seed=seed, resamples=resamples
                ).to_dict()
    out["probability_of_improvement"] = improvement
    return out
