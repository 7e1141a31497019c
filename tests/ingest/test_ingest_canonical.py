"""Canonical incidents and inventory files: formats, rejects, dedup, mapping, inventory updates."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from pipeline import warehouse
from pipeline.ingest import (
    InputError,
    ReaderOptions,
    ingest_files,
    parse_category_map,
    parse_column_map,
)
from pipeline.readers.canonical import BATCH_ROWS, ingest_canonical
from pipeline.store import taxonomy
from pipeline.store.taxonomy import classify

HEADER = "timestamp,cluster_id,node_id,category,gpu_index,job_id,message,resolved_at\n"
GOOD = "2026-03-02T04:26:29Z,c1,n1,gpu_memory,0,j1,ecc,2026-03-02T06:00:00Z\n"


@pytest.mark.parametrize(
    ("text", "utc"),
    [
        ("2026-03-02T04:26:29Z", "2026-03-02 04:26:29"),
        ("2026-03-02 05:26:29 +0100", "2026-03-02 04:26:29"),  # Python's and Go's default text
        ("2026-03-02 04:26:29 -05:00", "2026-03-02 09:26:29"),
        ("1772425589", "2026-03-02 04:26:29"),  # Unix epoch seconds
        ("1772425589.25", "2026-03-02 04:26:29.25"),
        ("1772425589250", "2026-03-02 04:26:29.25"),  # epoch milliseconds
        ("2026-03-02 05:26:29", "2026-03-02 04:26:29"),  # naive: read in --timezone (Europe/Paris)
    ],
)
def test_time_forms_of_real_exports(con, write, sql, text, utc):
    [s] = ingest_files(
        con,
        [write("t.csv", HEADER + f"{text},c1,n1,gpu_memory,3.0,j1,m,\n")],
        ReaderOptions(timezone="Europe/Paris"),
    )
    assert (s.rows_ingested, s.rows_rejected) == (1, 0)
    assert sql("SELECT CAST(timestamp_utc AS VARCHAR), gpu_index FROM events") == [(utc, 3)]


def test_inventory_gpus_per_node_must_be_whole(con, write, sql):
    header = "cluster_id,node_id,instance_type,gpus_per_node,in_service_from\n"
    rows = "c1,n1,p5,8.0,1772425589\nc1,n2,p5,8.5,2026-03-02T00:00:00Z\n"
    [s] = ingest_files(con, [write("inventory.csv", header + rows)])
    assert (s.rows_ingested, s.rows_rejected) == (1, 1)
    assert sql("SELECT node_id, gpus_per_node FROM inventory") == [("n1", 8)]
    assert "gpus_per_node 8.5 is not a whole number" in sql("SELECT reason FROM rejects")[0][0]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("yesterday,c1,n1,gpu_memory,0,j1,m,", "timestamp yesterday is not ISO 8601"),
        (",c1,n1,gpu_memory,0,j1,m,", "timestamp is empty"),
        ("2026-03-02T04:26:29Z,,n1,gpu_memory,0,j1,m,", "cluster_id is empty"),
        ("2026-03-02T04:26:29Z,c1,n1, ,0,j1,m,", "category is empty"),
        ("2026-03-02T04:26:29Z,c1,n1,gpu_memory,-1,j1,m,", "gpu_index -1 is not a non-negative integer"),
        ("infinity,c1,n1,gpu_memory,0,j1,m,", "timestamp infinity is not ISO 8601"),
        ("2026-03-02T04:26:29Z,c1,n1,gpu_memory,2.5,j1,m,", "gpu_index 2.5 is not a non-negative integer"),
        ("20260302,c1,n1,gpu_memory,0,j1,m,", "timestamp 20260302 is not ISO 8601"),  # not an epoch
        ("2026-03-02T04:26:29Z,c1,n1,gpu_memory,0,j1,m,infinity", "resolved_at infinity is not ISO 8601"),
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


def test_times_past_year_9999_and_before_1970_are_deduplicated_like_any_other(con, write):
    """The duplicate checks read stored rows by the batch's time range, which Python could not hold."""
    rows = HEADER + GOOD.replace("2026", "10000") + GOOD.replace("2026", "0001")
    [first, second] = ingest_files(con, [write("a.csv", rows), write("b.csv", rows + GOOD)])
    assert (first.rows_ingested, second.rows_ingested, second.rows_duplicate) == (2, 1, 2)


