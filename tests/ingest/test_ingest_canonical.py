"""Canonical incidents and inventory files: formats, rejects, dedup, mapping, inventory updates."""

from __future__ import annotations

import gzip
import json

import polars as pl
import pytest

from pipeline.ingest import InputError, ingest_files, parse_column_map

HEADER = "timestamp,cluster_id,node_id,category,gpu_index,job_id,message,resolved_at\n"
GOOD = "2026-03-02T04:26:29Z,c1,n1,gpu_memory,0,j1,ecc,2026-03-02T06:00:00Z\n"


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("yesterday,c1,n1,gpu_memory,0,j1,m,", "timestamp yesterday is not ISO 8601"),
        (",c1,n1,gpu_memory,0,j1,m,", "timestamp is empty"),
        ("2026-03-02T04:26:29Z,,n1,gpu_memory,0,j1,m,", "cluster_id is empty"),
        ("2026-03-02T04:26:29Z,c1,n1,cosmic_rays,0,j1,m,", "unknown category cosmic_rays"),
        ("2026-03-02T04:26:29Z,c1,n1,gpu_memory,-1,j1,m,", "gpu_index -1 is not a non-negative integer"),
        (
            "2026-03-02T04:26:29Z,c1,n1,gpu_memory,0,j1,m,2026-03-01T00:00:00Z",
            "resolved_at is before timestamp",
        ),
    ],
)
def test_bad_rows_are_rejected_with_line_and_reason(con, write, line, reason, sql):
    [s] = ingest_files(con, [write("incidents.csv", HEADER + GOOD + line + "\n")])
    assert (s.rows_read, s.rows_ingested, s.rows_duplicate, s.rows_rejected) == (2, 1, 0, 1)
    [(line_no, raw, got)] = sql("SELECT line, raw, reason FROM rejects")
    assert (line_no, raw) == (3, line)
    assert reason in got


def test_same_rows_in_another_file_are_duplicates_and_incidents_collapse(con, write, sql):
    storm = GOOD + GOOD.replace("04:26:29", "04:27:00") + GOOD.replace("04:26:29", "05:00:00")
    [first] = ingest_files(con, [write("a.csv", HEADER + storm)])
    [second] = ingest_files(
        con, [write("b.csv.gz", gzip.compress((HEADER + storm + GOOD.replace("c1", "c2")).encode()))]
    )
    assert (first.rows_ingested, first.rows_duplicate) == (3, 0)
    assert (second.rows_read, second.rows_ingested, second.rows_duplicate) == (4, 1, 3)
    assert sql("SELECT cluster_id, events FROM incidents ORDER BY cluster_id, timestamp_utc") == [
        ("c1", 2),
        ("c1", 1),
        ("c2", 1),
    ]


def test_jsonl_parquet_and_column_map(con, write, tmp_path, sql):
    record = {"ts": "2026-03-02T04:26:29+02:00", "cluster_id": "c1", "hostname": "n1", "category": "nvlink"}
    jsonl = write("events.jsonl", json.dumps(record) + "\n")
    parquet = tmp_path / "events.parquet"
    pl.DataFrame([{**record, "hostname": "n2", "extra": 1}]).write_parquet(parquet)
    mapping = parse_column_map(["timestamp=ts", "node_id=hostname"])
    summaries = ingest_files(con, [jsonl, parquet], column_map=mapping)
    assert [(s.format, s.rows_ingested) for s in summaries] == [("jsonl", 1), ("parquet", 1)]
    assert summaries[1].ignored_columns == ["extra"]
    assert sql("SELECT node_id, hour(timestamp_utc) FROM events ORDER BY node_id") == [
        ("n1", 2),
        ("n2", 2),
    ]


def test_inventory_later_file_closes_an_open_interval(con, write, sql):
    header = "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n"
    open_row = "c1,n1,p5.48xlarge,8,2026-03-01T00:00:00Z,\n"
    ingest_files(con, [write("inv1.csv", header + open_row)])
    [s] = ingest_files(con, [write("inv2.csv", header + open_row.replace(",\n", ",2026-04-01T00:00:00Z\n"))])
    assert s.rows_ingested == 1
    assert sql("SELECT count(*), max(in_service_to_utc) IS NOT NULL FROM inventory") == [(1, True)]


@pytest.mark.parametrize(
    ("pairs", "message"),
    [(["node_id"], "expected CANONICAL=SOURCE"), (["host=hostname"], "not a canonical column")],
)
def test_parse_column_map_errors(pairs, message):
    with pytest.raises(InputError, match=message):
        parse_column_map(pairs)
