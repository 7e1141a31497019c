"""Kernel logs with NVIDIA XID lines: storms, years, broken lines, encodings, gz, idempotence."""

from __future__ import annotations

import gzip
import itertools
import random
import tempfile
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pipeline import sample, warehouse
from pipeline.ingest import InputError, ReaderOptions, ingest_files
from pipeline.readers.lines import read_lines

HOST = "node-017"
XID79 = "NVRM: Xid (PCI:0000:18:00): 79, pid=10895, name=python3, GPU has fallen off the bus."


def iso(ts: str, msg: str, host: str = HOST) -> str:
    return f"{ts}+00:00 {host} kernel: {msg}"


# An XID 79 storm as a real driver logs it: the GPU line, the Xid line repeated within seconds
# (one exact repeat), the follow-up fallen-off line (an event of the same GPU and class: one
# incident with the Xid lines), and unrelated kernel noise around it.
STORM = "\n".join(
    [
        iso("2026-03-02T04:26:20.000001", "EXT4-fs (nvme0n1p1): re-mounted. Opts: (null)"),
        iso("2026-03-02T04:26:29.892511", "NVRM: GPU at PCI:0000:18:00: GPU-0b11d014-1685-04bd"),
        iso("2026-03-02T04:26:29.892511", f"[361589.124297] {XID79}"),
        iso("2026-03-02T04:26:29.892511", f"[361589.124297] {XID79}"),
        iso("2026-03-02T04:26:30.100000", f"[361589.331000] {XID79}"),
        iso("2026-03-02T04:26:31.500000", f"[361590.731000] {XID79}"),
        iso("2026-03-02T04:26:31.500001", "NVRM: GPU 0000:18:00.0: GPU has fallen off the bus."),
        iso("2026-03-02T05:40:00.000000", "NVRM: Xid (PCI:0000:2a:00): 13, Graphics Exception: ESR 0x404600"),
        iso("2026-03-02T05:41:00.000000", "NVRM: Xid (PCI:0000:2a:00): 13, Graphics Exception: ESR 0x404600"),
    ]
)


def summary_counts(s):
    return (s.rows_read, s.rows_ingested, s.rows_duplicate, s.rows_rejected, s.rows_ignored)


def test_xid_storm_exact_counts(con, write, sql):
    path = write("kern.log", STORM + "\n")
    [s] = ingest_files(con, [path], ReaderOptions(cluster="c1"))
    assert summary_counts(s) == (9, 6, 1, 0, 2)
    assert sum(summary_counts(s)[1:]) == s.rows_read
    incidents = warehouse.table(con, "incidents").sort("timestamp_utc")
    assert incidents.select("category", "events", "interrupting", "xid").rows() == [
        ("gpu_fell_off_bus", 4, True, 79),
        ("application", 2, False, 13),
    ]
    assert incidents["timestamp_utc"][0] == datetime(2026, 3, 2, 4, 26, 29, 892511)
    recorded = sql("SELECT rows_read, rows_ingested, rows_duplicate, rows_rejected FROM ingested_files")
    assert recorded == [(9, 6, 1, 0)]


def test_rerun_is_a_no_op_and_grown_log_adds_only_new_lines(con, write, sql):
    path = write("kern.log", STORM + "\n")
    ingest_files(con, [path], ReaderOptions(cluster="c1"))
    [again] = ingest_files(con, [path], ReaderOptions(cluster="c1"))
    assert again.skipped
    copy = write("kern-copy.log", STORM + "\n")  # same content under another name: same sha256
    assert ingest_files(con, [copy], ReaderOptions(cluster="c1"))[0].skipped
    grown = write("kern.log", STORM + "\n" + iso("2026-03-03T00:00:00", XID79.replace("79,", "48,")) + "\n")
    [s] = ingest_files(con, [grown], ReaderOptions(cluster="c1"))
    assert summary_counts(s) == (10, 1, 7, 0, 2)
    assert sql("SELECT count(*) FROM events") == [(7,)]
    assert sql("SELECT count(*) FROM incidents") == [(3,)]


