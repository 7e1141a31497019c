"""Slurm sacct exports -> jobs: any column order, hostlists, states, steps, re-exports, bad lines."""

from __future__ import annotations

import re
from datetime import datetime

import pytest

from pipeline.ingest import InputError, ReaderOptions, ingest_files
from pipeline.readers.hostlist import HostlistError, expand

SACCT = """JobID|JobName|Partition|State|ExitCode|Start|End|ElapsedRaw|NNodes|NodeList
881204|pretrain-7b|gpu|NODE_FAIL|0:0|2024-03-01T10:00:03|2024-03-01T13:12:44|11561|4|gpu-[001-004]
881204.batch|batch||NODE_FAIL|0:0|2024-03-01T10:00:03|2024-03-01T13:12:44|11561|1|gpu-001
881204.0|python||NODE_FAIL|0:0|2024-03-01T10:00:05|2024-03-01T13:12:44|11559|4|gpu-[001-004]
881207|eval|gpu|FAILED|1:0|2024-03-01T11:02:10|2024-03-01T11:02:55|45|1|gpu-017
881210|sweep|gpu|TIMEOUT|0:0|2024-03-01T12:00:00|2024-03-02T12:00:12|86412|2|gpu-[020-021]
881215|debug|gpu|CANCELLED by 51234|0:0|2024-03-01T12:30:00|2024-03-01T12:31:00|60|1|gpu-030
881216|boot|gpu|BOOT_FAIL|0:0|2024-03-01T12:40:00|2024-03-01T12:41:00|60|2|gpu-[040,042]
"""


def test_sacct_jobs(con, write, sql):
    [s] = ingest_files(con, [write("sacct.txt", SACCT)], ReaderOptions(cluster="c1"))
    assert (s.kind, s.format) == ("jobs", "sacct")
    assert (s.rows_read, s.rows_ingested, s.rows_duplicate, s.rows_rejected, s.rows_ignored) == (
        8,
        5,
        0,
        0,
        3,
    )
    got = sql("SELECT job_id, state, interrupted, nnodes, nodes, elapsed_hours FROM jobs ORDER BY job_id")
    assert got == [
        ("881204", "NODE_FAIL", True, 4, ["gpu-001", "gpu-002", "gpu-003", "gpu-004"], 11561 / 3600),
        ("881207", "FAILED", False, 1, ["gpu-017"], 45 / 3600),
        ("881210", "TIMEOUT", False, 2, ["gpu-020", "gpu-021"], 86412 / 3600),
        ("881215", "CANCELLED", False, 1, ["gpu-030"], 60 / 3600),
        ("881216", "BOOT_FAIL", True, 2, ["gpu-040", "gpu-042"], 60 / 3600),
    ]
    assert sql("SELECT start_utc, cluster_id FROM jobs WHERE job_id = '881204'") == [
        (datetime(2024, 3, 1, 10, 0, 3), "c1")
    ]


