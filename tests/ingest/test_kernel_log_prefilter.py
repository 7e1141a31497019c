"""The kernel-log reader's byte-level path: only lines with ``Xid`` or ``NVRM`` become strings, the
year scan reads line heads, the file is hashed beside the parse and one set of workers serves every
file.

Each byte-level result is checked against the string-per-line reading it replaces (``Block.frame()``
of all lines, ``syslog_years.month_changes``), which the rest of the readers still use."""

from __future__ import annotations

import hashlib
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline import warehouse
from pipeline.ingest import ReaderOptions, ingest_files
from pipeline.readers import kernel_log, syslog_years
from pipeline.readers.lines import read_blocks

# Xid lines in every form the parser accepts or rejects by name, with their sources:
# /work/shared/reference/log_formats.md section 1 and docs/ingest.md "Kernel logs".
XID_FORMS = [
    # https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1151 (syslog, no year)
    "May 18 19:02:39 node17 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.",
    # https://pastebin.com/jJdbRLSr (plain dmesg: rejected, no date)
    "[ 5107.644336] NVRM: Xid (PCI:0000:03:00): 79, GPU has fallen off the bus.",
    # stas00/ml-engineering compute/accelerator/nvidia/debug.md (no prefix at all: rejected)
    "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu.",
    # https://pastebin.com/xJaypMZt (old driver, no PCI: prefix)
    "Jan 18 11:38:05 host kernel: [ 269.517039] NVRM: Xid (0000:01:00): 3, C 00000005 SC 00000007",
    "May 18 19:02:40 node17 kernel: nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32",
    # docs/ingest.md: rsyslog RFC 3339, journalctl -o short-iso, dmesg -T
    "2026-03-02T04:26:29.892511+00:00 node-017 kernel: [361589.124297] NVRM: Xid (PCI:0000:18:00): 79, x",
    "2026-03-02T04:26:29+0000 node-017 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=10895",
    "[Mon Mar  2 04:26:29 2026] NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.",
    # broken ones are relevant too (rejected with a reason)
    "Feb 30 00:00:00 node17 kernel: NVRM: Xid (PCI:0000:18:00): 79, impossible date",
    "Mar  2 04:26:29 node17 kernel: NVRM: Xid without a code",
    "XidXid",
    "Xid",
    # a GPU fallen off the bus without an Xid (docs/ingest.md cites each): found by NVRM
    "Apr 16 12:39:12 blake kernel: [12149.628762] NVRM: GPU at 0000:02:00.0 has fallen off the bus.",
    "May 18 19:02:39 node17 kernel: NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.",
    "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",
    "               NVRM: fallen off the bus and is not responding to commands.",
]
NOISE = [
    "May 18 19:02:41 node17 kernel: EXT4-fs (nvme0n1p1): re-mounted. Opts: errors=remount-ro",
    "Xi d, XID 79 in capitals and xid in lower case: ordinary messages",
    "X",
    "",
]


def _blocks(tmp_path: Path, data: bytes, block_bytes: int) -> list:
    path = tmp_path / "kern.log"
    path.write_bytes(data)
    return list(read_blocks(path, block_bytes))


@pytest.mark.parametrize("form", XID_FORMS)
@pytest.mark.parametrize("ending", [b"\n", b"\r\n"])
def test_every_xid_form_is_kept_with_its_line_number(tmp_path, form, ending):
    """Whatever the form, an Xid line between ordinary lines (one with bytes that are not UTF-8, a
    byte order mark first) becomes a row with its physical line number and its text, and nothing
    else does."""
    lines = [b"\xef\xbb\xbf" + NOISE[0].encode(), *(n.encode() for n in NOISE)]
    lines += [form.encode(), b"caf\xc3\xa9 \xff not UTF-8", form.encode() + b" \xfe", NOISE[0].encode()]
    [block] = _blocks(tmp_path, ending.join(lines) + ending, 1 << 20)
    kept = block.frame(block.containing(b"Xid", b"NVRM"))
    assert kept["line"].to_list() == [6, 8]
    assert kept["text"].to_list() == [form, form + " \ufffd"]
    assert kept["bad_utf8"].to_list() == [False, True]
    assert block.bad_utf8_lines() == 2