@pytest.mark.parametrize(
    ("lines", "mtime", "year", "expected"),
    [
        # Dec -> Jan inside one file: the year goes up at the New Year, from --year ...
        (["Dec 31 23:59:58", "Jan  1 00:00:03"], None, 2025, ["2025-12-31 23:59:58", "2026-01-01 00:00:03"]),
        # ... or from the file's modification time (the last line is in that year)
        (
            ["Dec 31 23:59:58", "Jan  1 00:00:03"],
            "2026-01-05",
            None,
            ["2025-12-31 23:59:58", "2026-01-01 00:00:03"],
        ),
        # a December-only log modified in January belongs to the year before
        (
            ["Dec 30 10:00:00", "Dec 31 10:00:00"],
            "2026-01-02",
            None,
            ["2025-12-30 10:00:00", "2025-12-31 10:00:00"],
        ),
        # a line slightly out of order does not roll the year
        (
            ["Mar  2 10:00:00", "Feb 28 10:00:00"],
            "2026-03-05",
            None,
            ["2026-03-02 10:00:00", "2026-02-28 10:00:00"],
        ),
        # two New Years in one long log
        (
            ["Nov  1 00:00:00", "Jan  1 00:00:00", "Jul  1 00:00:00", "Jan  2 00:00:00"],
            None,
            2024,
            ["2024-11-01 00:00:00", "2025-01-01 00:00:00", "2025-07-01 00:00:00", "2026-01-02 00:00:00"],
        ),
    ],
)
def test_yearless_syslog_years(con, write, lines, mtime, year, expected):
    text = "".join(f"{t} {HOST} kernel: NVRM: Xid (PCI:0000:18:00): 79, n={i}\n" for i, t in enumerate(lines))
    [s] = ingest_files(con, [write("messages", text, mtime)], ReaderOptions(year=year, cluster="c1"))
    assert s.rows_ingested == len(lines)
    got = con.sql("SELECT strftime(timestamp_utc, '%Y-%m-%d %H:%M:%S') FROM events ORDER BY line").fetchall()
    assert [g[0] for g in got] == expected
    assert any("no year" in n and str(int(expected[0][:4])) in n for n in s.notes)


def test_ordinary_kernel_lines_move_the_year_too(con, write, sql):
    text = (
        f"Dec 31 23:00:00 {HOST} kernel: NVRM: Xid (PCI:0000:18:00): 79, a\n"
        f"Jan  1 00:30:00 {HOST} kernel: usb 1-1: new device\n"
        f"Mar  1 00:00:00 {HOST} kernel: NVRM: Xid (PCI:0000:18:00): 79, b\n"
    )
    ingest_files(con, [write("messages", text)], ReaderOptions(year=2025, cluster="c1"))
    got = sql("SELECT year(timestamp_utc) FROM events ORDER BY line")
    assert got == [(2025,), (2026,)]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (f"[ 5107.644336] {XID79}", "dmesg time since boot has no date"),
        (f"garbage {XID79}", "no timestamp and host prefix"),
        (f"Feb 30 04:26:29 {HOST} kernel: {XID79}", "timestamp 2026-02-30 04:26:29 is not a valid date"),
        (f"2026-13-02T04:26:29 {HOST} kernel: {XID79}", "timestamp 2026-13-02T04:26:29 is not a valid date"),
        (f"Mar  2 04:26:29 {HOST} kernel: NVRM: Xid (PCI:0000:18:00", "Xid line without"),
        (f"[Mon Mar  2 04:26:29 2026] {XID79}", "has no hostname; pass --node"),
    ],
)
def test_broken_xid_lines_are_rejected_with_reason(con, write, line, reason, sql):
    good = f"Mar  2 04:00:00 {HOST} kernel: NVRM: Xid (PCI:0000:18:00): 48, DBE"
    path = write("kern.log", f"{good}\n{line}\n{HOST} unrelated noise\n")
    [s] = ingest_files(con, [path], ReaderOptions(year=2026, cluster="c1"))
    assert summary_counts(s) == (3, 1, 0, 1, 1)
    [(line_no, raw, got)] = sql("SELECT line, raw, reason FROM rejects")
    assert (line_no, raw) == (2, line)
    assert reason in got