def test_jsonl_parquet_and_column_map(con, write, tmp_path, sql):
    record = {"ts": "2026-03-02T04:26:29+02:00", "cluster_id": "c1", "hostname": "n1", "category": "nvlink"}
    jsonl = write("events.jsonl", json.dumps(record) + "\n")
    parquet = tmp_path / "events.parquet"
    pl.DataFrame([{**record, "hostname": "n2", "extra": 1}]).write_parquet(parquet)
    mapping = parse_column_map(["timestamp=ts", "node_id=hostname"])
    summaries = ingest_files(con, [jsonl, parquet], ReaderOptions(column_map=mapping))
    assert [(s.format, s.rows_ingested) for s in summaries] == [("jsonl", 1), ("parquet", 1)]
    assert summaries[1].attribute_columns == ["extra"]
    assert sql("SELECT node_id, hour(timestamp_utc) FROM events ORDER BY node_id") == [
        ("n1", 2),
        ("n2", 2),
    ]


TICKETS = "opened,cluster_id,host,problem,gpu\n2026-03-02T04:26:29Z,c1,n1,Faulty GPU,3\n"
INVENTORY = (
    "cluster_id,node_id,instance_type,gpus_per_node,in_service_from\nc1,n1,p5,8,2026-01-01T00:00:00Z\n"
)
TICKET_MAP = ["timestamp=opened", "node_id=host", "category=problem", "gpu_index=gpu"]


@pytest.mark.parametrize(
    ("files", "extra_map", "error"),
    [
        # one map for the tickets and the inventory beside them: each file uses the entries it has
        ({"inventory.csv": INVENTORY, "tickets.csv": TICKETS}, [], None),
        # a misspelt source of a column the file's kind has: an error, not a dropped column
        (
            {"tickets.csv": TICKETS.replace(",gpu\n", ",gpx\n")},
            ["gpu_index=gpuu"],
            "--map names column(s) ['gpu', 'gpuu'] that the file does not",
        ),
        # a misspelt required column: the kind cannot be told, and the error says which entry missed
        ({"tickets.csv": TICKETS.replace("problem", "problm")}, [], "--map names column(s) ['problem']"),
        # both names in one file: ambiguous
        (
            {"tickets.csv": TICKETS.replace(",gpu\n", ",gpu,gpu_index\n").replace(",3\n", ",3,3\n")},
            [],
            "--map gpu_index: the file has columns ['gpu_index', 'gpu'] for it",
        ),
        # two sources of one column, one per file: the inventory's hostname, the tickets' host
        (
            {"inventory.csv": INVENTORY.replace("node_id", "hostname"), "tickets.csv": TICKETS},
            ["node_id=hostname"],
            None,
        ),
        # ... but not both in one file
        (
            {"tickets.csv": TICKETS.replace("gpu\n", "hostname\n")},
            ["node_id=hostname"],
            "has columns ['host', 'hostname']",
        ),
        # several names in one entry: the error says to give one --map each
        (
            {"inventory.csv": INVENTORY.replace("node_id", "hostname")},
            ["node_id=hostname,host"],
            "a column with several names takes one --map each: --map node_id=a --map node_id=b",
        ),
    ],
)
def test_one_column_map_serves_every_file_of_an_ingest(con, write, sql, files, extra_map, error):
    mapping = parse_column_map(TICKET_MAP + extra_map)
    paths = [write(name, text) for name, text in files.items()]
    if error:
        with pytest.raises(InputError, match=re.escape(error)):
            ingest_files(con, paths, ReaderOptions(column_map=mapping))
        return
    summaries = ingest_files(con, paths, ReaderOptions(column_map=mapping))
    assert [(s.kind, s.rows_ingested) for s in summaries] == [("inventory", 1), ("incidents", 1)]
    assert sql("SELECT node_id, category, gpu_index FROM events") == [("n1", "Faulty GPU", 3)]