_PIECES = [
    b"",
    b"a",
    b"Ja",
    b"Jan",
    b"Janitor 1 00:",
    b"Jan  1 00:00:00 h kernel: x",
    b"Jun 30 23:59:59 h kernel: x",
    b"Dec 31 23:59:59 h kernel: NVRM: Xid (PCI:0000:18:00): 79, x",
    b"Dec\t9 10:",
    b"Feb 2 x",
    b"Xid",
    b"X\xffid \xff Xid",
    b"caf\xc3\xa9",
    b"ab\r",
    b"Mar  2 04:26:29 h kernel: Xid\r",
    b"NVRM",
    b"NV",
    b"xNVRM: GPU at 0000:01:00.0 has fallen off the bus.",
    b"  NVRM: fallen off the bus",
    b"NVR",
    b"XNVRMXi",
]


@settings(max_examples=60, deadline=None)
@given(
    picks=st.lists(st.integers(0, len(_PIECES) - 1), max_size=60),
    bom=st.booleans(),
    newline_at_end=st.booleans(),
    block=st.integers(1, 200),
)
def test_byte_level_block_equals_the_string_per_line_reading(
    tmp_path_factory, picks, bom, newline_at_end, block
):
    """Per block: the lines found by bytes are those whose text contains ``Xid``, gathered rows
    equal those rows of the full frame, the undecodable lines are counted alike, and the month
    changes from line heads equal those of the regex over every line."""
    data = (b"\xef\xbb\xbf" if bom else b"") + b"\n".join(_PIECES[i] for i in picks)
    data += b"\n" if newline_at_end and picks else b""
    for b in _blocks(tmp_path_factory.mktemp("log"), data, block):
        full = b.frame()
        rows = b.containing(b"Xid")
        expected = np.flatnonzero(full["text"].str.contains("Xid", literal=True).to_numpy())
        assert rows.tolist() == expected.tolist()
        either = full["text"].str.contains("Xid", literal=True) | full["text"].str.contains(
            "NVRM", literal=True
        )
        assert b.containing(b"Xid", b"NVRM").tolist() == np.flatnonzero(either.to_numpy()).tolist()
        assert b.frame(rows).equals(_rows(full, rows))
        every_other = np.arange(0, b.lines, 2)  # more than half of the lines: the other path
        assert b.frame(every_other).equals(_rows(full, every_other))
        assert b.bad_utf8_lines() == full["bad_utf8"].sum()
        assert syslog_years.block_month_changes(b).equals(syslog_years.month_changes(full, ""))


def _rows(frame: pl.DataFrame, rows: np.ndarray) -> pl.DataFrame:
    return frame.filter(pl.int_range(pl.len()).is_in(rows.tolist()))


def _syslog(lines: int, xid_every: int = 7, start_line: int = 0) -> bytes:
    """Syslog lines across a New Year (Dec -> Jan), every ``xid_every``-th an Xid line with a code
    that makes its content unique, and every 11th an ordinary line with a byte that is not UTF-8."""
    out = []
    for i in range(start_line, start_line + lines):
        month, day = ("Dec", 31) if i < 150 else ("Jan", 1)
        stamp = f"{month} {day:2d} {i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d} node-{i % 5}"
        if i % xid_every == 0:
            out.append(
                f"{stamp} kernel: NVRM: Xid (PCI:0000:18:00): 79, pid={i}, GPU has fallen off the bus."
            )
        else:
            out.append(f"{stamp} kernel: usb 1-1: {'caf' + chr(0xE9) if i % 11 else 'bad'} message")
    data = "\n".join(out).encode() + b"\n"
    return data.replace(b"bad message", b"b\xffd message")