def test_dmesg_ctime_with_node_option(con, write, sql):
    path = write("dmesg.txt", f"[Mon Mar  2 04:26:29 2026] {XID79}\n[Mon Mar  2 04:26:30 2026] usb 1-1: x\n")
    [s] = ingest_files(con, [path], ReaderOptions(node="node-9", cluster="c1"))
    assert summary_counts(s) == (2, 1, 0, 0, 1)
    assert sql("SELECT node_id, timestamp_utc FROM events") == [("node-9", datetime(2026, 3, 2, 4, 26, 29))]


def test_non_utf8_bytes(con, write, sql):
    content = (
        iso("2026-03-02T04:26:29", XID79).encode()
        + b"\n"
        + iso("2026-03-02T04:27:29", "NVRM: Xid (PCI:0000:18:00): 79, name=py").encode()
        + b"\xff\xfethon\n"
        + b"Mar  2 04:28:00 node-017 kernel: caf\xe9 \xff noise\n"
    )
    [s] = ingest_files(con, [write("kern.log", content)], ReaderOptions(cluster="c1"))
    assert summary_counts(s) == (3, 1, 0, 1, 1)
    assert "not valid UTF-8" in sql("SELECT reason FROM rejects")[0][0]
    assert any("non-UTF-8" in n for n in s.notes)


