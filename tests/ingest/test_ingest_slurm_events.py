"""sacctmgr show event -P exports -> events: outage states per node, open events, any column order,
re-exports that close an open event, hostile text, and every line accounted for."""

from __future__ import annotations

import gzip
from datetime import datetime

import pytest

from pipeline import rebuild, warehouse
from pipeline.ingest import ReaderOptions, detect_format, ingest_files

# Header and row shapes: SchedMD/slurm src/sacctmgr/event_functions.c (default Format), common.c
# (column names), src/common/parse_time.c (Unknown), slurm_protocol_defs.c (compact states).
EVENTS = """Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User
tiger||2024-05-01T00:00:00|2024-05-01T00:05:00|||
tiger|gpu-001|2024-05-02T12:00:00|2024-05-02T14:00:00|DOWN*|Not responding|slurm(64030)
tiger|gpu-[002-003]|2024-05-03T08:00:00|Unknown|DRAIN|Xid 79, GPU fell off the bus|root(0)
tiger|gpu-004|2024-05-03T09:00:00|2024-05-03T10:00:00|IDLE*||
tiger|gpu-005|2024-05-04T09:00:00||FAIL||
tiger|gpu-006|2024-05-04T10:00:00|2024-05-04T11:00:00|DRNG|kernel panic|alice(1001)
"""


def _counts(s):
    return (s.rows_read, s.rows_ingested, s.rows_duplicate, s.rows_rejected, s.rows_ignored)


def test_outage_events_per_node_with_reason_user_and_open_end(con, write, sql):
    path = write("events.txt", EVENTS)
    assert detect_format(path) == "slurm-events"
    [s] = ingest_files(con, [path])
    assert (s.format, s.kind) == ("slurm-events", "node_events")
    assert _counts(s) == (7, 4, 0, 0, 3)  # header, cluster event, IDLE* ignored
    assert sum(_counts(s)[1:]) == s.rows_read
    got = sql(
        "SELECT node_id, cluster_id, timestamp_utc, resolved_at_utc, category, interrupting, message,"
        " source_format FROM events ORDER BY node_id"
    )
    assert got == [
        (
            "gpu-001",
            "tiger",
            datetime(2024, 5, 2, 12),
            datetime(2024, 5, 2, 14),
            "Not responding",
            True,
            "DOWN*: Not responding (set by slurm(64030))",
            "slurm-events",
        ),
        *[
            (
                node,
                "tiger",
                datetime(2024, 5, 3, 8),
                None,
                "Xid 79, GPU fell off the bus",
                True,
                "DRAIN: Xid 79, GPU fell off the bus (set by root(0))",
                "slurm-events",
            )
            for node in ("gpu-002", "gpu-003")
        ],
        ("gpu-005", "tiger", datetime(2024, 5, 4, 9), None, "FAIL", True, "FAIL:", "slurm-events"),
        (
            "gpu-006",
            "tiger",
            datetime(2024, 5, 4, 10),
            datetime(2024, 5, 4, 11),
            "kernel panic",
            True,
            "DRNG: kernel panic (set by alice(1001))",
            "slurm-events",
        ),
    ]
    assert any("5 node event(s) from 4 line(s)" in n for n in s.notes)
    assert any("3 event(s) still open" in n for n in s.notes)


@pytest.mark.parametrize(
    ("state", "kept"),
    [
        ("DOWN", True),
        ("DOWN~", True),
        ("DRAIN$", True),
        ("DRAINED", True),
        ("DRAINING", True),
        ("FAILG*", True),
        ("FAILING", True),
        ("IDLE+DRAIN", True),
        ("IDLE", False),
        ("MAINT", False),
        ("ALLOC+", False),
        ("POW_DN", False),
    ],
)
def test_outage_states(con, write, state, kept):
    text = f"NodeName|TimeStart|State\nn1|2024-05-01T00:00:00|{state}\n"
    [s] = ingest_files(con, [write("ev.txt", text)], ReaderOptions(fmt="slurm-events"))
    assert (s.rows_ingested, s.rows_ignored) == ((1, 1) if kept else (0, 2))


