"""Outages: which end each interruption gets, merging, censoring at the window end, and uptime
exposure (split intervals, never hourly rows; identical to calendar without recorded ends)."""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb
import polars as pl
import pytest

from pipeline import transform
from pipeline.analysis.downtime import outages

T0 = datetime(2026, 1, 1)
UNTIL = T0 + timedelta(days=10)


def h(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def _inventory(rows: list[tuple[str, float, float | None]]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "cluster_id": ["c"] * len(rows),
            "node_id": [r[0] for r in rows],
            "instance_type": ["x"] * len(rows),
            "gpus_per_node": [8] * len(rows),
            "in_service_from_utc": [h(r[1]) for r in rows],
            "in_service_to_utc": [None if r[2] is None else h(r[2]) for r in rows],
        },
        schema_overrides={"in_service_to_utc": pl.Datetime("us")},
    )


def _failures(rows: list[tuple[str, float, float | None]]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "cluster_id": ["c"] * len(rows),
            "node_id": [r[0] for r in rows],
            "timestamp_utc": [h(r[1]) for r in rows],
            "category": ["gpu"] * len(rows),
            "interrupting": [True] * len(rows),
            "resolved_at_utc": [None if r[2] is None else h(r[2]) for r in rows],
        },
        schema_overrides={"resolved_at_utc": pl.Datetime("us")},
    )


ALWAYS = [("a", 0, None)]
CASES = [
    # (inventory, failures, expected [(end_source, repair_hours, resolved, downtime_hours)])
    pytest.param(ALWAYS, [("a", 10, 15)], [("resolved_at", 5.0, True, 5.0)], id="resolved_at"),
    pytest.param(ALWAYS, [("a", 10, None)], [("open", 230.0, False, 0.0)], id="open-censored-at-window-end"),
    pytest.param(ALWAYS, [("a", 230, 260)], [("resolved_at", 10.0, False, 10.0)], id="resolved-after-window"),
    pytest.param(ALWAYS, [("a", 240, 250)], [("resolved_at", 0.0, False, 0.0)], id="failure-at-window-end"),
    pytest.param(
        [("a", 0, 10), ("a", 30, None)],
        [("a", 10, None)],
        [("inventory", 20.0, True, 20.0)],
        id="inventory-gap",
    ),
    pytest.param(
        [("a", 0, 10.25), ("a", 30, None)],
        [("a", 10, None)],
        [("inventory", 20.0, True, 20.0)],
        id="gap-just-after",
    ),
    pytest.param(
        [("a", 0, 12), ("a", 30, None)], [("a", 10, None)], [("open", 230.0, False, 0.0)], id="gap-too-late"
    ),
    pytest.param(
        [("a", 0, 10), ("a", 30, None)],
        [("a", 10, 12)],
        [("resolved_at", 2.0, True, 2.0)],
        id="resolved-at-wins",
    ),
    pytest.param(
        ALWAYS,
        [("a", 10, 20), ("a", 15, 30), ("a", 40, 41)],
        [("resolved_at", 20.0, True, 20.0), ("resolved_at", 1.0, True, 1.0)],
        id="failure-during-outage-merges",
    ),
    pytest.param(
        ALWAYS,
        [("a", 10, None), ("a", 40, 41)],
        [("unknown", None, False, 0.0), ("resolved_at", 1.0, True, 1.0)],
        id="no-end-but-failed-again",
    ),
    pytest.param(ALWAYS, [("a", 250, 251)], [], id="after-window-left-out"),
]


@pytest.mark.parametrize(("inventory", "failures", "expected"), CASES)
def test_outage_ends(inventory, failures, expected):
    out = outages(duckdb.connect(), _failures(failures), _inventory(inventory), UNTIL).sort("start_utc")
    got = list(out.select("end_source", "repair_hours", "resolved", "downtime_hours").iter_rows())
    assert got == [pytest.approx(row) if row[1] is not None else row for row in expected]


def test_merged_outage_counts_its_interruptions_and_keeps_the_first_category():
    failures = _failures([("a", 10, 20), ("a", 15, 30)]).with_columns(category=pl.Series(["gpu", "network"]))
    (row,) = outages(duckdb.connect(), failures, _inventory(ALWAYS), UNTIL).to_dicts()
    assert row["interruptions"] == 2 and row["category"] == "gpu" and row["end_utc"] == h(30)


def test_no_recorded_end_makes_uptime_equal_calendar():
    inventory = _inventory([("a", 0, None), ("b", 5, 100)])
    failures = _failures([("a", 10, None), ("b", 50, None)])
    exposure = transform.exposure_intervals(inventory, UNTIL)
    out = outages(duckdb.connect(), failures, inventory, UNTIL)
    assert transform.uptime_intervals(exposure, out).equals(exposure)


def test_uptime_splits_intervals_and_rates_still_count_the_failure_at_the_split():
    inventory = _inventory([("a", 0, None), ("b", 0, None)])
    failures = _failures([("a", 10, 20), ("a", 100, None), ("b", 230, 300)])
    exposure = transform.exposure_intervals(inventory, UNTIL)
    out = outages(duckdb.connect(), failures, inventory, UNTIL)
    uptime = transform.uptime_intervals(exposure, out)
    a = uptime.filter(pl.col("node_id") == "a").sort("start_utc")
    assert a.select("start_utc", "end_utc").rows() == [(h(0), h(10)), (h(20), h(240))]
    assert uptime["node_hours"].sum() == pytest.approx(480 - 10 - 10)  # b is down 230 h -> window end
    rates = transform.failure_rates(failures, uptime, by=[])  # closed ends: 10 h ends [0, 10]
    assert rates["failures"].item() == 3
    assert rates["exposure_node_hours"].item() == pytest.approx(460)
    calendar = transform.failure_rates(failures, exposure, by=[])
    assert calendar["exposure_node_hours"].item() == pytest.approx(480)
    avail = transform.availability(exposure, uptime, out, ["node_id"]).sort("node_id")
    assert avail["availability"].to_list() == pytest.approx([230 / 240, 230 / 240])


def test_uptime_with_inventory_gap_removes_nothing_from_service():
    inventory = _inventory([("a", 0, 10), ("a", 30, None)])
    failures = _failures([("a", 10, None)])
    exposure = transform.exposure_intervals(inventory, UNTIL)
    out = outages(duckdb.connect(), failures, inventory, UNTIL)
    uptime = transform.uptime_intervals(exposure, out)
    assert uptime["node_hours"].sum() == pytest.approx(exposure["node_hours"].sum())
    avail = transform.availability(exposure, uptime, out, ["cluster_id"])
    assert avail["availability"].item() == pytest.approx(220 / 240)  # 20 h out for repair