@pytest.mark.parametrize("block_bytes", [None, 1000])
def test_truncated_gz_keeps_lines_before_the_cut(con, write, sql, monkeypatch, block_bytes):
    if block_bytes:  # the cut falls after many blocks
        monkeypatch.setattr("pipeline.readers.lines.BLOCK_BYTES", block_bytes)
    lines = "".join(
        iso(f"2026-03-02T04:{m:02d}:00", XID79.replace("pid=10895", f"pid={m}")) + "\n" for m in range(60)
    )
    packed = gzip.compress(lines.encode() * 50, compresslevel=1)  # 3000 lines, ~60 distinct
    path = write("kern.log.gz", packed[: len(packed) * 2 // 3])
    [s] = ingest_files(con, [path], ReaderOptions(cluster="c1"))
    assert s.rows_rejected == 1
    assert s.rows_read == s.rows_ingested + s.rows_duplicate + s.rows_rejected + s.rows_ignored
    assert 1000 < s.rows_read < 3000 and s.rows_ingested == 60
    [(line, reason)] = sql("SELECT line, reason FROM rejects")
    assert reason.startswith("truncated .gz") and line == s.rows_read


def test_whole_gz_reads_like_plain(con, write):
    [s] = ingest_files(
        con, [write("kern.log.gz", gzip.compress(STORM.encode()))], ReaderOptions(cluster="c1")
    )
    assert summary_counts(s) == (9, 6, 1, 0, 2)  # no newline at the end: last line still counted


@pytest.mark.parametrize(
    ("name", "content"), [("kern.log", b""), ("kern.log.gz", gzip.compress(b"", mtime=0))]
)
def test_empty_file_is_reported_and_not_recorded(con, write, sql, name, content):
    [s] = ingest_files(con, [write(name, content)])
    assert s.rows_read == 0 and "empty file" in s.notes[0]
    assert sql("SELECT count(*) FROM ingested_files") == [(0,)]


@pytest.mark.parametrize(
    ("message", "category", "interrupting", "xid"),
    [
        ("NVRM: Xid (PCI:0000:18:00): 13, Graphics Exception", "application", False, 13),
        (
            "NVRM: Xid (PCI:0000:18:00): 31, pid=1, Ch 00000008, intr 10000000. MMU Fault",
            "application",
            False,
            31,
        ),
        ("NVRM: Xid (PCI:0000:18:00): 43, pid=1, Ch 00000008", "application", False, 43),
        ("NVRM: Xid (PCI:0000:18:00): 45, pid=1, Ch 00000008", "application", False, 45),
        ("NVRM: Xid (PCI:0000:18:00): 48, An uncorrectable double bit error", "gpu_memory", True, 48),
        (
            "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked",
            "gpu_memory_warning",
            False,
            63,
        ),
        ("NVRM: Xid (PCI:0000:18:00): 64, Row remapper failure", "gpu_memory", True, 64),
        ("NVRM: Xid (PCI:0000:b9:00): 74, NVLink: fatal error detected on link 6", "nvlink", True, 74),
        ("NVRM: Xid (PCI:0000:18:00): 92, High single-bit ECC error rate", "gpu_memory_warning", False, 92),
        ("NVRM: Xid (PCI:0000:18:00): 94, Contained ECC error", "gpu_memory", True, 94),
        ("NVRM: Xid (PCI:0000:18:00): 95, Uncontained ECC error", "gpu_memory", True, 95),
        ("NVRM: Xid (PCI:0000:18:00): 119, Timeout waiting for RPC from GSP", "gpu_firmware", True, 119),
        ("NVRM: Xid (0000:01:00): 3, C 00000005 SC 00000007", "unknown_xid", True, 3),
        ("NVRM: Xid (PCI:0000:18:00): 4242, new in a future driver", "unknown_xid", True, 4242),
        ("nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32", "nvlink", True, 12028),
        (
            "NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action changed to 0x1 (GPU Reset Required)",
            "other",
            False,
            154,
        ),
    ],
)
def test_xid_codes_map_to_categories(con, write, message, category, interrupting, xid, sql):
    [s] = ingest_files(
        con, [write("kern.log", iso("2026-03-02T04:26:29", message) + "\n")], ReaderOptions(cluster="c1")
    )
    assert s.rows_ingested == 1
    assert sql("SELECT category, interrupting, xid FROM events") == [(category, interrupting, xid)]
    assert any("unknown_xid" in n for n in s.notes) == (category == "unknown_xid")


def test_pci_bus_id_becomes_gpu_index_only_with_a_bus_order(con, write, sql):
    text = (
        iso("2026-03-02T04:26:29", XID79)
        + "\n"
        + iso("2026-03-02T04:26:29", XID79.replace(":18:", ":2A:"))
        + "\n"
    )
    ingest_files(con, [write("a.log", text)], ReaderOptions(cluster="c1"))
    ingest_files(
        con,
        [write("b.log", text.replace(HOST, "node-018"))],
        ReaderOptions(cluster="c1", bus_order=("18", "2a")),
    )
    got = sql("SELECT node_id, pci_bus_id, gpu_index FROM events ORDER BY node_id, pci_bus_id")
    assert got == [
        (HOST, "0000:18:00", None),
        (HOST, "0000:2a:00", None),
        ("node-018", "0000:18:00", 0),
        ("node-018", "0000:2a:00", 1),
    ]
    # two GPUs of one node failing together are two incidents either way
    assert sql("SELECT node_id, count(*) FROM incidents GROUP BY 1 ORDER BY 1") == [
        (HOST, 2),
        ("node-018", 2),
    ]


def test_cluster_comes_from_inventory_whatever_the_order(con, write, sql):
    log = write(
        "kern.log",
        iso("2026-03-02T04:26:29", XID79) + "\n" + iso("2026-03-02T04:26:29", XID79, "ghost") + "\n",
    )
    inventory = write(
        "inventory.csv",
        "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n"
        f"c9,{HOST},p5.48xlarge,8,2026-03-01T00:00:00Z,\n",
    )
    summaries = ingest_files(con, [log, inventory])
    assert [s.kind for s in summaries] == ["xid_log", "inventory"]
    assert sql("SELECT DISTINCT cluster_id FROM events") == [(warehouse.UNKNOWN_CLUSTER,)]
    got = sql("SELECT node_id, cluster_id FROM incidents ORDER BY node_id")
    assert got == [("ghost", warehouse.UNKNOWN_CLUSTER), (HOST, "c9")]


@pytest.mark.parametrize(("timezone", "hour"), [("UTC", 4), ("America/New_York", 9), ("Asia/Tokyo", 19)])
def test_naive_times_are_read_in_the_given_timezone(con, write, timezone, hour, sql):
    text = f"Mar  2 04:26:29 {HOST} kernel: {XID79}\n2026-03-02T04:26:29+00:00 {HOST} kernel: {XID79} x\n"
    ingest_files(con, [write("messages", text)], ReaderOptions(year=2026, timezone=timezone, cluster="c1"))
    got = sql("SELECT hour(timestamp_utc) FROM events ORDER BY line")
    assert got == [(hour,), (4,)]  # the line with an offset is not affected


def test_interrupted_file_leaves_the_warehouse_as_before(con, write, tmp_path, monkeypatch):
    spill = tmp_path / "spill"
    spill.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill))  # where the parsed Xid lines wait
    first = write("a.log", iso("2026-03-02T04:26:29", XID79) + "\n")
    ingest_files(con, [first], ReaderOptions(cluster="c1"))
    before = {t: warehouse.table(con, t).height for t in warehouse.TABLES}

    def interrupt(_bytes: int) -> None:
        raise KeyboardInterrupt

    second = write("b.log", STORM + "\n")
    with pytest.raises(KeyboardInterrupt):
        ingest_files(con, [second], ReaderOptions(cluster="c1"), progress=interrupt)
    assert {t: warehouse.table(con, t).height for t in warehouse.TABLES} == before
    assert list(spill.iterdir()) == []  # the parsed lines' temp folder is gone too
    assert (
        ingest_files(con, [second], ReaderOptions(cluster="c1"))[0].rows_ingested == 6
    )  # not marked as done