def test_counts_add_up_and_non_utf8_ignored_lines_are_counted(con, tmp_path):
    path = tmp_path / "kern.log"
    path.write_bytes(_syslog(300))
    [s] = ingest_files(con, [path], ReaderOptions(year=2025, cluster="c1"))
    xid = len(range(0, 300, 7))
    bad_ignored = len([i for i in range(0, 300, 11) if i % 7])
    assert (s.rows_read, s.rows_ingested, s.rows_rejected, s.rows_ignored) == (300, xid, 0, 300 - xid)
    assert f"{bad_ignored} ignored (non-Xid) line(s) had non-UTF-8 bytes" in s.notes
    lines = con.sql("SELECT line, year(timestamp_utc) FROM events ORDER BY line").fetchall()
    assert lines == [(i + 1, 2025 if i < 150 else 2026) for i in range(0, 300, 7)]


class _CountingPool(ThreadPoolExecutor):
    made: list[_CountingPool] = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.made.append(self)


def test_one_set_of_workers_serves_every_file_and_is_shut_down(tmp_path, monkeypatch):
    """Two logs large enough for spans in one ingest: one pool, started once, shut down at the end;
    both files are read whole."""
    monkeypatch.setattr(kernel_log, "SPAN_BYTES", 2000)
    monkeypatch.setattr(kernel_log, "ThreadPoolExecutor", _CountingPool)
    monkeypatch.setattr(kernel_log, "_workers", lambda: 1)
    _CountingPool.made.clear()
    first, second = tmp_path / "a.log", tmp_path / "b.log"
    first.write_bytes(_syslog(300))
    second.write_bytes(_syslog(300, start_line=300))
    con = warehouse.connect(tmp_path / "w.duckdb")
    summaries = ingest_files(con, [first, second], ReaderOptions(year=2025, cluster="c1"))
    assert [s.rows_read for s in summaries] == [300, 300]
    assert [s.rows_ingested for s in summaries] == [len(range(0, 300, 7)), len(range(300, 600, 7))]
    [pool] = _CountingPool.made
    assert pool._shutdown and pool._threads and not any(t.is_alive() for t in pool._threads)
    con.close()


class _NoPool:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("can't start new thread")


def test_hashed_beside_the_parse_re_ingest_is_a_no_op_and_a_grown_log_adds_its_new_lines(
    tmp_path, monkeypatch
):
    """A log parsed in spans whose size no stored file has is hashed while it is parsed: the stored
    sha256 is the file's; the same content again (same or another name) is skipped; the log grown
    by more lines adds only those."""
    monkeypatch.setattr(kernel_log, "SPAN_BYTES", 2000)
    monkeypatch.setattr(kernel_log, "ThreadPoolExecutor", _NoPool)
    path = tmp_path / "kern.log"
    path.write_bytes(_syslog(300))
    assert kernel_log.parallel_parts(path) > 1
    con = warehouse.connect(tmp_path / "w.duckdb")
    [s] = ingest_files(con, [path], ReaderOptions(year=2025, cluster="c1"))
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert con.sql("SELECT sha256, rows_read FROM ingested_files").fetchall() == [(sha, 300)]
    copy = tmp_path / "copy.log"
    shutil.copy(path, copy)
    again = ingest_files(con, [path, copy], ReaderOptions(year=2025, cluster="c1"))
    assert [a.skipped for a in again] == [True, True]
    events = con.sql("SELECT count(*) FROM events").fetchall()[0][0]
    assert events == s.rows_ingested
    path.write_bytes(_syslog(300) + _syslog(100, start_line=300))
    [grown] = ingest_files(con, [path], ReaderOptions(year=2025, cluster="c1"))
    new = len(range(300, 400, 7))
    assert (grown.rows_read, grown.rows_ingested, grown.rows_duplicate) == (400, new, s.rows_ingested)
    stored = con.sql("SELECT sha256 FROM ingested_files ORDER BY file_id").fetchall()
    assert stored == [(sha,), (hashlib.sha256(path.read_bytes()).hexdigest(),)]
    assert con.sql("SELECT count(*) FROM events").fetchall() == [(events + new,)]
    con.close()
