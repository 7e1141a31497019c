"""The systemd journal as ``journalctl -k -o json`` writes it -> ``events``: a kernel log in JSON.

One JSON object per line (Journal JSON Format, https://systemd.io/JOURNAL_EXPORT_FORMATS/; fields
in systemd.journal-fields(7))::

    {"__CURSOR":"s=...","__REALTIME_TIMESTAMP":"1772425589892511","__MONOTONIC_TIMESTAMP":"361589124297",
     "_BOOT_ID":"...","_TRANSPORT":"kernel","PRIORITY":"3","SYSLOG_FACILITY":"0","SYSLOG_IDENTIFIER":"kernel",
     "_HOSTNAME":"node-017","MESSAGE":"NVRM: Xid (PCI:0000:18:00): 79, pid=10895, GPU has fallen off ..."}

Read as the kernel-log reader reads a line's message (:mod:`.kernel_messages`: Xid and SXid codes,
fallen-off-the-bus messages, Xid 154 by its action): time = ``__REALTIME_TIMESTAMP`` (microseconds
since the epoch, a decimal string; ``_SOURCE_REALTIME_TIMESTAMP`` when an entry has none), node =
``_HOSTNAME``, else ``node`` (``--node``). ``MESSAGE`` is a string, or an array of byte values when
the text is not printable UTF-8 (decoded; undecodable bytes become U+FFFD and are noted), or an
array of values when the field was set more than once (joined), or null when journalctl left a
value of 4096 bytes or more out (without ``--all``): never a kernel message, whose lines printk
keeps under 1 KiB, so such an entry is ignored. A kernel message printed over
several lines (the driver's three-line fallen-off-the-bus message) is one entry whose lines are
joined as the kernel-log reader joins them, so both readers store it alike. ``-o json-seq``
(each entry after a record separator, U+001E) is read too.

Accounting, per line: read = ingested + duplicate + rejected + ignored. Only lines whose bytes hold
``Xid`` or ``NVRM``, or an array value (a ``MESSAGE`` of bytes could hide them), are parsed as JSON;
the others are ignored unless they are not shaped as a JSON object (``{...}``): those are rejected
as broken JSON, so a cut-off entry is never ignored silently. Ignored by rule: blank lines, entries
that are not the kernel's (``_TRANSPORT`` other than ``kernel`` and ``SYSLOG_IDENTIFIER`` other than
``kernel``: a daemon's own log of an Xid is not the driver's record), entries with no ``MESSAGE`` or
a null one, and kernel messages that carry no Xid or fallen-off message. Rejected, with file, line,
raw text and reason: a line that is not a JSON object, an entry without a usable time, without a
host (no ``_HOSTNAME`` and no ``--node``), and what the kernel log rejects (an Xid without a code
...).
"""

from __future__ import annotations

import json
import re
import tempfile
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from pipeline import xid as xid_catalog
from pipeline.readers.contract import Head, ReadContext
from pipeline.readers.kernel_messages import STAGED_ARROW, STAGED_SCHEMA, store_staged
from pipeline.readers.lines import RAW_CHARS, Block, head_text, read_blocks
from pipeline.store.files import FileSummary, InputError

FORMAT = "journald-json"
SNIFF = re.compile(r'^\x1e?\{\s*(?:$|.*"(?:__REALTIME_TIMESTAMP|__CURSOR)"\s*:)', re.DOTALL)
_META = re.compile(r'^\s*"(?:__REALTIME_TIMESTAMP|__CURSOR)"\s*:')
KERNEL = "kernel"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CANDIDATES = (b"Xid", b"NVRM", b":[", b" [")
"""Bytes that make a line worth parsing: the driver's words, or an array value (a MESSAGE of bytes,
``[78,86,...]``, in the compact and in the older spaced JSON that journalctl wrote)."""
_NOT_UTF8 = "not UTF-8"
_CONTINUATION = re.compile(r"\s*\n\s*(?:NVRM:\s*)?")
_ROWS = {
    "line": pl.Int64,
    "text": pl.String,
    "truncated": pl.Boolean,
    "problem": pl.String,
    "broken": pl.Boolean,  # not JSON: rejected whatever it holds
    "ts_text": pl.String,
    "node_id": pl.String,
    "message": pl.String,
}