def test_unknown_format_name_is_an_input_error(con, write):
    with pytest.raises(InputError, match="unknown format"):
        ingest_files(con, [write("kern.log", STORM)], ReaderOptions(fmt="syslog"))


@pytest.mark.parametrize(("form", "bus_order"), [("syslog", sample.PCI_BUS_ORDER), ("iso", ())])
def test_same_fleet_from_canonical_and_from_xid_logs(tmp_path, form, bus_order):
    """The simulated fleet read once from incidents.csv and once from its XID kernel logs gives the
    same GPU incident counts per node (storms and repeats collapse back into one incident)."""
    spec = sample.FleetSpec(
        cluster_sizes=(6, 10), days=90, rate_per_node_hour=0.003, noise_per_node_hour=0.001, seed=11
    )
    fleet = sample.simulate_fleet(spec)
    incidents_csv, inventory_csv = fleet.write(tmp_path / "canonical")
    logs = sample.write_kernel_logs(fleet, tmp_path / "logs", form=form)

    canonical = warehouse.connect(tmp_path / "canonical.duckdb")
    ingest_files(canonical, [inventory_csv, incidents_csv])
    from_logs = warehouse.connect(tmp_path / "logs.duckdb")
    summaries = ingest_files(from_logs, [*logs, inventory_csv], ReaderOptions(year=2026, bus_order=bus_order))

    xid_faults = fleet.incidents.filter(pl.col("message").str.starts_with("NVRM: Xid")).height
    assert xid_faults > 20
    assert sum(s.rows_ingested for s in summaries[:-1]) == 3 * xid_faults  # storm seconds 0, 0, 1, 2
    assert sum(s.rows_duplicate for s in summaries[:-1]) == xid_faults
    assert sum(s.rows_ignored for s in summaries[:-1]) == 2 * xid_faults
    assert sum(s.rows_rejected for s in summaries) == 0

    query = (  # by class: the canonical file records some faults under ticket names ("GPU fell off the bus")
        "SELECT cluster_id, node_id, failure_class, interrupting, count(*) AS n FROM incidents"
        " WHERE message LIKE 'NVRM: Xid%' GROUP BY ALL ORDER BY ALL"
    )
    expected = canonical.sql(query).fetchall()
    assert len(expected) > 10
    assert from_logs.sql(query).fetchall() == expected


