"""``analyze``'s outages stay in DuckDB (issue 27): :func:`pipeline.analysis.outage_exposure` cuts the
uptime pieces where the outages were found and returns the repair statistics' groups (by key,
repair time and resolved, weighted) instead of the outage rows. Checked against the row route
(:func:`pipeline.analysis.rate_exposure`, the outage rows in the window, :func:`repair_analysis` on
them) on random small fleets with every edge case (open and unknown outages, repairs of 0 h,
failures during an outage merged into it, outages before ``--since``, nodes without inventory,
failures past the window end), and the row route's counts against the rows themselves."""

from __future__ import annotations

import duckdb
import polars as pl
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from pipeline import analysis, transform
from pipeline.analysis import downtime
from pipeline.analysis.options import not_before
from tests.transform.test_interval_joins import _incident_frame, _interruptions, _inventory_frame, at, fleets

# every edge case at once: a (cluster a) n1: outage resolved at 0 h, a failure during its next
# outage (merged), an open last one; n2: an outage ended by the inventory's gap, one without an
# end before a later one (unknown), one before --since; cluster b: a node the inventory lacks
_EDGES = (
    _incident_frame(
        [
            ("a", "n1", 10, 10, True),  # 0 h repair
            ("a", "n1", 20, 30, True),  # outage 20-30 ...
            ("a", "n1", 24, None, True),  # ... this one is part of it
            ("a", "n1", 50, None, True),  # open at the window end
            ("a", "n2", 2, None, True),  # before --since, its end from the inventory gap 2-6
            ("a", "n2", 40, None, True),  # unknown: n2 failed again later
            ("a", "n2", 60, 63, True),
            ("b", "n1", 30, 31, True),  # no inventory: an outage, not in any exposure
        ]
    ),
    _inventory_frame([("a", "n1", 0, None), ("a", "n2", 0, 2), ("a", "n2", 6, None)]),
    at(80),
)
_EDGES_SINCE = 4


def _with_categories(incidents: pl.DataFrame) -> pl.DataFrame:
    """Two categories (by the failure's quarter hour), so the summaries by category have groups."""
    odd = (pl.col("timestamp_utc").dt.minute() // 15) % 2 == 1
    return incidents.with_columns(category=pl.when(odd).then(pl.lit("nvlink")).otherwise(pl.lit("xid")))


def _frames(analysis_part: analysis.RepairAnalysis) -> list[pl.DataFrame]:
    return [pl.DataFrame([analysis_part.total]), analysis_part.by_cluster, analysis_part.by_category]


def _check(incidents, inventory, end, since):
    failures = _interruptions(_with_categories(incidents))
    exposure = transform.exposure_intervals(inventory, end, since)
    for basis in transform.EXPOSURE_BASES:
        rows_at_risk, every = analysis.rate_exposure(
            duckdb.connect(), failures, inventory, exposure, end, basis
        )
        found = analysis.outage_exposure(failures, inventory, exposure, end, basis, since)
        assert_frame_equal(found.at_risk, rows_at_risk)
        if basis == "calendar" or rows_at_risk is exposure:
            assert found.at_risk is exposure  # nothing removed: the same frame, matched once
        rows = not_before(every, since, "start_utc")
        assert found.outages_before_window == every.height - rows.height
        for keys, groups in found.repair_groups.items():
            assert groups["_outages"].sum() == rows.height
            assert groups.select(*keys, "repair_hours", "resolved").is_duplicated().sum() == 0

        expected = analysis.repair_analysis(rows, exposure, rows_at_risk, basis)
        got = analysis.repair_analysis(found.repair_groups, exposure, found.at_risk, basis)
        for mine, theirs in zip(_frames(got), _frames(expected), strict=True):
            assert_frame_equal(mine, theirs)  # the same to the last bit
        assert_frame_equal(got.curves, expected.curves)
        assert (got.times is None) == (expected.times is None)
        if got.times is not None:
            assert got.times.quantiles_ == expected.times.quantiles_
            assert got.times.mean_hours_ == expected.times.mean_hours_

        # the row route's counts are the rows' own
        total = expected.total
        known = rows.filter(pl.col("repair_hours").is_not_null())
        assert total["outages"] == rows.height
        assert total["interruptions"] == rows["interruptions"].sum()
        assert total["zero_length_repairs"] == (known["repair_hours"] == 0).sum()
        assert total["unresolved"] == (~known["resolved"]).sum()
        assert total["unknown_end"] == rows.height - known.height
        assert total["downtime_hours"] == pytest.approx(rows["downtime_hours"].sum(), rel=1e-12, abs=1e-12)


def test_every_edge_case_by_hand():
    incidents, inventory, end = _EDGES
    _check(incidents, inventory, end, at(_EDGES_SINCE))
    _check(incidents, inventory, end, None)
    failures = _interruptions(_with_categories(incidents))
    exposure = transform.exposure_intervals(inventory, end, at(_EDGES_SINCE))
    found = analysis.outage_exposure(failures, inventory, exposure, end, "uptime", at(_EDGES_SINCE))
    total = analysis.repair_analysis(found.repair_groups, exposure, found.at_risk, "uptime").total
    assert found.outages_before_window == 1
    assert total["outages"] == 6 and total["interruptions"] == 7 and total["interruptions_while_down"] == 1
    assert total["zero_length_repairs"] == 1 and total["unresolved"] == 1 and total["unknown_end"] == 1
    # known downtime only, in steps of 15 minutes: 0 + 10 (20-30) + 3 (60-63) + 1 (b, 30-31); the
    # open outage and the unknown one have no recorded end
    assert total["downtime_hours"] == (0 + 10 + 3 + 1) * 0.25


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.one_of(st.none(), st.integers(0, 120)))
@example(_EDGES, _EDGES_SINCE)
def test_outage_groups_equal_the_row_route(fleet_frames, since_steps):
    incidents, inventory, end = fleet_frames
    _check(incidents, inventory, end, None if since_steps is None else at(since_steps))


def test_the_groups_are_per_repair_time_not_per_outage():
    """Outages with one repair time are one row of a group, standing for all of them."""
    rows = [("a", "n1", 10 * k, 10 * k + 4, True) for k in range(6)]
    incidents, inventory = _incident_frame(rows), _inventory_frame([("a", "n1", 0, None)])
    failures = _interruptions(_with_categories(incidents))
    exposure = transform.exposure_intervals(inventory, at(100))
    found = analysis.outage_exposure(failures, inventory, exposure, at(100))
    fleet = found.repair_groups[()]
    assert fleet.height == 1 and fleet["_outages"].item() == 6 and fleet["repair_hours"].item() == 1.0
    assert fleet["downtime_us"].item() == 6 * 3_600_000_000
    assert set(found.repair_groups) == set(downtime.REPAIR_KEYS)


def test_an_unknown_basis_is_refused_before_any_work():
    incidents, inventory, end = _EDGES
    failures = _interruptions(incidents)
    with pytest.raises(ValueError, match="unknown exposure basis"):
        analysis.outage_exposure(
            failures, inventory, transform.exposure_intervals(inventory, end), end, "wall"
        )