def _first_lines(head: str) -> list[str]:
    return [line.strip() for line in head.splitlines() if line.strip()][:2]


def looks_like(head: str) -> bool:
    """Whether ``head`` (a file's start) is a journal JSON export: its first non-blank line is an
    object naming ``__REALTIME_TIMESTAMP`` or ``__CURSOR`` (or, pretty-printed, ``{`` and then one
    of them: read to say how to export it)."""
    lines = _first_lines(head)
    if not lines or SNIFF.match(lines[0]) is None:
        return False
    return lines[0].lstrip("\x1e") != "{" or (len(lines) > 1 and _META.match(lines[1]) is not None)


def _shape_broken(block: Block) -> np.ndarray:
    """Indexes of the block's non-blank lines that are not shaped as a JSON object: the first
    byte (after a json-seq record separator) is not ``{`` or the last (before a CR) is not ``}``."""
    data, starts, ends = block.data, block.starts(), block.ends
    length = ends - starts
    last = np.where(length > 0, data[np.maximum(ends - 1, 0)], 0)
    carriage = (length > 0) & (last == ord("\r"))
    last = np.where(carriage & (length > 1), data[np.maximum(ends - 2, 0)], last)
    first = np.where(length > 0, data[np.minimum(starts, len(data) - 1)], 0)
    separator = (first == 0x1E) & (length > 1)
    first = np.where(separator, data[np.minimum(starts + 1, len(data) - 1)], first)
    blank = (length - carriage - separator) <= 0
    return np.flatnonzero(~blank & ((first != ord("{")) | (last != ord("}"))))