@pytest.mark.parametrize(
    ("bad", "good", "limit", "refused"),
    [(12, 2, None, True), (12, 2, 100, False), (12, 13, None, False), (9, 0, None, False)],
)
def test_a_file_that_loses_most_of_its_records_is_refused_whole(con, write, sql, bad, good, limit, refused):
    """US dates in a ticket export: most rows are rejected. Refused whole (nothing stored, one line
    naming the file, the first line and its reason) above the limit, from MIN_REFUSED rejects on;
    stored with its rejects when the limit allows it or most rows are good."""
    rows = [f"02/{d + 1:02d}/2026 10:00,c1,n1,gpu_memory,0,j1,m,\n" for d in range(bad)]
    rows += [GOOD.replace("04:26:29", f"04:{m:02d}:29") for m in range(good)]
    path = write("tickets.csv", HEADER + "".join(rows))
    options = ReaderOptions() if limit is None else ReaderOptions(max_rejected_percent=limit)
    if refused:
        with pytest.raises(InputError) as error:
            ingest_files(con, [path], options)
        assert str(error.value).startswith(f"{path}: {bad} of {bad + good} records rejected (86%, more than")
        assert "line 2: timestamp 02/01/2026 10:00 is not ISO 8601" in str(error.value)
        assert "--time-format for times such as" in str(error.value)
        assert sql("SELECT count(*) FROM ingested_files") == [(0,)]
        assert sql("SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM rejects)") == [(0,)]
        return
    [s] = ingest_files(con, [path], options)
    assert (s.rows_read, s.rows_ingested, s.rows_rejected) == (bad + good, good, bad)


def test_an_error_after_committed_files_says_they_stay(con, write, sql):
    bad = write("bad.csv", HEADER + "".join(f"02/{d:02d}/2026 10:00,c1,n1,x,0,j,m,\n" for d in range(1, 13)))
    inventory = write("inventory.csv", INVENTORY)
    with pytest.raises(InputError, match=re.escape("(1 file(s) before it were ingested and stay;")):
        ingest_files(con, [inventory, bad])
    assert sql("SELECT path FROM ingested_files") == [(str(inventory),)]
    with pytest.raises(InputError) as again:  # the inventory is skipped now: nothing to say about it
        ingest_files(con, [inventory, bad])
    assert "before it" not in str(again.value)


def test_inventory_later_file_closes_an_open_interval(con, write, sql):
    header = "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n"
    open_row = "c1,n1,p5.48xlarge,8,2026-03-01T00:00:00Z,\n"
    ingest_files(con, [write("inv1.csv", header + open_row)])
    [s] = ingest_files(con, [write("inv2.csv", header + open_row.replace(",\n", ",2026-04-01T00:00:00Z\n"))])
    assert s.rows_ingested == 1
    assert sql("SELECT count(*), max(in_service_to_utc) IS NOT NULL FROM inventory") == [(1, True)]


T = "2026-03-02T04:26:29Z"


@pytest.mark.parametrize(
    ("header", "row", "mapping", "note", "attributes"),
    [
        # headers written for people: case, spaces, hyphens, padding
        (
            "Timestamp,Cluster ID,node-id, CATEGORY ,Ticket",
            f"{T},c1,n1,Xid 79,T-1",
            {},
            "'Timestamp' as timestamp, 'Cluster ID' as cluster_id, 'node-id' as node_id, "
            "' CATEGORY ' as category",
            ["Ticket"],
        ),
        (
            "timestamp,cluster_id,Node_ID,category,GPU Index",
            f"{T},c1,n1,Xid 79,3",
            {},
            "'Node_ID' as node_id, 'GPU Index' as gpu_index",
            [],
        ),
        # the exact name wins; the other spelling stays an attribute
        ("timestamp,cluster_id,node_id,Node ID,category", f"{T},c1,n1,n9,Xid 79", {}, None, ["Node ID"]),
        # --map decides for its column; the words decide the rest
        (
            "Created,Cluster,Host,Node ID,category",
            f"{T},c1,n1,n9,Xid 79",
            {"timestamp": "Created", "cluster_id": "Cluster", "node_id": "Host"},
            None,
            ["Node ID"],
        ),
        (
            "Cluster_ID,Node_ID,Instance Type,GPUs per node,In Service From",
            f"c1,n1,p5,8,{T}",
            {"gpus_per_node": "GPUs per node"},
            "'Cluster_ID' as cluster_id, 'Node_ID' as node_id, 'Instance Type' as instance_type, "
            "'In Service From' as in_service_from",
            None,
        ),
    ],
)
def test_canonical_columns_are_found_by_their_words(con, write, sql, header, row, mapping, note, attributes):
    [s] = ingest_files(con, [write("t.csv", f"{header}\n{row}\n")], ReaderOptions(column_map=mapping))
    assert (s.kind, s.rows_ingested, s.rows_rejected) == (
        "incidents" if attributes is not None else "inventory",
        1,
        0,
    )
    worded = [n for n in s.notes if n.startswith("columns read by their words")]
    assert worded == ([f"columns read by their words: {note}"] if note else [])
    if attributes is None:
        assert sql("SELECT cluster_id, node_id, gpus_per_node FROM inventory") == [("c1", "n1", 8)]
        return
    assert sql("SELECT cluster_id, node_id, category FROM events") == [("c1", "n1", "Xid 79")]
    assert s.attribute_columns == attributes


