"""Reliability plot points against ground truth: Nelson's MCF of a homogeneous Poisson process is
rate x age within its band (band coverage near nominal), Weibull plot points of Weibull data lie on
a line of slope ~ shape, the Duane line passes through (T, n), and every frame is bounded."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import polars as pl
import pytest

from pipeline import models, sample, transform
from tests._fleets import fleet_exposure
from tests._interruptions import node_interruptions

T0 = datetime(2026, 1, 1)
RATE = 0.01


def poisson_nodes(seed: int, nodes: int = 200) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Nodes in service for 200-2000 h (some with a repair gap), failing as a Poisson process."""
    rng = np.random.default_rng(seed)
    rows, fails = [], []
    for i in range(nodes):
        length = rng.uniform(200, 2000)
        spans = [(0.0, length)]
        if i % 5 == 0:  # out for repair 100 h in the middle: not at risk then
            spans = [(0.0, length / 2), (length / 2 + 100, length + 100)]
        start = rng.uniform(0, 500)
        for a, b in spans:
            rows.append(("c", f"n{i}", T0 + timedelta(hours=start + a), T0 + timedelta(hours=start + b)))
            for t in rng.uniform(a, b, rng.poisson(RATE * (b - a))):
                fails.append(("c", f"n{i}", T0 + timedelta(hours=start + t)))
    exposure = pl.DataFrame(rows, schema=["cluster_id", "node_id", "start_utc", "end_utc"], orient="row")
    failures = pl.DataFrame(fails, schema=["cluster_id", "node_id", "timestamp_utc"], orient="row")
    return failures, exposure.with_columns(instance_type=pl.lit("p5"), size_bucket=pl.lit(256))


def test_mcf_of_a_poisson_process_is_rate_times_age_within_its_band():
    failures, exposure = poisson_nodes(0)
    mcf = transform.mean_cumulative_function(failures, exposure, max_points=50)
    assert mcf.height == 50 and (mcf["mcf"].diff().drop_nulls() >= 0).all()
    for age in (300, 800, 1500):  # the band's points are correlated: check a few ages at 3 se
        row = mcf.filter(pl.col("age_hours") >= age).row(0, named=True)
        se = (row["ci_high"] - row["ci_low"]) / (2 * 1.96)
        assert abs(row["mcf"] - RATE * row["age_hours"]) < 3 * se
    assert mcf["nodes_at_risk"].max() <= 200


def test_mcf_band_coverage_is_near_nominal():
    covered = []
    for seed in range(60):
        mcf = transform.mean_cumulative_function(*poisson_nodes(seed, nodes=100), max_points=40)
        row = mcf.filter(pl.col("age_hours") > 600).row(0, named=True)
        covered.append(row["ci_low"] <= RATE * row["age_hours"] <= row["ci_high"])
    assert 0.85 <= np.mean(covered) <= 1.0


def test_mcf_without_failures_is_empty():
    _, exposure = poisson_nodes(1, nodes=3)
    empty = pl.DataFrame(schema={"cluster_id": pl.String, "node_id": pl.String, "timestamp_utc": pl.Datetime})
    assert transform.mean_cumulative_function(empty, exposure).is_empty()


@pytest.mark.parametrize("shape", [0.7, 1.0, 1.5])
def test_weibull_plot_points_of_weibull_gaps_have_slope_shape(shape):
    rng = np.random.default_rng(int(shape * 10))
    gaps = rng.weibull(shape, 4000) * 100
    censor = rng.uniform(0, 400, 4000)
    km = models.KaplanMeier().fit(np.minimum(gaps, censor), gaps < censor)
    points = transform.weibull_plot_points(km.timeline_hours_, km.survival_, max_points=200)
    assert points.height == 200 and points["failure_probability"].is_between(0, 1, closed="none").all()
    slope, _ = np.polyfit(np.log(points["duration_hours"]), points["weibull_y"], 1)
    assert slope == pytest.approx(shape, rel=0.06)
    line = transform.weibull_plot_line(100.0, shape, 1.0, 100.0)
    assert line["weibull_y"].to_list() == pytest.approx([-shape * np.log(100), 0.0])


