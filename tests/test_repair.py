"""Repair times: Kaplan–Meier quantiles and restricted mean against lognormal ground truth with
censoring (coverage over repeated simulations). Hot spares: tests/test_spares.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate
from scipy.stats import lognorm

from pipeline import models

MEDIAN, SIGMA = 15.0, 1.2  # heavy tail: mean = 15 e^{0.72} = 30.8 h
TRUTH = lognorm(s=SIGMA, scale=MEDIAN)


def _censored(rng: np.random.Generator, n: int, horizon: float) -> tuple[np.ndarray, np.ndarray]:
    """Lognormal repairs that started uniformly in a window of ``horizon`` hours: those still open
    at the window end are right-censored there."""
    repair = TRUTH.rvs(size=n, random_state=rng)
    left = rng.uniform(0, horizon, n)
    return np.minimum(repair, left), repair <= left


def test_no_censoring_gives_the_sample_mean_and_median():
    hours = np.array([1.0, 2.0, 3.0, 10.0])
    m = models.RepairTimes().fit(hours, [True] * 4)
    assert m.mean_hours_ == pytest.approx(4.0)
    assert not m.mean_restricted_
    assert m.median_hours_ == 2.0  # first time S <= 0.5
    assert m.quantiles_[0.9][0] == 10.0


def test_open_longest_repair_makes_the_mean_a_restricted_lower_bound():
    m = models.RepairTimes().fit([1.0, 2.0, 3.0, 50.0], [True, True, True, False])
    assert m.mean_restricted_ and m.mean_horizon_hours_ == 50.0
    # S = 1/4 from 3 h to 50 h: mean = 1 + 0.75 + 0.5 + 0.25 * 47
    assert m.mean_hours_ == pytest.approx(1 + 0.75 + 0.5 + 0.25 * 47)
    assert m.quantiles_[0.9][0] == math.inf  # S never reaches 0.1


def test_weights_equal_repeated_rows():
    hours, done = np.array([2.0, 5.0, 9.0, 30.0]), np.array([True, False, True, True])
    counts = np.array([3, 1, 2, 1])
    a = models.RepairTimes().fit(hours, done, counts)
    b = models.RepairTimes().fit(np.repeat(hours, counts), np.repeat(done, counts))
    assert a.mean_hours_ == pytest.approx(b.mean_hours_)
    assert a.mean_confidence_interval_ == pytest.approx(b.mean_confidence_interval_)
    assert a.quantiles_ == b.quantiles_


def test_nothing_resolved_is_a_clear_error():
    with pytest.raises(ValueError, match="no completed repairs"):
        models.RepairTimes().fit([5.0, 7.0], [False, False])


def test_lognormal_median_p90_and_mean_recovered_with_censoring():
    hours, done = _censored(np.random.default_rng(3), 3000, horizon=300.0)
    assert 0.85 < done.mean() < 0.95  # the heavy tail is partly censored
    m = models.RepairTimes().fit(hours, done, horizon_hours=300.0)
    low, high = m.median_confidence_interval_
    assert low <= MEDIAN <= high
    p90, p90_low, p90_high = m.quantiles_[0.9]
    assert p90_low <= TRUTH.ppf(0.9) <= p90_high
    restricted, _ = integrate.quad(TRUTH.sf, 0, 300.0)
    assert m.mean_confidence_interval_[0] <= restricted <= m.mean_confidence_interval_[1]
    # ignoring censoring (the mean of the finished repairs only) is biased low
    assert np.minimum(hours[done], 300.0).mean() < m.mean_confidence_interval_[0]


def _coverage(runs: int, n: int, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    restricted, _ = integrate.quad(TRUTH.sf, 0, 200.0)
    median_hits = mean_hits = 0
    for _ in range(runs):
        m = models.RepairTimes().fit(*_censored(rng, n, horizon=1000.0), horizon_hours=200.0)
        median_hits += m.median_confidence_interval_[0] <= MEDIAN <= m.median_confidence_interval_[1]
        mean_hits += m.mean_confidence_interval_[0] <= restricted <= m.mean_confidence_interval_[1]
    return median_hits / runs, mean_hits / runs


def test_interval_coverage_fast():
    median, mean = _coverage(runs=120, n=300, seed=5)
    # binomial sd of a 95% coverage over 120 runs is 2%: 0.88 is 3.5 sd below
    assert median >= 0.88 and mean >= 0.88


@pytest.mark.slow
def test_interval_coverage_long():
    median, mean = _coverage(runs=1000, n=400, seed=6)
    assert 0.93 <= median <= 0.975 and 0.93 <= mean <= 0.97