def test_a_file_without_cluster_id_is_of_the_cluster_given(con, write, sql):
    """One cluster's tickets and inventory have no cluster_id column: --cluster names it; a file
    with the column keeps its own; without --cluster the refusal names the flag."""
    inventory = write("inv.csv", "node_id,instance_type,gpus_per_node,in_service_from\nn1,p5,8,2026-01-01\n")
    tickets = write("t.csv", "timestamp,node_id,category\n2026-03-02T04:26:29Z,n1,Xid 79\n")
    own = write("own.csv", "timestamp,cluster_id,node_id,category\n2026-03-03T04:26:29Z,c9,n1,Xid 79\n")
    with pytest.raises(InputError, match=r"inv.csv: .*missing \['cluster_id'\]\); .*or --cluster NAME"):
        ingest_files(con, [inventory])
    summaries = ingest_files(con, [inventory, tickets, own], ReaderOptions(cluster="c1"))
    assert [(s.kind, s.rows_ingested) for s in summaries] == [
        ("inventory", 1),
        ("incidents", 1),
        ("incidents", 1),
    ]
    assert sql("SELECT cluster_id, node_id FROM inventory") == [("c1", "n1")]
    assert sql("SELECT cluster_id FROM events ORDER BY timestamp_utc") == [("c1",), ("c9",)]
    assert sql("SELECT count(*) FROM rejects") == [(0,)]


def test_two_columns_with_the_same_words_are_not_guessed(con, write):
    with pytest.raises(InputError, match="not an incidents file .missing .'node_id'.."):
        ingest_files(
            con, [write("t.csv", "timestamp,cluster_id,Node ID,node-id,category\nx,c1,n1,n2,Xid 79\n")]
        )


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        (["node_id"], "expected CANONICAL=SOURCE"),
        (["host=hostname"], "not a canonical column"),
        (["node_id=host", "cluster_id=host"], "column 'host' is already read as node_id"),
    ],
)
def test_parse_column_map_errors(pairs, message):
    with pytest.raises(InputError, match=message):
        parse_column_map(pairs)


def test_parse_column_map_keeps_every_source_of_a_column_once():
    pairs = ["node_id=host", "node_id=hostname", "node_id=host", "category=problem"]
    assert parse_column_map(pairs) == {"node_id": ("host", "hostname"), "category": "problem"}


@pytest.mark.parametrize("variant", ["plain", "crlf", "gz"])
def test_blank_lines_keep_their_line_numbers(con, write, sql, variant):
    text = HEADER + GOOD + "\n\n" + "yesterday,c1,n1,gpu_memory,0,j1,m,\n" + GOOD.replace("c1", "c2") + "\n"
    if variant == "crlf":
        text = text.replace("\n", "\r\n")
    name, data = ("i.csv.gz", gzip.compress(text.encode())) if variant == "gz" else ("i.csv", text)
    [s] = ingest_files(con, [write(name, data)])
    assert (s.rows_read, s.rows_ingested, s.rows_rejected) == (6, 2, 4)
    assert sql("SELECT line, raw, reason FROM rejects ORDER BY line") == [
        (3, "", "timestamp is empty"),
        (4, "", "timestamp is empty"),
        (5, "yesterday,c1,n1,gpu_memory,0,j1,m,", "timestamp yesterday is not ISO 8601"),
        (7, "", "timestamp is empty"),
    ]
    assert sql("SELECT cluster_id, line FROM events ORDER BY line") == [("c1", 2), ("c2", 6)]


def _incident(timestamp: str, node: str) -> str:
    return json.dumps({"timestamp": timestamp, "cluster_id": "c1", "node_id": node, "category": "nvlink"})