def _text(value: object) -> str | None:
    """A journal field's value as text: a string, bytes given as numbers, or several values."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, list) and value and all(isinstance(b, int) and 0 <= b < 256 for b in value):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, list):
        parts = [_text(v) for v in value]
        return "\n".join(p for p in parts if p is not None) or None
    return None


def _time_text(entry: dict) -> tuple[str | None, str | None]:
    """(ISO time in UTC, problem) of an entry."""
    for field in ("__REALTIME_TIMESTAMP", "_SOURCE_REALTIME_TIMESTAMP"):
        value = _text(entry.get(field))
        if value is None:
            continue
        if not value.strip().isdigit():
            return None, f"{field} {value[:40]!r} is not microseconds since the epoch"
        try:
            return (_EPOCH + timedelta(microseconds=int(value))).isoformat(), None
        except OverflowError:
            return None, f"{field} {value[:40]!r} is out of range"
    return None, "entry has no __REALTIME_TIMESTAMP; export with journalctl -o json"


def _entry(raw: str, node: str | None, ignored: Counter) -> dict | None:
    """The staged fields of one candidate line, or None when it is ignored by rule (counted)."""
    try:
        entry = json.loads(raw.lstrip("\x1e"))
    except ValueError as exc:
        return {"problem": f"not a JSON object: {exc}", "broken": True}
    if not isinstance(entry, dict):
        return {"problem": "not a JSON object", "broken": True}
    transport, identifier = _text(entry.get("_TRANSPORT")), _text(entry.get("SYSLOG_IDENTIFIER"))
    if KERNEL not in (transport, identifier) and (transport or identifier):
        ignored[f"entries not from the kernel (_TRANSPORT {transport or '-'}, {identifier or '-'})"] += 1
        return None
    if "MESSAGE" not in entry:
        ignored["entries without MESSAGE"] += 1
        return None
    message = _text(entry["MESSAGE"])
    if message is None:  # left out by journalctl at 4096 bytes or more: printk's lines are under 1 KiB
        ignored["entries with MESSAGE null (too long to be a kernel message)"] += 1
        return None
    if isinstance(entry["MESSAGE"], list) and "\ufffd" in message:
        ignored[_NOT_UTF8] += 1
    ts_text, problem = _time_text(entry)
    host = _text(entry.get("_HOSTNAME")) or node
    if problem is None and not host:
        problem = "entry has no _HOSTNAME; pass --node NAME"
    return {
        "problem": problem,  # rejects the entry only if its message is the driver's (see _staged)
        "broken": False,
        "ts_text": ts_text,
        "node_id": host,
        "message": _CONTINUATION.sub(" ", message.strip()),
    }


def _block_rows(block: Block, node: str | None, ignored: Counter) -> pl.DataFrame:
    """The candidate and broken lines of one block as staged rows (before the driver's fields)."""
    rows = np.union1d(block.containing(*_CANDIDATES), _shape_broken(block))
    if block.truncated and (not len(rows) or rows[-1] != block.lines - 1):
        rows = np.append(rows, block.lines - 1)
    frame = block.frame(rows)
    staged = []
    for line, raw, truncated in frame.select("line", "text", "truncated").iter_rows():
        fields = {"problem": None, "broken": False} if truncated else _entry(raw, node, ignored)
        if fields is not None:
            staged.append({"line": line, "text": raw[:RAW_CHARS], "truncated": truncated, **fields})
    return pl.DataFrame(staged, schema=_ROWS)


def _staged(rows: pl.DataFrame, bus_order: Mapping[str, int]) -> pl.DataFrame:
    """Rows with the kernel store's columns. Dropped (ignored): entries whose message carries
    nothing, whatever else is wrong with them (an entry of another kind without a time is no
    concern); kept: the driver's messages, broken lines and the cut-off end of a truncated .gz."""
    staged = xid_catalog.driver_messages(
        rows.with_columns(pl.col("message").fill_null("")),
        "message",
        bus_order,
        keep=pl.col("broken") | pl.col("truncated"),
    ).with_columns(
        pl.lit(False).alias("bad_utf8"),
        pl.when(pl.col("problem").is_null() & pl.col("ts_text").is_not_null())
        .then(pl.lit("iso"))
        .alias("form"),
        pl.lit(0).alias("year_offset"),
    )
    return staged.select(
        [pl.col(c) if c in staged.columns else pl.lit(None).alias(c) for c in STAGED_SCHEMA]
    ).cast(STAGED_SCHEMA)


def read(ctx: ReadContext) -> FileSummary:
    """One journal export; the caller holds the transaction. Streams the file in blocks: memory
    holds one block and the staged rows wait in a Parquet file in a temporary folder."""
    path, o = ctx.path, ctx.options
    if (lines := _first_lines(head_text(path))) and lines[0].lstrip("\x1e") == "{":
        raise InputError(
            f"{path}: a pretty-printed journal (journalctl -o json-pretty); export one entry per line with"
            " journalctl -k -o json"
        )
    ignored: Counter = Counter()
    rows, done = 0, 0
    with tempfile.TemporaryDirectory(prefix="failcast-journald-") as tmp:
        out = Path(tmp) / "staged.parquet"
        with pq.ParquetWriter(out, STAGED_ARROW) as writer:
            for block in read_blocks(path, o.block_bytes, o.max_decompressed_bytes):
                rows += block.lines
                writer.write_table(_staged(_block_rows(block, o.node, ignored), o.bus_index).to_arrow())
                ctx.report(block.bytes_done - done)
                done = block.bytes_done
        summary = ctx.open_file("xid_log")
        summary.rows_read = rows
        offsets = pl.DataFrame(
            {"file": [str(out)], "line_base": [0], "year_base": [0], "new_year_from": [rows + 1]}
        )
        store_staged(
            ctx.con, path, summary, offsets=offsets, base_year=0, cluster=o.cluster, source_format=ctx.fmt
        )
    if not_utf8 := ignored.pop(_NOT_UTF8, 0):
        summary.notes.append(f"{not_utf8} MESSAGE byte array(s) not UTF-8: read with U+FFFD for the bytes")
    if ignored:
        summary.notes.append("ignored: " + ", ".join(f"{n} {why}" for why, n in sorted(ignored.items())))
    if o.cluster is None:
        summary.notes.append("cluster_id not given (--cluster): taken from the inventory by node name")
    return summary


def is_journal(head: Head) -> bool:
    """A journal export whatever its name, but a table's (checked first: a node's journal may hold
    other tools' JSON in its messages)."""
    return not head.named(".csv", ".tsv", ".parquet") and looks_like(head.text)
