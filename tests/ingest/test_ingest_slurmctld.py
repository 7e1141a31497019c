"""slurmctld log lines -> events (prefix forms, the four messages, pairing, years, bad lines), and the
end-to-end check: inventory + sacctmgr events + slurmctld log of one fleet give one set of failures."""

from __future__ import annotations

import gzip
import json
from datetime import datetime

import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.ingest import ReaderOptions, detect_format, ingest_files

# Message strings: SchedMD/slurm src/slurmctld/ping_nodes.c, node_mgr.c (update_node), job_mgr.c;
# prefixes: src/common/log.c (LogTimeFormat) and syslog.
LOG = """[2024-05-02T11:58:00.001] sched: Allocate JobId=48 NodeList=gpu-[001-002] #CPUs=128 Partition=gpu
[2024-05-02T12:00:00.123] error: Nodes gpu-001 not responding, setting DOWN
[2024-05-02T12:00:00.200] Killing JobId=48 on failed node gpu-001
[2024-05-03T08:00:00.300] update_node: node gpu-002 reason set to: Xid 79, GPU fell off the bus
[2024-05-03T08:00:00.301] update_node: node gpu-002 state set to DRAINED
[2024-05-03T08:00:00.400] update_node: node gpu-003 reason set to: Xid 79, GPU fell off the bus
[2024-05-03T08:00:00.401] update_node: node gpu-003 state set to DRAINING
[2024-05-04T09:00:00.000] update_node: node gpu-002 state set to IDLE
[2024-05-04T09:00:01.000] update_node: node gpu-002 will be resumed on 1714813200
[2024-05-04T09:00:02.000] _slurm_rpc_submit_batch_job: JobId=49 InitPrio=4294901759 usec=1
"""

CASES = [
    # (line, node, UTC time, category, job_id)
    (
        "[2024-05-01T12:00:00.123] error: Nodes gpu-017 not responding, setting DOWN",
        "gpu-017",
        datetime(2024, 5, 1, 12, 0, 0, 123000),
        "Not responding",
        None,
    ),
    (
        "[2024-05-01T12:00:00] error: Nodes gpu-017 not responding, setting DOWN",
        "gpu-017",
        datetime(2024, 5, 1, 12),
        "Not responding",
        None,
    ),
    (
        "[2024-05-01T14:00:00.5+02:00] update_node: node gpu-017 reason set to: bad HBM",
        "gpu-017",
        datetime(2024, 5, 1, 12, 0, 0, 500000),
        "bad HBM",
        None,
    ),
    (
        "[May 01 12:00:00] update_node: node gpu-017 state set to DOWN",
        "gpu-017",
        datetime(2024, 5, 1, 12),
        "DOWN",
        None,
    ),
    (
        "May  1 12:00:00 head slurmctld[1533]: error: Nodes gpu-017 not responding, setting DOWN",
        "gpu-017",
        datetime(2024, 5, 1, 12),
        "Not responding",
        None,
    ),
    (
        "2024-05-01T12:00:00.123456+00:00 head slurmctld[1533]: Killing JobId=7_3(11) on failed node gpu-017",
        "gpu-017",
        datetime(2024, 5, 1, 12, 0, 0, 123456),
        "Killed job on failed node",
        "7_3",
    ),
    (
        "[2024-05-01T12:00:00.000] Killing job_id 881 on failed node gpu-017",
        "gpu-017",
        datetime(2024, 5, 1, 12),
        "Killed job on failed node",
        "881",
    ),
]


@pytest.mark.parametrize(("line", "node", "ts", "category", "job"), CASES)
def test_each_message_and_prefix(con, write, sql, line, node, ts, category, job):
    [s] = ingest_files(
        con, [write("slurmctld.log", line + "\n", mtime="2024-06-01")], ReaderOptions(cluster="c1")
    )
    assert (s.format, s.rows_ingested, s.rows_rejected) == ("slurmctld", 1, 0)
    got = sql("SELECT node_id, timestamp_utc, category, job_id, cluster_id, interrupting FROM events")
    assert got == [(node, ts, category, job, "c1", True)]


def test_log_pairs_reason_with_state_and_kill_with_outage(con, write, sql):
    path = write("slurmctld.log", LOG)
    assert detect_format(path) == "slurmctld"
    [s] = ingest_files(con, [path])
    # ingested: DOWN, kill, gpu-002 pair, gpu-003 pair; duplicates: the state line of each pair
    counts = (s.rows_read, s.rows_ingested, s.rows_duplicate, s.rows_rejected, s.rows_ignored)
    assert counts == (10, 4, 2, 0, 4)
    got = sql("SELECT line, node_id, category, job_id, message FROM events ORDER BY line")
    assert got == [
        (2, "gpu-001", "Not responding", None, "error: Nodes gpu-001 not responding, setting DOWN"),
        (3, "gpu-001", "Not responding", "48", "Killing JobId=48 on failed node gpu-001"),
        (
            4,
            "gpu-002",
            "Xid 79, GPU fell off the bus",
            None,
            "update_node: node gpu-002 reason set to: Xid 79, GPU fell off the bus; "
            "update_node: node gpu-002 state set to DRAINED",
        ),
        (
            6,
            "gpu-003",
            "Xid 79, GPU fell off the bus",
            None,
            "update_node: node gpu-003 reason set to: Xid 79, GPU fell off the bus; "
            "update_node: node gpu-003 state set to DRAINING",
        ),
    ]
    # the kill merges into the outage's incident, which names the job
    incident = sql("SELECT node_id, events, job_id FROM incidents WHERE node_id = 'gpu-001'")
    assert incident == [("gpu-001", 2, "48")]