@pytest.mark.parametrize("variant", ["plain", "crlf", "bom", "gz", "bom-crlf-gz"])
@pytest.mark.parametrize(
    "lines",
    [
        ["ok", "", "bad", "bad"],
        ["", "", "bad", "ok", "", "", "", "bad"],
        ["bad", "  ", "\t", " \t ", "bad", "", "ok", " ", "bad"],
        ["ok", "bad", "", "  ", ""],
    ],
    ids=["blank-between", "leading-and-runs", "whitespace-only", "trailing"],
)
def test_jsonl_rows_keep_their_line_numbers_after_blank_lines(con, write, sql, lines, variant):
    """Polars skips lines of spaces, tabs and carriage returns; the rest keep their line in the file."""
    records = {
        n: _incident("2026-03-02T04:26:29Z" if kind == "ok" else f"day{n}", f"n{n}")
        for n, kind in enumerate(lines, 1)
        if kind in ("ok", "bad")
    }
    text = "\n".join(records.get(n, blank) for n, blank in enumerate(lines, 1)) + "\n"
    if "crlf" in variant:
        text = text.replace("\n", "\r\n")
    if "bom" in variant:
        text = "\ufeff" + text
    name, data = ("i.jsonl.gz", gzip.compress(text.encode())) if "gz" in variant else ("i.jsonl", text)
    [s] = ingest_files(con, [write(name, data)])
    bad = [n for n, kind in enumerate(lines, 1) if kind == "bad"]
    assert (s.rows_read, s.rows_rejected) == (len(records), len(bad))
    assert sql("SELECT line, raw, reason FROM rejects ORDER BY line") == [
        (n, records[n], f"timestamp day{n} is not ISO 8601") for n in bad
    ]
    assert sql("SELECT line, node_id FROM events ORDER BY line") == [
        (n, f"n{n}") for n, kind in enumerate(lines, 1) if kind == "ok"
    ]


def _fixture_files(tmp_path: Path) -> list[Path]:
    """Incidents with duplicates near and far (within and across batches), bad rows and blank
    lines; the same as Parquet; inventory whose later rows replace earlier ones for a key."""
    rows = []
    for i in range(150):
        minute = i % 60  # every key comes back once or twice, 60 rows apart
        rows.append(f"2026-03-02T04:{minute:02d}:00Z,c1,n{minute % 7},gpu_memory,{i % 2},j{i},m{minute}")
        if i % 37 == 0:
            rows += ["", f"2026-03-02T04:{minute:02d}:00Z,c1,n1,,0,j,m"]
    incidents = tmp_path / "incidents.csv"
    incidents.write_text(
        "timestamp,cluster_id,node_id,category,gpu_index,job_id,message\n" + "\n".join(rows) + "\n"
    )
    earlier = tmp_path / "earlier.csv"
    earlier.write_text(
        "timestamp,cluster_id,node_id,category,gpu_index,message\n2026-03-02T04:05:00Z,c1,n5,gpu_memory,1,m5\n"
    )
    parquet = tmp_path / "incidents.parquet"
    pl.read_csv(incidents, infer_schema=False).with_columns(message=pl.col("message") + "p").write_parquet(
        parquet
    )
    inventory = tmp_path / "inventory.csv"
    inventory.write_text(
        "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n"
        + "".join(
            f"c1,n{i % 9},p5,{8 if i % 11 else -1},2026-0{1 + i // 9 % 3}-01,2026-05-{1 + i % 28:02d}\n"
            for i in range(60)
        )
    )
    return [earlier, incidents, parquet, inventory]


def _warehouse_after(db: Path, files: list[Path], batch_rows: int) -> dict[str, list[tuple]]:
    con = warehouse.connect(db)
    for path in files:
        with warehouse.transaction(con):
            fmt = path.suffix.removeprefix(".")
            ingest_canonical(con, path, sha=path.name, fmt=fmt, batch_rows=batch_rows)
    tables = {
        "events": "SELECT * FROM events",
        "rejects": "SELECT file_id, path, line, raw, reason FROM rejects",
        "inventory": "SELECT * FROM inventory",
        "files": "SELECT file_id, rows_read, rows_ingested, rows_duplicate, rows_rejected"
        " FROM ingested_files",
    }
    found = {name: con.sql(query + " ORDER BY ALL").fetchall() for name, query in tables.items()}
    con.close()
    return found


def test_batch_size_does_not_change_the_warehouse(tmp_path):
    files = _fixture_files(tmp_path)
    one_batch = _warehouse_after(tmp_path / "a.duckdb", files, BATCH_ROWS)
    assert one_batch == _warehouse_after(tmp_path / "b.duckdb", files, 97)
    assert one_batch == _warehouse_after(tmp_path / "c.duckdb", files, 1)
    counts = {row[0]: row[1:] for row in one_batch["files"]}
    assert counts[2] == (160, 59, 91, 10) and counts[3] == (160, 60, 90, 10)  # 60 keys, 1 stored
    assert counts[4] == (60, 27, 27, 6)  # 9 nodes x 3 start dates; gpus_per_node -1 rejected


