"""The relative rounding grid and the aggregation the fits take (pipeline.transform.durations)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from pipeline import models, sample, transform

SECOND = 1 / 3600


def _rounded(hours: list[float], relative_resolution: float) -> list[float]:
    frame = pl.DataFrame({"h": hours}, schema={"h": pl.Float64})
    return frame.select(transform.relative_grid(pl.col("h"), relative_resolution))["h"].to_list()


@pytest.mark.parametrize(
    ("hours", "expected"),
    [
        # ratio 2: points 1 s, 2 s, 4 s, ...; nearest in log space (midpoint of 2 and 4 is sqrt 8)
        (1.4 * SECOND, 1 * SECOND),
        (1.5 * SECOND, 2 * SECOND),
        (2.8 * SECOND, 2 * SECOND),
        (2.9 * SECOND, 4 * SECOND),  # nearer 2 s in absolute terms, nearer 4 s in ratio
        (1024 * SECOND, 1024 * SECOND),
        # below the floor, zero and negative go to the floor, as one step on the absolute grid did
        (0.4 * SECOND, SECOND),
        (0.0, SECOND),
        (-3.0, SECOND),
    ],
)
def test_relative_grid_points(hours, expected):
    assert _rounded([hours], 1.0) == [pytest.approx(expected, rel=1e-12)]


@pytest.mark.parametrize("relative_resolution", [1e-4, 1e-3, 1e-2, 0.5])
def test_relative_grid_error_bounded_and_idempotent(relative_resolution):
    hours = np.geomspace(SECOND, 2 * 8760, 20_001)  # a second to two years
    once = _rounded(hours.tolist(), relative_resolution)
    error = np.abs(np.log(np.array(once) / hours))
    assert error.max() <= math.log1p(relative_resolution) / 2 * (1 + 1e-9)
    assert _rounded(once, relative_resolution) == once  # exactly: grid points map to themselves
    # distinct values: the grid's points from 1 s to 2 years, fewer only if the data are sparser
    points = 1 + round(math.log(2 * 8760 / SECOND) / math.log1p(relative_resolution))
    assert len(set(once)) == min(points, hours.size)


@pytest.mark.parametrize("relative_resolution", [0.0, -1e-3])
def test_relative_grid_needs_a_positive_resolution(relative_resolution):
    with pytest.raises(ValueError, match="relative_resolution must be positive"):
        _rounded([1.0], relative_resolution)


@pytest.mark.parametrize(
    ("relative_resolution", "rows"),
    [
        (None, 5),  # exact: 2.0 is unique per observed flag
        (1e-3, 4),  # 2.0 and 2.0002 share a point, 0 goes to the floor
        (1.0, 3),  # 2.0, 2.0002 and 2.5 share the point 2^13 s = 2.28 h
    ],
)
def test_aggregate_durations_preserves_counts(relative_resolution, rows):
    d = pl.DataFrame(
        {
            "cluster_id": ["a", "a", "a", "a", "a", "b"],
            "duration_hours": [2.0, 2.0, 2.0002, 2.5, 0.0, 2.0],
            "observed": [True, True, True, True, True, False],
        }
    )
    agg = transform.aggregate_durations(d, by=["cluster_id"], relative_resolution=relative_resolution)
    assert agg.height == rows
    counts = agg.group_by("cluster_id", "observed").agg(pl.col("count").sum()).sort("cluster_id")
    assert counts.rows() == [("a", True, 5), ("b", False, 1)]
    if relative_resolution is not None:
        assert agg["duration_hours"].min() == pytest.approx(SECOND)


def _weibull_gaps(rows: int, shape: float, mean_hours: float, seed: int) -> pl.DataFrame:
    """Renewal gaps right-censored by windows up to 1.5 means long, logged to the second."""
    rng = np.random.default_rng(seed)
    gaps = sample.weibull_scale_hours(mean_hours, shape) * rng.weibull(shape, rows)
    remaining = rng.uniform(0, 1.5 * mean_hours, rows)
    hours = np.round(np.minimum(gaps, remaining) * 3600) / 3600
    return pl.DataFrame({"duration_hours": hours, "observed": gaps <= remaining})


@pytest.mark.parametrize("mean_hours", [2000.0, 0.5])  # node gaps; cluster gaps of a big cluster
def test_fit_on_the_relative_grid_recovers_weibull_and_matches_the_raw_fit(mean_hours):
    shape = 0.85
    raw = _weibull_gaps(20_000, shape, mean_hours, seed=8)
    agg = transform.aggregate_durations(raw, relative_resolution=1e-3)
    assert agg.height < raw.height / 2
    fit = models.ParametricTBF("weibull").fit(agg["duration_hours"], agg["observed"], agg["count"])
    low, high = fit.confidence_interval_["rho_"]
    assert low <= shape <= high
    low, high = fit.mtbf_confidence_interval_
    assert low <= mean_hours <= high
    # the weighted fit is the fit on the rounded raw rows
    rounded = raw.with_columns(transform.relative_grid(pl.col("duration_hours"), 1e-3))
    fit_raw = models.ParametricTBF("weibull").fit(rounded["duration_hours"], rounded["observed"])
    for name, value in fit_raw.params_.items():
        assert fit.params_[name] == pytest.approx(value, rel=1e-6)
    assert fit.mtbf_hours_ == pytest.approx(fit_raw.mtbf_hours_, rel=1e-6)