@pytest.mark.parametrize(
    ("line", "utc"),
    [
        (f"2026-03-02T04:26:29Z {HOST} kernel: {XID79}", "2026-03-02 04:26:29"),
        (f"2026-03-02T04:26:29+0000 {HOST} kernel: {XID79}", "2026-03-02 04:26:29"),  # journalctl short-iso
        (f"2026-03-02T06:26:29.5+02:00 {HOST} kernel: {XID79}", "2026-03-02 04:26:29.5"),
        (f"2026-03-02 04:26:29,250 {HOST} kernel: {XID79}", "2026-03-02 04:26:29.25"),
        (
            f"Mar  2 04:26:29 {HOST} kernel: [ 269.517039] NVRM: Xid (0000:01:00): 79, old driver",
            "2026-03-02 04:26:29",
        ),
        (
            f"Mar 12 04:26:29 {HOST} kernel: NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>",
            "2026-03-12 04:26:29",
        ),
    ],
)
def test_accepted_line_forms(con, write, line, utc, sql):
    [s] = ingest_files(con, [write("kern.log", line + "\n")], ReaderOptions(year=2026, cluster="c1"))
    assert (s.rows_ingested, s.rows_rejected) == (1, 0)
    assert sql("SELECT CAST(timestamp_utc AS VARCHAR), node_id, xid FROM events") == [(utc, HOST, 79)]


@pytest.mark.parametrize("packed", [False, True])
def test_progress_reports_every_byte_on_disk(con, write, packed):
    data = (STORM + "\n").encode() * 200
    path = write("kern.log.gz" if packed else "kern.log", gzip.compress(data) if packed else data)
    seen: list[int] = []
    ingest_files(con, [path], ReaderOptions(cluster="c1"), progress=seen.append)
    assert sum(seen) == path.stat().st_size and all(n >= 0 for n in seen)


@pytest.mark.parametrize(("bus_order", "incidents"), [(("18",), 1), ((), 2)])
def test_one_fault_from_two_sources_is_one_incident_when_the_gpu_is_known(
    con, write, sql, bus_order, incidents
):
    canonical = write(
        "incidents.csv",
        "timestamp,cluster_id,node_id,category,gpu_index,job_id,message,resolved_at\n"
        f"2026-03-02T04:26:00Z,c1,{HOST},gpu_fell_off_bus,0,j1,fell off,\n",
    )
    log = write("kern.log", iso("2026-03-02T04:26:29", XID79) + "\n")
    ingest_files(con, [canonical, log], ReaderOptions(cluster="c1", bus_order=bus_order))
    assert sql("SELECT count(*), sum(events) FROM incidents") == [(incidents, 2)]


def test_a_bad_file_stops_the_run_but_earlier_files_are_complete(con, write, sql):
    good = write("a.log", STORM + "\n")
    bad = write("b.txt", "hello\n")
    with pytest.raises(InputError, match="cannot tell the format"):
        ingest_files(con, [good, bad], ReaderOptions(cluster="c1"))
    assert sql("SELECT count(*) FROM ingested_files") == [(1,)]
    assert sql("SELECT count(*) FROM incidents") == [(2,)]


def _snapshot(con) -> tuple:
    events = con.sql("SELECT line, timestamp_utc, node_id, xid FROM events ORDER BY line").fetchall()
    files = con.sql(
        "SELECT rows_read, rows_ingested, rows_duplicate, rows_rejected FROM ingested_files"
    ).fetchall()
    rejects = con.sql("SELECT line, raw, reason FROM rejects ORDER BY line").fetchall()
    return events, files, rejects


@pytest.mark.parametrize("packed", [False, True])
def test_tiny_blocks_give_the_same_result(tmp_path, write, monkeypatch, packed):
    """Lines and the syslog calendar carry across block boundaries (blocks of 37 bytes here)."""
    text = (
        f"Dec 31 23:59:58 {HOST} kernel: {XID79}\n"
        f"Dec 31 23:59:59 {HOST} kernel: ordinary message with caf\u00e9 in it\n"
        f"Jan  1 00:00:03 {HOST} kernel: {XID79}\n"
        f"garbage {XID79}\n" + STORM
    ).encode()
    path = write("kern.log.gz" if packed else "kern.log", gzip.compress(text) if packed else text)
    snapshots = []
    for block in (None, 37):
        if block:
            monkeypatch.setattr("pipeline.readers.lines.BLOCK_BYTES", block)
        con = warehouse.connect(tmp_path / f"w{block}.duckdb")
        ingest_files(con, [path], ReaderOptions(year=2025, cluster="c1"))
        snapshots.append(_snapshot(con))
    assert snapshots[0] == snapshots[1]
    events, files, rejects = snapshots[0]
    assert files == [(13, 8, 1, 1)]
    assert [e[1].year for e in events[:2]] == [2025, 2026]