def test_rows_are_stored_classified_as_the_taxonomy_would_with_a_map_and_left_to_it_without(con, write, sql):
    """With the category map the new events need no update after the file (classes joined as they
    are stored); without it (failcast extract's scratch warehouse) they are left unclassified."""
    rows = "".join(
        f"2026-03-0{day}T00:00:00Z,c1,n1,{c},0,j,m,\n"
        for day in (2, 3)
        for c in ("Faulty GPU", "Maintenance", "Cosmic Rays", "XID 79")
    )
    path = write("incidents.csv", HEADER + rows)
    cmap = parse_category_map(["Maintenance=other:noninterrupting"])
    with warehouse.transaction(con):
        summary = ingest_canonical(con, path, sha="a", fmt="csv", batch_rows=3, category_map=cmap)
    stored = sql("SELECT DISTINCT category, failure_class, interrupting, source_interrupting FROM events")
    expected = {
        (
            c,
            k.failure_class.value,
            k.interrupting if k.user_interrupting is None else k.user_interrupting,
            None,
        )
        for c in ("Faulty GPU", "Maintenance", "Cosmic Rays", "XID 79")
        for k in [classify(c, cmap)]
    }
    assert set(stored) == expected and ("Maintenance", "other", False, None) in expected
    assert summary.notes == taxonomy.category_notes(
        [("Cosmic Rays", 2)], taxonomy.classes_frame(["Cosmic Rays"], cmap)
    )
    assert len(summary.notes) == 1 and "'Cosmic Rays' 2" in summary.notes[0]
    other = write("later.csv", HEADER + rows.replace("2026-03-0", "2026-04-0"))
    with warehouse.transaction(con):
        summary = ingest_canonical(con, other, sha="b", fmt="csv")
    assert sql("SELECT count(*) FROM events WHERE failure_class IS NULL") == [(8,)] and summary.notes == []


_PEAK_RSS_CHILD = """
import sys
from pathlib import Path
from pipeline import warehouse
from pipeline.readers.canonical import ingest_canonical
con = warehouse.connect(Path(sys.argv[1]))
with warehouse.transaction(con):
    ingest_canonical(con, Path(sys.argv[2]), sha="x", fmt="csv")
print(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")))
"""


def _peak_rss_mb(tmp_path: Path, rows: int, compressed: bool) -> float:
    """Peak RSS of a fresh process ingesting ``rows`` distinct incidents (a fork would inherit ours)."""
    path = tmp_path / f"{rows}.csv"
    pl.DataFrame({"i": pl.int_range(rows, eager=True)}).select(
        timestamp=(pl.datetime(2026, 1, 1) + pl.duration(seconds=pl.col("i"))).dt.strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        ),
        cluster_id=pl.lit("c1"),
        node_id=pl.format("n{}", pl.col("i") % 5000),
        category=pl.lit("gpu_memory"),
        gpu_index=pl.col("i") % 8,
        job_id=pl.format("job-{}", pl.col("i") // 100),
        message=pl.format("ecc error {}", pl.col("i")),
    ).write_csv(path)
    if compressed:
        path = path.with_suffix(".csv.gz")
        path.write_bytes(gzip.compress(path.with_suffix("").read_bytes(), 1))
    child = [sys.executable, "-c", _PEAK_RSS_CHILD, str(tmp_path / f"{rows}.duckdb"), str(path)]
    done = subprocess.run(child, capture_output=True, text=True, check=True, cwd=Path(__file__).parents[2])
    return int(done.stdout.split()[-1]) / 1024


@pytest.mark.parametrize("compressed", [False, True], ids=["csv", "csv.gz"])
def test_peak_memory_barely_grows_with_the_file(tmp_path, compressed):
    """Both sizes fill whole batches, so the growth is what the reader keeps per row. Reading the
    file whole, peak RSS grew by ~600 MB from 250k to 1 M rows; streamed, by ~150-200 MB (Polars
    read-ahead and DuckDB's cache of the rows written). A ``.gz`` is streamed from a plain copy."""
    growth_mb = _peak_rss_mb(tmp_path, 1_000_000, compressed) - _peak_rss_mb(tmp_path, 250_000, compressed)
    assert growth_mb < 400, f"peak RSS grew by {growth_mb:.0f} MB from 250k to 1 M rows"


