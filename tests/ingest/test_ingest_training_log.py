"""PyTorch training-job logs: watchdog timeouts, elastic agent restarts, time formats, bad lines."""

from __future__ import annotations

import gzip
from datetime import datetime

import pytest

from pipeline import warehouse
from pipeline.ingest import ReaderOptions, detect_format, ingest_files

# Real-shaped lines (sources: pytorch/pytorch ProcessGroupNCCL.cpp checkTimeout and
# torch/distributed/elastic/agent/server/api.py; docs/ingest.md cites them).
WATCHDOG = (
    "[rank{r}]:[E810 03:04:{s} ProcessGroupNCCL.cpp:683] [Rank {r}] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=78, OpType=BROADCAST, NumelIn=80, NumelOut=80, Timeout(ms)=600000) ran for "
    "{ms} milliseconds before timing out."
)
RDZV_GLOG = (
    "I0810 {t} 1 torch/distributed/elastic/agent/server/api.py:525] [default] Rendezvous complete for "
    "workers. Result:"
)
FAILED_GLOG = (
    "I0810 {t} 140 torch/distributed/elastic/agent/server/api.py:700] [default] Worker group FAILED. "
    "3/3 attempts left; will restart worker group"
)
RDZV_PY = (
    "[2025-08-10 03:20:00,000] torch.distributed.elastic.agent.server.api: [INFO] [default] Rendezvous "
    "complete for workers. Result:"
)

LOG = "\n".join(
    [
        RDZV_GLOG.format(t="02:00:00.000000"),
        "  restart_count=0",
        "  master_addr=worker-0",
        "step 100 | loss 2.31",
        WATCHDOG.format(r=1, s="11.000000000", ms=600000),  # hanging since 02:54:11
        WATCHDOG.format(r=3, s="12.500000000", ms=600500),  # since 02:54:12
        FAILED_GLOG.format(t="03:04:41.000000"),
        RDZV_PY,  # restart 03:20:00
        RDZV_GLOG.format(t="03:20:01.000000"),  # the other agent's rendezvous: same restart
        "step 101 | loss 2.30",
    ]
)


def counts(s):
    return (s.rows_read, s.rows_ingested, s.rows_duplicate, s.rows_rejected, s.rows_ignored)


def test_job_log_counts_events_and_no_incidents(con, write, sql):
    path = write("job-77.log", LOG + "\n", mtime="2025-09-01")
    [s] = ingest_files(con, [path], ReaderOptions(cluster="c1"))
    assert s.format == "training-log"
    assert counts(s) == (10, 6, 0, 0, 4)
    assert sum(counts(s)[1:]) == s.rows_read
    rows = sql(
        "SELECT line, timestamp_utc, node_id, job_id, category, interrupting, source_format FROM events"
        " ORDER BY line"
    )
    assert [r[4] for r in rows] == [
        "rendezvous_complete",
        "nccl_timeout",
        "nccl_timeout",
        "worker_group_failed",
        "rendezvous_complete",
        "rendezvous_complete",
    ]
    assert rows[1][1] == datetime(2025, 8, 10, 3, 4, 11)
    assert rows[4][1] == datetime(2025, 8, 10, 3, 20)
    assert {r[2:4] for r in rows} == {("job:job-77", "job-77")}
    assert [r[5] for r in rows] == [False, True, True, True, False, False]
    # every category is in the taxonomy: no "not in the taxonomy" note, no class ``other``
    assert not any("taxonomy" in n for n in s.notes)
    classes = sql("SELECT DISTINCT failure_class FROM events ORDER BY 1")
    assert classes == [("nccl_timeout",), ("undetermined",)]
    # job symptoms, not node faults: no incidents, no estimated node
    assert sql("SELECT count(*) FROM incidents") == [(0,)]


def test_idempotent_and_grown_log(con, write, sql):
    path = write("job.log", LOG + "\n", mtime="2025-09-01")
    ingest_files(con, [path])
    [again] = ingest_files(con, [path])
    assert again.skipped
    grown = write("job-copy.log", LOG + "\n" + FAILED_GLOG.format(t="04:00:00.000000") + "\n", "2025-09-01")
    [s] = ingest_files(con, [grown], ReaderOptions(job="job"))
    assert counts(s) == (11, 1, 6, 0, 4)
    assert sql("SELECT count(*) FROM events") == [(7,)]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # kubectl logs --timestamps (nanoseconds, Z) before a glog line: the ISO time wins (it has a year)
        (
            "2025-08-10T03:04:11.123456789Z " + WATCHDOG.format(r=0, s="11.1", ms=5),
            datetime(2025, 8, 10, 3, 4, 11, 123456),
        ),
        (  # an offset converts to UTC
            "2025-08-10 05:04:11+02:00 " + FAILED_GLOG.format(t="03:04:11.0"),
            datetime(2025, 8, 10, 3, 4, 11),
        ),
        ("INFO 2025-08-10 03:04:11,250 " + RDZV_PY[27:], datetime(2025, 8, 10, 3, 4, 11, 250000)),
        # torchrun --tee prefix before a glog time; c10 pads the month in some builds
        ("[default0]:[E0810 03:04:11.000001 ProcessGroupNCCL.cpp:1" + WATCHDOG[47:].format(r=0, ms=1), None),
        (
            "W0810 03:04:11.5 9 torch/distributed/elastic/agent/server/api.py:700] [default] Worker group "
            "UNHEALTHY. 1/3 attempts left; will restart worker group",
            datetime(2025, 8, 10, 3, 4, 11, 500000),
        ),
    ],
)
def test_time_prefixes(con, write, sql, line, expected):
    path = write("j.log", line + "\n", mtime="2025-09-01")
    [s] = ingest_files(con, [path], ReaderOptions(fmt="training-log"))
    assert s.rows_ingested == 1, sql("SELECT reason FROM rejects")
    if expected is None:
        expected = datetime(2025, 8, 10, 3, 4, 11, 1)
    assert sql("SELECT timestamp_utc FROM events") == [(expected,)]


