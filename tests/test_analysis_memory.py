"""What analyze does to bound its memory (issue 27) changes no number: the shared match when
uptime equals calendar time, DuckDB's lowered cap while analyses read. (The memory itself is
measured in bench/, never in tests.)"""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from pipeline import analysis, ingest, warehouse
from tests._fleets import analysis_rows


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
    rows = analysis_rows(con)
    assert rows.rate_exposure is rows.exposure
    assert result.rates.overall["failures"].item() == 15
    assert result.failures_left_out["failures"].sum() == 0
    calendar = analysis.analyze(con, analysis.AnalysisOptions(exposure_basis="calendar"))
    assert_frame_equal(result.rates.by_cluster, calendar.rates.by_cluster)
    assert_frame_equal(result.fits.node_durations, calendar.fits.node_durations)
    assert rows.outages["end_source"].to_list() == ["resolved_at"] * 15
    assert result.repairs.outages == 15
