"""The fitted-Weibull (renewal) projection, the size sweep's verdicts and the size laws' agreement."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
from scipy.special import gamma as gamma_fn

from pipeline import analysis, models
from pipeline.projection import (
    CANNOT_FINISH,
    FailureModel,
    JobSpec,
    RecoveryProfile,
    expected_wall_hours,
    monte_carlo,
    project,
    renewal,
    renewal_monte_carlo,
    sweep_cluster_size,
)

PROFILE = RecoveryProfile(0.25, 0.5, 0.25, 2.0, 0.1)


def _spec(failure: FailureModel, **kw) -> JobSpec:
    base = dict(
        instances=64,
        gpus_per_instance=1,
        gpu_hours=64 * 301.0,  # 301 h of work: 150 full segments and a partial one
        price_per_gpu_hour_usd=2.0,
        failure=failure,
        recovery={"manual": PROFILE},
    )
    return JobSpec(**(base | kw))


def _walk(times: np.ndarray, work: float, prof: RecoveryProfile) -> tuple[float, int]:
    """Independent event-by-event walk of one run through its failure times (reference)."""
    tau, delta, r_h = prof.checkpoint_interval_hours, prof.checkpoint_write_hours, prof.downtime_hours
    segments = [tau + delta] * math.floor(work / tau + 1e-9)
    if work - len(segments) * tau > 1e-9:
        segments.append(work - len(segments) * tau + delta)
    clock, fails = 0.0, 0
    failures = list(times[np.isfinite(times)]) + [math.inf]
    for seg in segments:
        while True:
            while failures[fails] < clock:  # failures during recovery restart it
                clock = failures[fails] + r_h
                fails += 1
            if clock + seg <= failures[fails]:
                clock += seg
                break
            clock = failures[fails] + r_h
            fails += 1
    return clock, fails


def test_the_vectorised_walk_matches_an_event_by_event_walk():
    rng = np.random.default_rng(3)
    for work in (20.0, 21.3):  # the interval divides the work, and leaves a partial segment
        times = np.sort(rng.uniform(0, 60, (200, 12)), axis=1)
        times[rng.random(times.shape) < 0.3] = np.inf
        times = np.hstack([np.sort(times, axis=1), np.full((200, 1), np.inf)])
        wall, fails = renewal.wall_hours_from_failures(times, work, PROFILE)
        for row in range(200):
            ref_wall, ref_fails = _walk(times[row], work, PROFILE)
            assert wall[row] == pytest.approx(ref_wall, abs=1e-9)
            assert fails[row] == ref_fails


def test_shape_one_matches_the_exponential_projection():
    rate = 1e-3  # 64 instances: cluster MTBF 15.6 h, ~20 failures per run
    spec = _spec(FailureModel.weibull(1.0, 1 / rate))
    fitted = renewal_monte_carlo(spec, "manual", 4000, seed=1)
    poisson = monte_carlo(spec, "manual", 4000, seed=1)
    daly = expected_wall_hours(spec.failure_free_hours, 64 * rate, PROFILE) / 24
    keep = renewal_monte_carlo(spec, "manual", 4000, seed=1, keep_days=True).days
    se = keep.std() / math.sqrt(keep.size)
    assert abs(fitted.mean_days - daly) < 4 * se
    assert fitted.mean_interruptions == pytest.approx(poisson.mean_interruptions, rel=0.03)
    for a, b in ((fitted.p10_days, poisson.p10_days), (fitted.p90_days, poisson.p90_days)):
        assert a == pytest.approx(b, rel=0.01)


def _renewal_function(shape: float, scale: float, t: float, steps: int = 1000) -> float:
    """M(t) = F(t) + int_0^t M(t - x) dF(x) on a grid: M at the middle of each step of F is the mean
    of its ends, implicit in M(t) itself (converged: 1 000 and 8 000 steps agree to 2e-6)."""
    grid = np.linspace(0, t, steps + 1)
    cdf = -np.expm1(-((grid / scale) ** shape))
    d_f = np.diff(cdf)
    m = np.zeros(steps + 1)
    for i in range(1, steps + 1):
        j = np.arange(2, i + 1)
        rest = np.dot((m[i - j] + m[i - j + 1]) / 2, d_f[j - 1])
        m[i] = (cdf[i] + d_f[0] * m[i - 1] / 2 + rest) / (1 - d_f[0] / 2)
    return float(m[-1])


@pytest.mark.parametrize("shape", [0.6, 1.8])
def test_single_slot_counts_match_the_renewal_function(shape):
    scale, horizon, runs = 100.0, 300.0, 40_000
    rng = np.random.default_rng(5)
    times = renewal.failure_times(runs, 1, shape, scale, horizon, 0.0, "new", rng)
    counts = np.isfinite(times).sum(axis=1)
    se = counts.std() / math.sqrt(runs)
    assert abs(counts.mean() - _renewal_function(shape, scale, horizon)) < 4 * se
    # stationary ages: the expected count is exactly t / mean gap (Cox 1962)
    stationary = renewal.failure_times(runs, 1, shape, scale, horizon, 0.0, "stationary", rng)
    counts = np.isfinite(stationary).sum(axis=1)
    mean_gap = scale * gamma_fn(1 + 1 / shape)
    assert abs(counts.mean() - horizon / mean_gap) < 4 * counts.std() / math.sqrt(runs)


@pytest.mark.parametrize("shape", [0.5, 0.7, 1.0, 1.5])
def test_fast_weibull_gaps_follow_the_weibull_distribution(shape):
    """The float32 draw E^(1/k) is the Weibull: Kolmogorov-Smirnov against scipy's CDF, and the
    mean against scale * Gamma(1 + 1/k)."""
    from scipy import stats

    from pipeline.projection.renewal import _weibull_gaps

    gaps = _weibull_gaps(200_000, shape, 30.0, np.random.default_rng(3))
    assert gaps.dtype == np.float64
    assert stats.kstest(gaps, stats.weibull_min(shape, scale=30.0).cdf).pvalue > 0.001
    mean, se = gaps.mean(), gaps.std() / math.sqrt(gaps.size)
    assert abs(mean - 30.0 * gamma_fn(1 + 1 / shape)) < 4 * se


def test_infant_mortality_with_new_nodes_costs_more_than_the_exponential():
    spec = _spec(FailureModel.exponential(1e-3).with_weibull_shape(0.6), node_ages="new")
    p = project(spec, monte_carlo_runs=2000, seed=0)
    m = p.modes["manual"]
    assert m.renewal.mean_interruptions > 1.2 * m.monte_carlo.mean_interruptions
    assert m.renewal.mean_days > m.monte_carlo.mean_days


def test_parameter_uncertainty_widens_p10_p90():
    cov = ((0.04, -0.005), (-0.005, 0.01))  # (log scale, log shape)
    spec = _spec(FailureModel.exponential(1e-3).with_weibull_shape(0.7, cov))
    fixed = renewal_monte_carlo(spec, "manual", 3000, seed=2)
    drawn = renewal_monte_carlo(spec, "manual", 3000, seed=2, parameter_uncertainty=True)
    assert drawn.p90_days - drawn.p10_days > 1.3 * (fixed.p90_days - fixed.p10_days)
    assert project(spec, monte_carlo_runs=500).modes["manual"].renewal_with_parameter_uncertainty


def test_chunks_on_threads_give_the_same_runs_whatever_finishes_first(monkeypatch):
    """Chunks run WAVE at a time on threads, each with a generator seeded in chunk order: the same
    seed gives the same days, and so does a chunk size small enough for several waves."""
    spec = _spec(FailureModel.exponential(1e-3).with_weibull_shape(0.7))
    first = renewal_monte_carlo(spec, "manual", 600, seed=4, keep_days=True).days
    assert np.array_equal(first, renewal_monte_carlo(spec, "manual", 600, seed=4, keep_days=True).days)
    monkeypatch.setattr(renewal, "CHUNK_EVENTS", 20_000)  # many chunks, several waves
    many = renewal_monte_carlo(spec, "manual", 600, seed=4, keep_days=True).days
    assert np.array_equal(many, renewal_monte_carlo(spec, "manual", 600, seed=4, keep_days=True).days)
    assert abs(np.median(many) - np.median(first)) < 0.05 * np.median(first)


def test_sweep_says_cannot_finish_and_reoptimises_the_interval():
    spec = dataclasses.replace(
        _spec(FailureModel.exponential(5e-4)),
        instances=256,
        gpus_per_instance=8,
        gpu_hours=1e7,
        recovery={"manual": RecoveryProfile(1.0, 2.0, 0.5, 1.0, 0.05)},
    )
    sweep = sweep_cluster_size(spec, [256, 2048, 16384])
    big = sweep.filter(pl.col("instances") == 16384).row(0, named=True)
    assert big["manual_status"] == CANNOT_FINISH
    assert big["manual_expected_days"] is None and big["manual_cost_usd"] is None
    small = sweep.filter(pl.col("instances") == 256).row(0, named=True)
    assert small["manual_status"] == "finishes" and small["manual_expected_days"] < 1e4
    short = sweep.filter(pl.col("instances") == 2048).row(0, named=True)  # cluster MTBF ~1 h
    assert short["manual_optimal_interval_hours"] < short["manual_checkpoint_interval_hours"]
    assert short["manual_optimal_expected_days"] < short["manual_expected_days"]


def _fleet(rates_per_node_hour: list[float], alpha_ci_gaps: tuple[float, float]):
    sizes = np.array([32, 64, 128, 256, 512, 1024], float)
    hours = np.full(sizes.size, 5000.0)
    failures = np.round(np.array(rates_per_node_hour) * sizes * hours)
    law = models.MTBFScaling().fit(sizes, failures, hours)
    gaps = SimpleNamespace(alpha_=sum(alpha_ci_gaps) / 2, alpha_confidence_interval_=alpha_ci_gaps)
    clusters = pl.DataFrame({"instances": sizes, "failures": failures, "exposure_cluster_hours": hours})
    fits = SimpleNamespace(scaling=law, size_regression=gaps)
    return SimpleNamespace(fits=fits, rates=SimpleNamespace(cluster_mtbf=clusters))


def test_disagreeing_size_laws_are_named_with_the_heterogeneity_test():
    uneven = _fleet([1e-4, 4e-4, 0.5e-4, 3e-4, 1e-4, 2e-4], (0.3, 0.5))
    text = analysis.size_laws_agreement(uneven)
    assert "disagree" in text and "Pearson chi-square" in text and "rejects" in text
    assert "projection uses the count law" in text
    low, high = uneven.fits.scaling.alpha_confidence_interval_
    even = _fleet([1e-4] * 6, (low, high))
    assert analysis.size_laws_agreement(even).startswith("The two size laws agree")