def test_duane_points_follow_the_crow_amsaa_fit_and_are_bounded():
    from pipeline import analysis

    spec = sample.FleetSpec(cluster_sizes=(32, 128), days=60, seed=3)
    incidents, exposure = fleet_exposure(spec)
    failures = node_interruptions(incidents.filter("interrupting").select(analysis.FAILURE_COLUMNS))
    operating = transform.failure_operating_times(failures, exposure)
    trends = analysis.trend_tests(operating, exposure)
    points = transform.duane_points(operating, trends, max_points=60)
    assert points.height <= 60 and set(points["cluster_id"]) == {"c0032", "c0128"}
    for row in trends.iter_rows(named=True):
        mine = points.filter(cluster_id=row["cluster_id"])
        assert mine["cumulative_failures"].max() == row["failures"]  # the last failure is kept
        # the power law passes through (T, n): at T it predicts all n failures
        beta, total, n = row["crow_beta"], row["observed_node_hours"], row["failures"]
        last = mine.row(-1, named=True)
        assert last["fitted_failures"] == pytest.approx(n * (last["operating_node_hours"] / total) ** beta)


def _mcf_by_brute_force(failures: pl.DataFrame, exposure: pl.DataFrame, max_points: int):
    """MCF and robust variance at the grid ages from the definitions (the oracle): a node x age
    matrix of "some span of the node holds the age" (closed spans), every node's sums recomputed
    at each grid age."""
    from pipeline.transform.reliability import _spread

    first = exposure.group_by("cluster_id", "node_id").agg(first=pl.col("start_utc").min())
    hours = lambda c: (pl.col(c) - pl.col("first")).dt.total_seconds(fractional=True) / 3600  # noqa: E731
    spans = exposure.join(first, on=["cluster_id", "node_id"]).select(
        "cluster_id", "node_id", a=hours("start_utc"), b=hours("end_utc")
    )
    served = transform.failures_in_service(failures, exposure).join(first, on=["cluster_id", "node_id"])
    served = served.select("cluster_id", "node_id", age=hours("timestamp_utc"))
    nodes = spans.select("cluster_id", "node_id").unique().with_row_index("unit")
    spans, served = (f.join(nodes, on=["cluster_id", "node_id"]) for f in (spans, served))
    age, unit = served["age"].to_numpy(), served["unit"].to_numpy()
    ages, d = np.unique(age, return_counts=True)
    held = np.zeros((nodes.height, ages.size), bool)
    for u, a, b in spans.select("unit", "a", "b").iter_rows():
        held[u] |= (a <= ages) & (ages <= b)
    r = held.sum(axis=0)
    assert (r > 0).all()  # every counted failure's node is at risk at its age
    grid = _spread(ages.size, max_points)
    own = 1 / r[np.searchsorted(ages, age)]
    variance = np.empty(grid.size)
    for i, j in enumerate(grid):
        mine = np.bincount(unit, weights=np.where(age <= ages[j], own, 0.0), minlength=nodes.height)
        share = (held[:, : j + 1] * (d / r**2)[: j + 1]).sum(axis=1)
        variance[i] = np.sum((mine - share) ** 2)
    return np.cumsum(d / r)[grid], variance


@pytest.mark.parametrize("seed", range(40))
def test_mcf_and_band_equal_their_definitions(seed):
    """The sweep (failures + spans + grid x nodes) gives the MCF and variance of the definitions,
    on fleets with many spans per node, touching spans, failures on span starts and ends (a node
    failing as its last span ends is at risk then: no inf) and on grid ages, ties of ages across
    nodes, and fewer or more ages than grid points."""
    rng = np.random.default_rng(seed)
    rows, fails = [], []
    for i in range(int(rng.integers(1, 8))):
        t = float(rng.integers(0, 5))
        for _ in range(int(rng.integers(1, 12))):
            a, t = t, t + float(rng.integers(1, 6))
            rows.append(("c", f"n{i}", T0 + timedelta(hours=a), T0 + timedelta(hours=t)))
            for hour in rng.choice([a, t, a + 0.5, a + 1, t - 1], int(rng.integers(0, 4))):
                fails.append(("c", f"n{i}", T0 + timedelta(hours=float(hour))))
            t += float(rng.choice([0, 0, 1, 2.5]))  # touching spans, or a repair gap
    exposure = pl.DataFrame(rows, schema=["cluster_id", "node_id", "start_utc", "end_utc"], orient="row")
    exposure = exposure.with_columns(instance_type=pl.lit("p5"), size_bucket=pl.lit(8))
    schema = {"cluster_id": pl.String, "node_id": pl.String, "timestamp_utc": pl.Datetime("us")}
    failures = pl.DataFrame(fails, schema=schema, orient="row")
    max_points = int(rng.choice([3, 10, 300]))
    mcf = transform.mean_cumulative_function(failures, exposure, max_points=max_points)
    if mcf.is_empty():
        return
    expected_mcf, expected = _mcf_by_brute_force(failures, exposure, max_points)
    np.testing.assert_allclose(mcf["mcf"].to_numpy(), expected_mcf, rtol=1e-12)
    factor = np.exp(1.959963984540054 * np.sqrt(expected) / expected_mcf)
    np.testing.assert_allclose(mcf["ci_high"].to_numpy(), expected_mcf * factor, rtol=1e-9)
    np.testing.assert_allclose(mcf["ci_low"].to_numpy(), expected_mcf / factor, rtol=1e-9)


