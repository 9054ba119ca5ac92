"""rliable-style aggregates: IQM, stratified bootstrap, probability of improvement (hand values)."""

from __future__ import annotations

import numpy as np
import pytest

from rlid.compare.aggregates import (
    arm_aggregates,
    iqm,
    probability_of_improvement,
    stratified_bootstrap,
)
from rlid.compare.text import _aggregates_section, _num


def test_iqm_hand_values():
    assert iqm([[1.0], [2.0], [3.0], [4.0]]) == 2.5  # cut 1 from each end
    assert iqm([[0, 1, 2, 3], [4, 5, 6, 7]]) == 3.5  # 8 scores: cut 2 each end -> mean(2..5)
    assert iqm([[0.0], [0.0], [1.0]]) == pytest.approx(1 / 3)  # < 4 runs: the plain mean
    assert iqm([[1.0], [1.0], [1.0], [100.0]]) == 1.0  # one outlying seed does not move it
    with pytest.raises(ValueError, match="runs x envs"):
        iqm([1.0, 2.0])


def test_probability_of_improvement_hand_values():
    # pairs (1,0)=1 (1,2)=0 (2,0)=1 (2,2)=1/2 -> 2.5 / 4
    assert probability_of_improvement([[1.0], [2.0]], [[0.0], [2.0]]) == 0.625
    # two envs averaged: env 1 as above (0.625), env 2 x always worse (0)
    x = [[1.0, 0.0], [2.0, 0.0]]
    y = [[0.0, 5.0], [2.0, 5.0]]
    assert probability_of_improvement(x, y) == pytest.approx((0.625 + 0.0) / 2)
    assert probability_of_improvement(y, x) == pytest.approx(1 - (0.625 + 0.0) / 2)
    assert probability_of_improvement([[3.0]], [[3.0]]) == 0.5
    with pytest.raises(ValueError, match="same envs"):
        probability_of_improvement([[1.0, 2.0]], [[1.0]])


def test_stratified_bootstrap_resamples_within_each_env():
    # env 0 always 0, env 1 always 1: any within-env resample has mean exactly 0.5,
    # a pooled (unstratified) resample would not
    scores = [[0.0, 1.0], [0.0, 1.0], [0.0, 1.0]]
    agg = stratified_bootstrap(lambda m: float(np.mean(m)), scores, resamples=200)
    assert (agg.value, agg.low, agg.high) == (0.5, 0.5, 0.5)
    spread = stratified_bootstrap(iqm, [[0.0], [1.0], [2.0], [3.0]], resamples=500, seed=1)
    assert spread.low < spread.value < spread.high and spread.low >= 0 and spread.high <= 3
    again = stratified_bootstrap(iqm, [[0.0], [1.0], [2.0], [3.0]], resamples=500, seed=1)
    assert again == spread  # seeded


def test_arm_aggregates_and_report_section():
    scores = {"a": [[1.0, 1.0], [1.0, 0.0]], "b": [[0.0, 0.0], [0.0, 1.0]]}
    agg = arm_aggregates(scores, resamples=200)
    assert agg["mean"]["a"]["mean"] == 0.75 and agg["iqm"]["b"]["mean"] == 0.0
    # env 0: a's (1, 1) vs b's (0, 0) -> 1; env 1: a (1, 0) vs b (0, 1) -> (0.5+1+0+0.5)/4 = 0.5
    assert agg["probability_of_improvement"]["a"]["b"]["mean"] == 0.75
    text = "\n".join(_aggregates_section({"success": agg}, {"seeds": [0, 1], "envs": [{}, {}]}))
    assert "## Aggregates across seeds and envs (rliable-style)" in text
    assert "| a | 0.75 [" in text and "P(row > column)" in text and "| b | 0.25 [" in text


def test_report_numbers_group_thousands_whether_or_not_they_are_whole():
    # a mean over seeds is rarely whole: 9426670.3 read as a different kind of number
    assert _num(9426670.3, 1) == "9,426,670.3"
    assert _num(3080.25, 1) == "3,080.2"
    assert _num(6619270.0, 1) == "6,619,270"
    assert _num(0.396, 3) == "0.396"
    assert _num(None) == "n/a"
