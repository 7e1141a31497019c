"""``failcast ingest``: help, auto-detection of mixed formats, summaries, one-line errors."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.ingest import FORMATS, detect_format

INVENTORY = (
    "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n"
    "c1,node-017,p5.48xlarge,8,2026-03-01T00:00:00Z,\n"
)
INCIDENTS = (
    "timestamp,cluster_id,node_id,category,gpu_index,job_id,message,resolved_at\n"
    "2026-03-02T04:26:29Z,c1,node-017,gpu_memory,0,j1,ecc,\n"
    "not-a-time,c1,node-017,gpu_memory,0,j1,ecc,\n"
)
KERNEL = (
    "Mar  2 04:26:29 node-017 kernel: NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.\n"
    "Mar  2 04:26:30 node-017 kernel: usb 1-1: new high-speed USB device\n"
)
SACCT = (
    "JobID|State|Start|End|NNodes|NodeList\n9|NODE_FAIL|2026-03-02T00:00:00|2026-03-02T04:27:00|1|node-017\n"
)


def test_help_documents_every_format_with_an_example():
    result = CliRunner().invoke(main, ["ingest", "--help"])
    assert result.exit_code == 0
    for fmt in FORMATS:
        assert re.search(rf"\n +{re.escape(fmt)}  +\S", result.output), fmt
    for example in (
        "NVRM: Xid (PCI:0000:18:00): 79",
        "Mar  2 04:26:29 node-017",
        "881204|pretrain-7b|NODE_FAIL",
    ):
        assert example in result.output


def test_mixed_formats_are_detected_and_summarised(tmp_path):
    (tmp_path / "inventory.csv").write_text(INVENTORY)
    (tmp_path / "incidents.csv").write_text(INCIDENTS)
    (tmp_path / "messages.gz").write_bytes(gzip.compress(KERNEL.encode()))
    (tmp_path / "sacct.out").write_text(SACCT)
    files = [str(tmp_path / n) for n in ("inventory.csv", "incidents.csv", "messages.gz", "sacct.out")]
    db = str(tmp_path / "w.duckdb")
    result = CliRunner().invoke(main, ["ingest", *files, "--db", db, "--year", "2026", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert {f["timezone"] for f in payload} == {"UTC"}
    got = [
        (f["kind"], f["format"], f["rows_read"], f["rows_ingested"], f["rows_rejected"], f["rows_ignored"])
        for f in payload
    ]
    assert got == [
        ("inventory", "csv", 1, 1, 0, 0),
        ("incidents", "csv", 2, 1, 1, 0),
        ("xid_log", "kernel-log", 2, 1, 0, 1),
        ("jobs", "sacct", 2, 1, 0, 1),
    ]
    text = CliRunner().invoke(main, ["ingest", *files, "--db", db]).output
    assert text.count("same sha256: skipped") == 4


def test_text_summary_names_rejects_and_notes(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text(KERNEL + "garbage NVRM: Xid (PCI:0000:18:00): 79, x\n")
    result = CliRunner().invoke(
        main, ["ingest", str(log), "--db", str(tmp_path / "w.duckdb"), "--year", "2026"]
    )
    assert result.exit_code == 0
    assert "read 3, ingested 1, duplicate 0, rejected 1, ignored 1" in result.output
    assert f"rejected {log}:3: no timestamp and host prefix" in result.output
    assert "note: syslog times carry no year: read as 2026 (--year)" in result.output
    assert "timestamps without an offset read as UTC" in result.output


@pytest.mark.parametrize(
    ("name", "content", "args", "message"),
    [
        ("notes.txt", "hello world\n", [], "cannot tell the format"),
        ("bad.csv", "a,b\n1,2\n", [], "not an incidents file"),
        ("sacct.txt", "1|COMPLETED|x\n", ["--format", "sacct"], "sacct header lacks"),
        ("kern.log", KERNEL, ["--timezone", "Mars/Olympus"], "unknown time zone"),
        ("kern.log", KERNEL, ["--gpu-bus-order", "18,zz"], "--gpu-bus-order"),
        ("bad.log.gz", b"\x1f\x8b\x08garbage", [], "damaged or truncated .gz"),
        ("missing.log", None, [], "no such file"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(tmp_path, name, content, args, message):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    result = CliRunner().invoke(main, ["ingest", str(path), "--db", str(tmp_path / "w.duckdb"), *args])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and message in result.stderr
    assert (str(path) in result.stderr) == ("time zone" not in message and "--" not in message)


def test_a_real_process_reports_bad_input_without_traceback(tmp_path):
    path = tmp_path / "truncated.log.gz"
    path.write_bytes(gzip.compress(KERNEL.encode() * 10)[:30])
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "ingest", str(path), "--db", str(tmp_path / "w.duckdb")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stderr.startswith(f"failcast: {path}: ") and result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("name", "content", "fmt"),
    [
        # messages hold Xid lines, but the header says canonical CSV
        ("export.txt", INCIDENTS.replace(",ecc,", ',"NVRM: Xid (PCI:0000:18:00): 48, DBE",'), "csv"),
        ("events.log", '{"timestamp": "2026-03-02T04:26:29Z"}\n', "jsonl"),
        ("syslog", KERNEL, "kernel-log"),
        (
            "journal.txt",
            "-- Journal begins --\n2026-03-02T04:26:29+0000 n1 kernel: NVRM: Xid (PCI:0000:18:00): 79, x\n",
            "kernel-log",
        ),
        ("acct", SACCT, "sacct"),
        ("acct-p", SACCT.replace("\n", "|\n"), "sacct"),
    ],
)
def test_format_is_detected_from_content(tmp_path, name, content, fmt):
    path = tmp_path / name
    path.write_text(content)
    assert detect_format(path) == fmt


def test_a_file_read_before_is_skipped_naming_how_it_was_read(tmp_path):
    """A TSV once taken for another format and given again with --format: the skip says how it
    was read and that the new --format does not read it again (its records are stored once)."""
    path = tmp_path / "tickets.txt"
    path.write_text("timestamp,cluster_id,node_id,category\n2026-03-02T04:26:29Z,c1,n1,Xid 79\n")
    db = tmp_path / "w.duckdb"
    assert CliRunner().invoke(main, ["ingest", str(path), "--db", str(db)]).exit_code == 0
    again = CliRunner().invoke(main, ["ingest", str(path), "--db", str(db), "--format", "jsonl"])
    assert again.exit_code == 0
    assert f"{path}: already ingested as incidents (csv), same sha256: skipped" in again.stdout
    assert "note: read as csv before: --format jsonl does not read it again" in again.stderr
    same = CliRunner().invoke(main, ["ingest", str(path), "--db", str(db), "--format", "csv"])
    assert "same sha256: skipped" in same.stdout and "does not read it again" not in same.stderr


def test_a_bad_time_format_flag_is_one_line_and_exit_2(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("timestamp,cluster_id,node_id,category\n01.03.2026 05:26,c1,n1,Xid 79\n")
    for command in ("ingest", "extract"):
        args = [command, str(path), "--time-format", "dd.mm.yyyy"]
        args += (
            ["--db", str(tmp_path / "w.duckdb")] if command == "ingest" else ["--out", str(tmp_path / "lake")]
        )
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
        assert "time format 'dd.mm.yyyy' has no strptime code" in result.output
    good = CliRunner().invoke(
        main, ["ingest", str(path), "--db", str(tmp_path / "w.duckdb"), "--time-format", "%d.%m.%Y %H:%M"]
    )
    assert good.exit_code == 0 and "read 1, ingested 1" in good.output
    assert "read as UTC; times in the form %d.%m.%Y %H:%M tried first" in good.output