def test_mcf_of_one_node_failing_as_its_service_ends_is_one():
    """One node, one failure at the very end of its only service interval: it counts (closed
    interval) and the node is at risk then, so MCF = 1 failure per node, finite."""
    exposure = pl.DataFrame(
        {"cluster_id": ["c"], "node_id": ["n0"], "start_utc": [T0], "end_utc": [T0 + timedelta(hours=10)]}
    ).with_columns(instance_type=pl.lit("p5"), size_bucket=pl.lit(8))
    failures = pl.DataFrame(
        {"cluster_id": ["c"], "node_id": ["n0"], "timestamp_utc": [T0 + timedelta(hours=10)]},
        schema={"cluster_id": pl.String, "node_id": pl.String, "timestamp_utc": pl.Datetime("us")},
    )
    mcf = transform.mean_cumulative_function(failures, exposure)
    assert mcf.select("age_hours", "mcf", "nodes_at_risk").rows() == [(10.0, 1.0, 1.0)]


def test_mcf_refuses_failures_out_of_service():
    """The MCF takes failures already matched to the exposure: one of a node without service is
    not dropped, and one at an age when no node serves does not make the MCF infinite."""
    exposure = pl.DataFrame(
        {"cluster_id": ["c"], "node_id": ["n0"], "start_utc": [T0], "end_utc": [T0 + timedelta(hours=10)]}
    )
    schema = {"cluster_id": pl.String, "node_id": pl.String, "timestamp_utc": pl.Datetime("us")}
    in_service = ("n0", T0 + timedelta(hours=5))
    for stray in (("n9", T0 + timedelta(hours=5)), ("n0", T0 + timedelta(hours=11))):
        failures = pl.DataFrame([("c", *in_service), ("c", *stray)], schema=schema, orient="row")
        with pytest.raises(ValueError, match="1 failure.* not in service on the exposure"):
            transform.mean_cumulative_function(failures, exposure)


@pytest.mark.parametrize("basis", ["uptime", "calendar"])
def test_analysis_carries_the_counted_failures_as_bounded_aggregates(sample_warehouse, basis):
    """``analyze`` hands the report the MCF, the Duane points and the renamed categories, each at
    most MAX_POINTS rows, equal to what the report computed from every counted failure before
    (issue 27): the MCF bit for bit that of the failures matched to the rate exposure and then
    matched again to the calendar intervals; the categories their counts."""
    from pipeline import analysis, warehouse
    from pipeline.transform.reliability import MAX_POINTS

    con = warehouse.connect(sample_warehouse, read_only=True)
    options = analysis.AnalysisOptions(exposure_basis=basis)
    result = analysis.analyze(con, options)
    counted = result.counted
    assert 0 < counted.mcf.height <= MAX_POINTS and 0 < counted.duane_points.height <= MAX_POINTS
    # the report's route before: every counted failure, matched again
    inventory, resolved, exposure = analysis.service_window(con, options)
    failures = analysis.read_failures(con, window_minutes=resolved.interruption_window_minutes)
    at_risk, _ = analysis.rate_exposure(con, failures, inventory, exposure, resolved.until, basis)
    rows = transform.failures_in_service(failures, at_risk)
    con.close()
    keys = rows.select("cluster_id", "node_id", "timestamp_utc")
    expected = transform.mean_cumulative_function(transform.failures_in_service(keys, exposure), exposure)
    assert counted.mcf.equals(expected)
    assert (
        counted.duane_points.group_by("cluster_id")
        .agg(pl.col("cumulative_failures").max())
        .sort("cluster_id")
        .rows()
        == result.rates.trend_tests.filter(pl.col("crow_beta").is_not_null())
        .select("cluster_id", pl.col("failures").cast(pl.Float64))
        .sort("cluster_id")
        .rows()
    )
    renamed = rows.filter(pl.col("category") != pl.col("failure_class"))
    assert renamed.height > 0
    assert counted.renamed_categories.rows() == (
        renamed.group_by("category", "failure_class")
        .agg(failures=pl.len())
        .sort("failures", "category", "failure_class", descending=[True, False, False])
        .rows()
    )