def test_hostlists_expand_and_bad_lines_are_rejected(con, write, sql):
    text = (
        "[2024-05-01T12:00:00.000] error: Nodes gpu-[001-003],cpu7 not responding, setting DOWN\n"
        "[2024-13-01T12:00:00.000] error: Nodes gpu-009 not responding, setting DOWN\n"
        "[2024-05-01T12:00:00.000] error: Nodes gpu-[1- not responding, setting DOWN\n"
        "123456 error: Nodes gpu-010 not responding, setting DOWN\n"
        "[2024-05-01T12:00:00.000] update_node: node gpu-011 reason set to: caf\xe9\n"
    )
    raw = text.encode("utf-8").replace("caf\xe9".encode(), b"caf\xe9")
    [s] = ingest_files(con, [write("slurmctld.log", raw)], ReaderOptions(fmt="slurmctld"))
    assert (s.rows_ingested, s.rows_rejected) == (1, 4)
    assert sql("SELECT count(*) FROM events") == [(4,)]
    reasons = [r[0] for r in sql("SELECT reason FROM rejects ORDER BY line")]
    assert "2024-13-01T12:00:00.000 is not a valid date" in reasons[0]
    assert reasons[1].startswith("hostlist 'gpu-[1-'")
    assert reasons[2].startswith("no date")
    assert "not valid UTF-8" in reasons[3]


def test_hostile_reason_text_is_kept_verbatim(con, write, sql):
    reasons = ['it\'s "x"', "\x1b[2J\x1b[31mred", "<img src=x onerror=alert(1)>", "y" * 5000]
    text = "".join(
        f"[2024-05-01T12:00:0{i}.000] update_node: node n{i} reason set to: {r}\n"
        for i, r in enumerate(reasons)
    )
    ingest_files(con, [write("slurmctld.log", text)], ReaderOptions(fmt="slurmctld"))
    assert [r[0] for r in sql("SELECT category FROM events ORDER BY node_id")] == reasons


def test_syslog_years_crlf_gzip_truncation_and_reingest(con, write, sql):
    text = (
        "Dec 31 23:59:59 head slurmctld[9]: error: Nodes n1 not responding, setting DOWN\r\n"
        "\r\n"
        "Jan  1 00:00:01 head slurmctld[9]: error: Nodes n2 not responding, setting DOWN\r\n"
    )
    data = gzip.compress(text.encode())
    [s] = ingest_files(con, [write("ctld.log.gz", data)], ReaderOptions(fmt="slurmctld", year=2023))
    assert (s.rows_read, s.rows_ingested, s.rows_ignored) == (3, 2, 1)
    assert sql("SELECT timestamp_utc FROM events ORDER BY 1") == [
        (datetime(2023, 12, 31, 23, 59, 59),),
        (datetime(2024, 1, 1, 0, 0, 1),),
    ]
    assert any("2023..2024" in n for n in s.notes)
    # the same lines again (a copy under another name): all duplicates
    [d] = ingest_files(con, [write("copy.log", text)], ReaderOptions(fmt="slurmctld", year=2023))
    assert (d.rows_ingested, d.rows_duplicate) == (0, 2)
    [t] = ingest_files(con, [write("cut.log.gz", data[:-25])], ReaderOptions(fmt="slurmctld", year=2023))
    assert t.rows_rejected == 1
    assert t.rows_ingested + t.rows_duplicate + t.rows_rejected + t.rows_ignored == t.rows_read


INVENTORY = """cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to
tiger,gpu-001,h100,8,2024-05-01T00:00:00Z,
tiger,gpu-002,h100,8,2024-05-01T00:00:00Z,
tiger,gpu-003,h100,8,2024-05-01T00:00:00Z,
tiger,gpu-004,h100,8,2024-05-01T00:00:00Z,
"""
EVENTS = """Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User
tiger||2024-05-01T00:00:00|Unknown|||
tiger|gpu-001|2024-05-02T12:00:00|2024-05-02T14:00:00|DOWN*|Not responding|slurm(64030)
tiger|gpu-[002-003]|2024-05-03T08:00:00|Unknown|DRAIN|Xid 79, GPU fell off the bus|root(0)
tiger|gpu-004|2024-05-03T09:00:00|2024-05-03T10:00:00|IDLE*||
"""


def test_end_to_end_one_fleet_three_sources_give_one_set_of_failures(tmp_path):
    db = tmp_path / "w.duckdb"
    paths = []
    for name, text in (("inventory.csv", INVENTORY), ("events.txt", EVENTS), ("slurmctld.log", LOG)):
        (tmp_path / name).write_text(text)
        paths.append(str(tmp_path / name))
    runner = CliRunner()
    result = runner.invoke(main, ["ingest", *paths, "--db", str(db), "--json", "-q"])
    assert result.exit_code == 0, result.output
    files = {f["format"]: f for f in json.loads(result.stdout)}
    assert files["slurm-events"]["rows_ingested"] == 2 and files["slurmctld"]["rows_ingested"] == 4
    result = runner.invoke(
        main, ["rates", "--db", str(db), "--json", "--by", "cluster_id", "--until", "2024-05-10"]
    )
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout)
    # gpu-001 down once (sacctmgr + ctld log + kill = one), gpu-002 and gpu-003 drained: 3 failures
    assert (row["cluster_id"], row["failures"]) == ("tiger", 3)
    # uptime: gpu-001 was down 12:00-14:00 (the sacctmgr TimeEnd); the open drains add no known downtime
    assert row["exposure_node_hours"] == pytest.approx(4 * 9 * 24 - 2)
    assert row["exposure_basis"] == "uptime"