@pytest.mark.parametrize("variant", ["plain", "crlf", "gz"])
def test_rows_after_a_quoted_field_spanning_lines_keep_their_physical_lines(con, write, sql, variant):
    multi = '2026-03-02T04:26:29Z,c1,n2,gpu_memory,0,j1,"first\nsecond\nthird",\n'
    text = HEADER + multi + "\n" + "yesterday,c1,n1,gpu_memory,0,j1,m,\n" + GOOD
    if variant == "crlf":
        text = text.replace("\n", "\r\n")
    name, data = ("i.csv.gz", gzip.compress(text.encode())) if variant == "gz" else ("i.csv", text)
    [s] = ingest_files(con, [write(name, data)])
    assert (s.rows_read, s.rows_ingested, s.rows_rejected) == (4, 2, 2)
    assert sql("SELECT line, raw, reason FROM rejects ORDER BY line") == [
        (5, "", "timestamp is empty"),
        (6, "yesterday,c1,n1,gpu_memory,0,j1,m,", "timestamp yesterday is not ISO 8601"),
    ]
    assert sql("SELECT line, node_id FROM events ORDER BY line") == [(2, "n2"), (7, "n1")]


@pytest.mark.parametrize(
    ("name", "sep"),
    [
        ("t.csv", ","),
        ("t.csv", ";"),  # a spreadsheet in a locale where the comma is the decimal mark
        ("t.tsv", "\t"),
        ("t.txt", "\t"),  # told from the header
        ("t.csv", "|"),
    ],
)
def test_the_separator_is_read_from_the_header(con, write, sql, name, sep):
    rows = [
        ["timestamp", "cluster_id", "node_id", "category", "message"],
        ["2026-03-02T04:26:29Z", "c1", "n1", "Xid 79", '"lost, then; back|again"'],
        ["not a time", "c1", "n2", "Xid 79", "m"],
        ["2026-03-02T05:00:00Z", "c1", "n2", "ECC", "m"],
    ]
    path = write(name, "".join(sep.join(r) + "\n" for r in rows))
    [s] = ingest_files(con, [path])
    assert (s.format, s.kind, s.rows_read, s.rows_ingested, s.rows_rejected) == ("csv", "incidents", 3, 2, 1)
    assert sql("SELECT node_id, message FROM events ORDER BY node_id") == [
        ("n1", "lost, then; back|again"),
        ("n2", "m"),
    ]
    assert sql("SELECT line, raw FROM rejects") == [(3, sep.join(rows[2]))]


@pytest.mark.parametrize(
    ("time_format", "text", "utc"),
    [
        ("%d.%m.%Y %H:%M", "01.03.2026 05:26", "2026-03-01 04:26:00"),  # day first, read in Europe/Paris
        ("%m/%d/%Y %I:%M %p", "03/01/2026 5:26 PM", "2026-03-01 16:26:00"),
        ("%d/%m/%Y %H:%M:%S %z", "01/03/2026 05:26:00 +0000", "2026-03-01 05:26:00"),  # its offset wins
        ("%d.%m.%Y %H:%M", "2026-03-01T05:26:00Z", "2026-03-01 05:26:00"),  # ISO still read beside it
        ("%d.%m.%Y %H:%M", "1772342760", "2026-03-01 05:26:00"),  # and epoch seconds
        ("%Y-%d-%m %H:%M", "2026-01-03 05:26", "2026-03-01 04:26:00"),  # tried first: its order wins
    ],
)
def test_time_format_reads_the_exports_own_times(con, write, sql, time_format, text, utc):
    header = "timestamp,cluster_id,node_id,category,resolved_at\n"
    path = write("t.csv", header + f"{text},c1,n1,Xid 79,\n31.02.2026 10:00,c1,n2,Xid 79,\n")
    [s] = ingest_files(con, [path], ReaderOptions(timezone="Europe/Paris", time_format=time_format))
    assert (s.rows_ingested, s.rows_rejected) == (1, 1)
    assert sql("SELECT CAST(timestamp_utc AS VARCHAR) FROM events") == [(utc,)]
    [(reason,)] = sql("SELECT reason FROM rejects")
    assert reason == "timestamp 31.02.2026 10:00 matches neither --time-format nor ISO 8601"


