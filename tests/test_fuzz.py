"""A corpus of nasty real-world input shapes, generated small by the tests: CRLF, byte order marks,
NUL bytes, 10 MB lines, odd timestamps (out of order, future, before 1970, leap seconds, DST-naive
local times), gzip bombs, symlink loops in globs, unreadable files.

Each case checks the documented outcome and that every line is accounted for.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from pipeline import warehouse
from pipeline.cli import main
from pipeline.ingest import InputError, ReaderOptions, detect_format, ingest_files

REPO = Path(__file__).parents[1]
CSV_HEADER = "timestamp,cluster_id,node_id,category,gpu_index,job_id,message,resolved_at"
INVENTORY = (
    "cluster_id,node_id,instance_type,gpus_per_node,in_service_from\nc1,n1,p5,8,2020-01-01T00:00:00Z\n"
)
XID = "2026-03-02T04:26:{s:02d}+00:00 node-1 kernel: NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus."  # noqa: E501
SACCT = "JobID|State|Start|End|NodeList\n7|NODE_FAIL|2024-03-01T10:00:00|2024-03-01T11:00:00|gpu-[1-2]\n"


@pytest.fixture
def con(tmp_path):
    connection = warehouse.connect(tmp_path / "w.duckdb")
    yield connection
    connection.close()


def add_up(s) -> bool:
    return s.rows_read == s.rows_ingested + s.rows_duplicate + s.rows_rejected + s.rows_ignored


def csv_rows(*rows: str) -> str:
    return "\n".join([CSV_HEADER, *rows]) + "\n"


def xid_log(n: int) -> str:
    return "".join(XID.format(s=s) + "\n" for s in range(n))


def rows_of(con, sql: str) -> list[tuple]:
    return con.sql(sql).fetchall()


# --- line endings, byte order marks, NUL bytes, long lines ---------------------------------------
@pytest.mark.parametrize(
    ("name", "text", "fmt", "table"),
    [
        ("i.csv", csv_rows("2026-03-02T04:26:29Z,c1,n1,gpu_fell_off_bus,0,,m,"), None, "events"),
        (
            "i.jsonl",
            '{"timestamp":"2026-03-02T04:26:29Z","cluster_id":"c1","node_id":"n1",'
            '"category":"gpu_fell_off_bus"}\n',
            None,
            "events",
        ),
        ("k.log", xid_log(3), "kernel-log", "events"),
        ("s.txt", SACCT, "sacct", "jobs"),
    ],
)
@pytest.mark.parametrize("shape", ["crlf", "bom", "bom+crlf", "gzip+bom"])
def test_crlf_and_byte_order_marks_read_like_plain_files(tmp_path, name, text, fmt, table, shape):
    """A BOM used to break the first line: JSONL refused, the sacct header lost, XID line 1 rejected."""
    plain_con = warehouse.connect(tmp_path / "plain.duckdb")
    (tmp_path / "plain").mkdir()
    [plain] = ingest_files(
        plain_con, [_write(tmp_path / "plain" / name, text.encode())], ReaderOptions(fmt=fmt)
    )
    data = text.replace("\n", "\r\n") if "crlf" in shape else text
    data = ("\ufeff" + data if "bom" in shape else data).encode()
    path = tmp_path / (name + ".gz" if "gzip" in shape else name)
    shaped_con = warehouse.connect(tmp_path / "shaped.duckdb")
    [shaped] = ingest_files(
        shaped_con, [_write(path, gzip.compress(data) if "gzip" in shape else data)], ReaderOptions(fmt=fmt)
    )
    counts = ("rows_read", "rows_ingested", "rows_rejected", "rows_ignored")
    assert [getattr(shaped, c) for c in counts] == [getattr(plain, c) for c in counts]
    assert shaped.rows_ingested > 0 and shaped.rows_rejected == 0
    columns = "node_id, timestamp_utc, message" if table == "events" else "job_id, nodes, start_utc"
    query = f"SELECT {columns} FROM {table} ORDER BY ALL"  # noqa: S608 (names from the parametrize list)
    assert rows_of(shaped_con, query) == rows_of(plain_con, query)


@pytest.mark.parametrize(
    ("content", "fmt"),
    [
        (
            '{"timestamp":"2026-03-02T04:26:29Z","cluster_id":"c1","node_id":"n1","category":"host"}\n',
            "jsonl",
        ),
        (SACCT, "sacct"),
        (csv_rows("2026-03-02T04:26:29Z,c1,n1,host,,,m,"), "csv"),
        (xid_log(1), "kernel-log"),
    ],
)
def test_format_is_detected_behind_a_byte_order_mark(tmp_path, content, fmt):
    assert detect_format(_write(tmp_path / "export.txt", ("\ufeff" + content).encode())) == fmt


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_nul_bytes_are_kept_or_rejected_never_lost(con, tmp_path):
    row = "2026-03-02T04:26:29Z,c1,n\x001,gpu_fell_off_bus,0,,a\x00b,"
    csv_path = _write(tmp_path / "nul.csv", csv_rows(row).encode())
    log_path = _write(tmp_path / "nul.log", ("\x00\x00\n" + xid_log(1).replace("bus.", "b\x00us.")).encode())
    summaries = ingest_files(con, [csv_path, log_path])
    assert all(add_up(s) for s in summaries)
    assert [s.rows_ingested for s in summaries] == [1, 1]
    messages = {m for (m,) in rows_of(con, "SELECT message FROM events")}
    assert "a\x00b" in messages  # stored as given; the outputs escape it (test_security.py)


def test_ten_megabyte_lines_are_read_across_block_boundaries(con, tmp_path):
    junk = "x" * (10 << 20)
    log = _write(
        tmp_path / "big.log", (junk + "\n" + XID.format(s=1) + " " + junk + "\n" + XID.format(s=2)).encode()
    )
    csv_path = _write(
        tmp_path / "big.csv", csv_rows(f"2026-03-02T04:26:29Z,c1,n1,gpu_fell_off_bus,0,,{junk},").encode()
    )
    [s_log] = ingest_files(con, [log], ReaderOptions(fmt="kernel-log"))
    [s_csv] = ingest_files(con, [csv_path])
    assert (s_log.rows_read, s_log.rows_ingested, s_log.rows_ignored) == (3, 2, 1)
    assert (s_csv.rows_read, s_csv.rows_ingested) == (1, 1)
    lengths = rows_of(con, "SELECT length(message) FROM events ORDER BY length(message)")
    assert lengths[-2][0] == len(junk) and lengths[-1][0] > len(junk)


# --- timestamps ----------------------------------------------------------------------------------
def test_out_of_order_future_and_pre_1970_times_are_kept_as_given(con, tmp_path):
    times = ["2026-03-02T04:00:00Z", "1969-07-20T20:17:40Z", "2999-12-31T23:59:59Z", "2026-03-01T00:00:00Z"]
    path = _write(
        tmp_path / "t.csv", csv_rows(*(f"{t},c1,n1,host,,,m{i}," for i, t in enumerate(times))).encode()
    )
    [s] = ingest_files(con, [path])
    assert (s.rows_ingested, s.rows_rejected) == (4, 0)
    stored = [t for (t,) in rows_of(con, "SELECT timestamp_utc FROM events ORDER BY line")]
    assert stored == [datetime.fromisoformat(t.removesuffix("Z")) for t in times]
    assert rows_of(con, "SELECT count(*) FROM incidents") == [(4,)]


@pytest.mark.parametrize(
    ("name", "content", "fmt"),
    [
        ("leap.csv", csv_rows("2016-12-31T23:59:60Z,c1,n1,host,,,leap,"), None),
        ("leap.log", XID.replace("2026-03-02T04:26:{s:02d}", "2016-12-31T23:59:60") + "\n", "kernel-log"),
        (
            "leap-syslog.log",
            "Dec 31 23:59:60 node-1 kernel: NVRM: Xid (PCI:0000:18:00): 79, x\n",
            "kernel-log",
        ),
    ],
)
def test_leap_seconds_are_rejected_with_the_time_named(con, tmp_path, name, content, fmt):
    """Decision (SECURITY.md): 23:59:60 is not a valid time for DuckDB; the line is rejected with
    its text kept, never dropped silently or moved to another second."""
    [s] = ingest_files(con, [_write(tmp_path / name, content.encode())], ReaderOptions(fmt=fmt, year=2016))
    assert (s.rows_read, s.rows_ingested, s.rows_rejected) == (1, 0, 1)
    [(reason, raw)] = rows_of(con, "SELECT reason, raw FROM rejects")
    assert "23:59:60" in reason and "23:59:60" in raw


@pytest.mark.parametrize(
    ("local", "utc"),
    [
        ("2026-11-01 01:30:00", "2026-11-01 06:30:00"),  # ambiguous (01:00-02:00 twice): standard time
        ("2026-03-08 02:30:00", "2026-03-08 07:30:00"),  # nonexistent (skipped hour): pre-change offset
        ("2026-07-01 12:00:00", "2026-07-01 16:00:00"),  # ordinary summer time
    ],
)
@pytest.mark.parametrize("fmt", ["csv", "kernel-log"])
def test_dst_naive_local_times_follow_the_documented_rule(con, tmp_path, local, utc, fmt):
    """Naive times with --timezone America/New_York: an ambiguous time is read as its second
    (standard-time) occurrence, a nonexistent one with the offset before the change."""
    if fmt == "csv":
        path = _write(tmp_path / "dst.csv", csv_rows(f"{local},c1,n1,host,,,m,").encode())
    else:
        path = _write(tmp_path / "dst.log", XID.replace("2026-03-02T04:26:{s:02d}+00:00", local).encode())
    [s] = ingest_files(con, [path], ReaderOptions(timezone="America/New_York"))
    assert s.rows_ingested == 1
    assert rows_of(con, "SELECT timestamp_utc FROM events") == [(datetime.fromisoformat(utc),)]


# --- gzip bombs ----------------------------------------------------------------------------------
BOMB_LIMIT = 1 << 20


@pytest.mark.parametrize(
    ("name", "payload", "fmt"),
    [
        ("bomb.csv.gz", csv_rows().encode() + b"\n" * (4 << 20), None),
        ("bomb.jsonl.gz", b" " * (4 << 20) + b"\n", None),
        ("bomb.log.gz", (xid_log(1) + "\n" * (4 << 20)).encode(), "kernel-log"),
        ("bomb.txt.gz", SACCT.encode() + b"\n" * (4 << 20), "sacct"),
    ],
)
def test_gzip_bombs_stop_at_the_decompressed_size_limit(con, tmp_path, name, payload, fmt):
    path = _write(tmp_path / name, gzip.compress(payload, 9))
    assert path.stat().st_size < BOMB_LIMIT / 50  # a bomb: tiny on disk
    good = _write(tmp_path / "good.csv", INVENTORY.encode())
    ingest_files(con, [good])
    with pytest.raises(InputError, match="decompresses to more than 1 MB.*gzip bomb.*--max-decompressed-mb"):
        ingest_files(con, [path], ReaderOptions(fmt=fmt, max_decompressed_bytes=BOMB_LIMIT))
    files = rows_of(con, "SELECT path FROM ingested_files")
    assert files == [(str(good),)]  # the bomb's transaction rolled back
    assert rows_of(con, "SELECT count(*) FROM events") + rows_of(con, "SELECT count(*) FROM jobs") == [
        (0,),
        (0,),
    ]


def test_gzip_bomb_on_the_command_line_is_one_line_and_exit_2(tmp_path):
    path = _write(tmp_path / "bomb.log.gz", gzip.compress(b"\n" * (3 << 20), 9))
    result = CliRunner().invoke(
        main,
        ["ingest", str(path), "--format", "kernel-log", "--db", str(tmp_path / "w.duckdb")]
        + ["--max-decompressed-mb", "1"],
    )
    assert result.exit_code == 2, result.output
    assert "gzip bomb" in result.output and len(result.output.strip().splitlines()) == 1


def test_the_configured_limit_reaches_a_scheduled_run(tmp_path):
    (tmp_path / "logs").mkdir()
    _write(tmp_path / "logs" / "bomb.log.gz", gzip.compress(b"\n" * (3 << 20), 9))
    cfg = _write(
        tmp_path / "failcast.toml",
        b'warehouse = "w.duckdb"\n[inputs]\nkernel-log = ["logs/*.gz"]\n[ingest]\nmax_decompressed_mb = 1\n',
    )
    result = CliRunner().invoke(main, ["run", "--config", str(cfg)])
    assert result.exit_code == 2 and "gzip bomb" in result.output, result.output


def test_a_gzip_within_the_limit_is_read(con, tmp_path):
    path = _write(tmp_path / "ok.log.gz", gzip.compress((xid_log(2) + "\n" * 1000).encode()))
    [s] = ingest_files(con, [path], ReaderOptions(max_decompressed_bytes=BOMB_LIMIT))
    assert (s.rows_ingested, s.rows_ignored) == (2, 1000)


# --- symlink loops and unreadable files ----------------------------------------------------------
def test_symlink_loop_in_an_input_glob_ingests_each_file_once(tmp_path):
    logs = tmp_path / "logs"
    (logs / "a").mkdir(parents=True)
    (logs / "a" / "back").symlink_to(logs, target_is_directory=True)  # logs/a/back -> logs: a loop
    (logs / "a" / "i.csv").write_text(csv_rows("2026-03-02T04:26:29Z,c1,n1,host,,,m,"))
    result = CliRunner().invoke(
        main, ["ingest", str(logs / "**" / "*.csv"), "--db", str(tmp_path / "w.duckdb"), "--json"]
    )
    assert result.exit_code == 0, result.output
    assert result.output.count('"path"') == 1


WRITE_ONLY = Path("/proc/sys/vm/drop_caches")  # mode 0200: procfs refuses reads even to root


def test_unreadable_file_is_a_clean_error_naming_it(tmp_path):
    """chmod 000 does not stop root (CI runs tests as root), so as root the unreadable file is a
    write-only procfs file, which refuses reads to root as well."""
    if os.geteuid() != 0:
        unreadable = tmp_path / "incidents.csv"
        unreadable.write_text(csv_rows("2026-03-02T04:26:29Z,c1,n1,host,,,m,"))
        unreadable.chmod(0o000)
    elif WRITE_ONLY.exists() and not os.access(WRITE_ONLY, os.R_OK):
        unreadable = WRITE_ONLY
    else:
        pytest.skip(f"running as root and {WRITE_ONLY} is missing or readable: no file root cannot read")
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "ingest", str(unreadable), "--db", str(tmp_path / "w.duckdb")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert f"{unreadable}: cannot read (Permission denied)" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("directory", "is a directory: pass files or a glob"),
        ("fifo", "not a regular file"),
        ("missing", "no such file"),
    ],
)
def test_paths_that_are_no_regular_file_are_refused_without_hanging(con, tmp_path, kind, message):
    path = tmp_path / "input.csv"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)  # opening it would block forever
    with pytest.raises(InputError, match=message):
        ingest_files(con, [path])


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
@pytest.mark.parametrize("name", ["incidents[1]", "incidents*", "incidents?"])
def test_file_names_with_glob_characters_are_read_as_named(con, tmp_path, name, suffix):
    """Polars expands glob patterns in paths: 'incidents*.csv' must not read the neighbours too."""
    rows = {
        "timestamp": ["2026-03-02T04:26:29Z"],
        "cluster_id": ["c1"],
        "node_id": ["n1"],
        "category": ["host"],
    }
    frame = pl.DataFrame(rows)
    for stem, node in ((name, "n1"), ("incidents1", "n2"), ("incidentsX", "n3")):
        path = tmp_path / f"{stem}{suffix}"
        framed = frame.with_columns(node_id=pl.lit(node))
        {".csv": framed.write_csv, ".jsonl": framed.write_ndjson, ".parquet": framed.write_parquet}[suffix](
            path
        )
    [s] = ingest_files(con, [tmp_path / f"{name}{suffix}"])
    assert (s.rows_read, s.rows_ingested) == (1, 1)
    assert rows_of(con, "SELECT node_id FROM events") == [("n1",)]