_POOL = [
    iso("2026-03-02T04:26:29", XID79).encode(),
    iso("2026-03-02T04:26:30", XID79.replace("79,", "13,")).encode(),
    f"Mar  2 04:26:29 {HOST} kernel: {XID79}".encode(),
    f"Mar  2 04:26:29 {HOST} kernel: usb 1-1: new device".encode(),
    f"[ 5107.644336] {XID79}".encode(),
    f"Feb 30 00:00:00 {HOST} kernel: {XID79}".encode(),
    iso("2026-03-02T04:26:31", "NVRM: Xid (PCI:0000:18:00): 79, py").encode() + b"\xff\xfe",
    b"",
    b"\x00\x01 binary junk",
]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(picks=st.lists(st.integers(0, len(_POOL) - 1), max_size=40), packed=st.booleans())
def test_every_line_is_accounted_for(tmp_path, picks, packed):
    data = b"\n".join(_POOL[i] for i in picks) + (b"\n" if picks else b"")
    with tempfile.TemporaryDirectory(dir=tmp_path) as tmp:
        path = Path(tmp) / ("kern.log.gz" if packed else "kern.log")
        path.write_bytes(gzip.compress(data) if packed else data)
        con = warehouse.connect(Path(tmp) / "w.duckdb")
        # mostly bad lines on purpose: no share of rejects refuses the file here
        options = ReaderOptions(fmt="kernel-log", year=2026, cluster="c1", max_rejected_percent=100)
        [s] = ingest_files(con, [path], options)
        assert s.rows_read == (len(picks) if data else 0)
        assert s.rows_read == s.rows_ingested + s.rows_duplicate + s.rows_rejected + s.rows_ignored
        assert con.sql("SELECT count(*) FROM events").fetchall() == [(s.rows_ingested,)]
        assert con.sql("SELECT count(*) FROM rejects").fetchall() == [(s.rows_rejected,)]
        con.close()


def _hostile_log(seed: int) -> bytes:
    """Syslog across a New Year with every kind of line around the Xid lines: CRLF, bytes that are
    not UTF-8, a byte order mark, a long line, broken and duplicate Xid lines, no final newline."""
    rng = random.Random(seed)
    lines = ["\ufeffDec 30 10:00:00 n1 kernel: first line after a byte order mark"]
    for day, month in [(30, "Dec"), (31, "Dec"), (1, "Jan"), (2, "Jan"), (31, "Dec"), (3, "Jan")]:
        for i in range(60):
            stamp, code = f"{month} {day:2d} {i // 10:02d}:{i:02d}:00", rng.choice([13, 48, 999])
            lines.append(
                rng.choice(
                    [
                        f"{stamp} node-{i % 7} kernel: {XID79}",
                        f"{stamp} node-{i % 7} kernel: {XID79.replace('79,', f'{code},')}",
                        f"{stamp} node-{i % 7} kernel: usb 1-1: ordinary message",
                        f"{stamp} node-{i % 7} kernel: caf\u00e9 " + "x" * rng.randint(0, 300),
                        f"{stamp} node-{i % 7} kernel: NVRM: Xid without a code",
                        f"[ 5107.644336] {XID79}",
                        iso("2026-03-02T04:26:29", XID79),
                        "",
                        # a GPU lost at probe: one message over three lines (one event), and
                        # a last line alone (rejected); records may be cut by spans and blocks
                        f"{stamp} node-{i % 7} kernel: NVRM: The NVIDIA GPU 0000:{code % 256:02x}:00.0\n"
                        f"{' ' * 30}NVRM: (PCI ID: 10de:2330) installed in this system has\n"
                        f"{' ' * 30}NVRM: fallen off the bus and is not responding to commands.",
                        f"{stamp} node-{i % 7} kernel: NVRM: fallen off the bus and is not responding.",
                    ]
                )
            )
    data = "\n".join(lines).encode()
    data = data.replace(b"ordinary", b"ordin\xffary").replace(b"without", b"with\xfe\xffout", 3)
    return data.replace(b"usb", b"usb\r", 5).replace(b"\n[", b"\r\n[", 4)