def test_sacct_other_column_order_trailing_bar_epoch_times_and_elapsed(con, write, sql):
    text = (
        "NodeList|State|End|Start|JobID|Elapsed|Cluster|\n"
        "n[1-2]|COMPLETED|1709290800|1709287200|77|1-01:00:00|tiger|\n"
        "n3|RUNNING|Unknown|1709287200|78|00:10:00|tiger|\n"
        "None assigned|PENDING|Unknown|Unknown|79|00:00:00|tiger|\n"
    )
    [s] = ingest_files(con, [write("sacct.txt", text)])
    assert (s.rows_ingested, s.rows_rejected) == (3, 0)
    got = sql(
        "SELECT job_id, cluster_id, start_utc, end_utc, elapsed_hours, nnodes, nodes FROM jobs ORDER BY 1",
    )
    assert got == [
        ("77", "tiger", datetime(2024, 3, 1, 10), datetime(2024, 3, 1, 11), 25.0, 2, ["n1", "n2"]),
        ("78", "tiger", datetime(2024, 3, 1, 10), None, 10 / 60, 1, ["n3"]),
        ("79", "tiger", None, None, 0.0, 0, []),
    ]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (
            "881300|x|gpu|COMPLETED|0:0|2024-03-01T10:00:03|2024-03-01T13:12:44|11561|4",
            "expected 10 |-separated",
        ),
        (
            "881301|x|gpu|COMPLETED|0:0|yesterday|2024-03-01T13:12:44|1|1|gpu-001",
            "Start yesterday is not a time",
        ),
        (
            "881302|x|gpu|COMPLETED|0:0|2024-03-01T10:00:03|2024-02-01T13:12:44|1|1|gpu-001",
            "End is before Start",
        ),
        (
            "881303|x|gpu|COMPLETED|0:0|2024-03-01T10:00:03|2024-03-01T13:12:44|1|1|gpu-[001-",
            "unbalanced brackets",
        ),
        ("881304|x|gpu|COMPLETED|0:0|2024-03-01T10:00:03|2024-03-01T13:12:44|1|four|gpu-001", "NNodes four"),
        ("|x|gpu|COMPLETED|0:0|2024-03-01T10:00:03|2024-03-01T13:12:44|1|1|gpu-001", "JobID is empty"),
    ],
)
def test_sacct_bad_lines_are_rejected(con, write, line, reason, sql):
    [s] = ingest_files(con, [write("sacct.txt", SACCT + line + "\n")], ReaderOptions(cluster="c1"))
    assert (s.rows_ingested, s.rows_rejected) == (5, 1)
    [(line_no, raw, got)] = sql("SELECT line, raw, reason FROM rejects")
    assert (line_no, raw) == (9, line)
    assert reason in got


def test_sacct_re_export_updates_states_and_counts_duplicates(con, write, sql):
    header = "JobID|State|Start|End|NodeList\n"
    done = "2|COMPLETED|2024-03-01T10:00:00|2024-03-01T11:00:00|n2\n"
    ingest_files(con, [write("a.txt", header + "1|RUNNING|2024-03-01T10:00:00|Unknown|n1\n" + done)])
    later = header + "1|NODE_FAIL|2024-03-01T10:00:00|2024-03-01T12:00:00|n1\n" + done + header
    [s] = ingest_files(con, [write("b.txt", later)])
    assert (s.rows_read, s.rows_ingested, s.rows_duplicate, s.rows_ignored) == (4, 1, 1, 2)
    assert sql("SELECT job_id, state, interrupted FROM jobs ORDER BY 1") == [
        ("1", "NODE_FAIL", True),
        ("2", "COMPLETED", False),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("881204|pretrain|NODE_FAIL|2024-03-01T10:00:03|2024-03-01T13:12:44|gpu-001\n", "lacks"),
        ("JobID|State|NodeList\n1|COMPLETED|n1\n", "sacct header lacks ['start', 'end']"),
    ],
)
def test_sacct_without_a_usable_header_is_an_input_error(con, write, text, message, sql):
    path = write("sacct.txt", text)
    with pytest.raises(InputError, match=re.escape(message)) as err:
        ingest_files(con, [path], ReaderOptions(fmt="sacct"))
    assert str(path) + ":1:" in str(err.value)
    assert sql("SELECT count(*) FROM ingested_files") == [(0,)]


@pytest.mark.parametrize(
    ("expr", "hosts"),
    [
        ("gpu-[001-004,010]", ["gpu-001", "gpu-002", "gpu-003", "gpu-004", "gpu-010"]),
        ("gpu-017", ["gpu-017"]),
        ("a[1-2]b,c", ["a1b", "a2b", "c"]),
        ("r[1-2]n[8-9]", ["r1n8", "r1n9", "r2n8", "r2n9"]),
        ("n[9-11]", ["n9", "n10", "n11"]),
        ("None assigned", []),
        ("", []),
    ],
)
def test_hostlist_expand(expr, hosts):
    assert expand(expr) == hosts


@pytest.mark.parametrize("expr", ["gpu-[001-", "gpu-[a-b]", "x,,y", "n[5-3]", "n]1["])
def test_hostlist_errors(expr):
    with pytest.raises(HostlistError, match="hostlist"):
        expand(expr)
