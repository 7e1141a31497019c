"""Kernel-log and sacct ingest stream: peak memory does not grow with the size of the file;
DuckDB's own memory can be capped (``FAILCAST_DUCKDB_MEMORY_MB``).

Each ingest runs in a fresh interpreter (its peak RSS is its own) with small read blocks and a
small DuckDB memory limit, so a reader that keeps lines, parsed rows or rejects in memory shows up
as growth between a file and one 4x as long (a log with 40% Xid lines, some of them rejects; a
sacct export). DuckDB fills most of its cap already on the smaller file, so the growth is
failcast's own memory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from pipeline import warehouse

REPO = Path(__file__).resolve().parents[2]
BLOCK_BYTES = 256 << 10
DUCKDB_MEMORY_MB = 64
MAX_GROWTH_MB = 40

CHILD = """
import json, sys
from pathlib import Path

from pipeline import warehouse
from pipeline.ingest import ReaderOptions, ingest_files

log, db, block_bytes, memory_mb = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
con = warehouse.connect(db, memory_limit_mb=memory_mb)
[s] = ingest_files(con, [log], ReaderOptions(year=2026, cluster="c1", block_bytes=block_bytes))
con.close()
status = Path("/proc/self/status").read_text()
peak_kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
print(json.dumps({**s.to_dict(), "peak_mb": peak_kb / 1024}))
"""


def write_log(path: Path, lines: int) -> None:
    """Syslog lines one second apart; 2 in 5 are Xid lines, and 1 in 10 of those has no PCI id
    (a reject)."""
    start = datetime(2026, 1, 1)
    with path.open("w") as out:
        for i in range(lines):
            stamp = (start + timedelta(seconds=i)).strftime("%b %e %H:%M:%S")
            if i % 5 == 0:
                text = f"NVRM: Xid (PCI:0000:18:00): 79, pid={i}, name=python3, GPU has fallen off the bus."
            elif i % 5 == 1:
                text = f"NVRM: Xid 13, pid={i}" if i % 50 == 1 else f"NVRM: Xid (PCI:0000:2a:00): 48, pid={i}"
            else:
                text = f"EXT4-fs (nvme0n1p1): re-mounted. Opts: errors=remount-ro seq={i}"
            out.write(f"{stamp} node-{i % 97} kernel: {text}\n")


def write_sacct(path: Path, lines: int) -> None:
    """A sacct -P export of ``lines`` jobs on 4 nodes each, 1 in 50 ended by NODE_FAIL."""
    start = datetime(2026, 1, 1)
    with path.open("w") as out:
        out.write("JobID|JobName|State|Start|End|ElapsedRaw|NNodes|NodeList\n")
        for j in range(lines - 1):
            begin, end = start + timedelta(minutes=j), start + timedelta(minutes=j + 60)
            state = "NODE_FAIL" if j % 50 == 0 else "COMPLETED"
            out.write(f"{j}|job{j % 97}|{state}|{begin:%Y-%m-%dT%H:%M:%S}|{end:%Y-%m-%dT%H:%M:%S}|3600|4|")
            out.write(f"gpu-[{j % 900:03d}-{j % 900 + 3:03d}]\n")


def ingest_in_child(tmp_path: Path, lines: int, write=write_log) -> dict:
    log = tmp_path / f"{write.__name__}-{lines}.txt"
    write(log, lines)
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            str(log),
            str(tmp_path / f"w-{lines}.duckdb"),
            str(BLOCK_BYTES),
            str(DUCKDB_MEMORY_MB),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    ).stdout
    return json.loads(out.splitlines()[-1])


def test_peak_memory_does_not_grow_with_the_log(tmp_path):
    small, big = ingest_in_child(tmp_path, 120_000), ingest_in_child(tmp_path, 480_000)
    for result, lines in ((small, 120_000), (big, 480_000)):
        assert result["rows_read"] == lines
        assert result["rows_ingested"] == lines * 2 // 5 - lines // 50
        assert result["rows_rejected"] == lines // 50
        assert result["rows_ignored"] == lines * 3 // 5
    growth_mb = big["peak_mb"] - small["peak_mb"]
    assert growth_mb < MAX_GROWTH_MB, (
        f"peak RSS {small['peak_mb']:.0f} MB for 120k lines, {big['peak_mb']:.0f} MB for 480k lines"
    )


def test_sacct_peak_memory_does_not_grow_with_the_export(tmp_path):
    """Parsed batches were registered in DuckDB inside the file's transaction, which kept them all
    until commit: +79 MB from 60k to 240k jobs under the 64 MB cap; read by variable name: +10 MB."""
    small, big = (
        ingest_in_child(tmp_path, 60_000, write_sacct),
        ingest_in_child(tmp_path, 240_000, write_sacct),
    )
    assert (small["rows_ingested"], big["rows_ingested"]) == (59_999, 239_999)
    growth_mb = big["peak_mb"] - small["peak_mb"]
    assert growth_mb < MAX_GROWTH_MB, (
        f"peak RSS {small['peak_mb']:.0f} MB for 60k jobs, {big['peak_mb']:.0f} MB for 240k jobs"
    )


@pytest.mark.parametrize(("value", "limit"), [("256", "244.1 MiB"), ("", "976.5 MiB"), ("0", None)])
def test_the_environment_caps_duckdb_memory(tmp_path, monkeypatch, value, limit):
    """256 MB (DuckDB shows 256e6 bytes in MiB); unset: the default cap, 1024 MB; 0: no cap
    (DuckDB's own default, 80% of RAM)."""
    monkeypatch.setenv("FAILCAST_DUCKDB_MEMORY_MB", value)
    con = warehouse.connect(tmp_path / "w.duckdb")
    [(got,)] = con.sql("SELECT current_setting('memory_limit')").fetchall()
    assert got == limit if limit else got not in ("976.5 MiB", "244.1 MiB")
    con.close()


@pytest.mark.parametrize("value", ["abc", "10", "-512", "1.5"])
def test_a_bad_memory_cap_is_refused(tmp_path, monkeypatch, value):
    monkeypatch.setenv("FAILCAST_DUCKDB_MEMORY_MB", value)
    with pytest.raises(ValueError, match=f"^FAILCAST_DUCKDB_MEMORY_MB={value!r}: expected whole megabytes"):
        warehouse.connect(tmp_path / "w.duckdb")
    assert not (tmp_path / "w.duckdb").exists()


def test_a_bad_memory_cap_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "x.log").write_text("Mar  2 04:26:29 node-017 kernel: NVRM: Xid (PCI:0000:18:00): 79\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "ingest",
            str(tmp_path / "x.log"),
            "--db",
            str(tmp_path / "w.duckdb"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "FAILCAST_DUCKDB_MEMORY_MB": "lots"},
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        "failcast: FAILCAST_DUCKDB_MEMORY_MB='lots': expected whole megabytes, at least 64 (e.g. 4096), "
        "or 0 for no cap"
    )
