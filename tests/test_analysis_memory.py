"""What analyze does to bound its memory (issue 27) changes no number: the node interruptions of
rows that come sorted, the shared match when uptime equals calendar time, DuckDB's lowered cap
while analyses read. (The memory itself is measured in bench/, never in tests.)"""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from pipeline import analysis, ingest, transform, warehouse
from pipeline.transform.interruptions import _sorted_by
from tests.transform.test_fleet import _reference_interruptions, _stepped_incidents


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["a1", "a2", "b1"]),
            st.sampled_from([0, 0, 1, 29, 30, 31, 1799, 1800, 1801, 86_400]),
            st.sampled_from(["host", "network", "xid"]),
            st.booleans() | st.just(True),
        ),
        max_size=60,
    ),
    window=st.sampled_from([0.0, 0.5, 30.0]),
)
def test_node_interruptions_of_sorted_rows_match_the_reference(steps, window):
    """Rows handed over in node and time order (as read_failures reads them) are not sorted
    again; the interruptions are the row-by-row reference's all the same."""
    incidents = _stepped_incidents(steps).sort("cluster_id", "node_id", "timestamp_utc", "category")
    assert_frame_equal(
        transform.node_interruptions(incidents, window_minutes=window),
        _reference_interruptions(incidents, window),
    )


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from(["x", "y", None]), st.sampled_from([1, 2, None])), max_size=8))
def test_sorted_by_agrees_with_a_sort(rows):
    frame = pl.DataFrame(rows, schema={"a": pl.String, "b": pl.Int64}, orient="row")
    assert _sorted_by(frame, ["a", "b"]) == frame.equals(frame.sort("a", "b", maintain_order=True))


def _limit(con) -> str:
    return con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]


def test_reading_lowers_duckdb_cap_to_a_quarter_and_restores_it(tmp_path):
    con = warehouse.connect(tmp_path / "w.duckdb", memory_limit_mb=1024)
    before = _limit(con)
    with warehouse.reading(con):
        assert _limit(con) == "244.0 MiB"  # a quarter of 1024 MB (976.5 MiB)
    assert _limit(con) == before
    with pytest.raises(duckdb.CatalogException), warehouse.reading(con):
        con.execute("SELECT * FROM no_such_table")
    assert _limit(con) == before


def test_reading_never_goes_below_64_mb(tmp_path):
    con = warehouse.connect(tmp_path / "w.duckdb", memory_limit_mb=128)
    with warehouse.reading(con):
        assert _limit(con) == "64.0 MiB"
    assert _limit(con) == "122.0 MiB"


T0 = datetime(2025, 1, 1)


def _availability_trace(folder) -> duckdb.DuckDBPyConnection:
    """Three nodes, each up for intervals that end in a failure, back after a repair gap
    (resolved_at = the next interval's start); the last interval of each is still up."""
    inventory, incidents = [], []
    for n, up_h in enumerate((20, 31, 47)):
        start = T0 + timedelta(hours=n)
        for i in range(6):
            end = start + timedelta(hours=up_h + i)
            back = end + timedelta(hours=2 + n)
            last = i == 5
            inventory.append(("c1", f"n{n}", "p5", 8, start, None if last else end))
            if not last:
                incidents.append((end, "c1", f"n{n}", "gpu_memory", back))
            start = back
    pl.DataFrame(
        inventory,
        schema=[
            "cluster_id",
            "node_id",
            "instance_type",
            "gpus_per_node",
            "in_service_from",
            "in_service_to",
        ],
        orient="row",
    ).write_csv(folder / "inventory.csv")
    pl.DataFrame(
        incidents, schema=["timestamp", "cluster_id", "node_id", "category", "resolved_at"], orient="row"
    ).write_csv(folder / "incidents.csv")
    con = warehouse.connect(folder / "w.duckdb")
    ingest.ingest_files(con, [folder / "inventory.csv", folder / "incidents.csv"])
    return con


def test_availability_trace_shares_one_match_and_counts_every_failure(tmp_path):
    """A node out of service while it is down leaves no downtime inside its intervals: the uptime
    exposure is the calendar one itself (one match of failures, not two), and every failure at
    an interval's end counts."""
    con = _availability_trace(tmp_path)
    result = analysis.analyze(con)
    assert result.rate_exposure is result.exposure
    assert result.rates.overall["failures"].item() == 15
    assert result.failures_left_out["failures"].sum() == 0
    calendar = analysis.analyze(con, analysis.AnalysisOptions(exposure_basis="calendar"))
    assert_frame_equal(result.rates.by_cluster, calendar.rates.by_cluster)
    assert_frame_equal(result.fits.node_durations, calendar.fits.node_durations)
    assert result.repairs.outages["end_source"].to_list() == ["resolved_at"] * 15
