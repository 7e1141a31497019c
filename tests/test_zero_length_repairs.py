"""A repair that ends when it begins is a repair of 0 h (issue 28, item 1): on a fault table shaped
like a real one (tests/_fault_table.py) MTTR and median are the table's own, computed by hand;
the report's "not repaired" count is the table's; 0-h outages remove no uptime; an end before its
start is rejected by every reader that reads an end."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import duckdb
import polars as pl
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from pipeline import analysis, models, projection, transform, warehouse
from pipeline.analysis.downtime import outages
from pipeline.cli import main
from pipeline.extract import extract_files
from pipeline.ingest import ingest_files
from pipeline.report import repairs as report_repairs
from pipeline.report.format import duration_text
from tests._fault_table import expected_repairs, fault_table
from tests._fleets import analysis_rows


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def table():
    return fault_table()


@pytest.fixture(scope="module")
def table_db(tmp_path_factory, table):
    root = tmp_path_factory.mktemp("faults")
    con = warehouse.connect(root / "w.duckdb")
    try:
        summaries = ingest_files(con, table.write(root / "in"))
    finally:
        con.close()
    assert [s.rows_rejected for s in summaries] == [0, 0]
    return root / "w.duckdb"


def test_the_fixture_is_shaped_like_the_issues_table(table):
    truth = expected_repairs(table)
    assert 550 <= table.incidents.height <= 650
    assert truth.zero_length == 14 and truth.unknown_end == 4
    assert truth.unresolved >= 9  # still open, or running past the window end
    assert truth.table_mean_hours > 5 * truth.table_median_hours  # the heavy tail of real repairs
    assert table.incidents["resolved_at"].max() > table.end  # some repairs run past the window end


def test_mttr_and_median_are_the_tables_own(table, table_db):
    truth = expected_repairs(table)
    payload = json.loads(invoke("repairs", "--db", str(table_db), "--json").stdout)
    total = payload["total"]
    assert total["outages"] == table.incidents.height
    assert total["unresolved"] == truth.unresolved
    assert total["unknown_end"] == truth.unknown_end
    assert total["zero_length_repairs"] == 14  # counted once, in repair_summary, for text and report
    # the product-limit estimates written out by hand, open repairs censored at the window end
    assert total["mttr_hours"] == pytest.approx(truth.km_mean_hours, rel=1e-9)
    assert total["repair_hours_p50"] == pytest.approx(truth.km_median_hours, rel=1e-9)
    # and the table's own plain mean and median of its closed rows (few are censored): before the
    # fix the 14 zero-length repairs were open for months and MTTR came out 26% higher
    assert total["mttr_hours"] == pytest.approx(truth.table_mean_hours, rel=0.05)
    assert total["repair_hours_p50"] == pytest.approx(truth.table_median_hours, rel=0.10)
    text = invoke("repairs", "--db", str(table_db)).output
    assert text.startswith(f"{total['outages']:,} outages, {truth.unresolved} unresolved")
    assert "14 repairs ended when they began (resolved_at = start): counted as 0 h" in text


def test_the_reports_repair_note_counts_what_its_table_counts(table, table_db):
    truth = expected_repairs(table)
    con = warehouse.connect(table_db, read_only=True)
    try:
        fleet = analysis.analyze(con)
        outage_rows = analysis_rows(con).outages
    finally:
        con.close()
    zero = outage_rows.filter(pl.col("repair_hours") == 0)
    assert zero.height == 14 == fleet.repairs.total["zero_length_repairs"]
    assert zero["resolved"].all() and (zero["end_source"] == "resolved_at").all()
    assert (zero["downtime_hours"] == 0).all()
    table_unresolved = int(report_repairs.availability_table(fleet.repairs)["unresolved"].sum())
    note = report_repairs.repair_note(fleet.repairs)
    assert table_unresolved == truth.unresolved
    assert f"; {truth.unresolved} not repaired by the window end" in note
    assert f"{truth.unknown_end} outages without a recorded end whose node failed again are left out" in note
    assert "14 repairs ended when they began" in note
    assert fleet.repairs.times.mean_hours_ == pytest.approx(truth.km_mean_hours, rel=1e-9)
    assert f"MTTR {duration_text(truth.km_mean_hours)}" in note
    # one fault, one outage: nothing to explain
    assert note.startswith(f"{outage_rows.height:,} outages; ")
    assert fleet.repairs.outages == outage_rows.height


def test_hot_spares_and_measured_recovery_take_the_tables_mttr(table, table_db):
    truth = expected_repairs(table)
    args = ["project", "--db", str(table_db), "--instances", "64", "--gpu-hours", "1e5"]
    args += ["--price-per-gpu-hour", "2", "--monte-carlo-runs", "0", "--recovery", "measured", "--json"]
    project = json.loads(invoke(*args).stdout)
    assert project["spec"]["recovery"]["manual"]["replace_hours"] == pytest.approx(truth.km_mean_hours)
    assert project["spares"]["mttr_hours"] == pytest.approx(truth.km_mean_hours)
    rate = project["spec"]["failure"]["rate_per_instance_hour"]
    assert project["spares"]["spares"] == projection.SparePool(64, rate, truth.km_mean_hours).spares_for()


def test_rates_count_the_same_uptime_in_duckdb_as_in_polars(table_db):
    """`failcast rates` (counted in DuckDB, analysis/counts.py) and analyze (Polars) remove the
    same downtime: 0-h outages remove none and split no interval."""
    rates = json.loads(invoke("rates", "--db", str(table_db), "--json").stdout)
    con = warehouse.connect(table_db, read_only=True)
    try:
        fleet = analysis.analyze(con)
    finally:
        con.close()
    [row] = fleet.rates.overall.to_dicts()
    assert rates[0]["failures"] == row["failures"]
    assert rates[0]["exposure_node_hours"] == pytest.approx(row["exposure_node_hours"], rel=1e-12)


T0 = datetime(2026, 3, 1)


def _frames(ends: list[timedelta | None]):
    """One node in service for 10 days, failing at day 1, 3, 5 ... with the given repair times."""
    starts = [T0 + timedelta(days=1 + 2 * i) for i in range(len(ends))]
    failures = pl.DataFrame(
        {
            "cluster_id": "c1",
            "node_id": "n1",
            "timestamp_utc": starts,
            "resolved_at_utc": [None if e is None else s + e for s, e in zip(starts, ends, strict=True)],
        },
        schema_overrides={"resolved_at_utc": pl.Datetime("us"), "timestamp_utc": pl.Datetime("us")},
    )
    inventory = pl.DataFrame(
        {
            "cluster_id": ["c1"],
            "node_id": ["n1"],
            "instance_type": ["p5"],
            "gpus_per_node": [8],
            "in_service_from_utc": [T0],
            "in_service_to_utc": [T0 + timedelta(days=10)],
        },
        schema_overrides={"in_service_to_utc": pl.Datetime("us"), "in_service_from_utc": pl.Datetime("us")},
    )
    return failures, inventory, T0 + timedelta(days=10)


@pytest.mark.filterwarnings("error")  # lifelines takes a 0 duration without a word
def test_a_zero_length_outage_is_a_repair_of_zero_hours_and_removes_no_uptime():
    failures, inventory, end = _frames([timedelta(0), timedelta(hours=6), timedelta(0)])
    out = outages(duckdb.connect(), failures, inventory, end)
    assert out["end_source"].to_list() == ["resolved_at"] * 3
    assert out["repair_hours"].to_list() == [0.0, 6.0, 0.0]
    assert out["resolved"].all() and out["downtime_hours"].to_list() == [0.0, 6.0, 0.0]
    exposure = transform.exposure_intervals(inventory, end)
    uptime = transform.uptime_intervals(exposure, out)
    assert uptime.height == 2  # split around the 6-h repair only: no empty pieces
    assert (uptime["node_hours"] > 0).all()
    assert uptime["node_hours"].sum() == pytest.approx(240 - 6)
    share = transform.availability(exposure, uptime, out, [])
    assert share["availability"].item() == pytest.approx(234 / 240)
    fit = models.RepairTimes().fit(out["repair_hours"], out["resolved"])
    assert fit.mean_hours_ == pytest.approx(2.0) and fit.median_hours_ == 0.0
    assert not fit.mean_restricted_


@pytest.mark.filterwarnings("error")  # lifelines takes a 0 duration without a word
def test_only_zero_length_repairs_give_an_mttr_of_zero():
    fit = models.RepairTimes().fit([0.0, 0.0, 0.0], [True] * 3)
    assert fit.mean_hours_ == 0.0 and fit.mean_confidence_interval_ == (0.0, 0.0)
    assert fit.quantiles_[0.9] == (0.0, 0.0, 0.0)


def _ingest(db, path):
    """(summary, stored (node, start, end), rejects (path, line, reason)) of ingesting ``path``."""
    con = warehouse.connect(db)
    try:
        [summary] = ingest_files(con, [path])
        stored = con.sql("SELECT node_id, timestamp_utc, resolved_at_utc FROM events").fetchall()
        rejects = con.sql("SELECT path, line, reason FROM rejects").fetchall()
    finally:
        con.close()
    counts = (summary.rows_read, summary.rows_ingested, summary.rows_duplicate, summary.rows_rejected)
    return counts, stored, rejects


@pytest.mark.parametrize(
    ("name", "text", "at", "reason", "read"),
    [
        (
            "t.csv",
            "timestamp,cluster_id,node_id,category,resolved_at\n"
            "2026-03-01T00:00:00Z,c1,n1,Stress test,2026-03-01T00:00:00Z\n"
            "2026-03-02T00:00:00Z,c1,n2,GPU,2026-03-01T23:00:00Z\n",
            datetime(2026, 3, 1),
            "resolved_at is before timestamp",
            2,
        ),
        (
            "events.txt",
            "Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User\n"
            "c1|n1|2024-05-02T12:00:00|2024-05-02T12:00:00|DOWN*|Not responding|slurm(1)\n"
            "c1|n2|2024-05-02T12:00:00|2024-05-02T11:00:00|DOWN*|Not responding|slurm(1)\n",
            datetime(2024, 5, 2, 12),
            "TimeEnd is before TimeStart",
            3,  # sacctmgr's header line is read (and ignored)
        ),
    ],
    ids=["canonical", "slurm-events"],
)
def test_an_end_equal_to_the_start_is_stored_and_one_before_it_rejected(
    tmp_path, name, text, at, reason, read
):
    path = tmp_path / name
    path.write_text(text)
    counts, stored, rejects = _ingest(tmp_path / "w.duckdb", path)
    assert counts == (read, 1, 0, 1)
    assert stored == [("n1", at, at)]
    assert rejects == [(str(path), 3, reason)]


def test_a_lake_part_with_an_end_before_its_start_is_rejected_not_stored(tmp_path):
    """The readers never write one; a damaged or hand-made part gets the readers' treatment."""
    tickets = tmp_path / "t.csv"
    tickets.write_text(
        "timestamp,cluster_id,node_id,category,resolved_at\n"
        "2026-03-01T00:00:00Z,c1,n1,GPU,2026-03-01T05:00:00Z\n"
        "2026-03-02T00:00:00Z,c1,n2,GPU,2026-03-02T00:00:00Z\n"
    )
    lake = tmp_path / "lake"
    [extracted] = extract_files([str(tickets)], lake, workers=1)
    assert extracted.error is None
    [part] = lake.glob("events/**/*.parquet")
    frame = pl.read_parquet(part, hive_partitioning=False)
    broken = frame.with_columns(
        resolved_at_utc=pl.when(pl.col("node_id") == "n1")
        .then(pl.col("timestamp_utc") - pl.duration(hours=1))
        .otherwise(pl.col("resolved_at_utc"))
    )
    pq.write_table(broken.to_arrow(), part)
    counts, stored, rejects = _ingest(tmp_path / "w.duckdb", lake)
    assert counts == (2, 1, 0, 1)
    assert stored == [("n2", datetime(2026, 3, 2), datetime(2026, 3, 2))]
    assert rejects == [
        (str(tickets), 2, "resolved_at_utc is before timestamp_utc in the lake part: extract the input again")
    ]