def test_any_column_order_trailing_bar_epoch_times_timezone_and_cluster_option(con, write, sql):
    text = (
        "User|Reason|State|TimeEnd|NodeName|TimeStart|\n"
        "root(0)|PSU failed|DOWN|1714572000|n7|1714564800|\n"
        "root(0)|ECC storm|DRAIN|2024-05-02T10:00:00|n8|2024-05-02T09:00:00|\n"
    )
    [s] = ingest_files(con, [write("ev.txt", text)], ReaderOptions(cluster="lion", timezone="Europe/Berlin"))
    assert s.format == "slurm-events" and s.rows_ingested == 2
    got = sql("SELECT node_id, cluster_id, timestamp_utc, resolved_at_utc, category FROM events ORDER BY 1")
    assert got == [
        ("n7", "lion", datetime(2024, 5, 1, 12), datetime(2024, 5, 1, 14), "PSU failed"),
        ("n8", "lion", datetime(2024, 5, 2, 7), datetime(2024, 5, 2, 8), "ECC storm"),
    ]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("c|n1|2024-05-01T00:00:00|Unknown|DOWN", "expected 7 |-separated fields"),
        ("c|n1|yesterday|Unknown|DOWN|x|root(0)", "TimeStart yesterday is not a time"),
        ("c|n1|Unknown|Unknown|DOWN|x|root(0)", "TimeStart Unknown is not a time"),
        ("c|n1|2024-05-01T00:00:00|soon|DOWN|x|root(0)", "TimeEnd soon is not a time"),
        ("c|n1|2024-05-02T00:00:00|2024-05-01T00:00:00|DOWN|x|root(0)", "TimeEnd is before TimeStart"),
        ("c|n1|2024-05-01T00:00:00|Unknown||x|root(0)", "State is empty"),
        ("c|n[1-|2024-05-01T00:00:00|Unknown|DOWN|x|root(0)", "hostlist 'n[1-'"),
        ("c|n1|2024-05-01T00:00:00|Unknown|DOWN|bad \ufffd byte|root(0)", "not valid UTF-8"),
    ],
)
def test_bad_lines_are_rejected_with_line_and_reason(con, write, sql, line, reason):
    header = "Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User\n"
    raw = (header + line + "\n").encode().replace("\ufffd".encode(), b"\xff")
    [s] = ingest_files(con, [write("ev.txt", raw)], ReaderOptions(fmt="slurm-events"))
    assert (s.rows_rejected, s.rows_ingested) == (1, 0)
    [(line_no, text, why)] = sql("SELECT line, raw, reason FROM rejects")
    assert line_no == 2 and reason in why and text.startswith("c|n")


def test_hostile_reasons_are_stored_verbatim(con, write, sql):
    reasons = [
        'it\'s "quoted"',
        "\x1b[31mred\x1b[0m",
        "<script>alert(1)</script>",
        "pipe | inside | reason",
        "x" * 5000,
    ]
    text = "NodeName|TimeStart|State|Reason|User\n" + "".join(
        f"n{i}|2024-05-01T00:00:0{i}|DOWN|{r}|root(0)\n" for i, r in enumerate(reasons)
    )
    [s] = ingest_files(con, [write("ev.txt", text)], ReaderOptions(fmt="slurm-events"))
    assert (s.rows_ingested, s.rows_rejected) == (5, 0)
    assert [r[0] for r in sql("SELECT category FROM events ORDER BY node_id")] == reasons


def test_crlf_gzip_blank_lines_and_truncated_gzip(con, write, sql):
    text = EVENTS.replace("\n", "\r\n") + "\r\n\r\n"
    data = gzip.compress(text.encode())
    [s] = ingest_files(con, [write("ev.txt.gz", data)])
    assert s.format == "slurm-events"
    assert _counts(s) == (9, 4, 0, 0, 5)
    [t] = ingest_files(con, [write("cut.txt.gz", data[: len(data) - 30])], ReaderOptions(fmt="slurm-events"))
    assert t.rows_rejected == 1 and "truncated" in sql("SELECT reason FROM rejects")[0][0]
    assert sum(_counts(t)[1:]) == t.rows_read


def test_reingest_is_idempotent_and_a_later_export_closes_open_events(con, write, sql):
    first = write("a.txt", EVENTS)
    ingest_files(con, [first])
    [again] = ingest_files(con, [first])
    assert again.skipped
    before = sql("SELECT * EXCLUDE (file_id) FROM events ORDER BY ALL")
    # the same export with one more line: every old line is a duplicate
    [s] = ingest_files(con, [write("b.txt", EVENTS + "tiger|gpu-007|2024-05-05T00:00:00|Unknown|DOWN|x|\n")])
    assert _counts(s) == (8, 1, 4, 0, 3)
    assert sql("SELECT * EXCLUDE (file_id) FROM events WHERE node_id <> 'gpu-007' ORDER BY ALL") == before
    # a later export in which the drain of gpu-002/003 ended
    closed = EVENTS.replace("2024-05-03T08:00:00|Unknown", "2024-05-03T08:00:00|2024-05-04T08:00:00")
    [c] = ingest_files(con, [write("c.txt", closed)])
    assert (c.rows_ingested, c.rows_duplicate) == (1, 3)
    drained = sql("SELECT count(*), max(resolved_at_utc) FROM events WHERE node_id IN ('gpu-002', 'gpu-003')")
    assert drained == [(2, datetime(2024, 5, 4, 8))]
    assert any("2 stored open event(s) closed" in n for n in c.notes)
    # the incremental rebuild revisits the nodes whose events the export closed: their incidents
    # end too, as a full rebuild's do (they stayed open until one)
    ended = (
        "SELECT node_id, resolved_at_utc FROM incidents WHERE node_id IN ('gpu-002', 'gpu-003') ORDER BY 1"
    )
    assert sql(ended) == [("gpu-002", datetime(2024, 5, 4, 8)), ("gpu-003", datetime(2024, 5, 4, 8))]
    incidents = sql("SELECT * FROM incidents ORDER BY ALL")
    with warehouse.transaction(con):
        rebuild.rebuild_incidents(con, full=True)
    assert sql("SELECT * FROM incidents ORDER BY ALL") == incidents


def test_header_without_needed_columns_is_one_clear_error(con, write):
    from pipeline.ingest import InputError

    with pytest.raises(InputError, match=r"ev.txt:1: sacctmgr event header lacks \['state'\]"):
        path = write("ev.txt", "NodeName|TimeStart|Reason\nn1|2024-05-01T00:00:00|x\n")
        ingest_files(con, [path], ReaderOptions(fmt="slurm-events"))