def test_glog_year_from_mtime_and_year_option(con, write, sql):
    line = FAILED_GLOG.format(t="03:04:41.0").replace("I0810", "I1231")
    path = write("a.log", line + "\n", mtime="2026-01-02")  # December before a January mtime: last year
    ingest_files(con, [path])
    path2 = write("b.log", "step 2\n" + line + "\n", mtime="2026-01-02")  # other bytes: not skipped
    ingest_files(con, [path2], ReaderOptions(year=2020, job="b2"))
    years = sorted(r[0].year for r in sql("SELECT timestamp_utc FROM events"))
    assert years == [2020, 2025]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (
            "INFO:torch.distributed.elastic.agent.server.api:[default] Rendezvous complete for workers. "
            "Result:",
            "no time on the line",
        ),
        (
            "[rank7]:[E ProcessGroupNCCL.cpp:583] [Rank 7] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=1, OpType=BROADCAST, Timeout(ms)=600000) ran for 600017 milliseconds before "
            "timing out.",
            "no time on the line",
        ),
        (WATCHDOG.format(r=1, s="11.0", ms=600000).split(" ran for")[0], 'without "ran for N milliseconds'),
        ("2025-13-40T03:04:11Z " + RDZV_PY[27:], "is not a valid date and time"),
        ("2025-08-10T03:04:11Z [default] Worker group FAILED. <script>alert(1)</script> \udcff", "UTF-8"),
    ],
)
def test_rejects_name_file_line_and_reason(con, write, sql, line, reason):
    raw = line.encode("utf-8", errors="surrogateescape")
    path = write("bad.log", b"step 1\n" + raw + b"\n", mtime="2025-09-01")
    [s] = ingest_files(con, [path], ReaderOptions(fmt="training-log"))
    assert counts(s) == (2, 0, 0, 1, 1)
    [(file, n, text, why)] = sql("SELECT path, line, raw, reason FROM rejects")
    assert (file, n) == (str(path), 2) and reason in why
    assert "Watchdog" in text or "Rendezvous" in text or "Worker group" in text


def test_crlf_gz_and_truncated_gz(con, write, sql):
    body = (LOG.replace("\n", "\r\n") + "\r\n").encode()
    path = write("job-9.log.gz", gzip.compress(body), mtime="2025-09-01")
    assert detect_format(path) == "training-log"
    [s] = ingest_files(con, [path])
    assert counts(s) == (10, 6, 0, 0, 4)
    assert sql("SELECT DISTINCT job_id FROM events") == [("job-9",)]
    assert not any(m.endswith("\r") for (m,) in sql("SELECT message FROM events"))
    cut = gzip.compress(body)[:-40]
    [t] = ingest_files(con, [write("job-10.log.gz", cut, mtime="2025-09-01")])
    assert t.rows_read == t.rows_ingested + t.rows_duplicate + t.rows_rejected + t.rows_ignored
    assert sql("SELECT reason FROM rejects WHERE reason LIKE 'truncated%'")


def test_node_option_and_detection(con, write, sql):
    path = write("run.txt", LOG + "\n", mtime="2025-09-01")
    assert detect_format(path) == "training-log"
    ingest_files(con, [path], ReaderOptions(node="gpu-001", job="881204", cluster="c1"))
    assert sql("SELECT DISTINCT node_id, job_id, cluster_id FROM events") == [("gpu-001", "881204", "c1")]
    assert warehouse.table(con, "incidents").height == 0
    # a node's journal with kernel Xid lines and the job's output is a kernel log: its Xids count
    journal = "2025-08-10T03:04:10+00:00 gpu-001 kernel: NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off\n"
    both = write("journal.txt", journal + LOG + "\n", mtime="2025-09-01")
    assert detect_format(both) == "kernel-log"


def test_hostile_text_is_stored_as_text(con, write, sql):
    hostile = "[default] Worker group FAILED. <img src=x onerror=alert(1)> '); DROP TABLE events;--\x1b[2J"
    path = write("evil.log", f"2025-08-10T03:04:11Z {hostile}\n", mtime="2025-09-01")
    [s] = ingest_files(con, [path], ReaderOptions(job="j'; --"))
    assert counts(s) == (1, 1, 0, 0, 0)
    assert sql("SELECT job_id, category, message FROM events") == [
        ("j'; --", "worker_group_failed", f"2025-08-10T03:04:11Z {hostile}")
    ]