def test_time_format_reads_inventory_and_resolved_times(con, write, sql):
    inventory = "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n"
    inventory += "c1,n1,p5,8,01.02.2026 00:00,01.04.2026 00:00\n"
    tickets = "timestamp,cluster_id,node_id,category,resolved_at\nc,c1,n1,Xid 79,02.03.2026 07:00\n"
    tickets = tickets.replace("\nc,", "\n02.03.2026 05:00,")
    options = ReaderOptions(time_format="%d.%m.%Y %H:%M")
    [inv, inc] = ingest_files(con, [write("inv.csv", inventory), write("t.csv", tickets)], options)
    assert (inv.rows_ingested, inc.rows_ingested) == (1, 1)
    assert sql(
        "SELECT CAST(in_service_from_utc AS VARCHAR), CAST(in_service_to_utc AS VARCHAR) FROM inventory"
    ) == [("2026-02-01 00:00:00", "2026-04-01 00:00:00")]
    assert sql("SELECT CAST(resolved_at_utc AS VARCHAR) FROM events") == [("2026-03-02 07:00:00",)]


@pytest.mark.parametrize(
    ("time_format", "message"),
    [("dd.mm.yyyy", "has no strptime code"), ("%d.%m.%Q", "Unrecognized format for strftime/strptime: %Q")],
)
def test_a_bad_time_format_is_one_error_before_any_file(time_format, message):
    with pytest.raises(ValueError, match=message):
        ReaderOptions(time_format=time_format)


@pytest.mark.parametrize(
    ("name", "text", "line", "command"),
    [
        (
            "t.csv",
            HEADER.replace(",", ";") + "2026-03-02T04:26:29Z;c1;n1;K\xfchlung;;;;\n",
            2,
            "iconv -f cp1252",
        ),
        (
            "t.csv.gz",
            HEADER + "2026-03-02T04:26:29Z,c1,n1,ok,,,,\n" * 2 + "x,c1,n1,\xc4nderung,,,,\n",
            4,
            "zcat",
        ),
        ("t.jsonl", '{"timestamp": "x"}\n{"category": "K\xfchlung"}\n', 2, "iconv -f cp1252"),
        ("t.json", '[\n  {"timestamp": "x"},\n  {"category": "K\xfchlung"}\n]', 3, "iconv -f cp1252"),
    ],
)
def test_text_that_is_not_utf8_names_its_line_and_how_to_convert(con, write, name, text, line, command):
    """A spreadsheet's CSV saved in Windows-1252: one line with the file's line and byte."""
    data = text.encode("cp1252")
    path = write(name, gzip.compress(data) if name.endswith(".gz") else data)
    with pytest.raises(InputError) as error:
        ingest_files(con, [path])
    message = str(error.value)
    assert message.startswith(f"{path}:{line}: cannot read as ") and "not UTF-8 (byte 0x" in message
    assert command in message and f"> 'utf8-{name.removesuffix('.gz')}'" in message


@pytest.mark.parametrize("absent", ["NULL", "null", "None", "nan", "NaN", "NaT", "N/A", "n/a", "-", " NULL "])
def test_no_value_written_as_exports_write_it_is_empty_not_rejected(con, write, sql, absent):
    """SQL's NULL, pandas' nan/NaT, Python's None, a ticket system's N/A or - in an optional field."""
    header = "timestamp,cluster_id,node_id,category,gpu_index,resolved_at\n"
    rows = f"2026-03-02T04:26:29Z,c1,n1,Xid 79,{absent},{absent}\n2026-03-02T05:00:00Z,c1,n2,Xid 79,x,y\n"
    inventory = "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n"
    inventory += f"c1,n1,p5,8,2026-01-01T00:00:00Z,{absent}\n"
    [inv, inc] = ingest_files(
        con,
        [write("inv.csv", inventory), write("t.csv", header + rows)],
        ReaderOptions(max_rejected_percent=100),
    )
    assert (inv.rows_ingested, inc.rows_ingested, inc.rows_rejected) == (1, 1, 1)
    assert sql("SELECT in_service_to_utc FROM inventory") == [(None,)]
    assert sql("SELECT gpu_index, resolved_at_utc FROM events") == [(None, None)]
    assert sql("SELECT line, reason FROM rejects") == [(3, "gpu_index x is not a non-negative integer")]


def test_header_cells_without_a_name_are_named_by_their_position(con, write, sql):
    """A spreadsheet's export ends every line with commas: the unnamed columns are attributes
    column_5 and column_6 (a value under them stays), not a key "" and "_duplicated_0"."""
    text = "timestamp,cluster_id,node_id,category,,\r\n2026-03-02T04:26:29Z,c1,n1,Xid 79,rack 7,\r\n"
    [s] = ingest_files(con, [write("t.csv", text)])
    assert (s.rows_ingested, s.attribute_columns) == (1, ["column_5", "column_6"])
    assert sql("SELECT attributes->>'column_5' FROM events") == [("rack 7",)]
