"""The one interval rule (pipeline.transform.in_service): closed service intervals, a failure at an
interval's end or at the window end counts, a failure between adjacent intervals counts once, events
while out of service are left out and counted by reason. Every statistic follows it: rates, node- and
cluster-level gaps, operating times (trend tests), periods and the left-out counts.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import polars as pl
import pytest

from pipeline import transform

T0 = datetime(2026, 3, 1)
AFTER, NO_INTERVAL, OUT = transform.LEFT_OUT_REASONS


def _at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def _inventory(rows) -> pl.DataFrame:
    """rows: (node, from_hour, to_hour or None); one cluster ``c``."""
    return pl.DataFrame(
        [("c", n, "p5", 8, _at(a), None if b is None else _at(b)) for n, a, b in rows],
        schema={
            "cluster_id": pl.String,
            "node_id": pl.String,
            "instance_type": pl.String,
            "gpus_per_node": pl.Int32,
            "in_service_from_utc": pl.Datetime("us"),
            "in_service_to_utc": pl.Datetime("us"),
        },
        orient="row",
    )


def _failures(rows) -> pl.DataFrame:
    """rows: (node, hour); every one an interrupting failure in cluster ``c``."""
    return pl.DataFrame(
        [("c", n, _at(h), "host", True) for n, h in rows],
        schema={
            "cluster_id": pl.String,
            "node_id": pl.String,
            "timestamp_utc": pl.Datetime("us"),
            "category": pl.String,
            "interrupting": pl.Boolean,
        },
        orient="row",
    )


# n1 in service [0, 10], [10, 20] (re-added at once), out 20-30, [30, 40]; n2 [0, open)
INVENTORY = _inventory([("n1", 0, 10), ("n1", 10, 20), ("n1", 30, 40), ("n2", 0, None)])


def _counted(failures: pl.DataFrame, until_hours: float) -> dict:
    """What each statistic counts, and what the left-out table says, for one set of failures."""
    exposure = transform.exposure_intervals(INVENTORY, _at(until_hours))
    node_gaps = transform.times_between_failures(failures, exposure, first_gap="keep")
    cluster_gaps = transform.times_between_failures(failures, exposure, level="cluster", first_gap="keep")
    left_out = transform.failures_left_out(failures, exposure, _at(until_hours))
    return {
        "rates": transform.failure_rates(failures, exposure, by=[])["failures"][0],
        "by_node": transform.failure_rates(failures, exposure, by=["node_id"])["failures"].sum(),
        "node_gaps": node_gaps["observed"].sum(),
        "cluster_gaps": cluster_gaps["observed"].sum(),
        "operating": transform.failure_operating_times(failures, exposure).height,
        "left_out": {r: n for r, n in left_out.iter_rows() if n},
    }


@pytest.mark.parametrize(
    ("failures", "until_hours", "counted", "left_out"),
    [
        pytest.param([("n1", 0)], 50, 1, {}, id="at-interval-start"),
        pytest.param([("n1", 40)], 50, 1, {}, id="at-interval-end"),
        pytest.param([("n2", 35)], 35, 1, {}, id="at-window-end"),
        pytest.param([("n1", 35)], 35, 1, {}, id="at-window-end-inside-an-interval"),
        pytest.param([("n2", 35.5)], 35, 0, {AFTER: 1}, id="after-window-end"),
        pytest.param([("n1", 10)], 50, 1, {}, id="between-adjacent-intervals-counts-once"),
        pytest.param([("n1", 20)], 50, 1, {}, id="at-end-before-an-out-of-service-gap"),
        pytest.param([("n1", 25)], 50, 0, {OUT: 1}, id="during-out-of-service-gap"),
        pytest.param([("n1", 30)], 50, 1, {}, id="at-re-entry"),
        pytest.param([("n9", 5)], 50, 0, {NO_INTERVAL: 1}, id="node-not-in-inventory"),
        pytest.param([("n1", 10), ("n1", 25), ("n1", 40), ("n2", 50)], 50, 3, {OUT: 1}, id="mixed"),
    ],
)
def test_boundary_failures_count_the_same_in_every_statistic(failures, until_hours, counted, left_out):
    got = _counted(_failures(failures), until_hours)
    assert got == {
        "rates": counted,
        "by_node": counted,
        "node_gaps": counted,
        "cluster_gaps": counted,
        "operating": counted,
        "left_out": left_out,
    }


def test_a_failure_between_adjacent_intervals_closes_the_earlier_one():
    exposure = transform.exposure_intervals(INVENTORY, _at(50))
    gaps = transform.times_between_failures(_failures([("n1", 10)]), exposure, first_gap="keep")
    n1 = gaps.filter(node_id="n1").select("duration_hours", "observed").rows()
    # [0, 10] ends in the failure; [10, 20] and [30, 40] are censored whole
    assert n1 == [(10.0, True), (10.0, False), (10.0, False)]


def test_one_node_one_failure_at_its_end():
    inventory = _inventory([("n1", 0, 100)])
    failures = _failures([("n1", 100)])
    exposure = transform.exposure_intervals(inventory, _at(100))
    row = transform.failure_rates(failures, exposure, by=[]).row(0, named=True)
    assert (row["failures"], row["exposure_node_hours"]) == (1, 100.0)
    gaps = transform.times_between_failures(failures, exposure, first_gap="keep")
    assert gaps.select("duration_hours", "observed").rows() == [(100.0, True)]  # no empty censored tail


@pytest.mark.parametrize(
    ("intervals", "failure_hour", "expected"),
    [
        # [Mar 1, Apr 1] ends in a failure at midnight: March's
        ([(0, 31 * 24)], 31 * 24, {datetime(2026, 3, 1): 1}),
        # ... also when the node is re-added at once; one failure, not two
        ([(0, 31 * 24), (31 * 24, 40 * 24)], 31 * 24, {datetime(2026, 3, 1): 1, datetime(2026, 4, 1): 0}),
        # a failure at the start of April's interval (not an end) is April's
        ([(0, 20 * 24), (31 * 24, 40 * 24)], 31 * 24, {datetime(2026, 3, 1): 0, datetime(2026, 4, 1): 1}),
    ],
)
def test_failure_at_a_period_boundary_counts_in_the_period_it_ends(intervals, failure_hour, expected):
    inventory = _inventory([("n1", a, b) for a, b in intervals])
    exposure = transform.exposure_intervals(inventory, _at(intervals[-1][1]))
    rates = transform.failure_rates(_failures([("n1", failure_hour)]), exposure, by=[], period="month")
    assert dict(rates.select("period", "failures").iter_rows()) == expected


def availability_trace(
    nodes: int, horizon_hours: float, rate: float, seed: int
) -> tuple[pl.DataFrame, pl.DataFrame, dict]:
    """An availability trace as operators export it: each node's up intervals end at a failure
    (``in_service_to`` = failure time), a short outage (mean 2 h), then the node is re-added; the
    interval crossing the horizon stays open. During some outages the node logs an event (not a
    failure: it is out of service). The last failure of the data is the latest time in it, so the
    default window end falls on it. Returns (inventory, incidents, truth)."""
    rng = np.random.default_rng(seed)
    rows, events, up_hours = [], [], []
    for i in range(nodes):
        t = 0.0
        while True:
            up = rng.exponential(1 / rate)
            if t + up >= horizon_hours:
                rows.append((f"n{i}", t, None))
                break
            rows.append((f"n{i}", t, t + up))
            events.append((f"n{i}", t + up))
            up_hours.append(up)
            outage = rng.exponential(2.0)
            if rng.uniform() < 0.5:
                events.append((f"n{i}", t + up + outage * rng.uniform(0.05, 0.95)))
            t += up + outage
    # one more node whose failure is the latest time in the data
    rows.append(("last", 0.0, horizon_hours + 1))
    events.append(("last", horizon_hours + 1))
    up_hours.append(horizon_hours + 1)
    truth = {
        "failures": len(up_hours),
        "outage_events": len(events) - len(up_hours),
        "up_hours": np.sort(np.array(up_hours)),
        "re_added": len(rows) - nodes - 1,
    }
    return _inventory(rows), _failures(events), truth


@pytest.mark.parametrize("seed", [1, 2])
def test_availability_trace_counts_every_failure_and_recovers_the_rate(seed):
    rate = 0.01
    inventory, incidents, truth = availability_trace(nodes=150, horizon_hours=2000, rate=rate, seed=seed)
    assert truth["re_added"] > 2500 and truth["outage_events"] > 1000  # many short outages
    until = transform.observation_end(incidents, inventory)
    exposure = transform.exposure_intervals(inventory, until)

    row = transform.failure_rates(incidents, exposure, by=[]).row(0, named=True)
    assert row["failures"] == truth["failures"]  # exactly: every failure closes an interval
    assert row["rate_ci_low"] <= rate <= row["rate_ci_high"]
    assert row["rate_per_node_hour"] == pytest.approx(rate, rel=0.05)
    left_out = dict(transform.failures_left_out(incidents, exposure, until).iter_rows())
    assert left_out == {AFTER: 0, NO_INTERVAL: 0, OUT: truth["outage_events"]}

    gaps = transform.times_between_failures(incidents, exposure, first_gap="keep")
    observed = gaps.filter("observed")
    assert observed.height == truth["failures"]
    # each up interval that ended in a failure is one observed time between failures, exactly
    np.testing.assert_allclose(np.sort(observed["duration_hours"].to_numpy()), truth["up_hours"], atol=1e-6)
    cluster = transform.times_between_failures(incidents, exposure, level="cluster", first_gap="keep")
    assert cluster["observed"].sum() == truth["failures"]
    assert transform.failure_operating_times(incidents, exposure).height == truth["failures"]


def test_the_rule_is_a_closed_interval():
    frame = pl.DataFrame({"t": [_at(h) for h in (-1, 0, 5, 10, 11)]})
    inside = frame.select(transform.in_service(pl.col("t"), pl.lit(_at(0)), pl.lit(_at(10))))
    assert inside.to_series().to_list() == [False, True, True, True, False]