def _full_snapshot(con) -> tuple:
    events = con.sql(
        "SELECT event_key, line, timestamp_utc, node_id, xid, category, message FROM events ORDER BY line"
    ).fetchall()
    return (events, *_snapshot(con)[1:])


@pytest.mark.parametrize("seed", [1, 2])
def test_parallel_spans_give_the_same_result_as_one_pass(tmp_path, monkeypatch, seed):
    """A plain log cut into byte spans parsed by a worker thread and by this one, with blocks of
    37 bytes (lines cut at span and block edges), stores the same events, content keys, counts and
    rejects as one pass over the file; so does the fallback when no worker thread can start."""
    path = tmp_path / "kern.log"
    path.write_bytes(_hostile_log(seed))
    snapshots = []
    for mode in ("one pass", "spans", "spans without workers"):
        if mode != "one pass":
            monkeypatch.setattr("pipeline.readers.kernel_log.SPAN_BYTES", 1499)
            monkeypatch.setattr("pipeline.readers.lines.BLOCK_BYTES", 37)
        if mode == "spans without workers":
            monkeypatch.setattr("pipeline.readers.kernel_log.ThreadPoolExecutor", _NoPool)
        con = warehouse.connect(tmp_path / f"{mode}.duckdb")
        [s] = ingest_files(con, [path], ReaderOptions(year=2025, cluster="c1"))
        assert s.rows_read == s.rows_ingested + s.rows_duplicate + s.rows_rejected + s.rows_ignored
        snapshots.append((_full_snapshot(con), summary_counts(s), s.notes))
        con.close()
    assert snapshots[1] == snapshots[0]
    assert snapshots[2] == snapshots[0]
    (events, files, rejects), counts, notes = snapshots[0]
    physical = _hostile_log(seed).decode(errors="replace").removeprefix("\ufeff").split("\n")
    assert counts[0] == len(physical)
    assert all(physical[line - 1].removesuffix("\r") == raw for line, raw, _ in rejects)
    assert {e[2].year for e in events} == {2025, 2026, 2027}
    assert any(e[5] == "gpu_fell_off_bus" and e[4] is None for e in events)  # the three-line message
    assert any("without its first line" in r[2] for r in rejects)
    assert any("not valid UTF-8" in r[2] for r in rejects) and any("no date" in r[2] for r in rejects)
    assert "syslog times carry no year: read as 2025..2027 (2 New Year rollover(s)) (--year)" in notes


class _NoPool:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("can't start new thread")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.lists(
        st.sampled_from([b"", b"a", b"ab\r", b"\xef\xbb\xbfbom", b"caf\xc3\xa9 \xff", b"Xid " * 9]),
        max_size=40,
    ).map(b"\n".join),
    cuts=st.lists(st.integers(0, 400), max_size=8),
    block=st.integers(1, 50),
)
@example(data=b"a\n\xef\xbb\xbfbom\nb", cuts=[2], block=4)  # a span starting at a mid-file byte order mark
def test_byte_spans_cut_anywhere_read_every_line_once(tmp_path, data, cuts, block):
    """Spans hold the lines that begin in them: cut at any bytes, in blocks of any size, they give
    the file's lines in order, each once, like one pass (a byte order mark is dropped only at the
    start of the file; a last line without a newline is a line)."""
    with tempfile.TemporaryDirectory(dir=tmp_path) as tmp:
        path = Path(tmp) / "kern.log"
        path.write_bytes(data)
        size = path.stat().st_size
        bounds = sorted({0, size, *(c for c in cuts if c < size)})

        def texts(span):
            return [t for b in read_lines(path, block, span=span) for t in b.frame["text"]]

        whole = texts(None)
        assert [t for a, b in itertools.pairwise(bounds) for t in texts((a, b))] == whole
