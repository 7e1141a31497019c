"""NVIDIA XID lines in kernel logs (syslog, journalctl, ``dmesg -T``) -> ``events``.

Line forms read (everything else in the log is an ordinary kernel message and counts as ignored):

* ISO 8601 prefix (rsyslog RFC 3339, ``journalctl -o short-iso[-precise]``), offset optional::

    2026-03-02T04:26:29.892511+00:00 node-017 kernel: [361589.124297] NVRM: Xid (PCI:0000:18:00): 79, ...

* classic syslog without a year (``/var/log/syslog``, ``messages``, ``journalctl`` default)::

    Mar  2 04:26:29 node-017 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=10895, name=python3, ...

* ``dmesg -T`` (no hostname in the line: give it with ``node``)::

    [Mon Mar  2 04:26:29 2026] NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.

A line is *relevant* when it contains ``Xid`` (``NVRM: Xid`` or NVSwitch ``SXid``); a relevant line
that cannot be used is rejected with the reason (no date, no code, not UTF-8 ...). The driver's PCI
id (``PCI:`` prefix optional, as on old drivers) identifies the GPU; with a bus order (the PCI bus
number of each gpu_index, identical on every node of one board type) it becomes a gpu_index.

Years of syslog lines (they have none): :mod:`.syslog_years`.

Event key: (UTC time, node, message) - the cluster is left out because an XID line's cluster may be
resolved later from the inventory; an identical line at the same second is one event.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from pipeline.categories import FailureCategory
from pipeline.ingest import lines
from pipeline.ingest import xid as xid_catalog
from pipeline.ingest.common import (
    FileSummary,
    account_lines,
    count,
    register_file,
    registered,
)
from pipeline.ingest.lines import MAX_DECOMPRESSED_BYTES, is_gzip, read_blocks
from pipeline.ingest.syslog_years import (
    MONTH_PATTERN,
    block_month_changes,
    month_number,
    syslog_base_year,
    year_offsets_at,
)
from pipeline.warehouse import UNKNOWN_CLUSTER

_ISO = (
    r"^(?<iso_ts>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)"
    r"\s+(?<iso_host>\S+)\s+(?<iso_rest>.*)$"
)
_BSD = (
    rf"^(?<bsd_mon>{MONTH_PATTERN})\s+(?<bsd_day>\d{{1,2}})\s+(?<bsd_hms>\d{{2}}:\d{{2}}:\d{{2}})"
    r"\s+(?<bsd_host>\S+)\s+(?<bsd_rest>.*)$"
)
_CTIME = (
    rf"^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)\s+(?<ct_mon>{MONTH_PATTERN})\s+(?<ct_day>\d{{1,2}})\s+"
    r"(?<ct_hms>\d{2}:\d{2}:\d{2})\s+(?<ct_year>\d{4})\]\s*(?<ct_rest>.*)$"
)
_MONOTONIC = r"^\[\s*\d+\.\d+\]"
_KERNEL_PREFIX = r"^(?:kernel:\s*)?(?:\[\s*\d+\.\d+\]\s*)?"

SPAN_BYTES = 32 << 20
"""Plain logs of two spans or more are parsed in parallel, one span of about this many bytes a task."""

_STAGED_SCHEMA = {
    "line": pl.Int64,
    "text": pl.String,
    "bad_utf8": pl.Boolean,
    "truncated": pl.Boolean,
    "form": pl.String,
    "ts_text": pl.String,
    "month": pl.Int32,
    "day": pl.Int32,
    "hms": pl.String,
    "year": pl.Int32,
    "year_offset": pl.Int32,
    "node_id": pl.String,
    "message": pl.String,
    "xid": pl.Int32,
    "pci_bus_id": pl.String,
    "is_sxid": pl.Boolean,
    "gpu_index": pl.Int32,
}
_STAGED_ARROW = pl.DataFrame(schema=_STAGED_SCHEMA).to_arrow().schema


def _relevant_lines(
    block: lines.Block, carry: tuple[int | None, int]
) -> tuple[pl.DataFrame, tuple[int | None, int], tuple[int, int] | None]:
    """The relevant lines of one block (``Xid`` in the bytes, or where a truncated .gz ends: the
    only lines made strings) with the New Years passed before each; ``carry`` is (last syslog
    month, New Years so far). Also returns the first month change of the block (row, month)."""
    changes = block_month_changes(block)
    relevant = block.containing(b"Xid")
    if block.truncated and (not len(relevant) or relevant[-1] != block.lines - 1):
        relevant = np.append(relevant, block.lines - 1)
    year_offset, new_carry = year_offsets_at(changes, relevant, carry)
    first = (int(changes["i"][0]), int(changes["month"][0])) if changes.height else None
    return block.frame(relevant).with_columns(year_offset), new_carry, first


def _parse_xid_lines(rel: pl.DataFrame, node: str | None, bus_order: Mapping[str, int]) -> pl.DataFrame:
    """The relevant lines (``line``, ``text``, ``bad_utf8``, ``truncated``, ``year_offset``) split
    into the staged columns by the line-form regexes."""
    parts = rel.with_columns(
        pl.col("text").str.extract_groups(_ISO).alias("iso"),
        pl.col("text").str.extract_groups(_BSD).alias("bsd"),
        pl.col("text").str.extract_groups(_CTIME).alias("ct"),
        pl.col("text").str.extract_groups(xid_catalog.XID_LINE).alias("x"),
    ).unnest("iso", "bsd", "ct", "x")
    form = (
        pl.when(pl.col("iso_ts").is_not_null())
        .then(pl.lit("iso"))
        .when(pl.col("bsd_mon").is_not_null())
        .then(pl.lit("bsd"))
        .when(pl.col("ct_mon").is_not_null())
        .then(pl.lit("ctime"))
        .when(pl.col("text").str.contains(_MONOTONIC))
        .then(pl.lit("monotonic"))
    )
    rest = pl.coalesce("iso_rest", "bsd_rest", "ct_rest")
    pci = pl.col("pci").str.to_lowercase()
    staged = parts.select(
        "line",
        "text",
        "bad_utf8",
        "truncated",
        form.alias("form"),
        pl.col("iso_ts").str.replace(",", ".", literal=True).alias("ts_text"),
        month_number(pl.coalesce("bsd_mon", "ct_mon")).alias("month"),
        pl.coalesce("bsd_day", "ct_day").cast(pl.Int32).alias("day"),
        pl.coalesce("bsd_hms", "ct_hms").alias("hms"),
        pl.col("ct_year").cast(pl.Int32).alias("year"),
        pl.col("year_offset").cast(pl.Int32),
        pl.coalesce("iso_host", "bsd_host", pl.lit(node, pl.String)).alias("node_id"),
        rest.str.replace(_KERNEL_PREFIX, "").str.strip_chars().alias("message"),
        pl.col("code").cast(pl.Int32, strict=False).alias("xid"),
        pci.alias("pci_bus_id"),
        (pl.col("sxid") == "S").alias("is_sxid"),
        pci.str.slice(5, 2)
        .replace_strict(dict(bus_order), default=None, return_dtype=pl.Int32)
        .alias("gpu_index"),
    )
    return staged.cast(_STAGED_SCHEMA)


_STAGE = """
CREATE OR REPLACE TEMP TABLE xid_parsed AS
WITH staged AS (  -- the spans' lines numbered and dated as in one pass over the file
    SELECT s.* EXCLUDE (line, year_offset, filename), s.line + o.line_base AS line,
           s.year_offset + o.year_base + CASE WHEN s.line >= o.new_year_from THEN 1 ELSE 0 END
               AS year_offset
    FROM read_parquet($staged_paths, filename = true) s JOIN span_offsets o ON o.file = s.filename
), shown AS (
    SELECT *,
           CASE form
             WHEN 'iso' THEN ts_text
             WHEN 'bsd' THEN printf('%04d-%02d-%02d %s', $base_year + year_offset, month, day, hms)
             WHEN 'ctime' THEN printf('%04d-%02d-%02d %s', year, month, day, hms)
           END AS ts_shown
    FROM staged
), timed AS (
    SELECT *,
           CASE WHEN form = 'iso' THEN TRY_CAST(ts_shown AS TIMESTAMPTZ)
                ELSE TRY_CAST(TRY_CAST(ts_shown AS TIMESTAMP) AS TIMESTAMPTZ) END AS ts
    FROM shown
)
SELECT t.line, t.text, t.ts, t.node_id, t.message, t.xid, t.pci_bus_id, t.gpu_index,
       CASE
         WHEN truncated THEN 'truncated .gz: the compressed stream ends here, the rest of the file is '
                             || 'lost; copy the file again'
         WHEN bad_utf8 THEN 'line is not valid UTF-8 (undecodable bytes shown as U+FFFD); fix the encoding'
         WHEN form = 'monotonic' THEN 'dmesg time since boot has no date; export with dmesg -T or '
                                      || 'journalctl -k -o short-iso'
         WHEN form IS NULL THEN 'no timestamp and host prefix; expected ISO 8601 '
                                || '(2026-03-02T04:26:29+00:00 host ...) or syslog (Mar  2 04:26:29 host ...)'
         WHEN node_id IS NULL THEN 'dmesg -T line has no hostname; pass --node NAME'
         WHEN ts IS NULL THEN 'timestamp ' || ts_shown || ' is not a valid date and time'
         WHEN t.xid IS NULL THEN 'Xid line without (PCI:dddd:bb:dd): CODE; cannot tell the GPU and the code'
       END AS reason,
       CASE WHEN is_sxid THEN $sxid_category ELSE coalesce(c.category, $unknown_category) END AS category,
       CASE WHEN is_sxid THEN $sxid_interrupting
            ELSE coalesce(c.interrupting, $unknown_interrupting) END AS interrupting,
       md5(concat_ws(chr(31), CAST(timezone('UTC', ts) AS VARCHAR), node_id, message)) AS event_key
FROM timed t LEFT JOIN xid_catalog c ON c.xid = t.xid AND NOT t.is_sxid
"""

# The first line of each event not yet stored. A GROUP BY rather than a window over all lines:
# DuckDB spills it to disk under a memory cap (the window ran out of memory at 64 MB).
_INSERT = """
INSERT INTO events (event_key, file_id, line, timestamp_utc, cluster_id, node_id, category, interrupting,
                    gpu_index, job_id, message, resolved_at_utc, xid, pci_bus_id, source_format)
SELECT event_key, $file_id, line, timezone('UTC', ts), $cluster, node_id, category, interrupting,
       gpu_index, NULL, message, NULL, xid, pci_bus_id, 'kernel-log'
FROM xid_parsed
WHERE line IN (SELECT min(line) FROM xid_parsed s
               WHERE reason IS NULL AND NOT EXISTS (SELECT 1 FROM events e WHERE e.event_key = s.event_key)
               GROUP BY event_key)
"""


@dataclass(frozen=True)
class _Span:
    """One parsing task: the lines beginning in bytes ``[start, stop)`` of a plain log (the whole
    file, ``.gz`` too, when ``bounds`` is None), parsed into the Parquet file ``out``."""

    path: Path
    bounds: tuple[int, int] | None
    out: Path
    node: str | None
    bus_order: Mapping[str, int]
    max_decompressed_bytes: int
    block_bytes: int


@dataclass(frozen=True)
class _Parsed:
    """What a span holds, with line numbers and New Years counted from the span's start."""

    rows: int
    first_dated: tuple[int, int] | None  # (line, month) of the first syslog-dated line
    last_month: int | None
    rollovers: int
    bad_ignored: int


_PARSE_ROWS = 4096
"""Relevant lines are parsed in batches of at least this many (or what a span has): the regexes'
fixed cost per call is that of a few thousand lines."""


def _stage_span(span: _Span, progress: Callable[[int], None] | None = None) -> _Parsed:
    """Parse a span block by block and write its relevant lines to ``span.out``, so memory holds one
    block (and a few thousand relevant lines) whatever the size of the log (a frame registered in
    DuckDB would stay alive until the file's transaction commits). Runs in a worker thread for the
    spans of a parallel read."""
    carry: tuple[int | None, int] = (None, 0)
    rows, bad_ignored, done = 0, 0, 0
    first_dated: tuple[int, int] | None = None
    held: list[pl.DataFrame] = []  # relevant lines not parsed yet: the regexes run on a few thousand
    blocks = read_blocks(span.path, span.block_bytes, span.max_decompressed_bytes, span.bounds)
    with pq.ParquetWriter(span.out, _STAGED_ARROW) as writer:
        for block in blocks:
            relevant, carry, first = _relevant_lines(block, carry)
            if first_dated is None and first is not None:
                first_dated = (rows + first[0] + 1, first[1])
            rows += block.lines
            bad_ignored += block.bad_utf8_lines() - relevant["bad_utf8"].sum()
            held.append(relevant)
            if sum(frame.height for frame in held) >= _PARSE_ROWS:
                writer.write_table(_parse_xid_lines(pl.concat(held), span.node, span.bus_order).to_arrow())
                held = []
            if progress:
                progress(block.bytes_done - done)
            done = block.bytes_done
        if held:
            writer.write_table(_parse_xid_lines(pl.concat(held), span.node, span.bus_order).to_arrow())
    return _Parsed(rows, first_dated, carry[0], carry[1], int(bad_ignored))


def _workers() -> int:
    """Worker processes beside this one: one per further core this process may use."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(cores - 1, 0)


class SpanWorkers:
    """The threads that parse spans of large plain logs beside the ingesting thread, one per
    further core, kept for every file of one ingest (a context manager: they end with it).

    Threads, not processes: a span's parse spends its time in NumPy, Polars and file reads, which
    release the GIL, so threads run in parallel as well as processes did, without a process's start
    (importing Polars, ~0.6 CPU-s) or a pass over the results to bring them back. If no thread can
    start, the ingesting thread parses every span."""

    def __init__(self) -> None:
        self.count = _workers()
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, span: _Span) -> Future | None:
        """The span's future, or None when no thread can take it (then none ever will)."""
        if not self.count:
            return None
        try:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.count, thread_name_prefix="failcast-span")
            return self._pool.submit(_stage_span, span)
        except RuntimeError:  # cannot start a thread here
            self.close()
            self.count = 0
            return None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def __enter__(self) -> SpanWorkers:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _parse_spans(spans: list[_Span], workers: SpanWorkers) -> list[_Parsed]:
    """Parse the spans in the worker threads and in this one at once; the results are the same
    whoever parses a span. Spans go to the workers in order (two each in flight, so none waits for
    the next) while this thread takes spans from the end; once none is left, it takes back the
    spans no worker has begun."""
    results: dict[int, _Parsed] = {}
    pending = list(range(len(spans)))
    futures: dict[int, Future] = {}
    taking_back = False
    try:
        while pending or futures:
            while pending and not taking_back and len(futures) < 2 * workers.count:
                future = workers.submit(spans[pending[0]])
                if future is None:
                    break
                futures[pending.pop(0)] = future
            if not pending and not taking_back:
                taking_back = True
                pending = [index for index, future in futures.items() if future.cancel()]
                futures = {i: f for i, f in futures.items() if i not in pending}
            if pending:
                index = pending.pop()
                results[index] = _stage_span(spans[index])
            elif futures:
                wait(futures.values(), return_when=FIRST_COMPLETED)
            for index, future in list(futures.items()):
                if future.done():
                    results[index] = futures.pop(index).result()
    finally:  # on an error here, no worker may still write into the temporary folder
        for future in futures.values():
            future.cancel()
        wait(futures.values())
    return [results[i] for i in range(len(spans))]


def parallel_parts(path: Path) -> int:
    """How many spans the log is parsed in: one for a ``.gz`` or a log under two :data:`SPAN_BYTES`."""
    size = path.stat().st_size
    return 1 if is_gzip(path) or size < 2 * SPAN_BYTES else -(-size // SPAN_BYTES)


def _stage_lines(
    path: Path,
    tmp: Path,
    summary: FileSummary,
    node: str | None,
    bus_order: Mapping[str, int],
    progress: Callable[[int], None] | None,
    max_decompressed_bytes: int,
    block_bytes: int | None,
    workers: SpanWorkers,
) -> tuple[pl.DataFrame, tuple[int | None, int], bool, int]:
    """Parse the log into Parquet files of its relevant lines, one per span. A plain log of two
    spans or more (:data:`SPAN_BYTES`) is cut into byte spans parsed in parallel, each numbering
    its lines and counting New Years from its own start (:func:`_span_offsets` joins them in file
    order). Returns the spans' offsets, the year carry, whether any syslog line was dated, and the
    number of ignored lines with non-UTF-8 bytes."""
    size, parts = path.stat().st_size, parallel_parts(path)
    bounds = [None] if parts == 1 else [(size * i // parts, size * (i + 1) // parts) for i in range(parts)]
    block_bytes = block_bytes or lines.BLOCK_BYTES  # resolved once: every span reads the same blocks
    spans = [
        _Span(path, b, tmp / f"span-{i}.parquet", node, bus_order, max_decompressed_bytes, block_bytes)
        for i, b in enumerate(bounds)
    ]
    if parts == 1:
        parsed = [_stage_span(spans[0], progress)]
    else:
        parsed = _parse_spans(spans, workers)
        if progress:
            progress(size)
    summary.rows_read += sum(p.rows for p in parsed)
    offsets, carry = _span_offsets(spans, parsed)
    return offsets, carry, carry[0] is not None, sum(p.bad_ignored for p in parsed)


def _span_offsets(spans: list[_Span], parsed: list[_Parsed]) -> tuple[pl.DataFrame, tuple[int | None, int]]:
    """What makes each span's lines numbered and dated as one pass over the file would have:
    ``file``, ``line_base`` (lines before the span), ``year_base`` (New Years before it) and
    ``new_year_from`` (its first line past a New Year at its start, if one passed there: when its
    first dated month falls back by six or more from the last dated month before it). DuckDB adds
    them as it reads the spans' Parquet files. Also returns the year carry of the whole file."""
    rows, line_base, last_month, offset = [], 0, None, 0
    for span, part in zip(spans, parsed, strict=True):
        new_year_from = part.rows + 1
        if part.first_dated is not None and last_month is not None:
            first_line, first_month = part.first_dated
            if last_month - first_month >= 6:
                new_year_from = first_line
        rows.append((str(span.out), line_base, offset, new_year_from))
        line_base += part.rows
        offset += part.rollovers + (new_year_from <= part.rows)
        last_month = part.last_month if part.last_month is not None else last_month
    frame = pl.DataFrame(rows, schema=["file", "line_base", "year_base", "new_year_from"], orient="row")
    return frame, (last_month, offset)


def ingest_kernel_log(
    con,
    path: Path,
    *,
    sha: str | Callable[[], str],
    cluster: str | None,
    node: str | None,
    year: int | None,
    bus_order: Mapping[str, int],
    workers: SpanWorkers | None = None,
    progress: Callable[[int], None] | None = None,
    max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES,
    block_bytes: int | None = None,
) -> FileSummary:
    """One kernel log; the caller holds the transaction and the session time zone. The parsed Xid
    lines wait in a temporary directory, removed at the end (also on error and Ctrl-C). ``sha``: the
    file's sha256, or a function that returns it once a thread hashing beside the parse is done.
    ``workers``: the ingest's span threads; None (one file on its own, e.g. an extract task):
    threads of its own for this file."""
    summary = FileSummary(str(path), "xid_log", "kernel-log")
    with (
        tempfile.TemporaryDirectory(prefix="failcast-xid-") as tmp,
        nullcontext(workers) if workers is not None else SpanWorkers() as workers,
    ):
        offsets, carry, any_syslog, bad_ignored = _stage_lines(
            path, Path(tmp), summary, node, bus_order, progress, max_decompressed_bytes, block_bytes, workers
        )
        file_id = register_file(con, path, sha if isinstance(sha, str) else sha(), "xid_log", "kernel-log")
        summary.file_id = file_id
        base_year = syslog_base_year(path, year, carry, summary) if any_syslog else 0
        with (
            registered(con, "xid_catalog", xid_catalog.catalog_frame()),
            registered(con, "span_offsets", offsets),
        ):
            con.execute(
                _STAGE,
                {
                    "staged_paths": offsets["file"].to_list(),
                    "base_year": base_year,
                    "sxid_category": xid_catalog.SXID_CATEGORY.value,
                    "sxid_interrupting": xid_catalog.SXID_CATEGORY.interrupting,
                    "unknown_category": FailureCategory.UNKNOWN_XID.value,
                    "unknown_interrupting": FailureCategory.UNKNOWN_XID.interrupting,
                },
            )
    before = count(con, "SELECT count(*) FROM events")
    con.execute(_INSERT, {"file_id": file_id, "cluster": cluster or UNKNOWN_CLUSTER})
    summary.rows_ingested = count(con, "SELECT count(*) FROM events") - before
    account_lines(con, file_id, path, summary, "xid_parsed")
    unknown = con.sql(
        "SELECT count(*), list(DISTINCT xid ORDER BY xid) FROM xid_parsed"
        " WHERE reason IS NULL AND category = $c",
        params={"c": FailureCategory.UNKNOWN_XID.value},
    ).fetchall()[0]
    con.execute("DROP TABLE xid_parsed")
    if unknown[0]:
        summary.notes.append(
            f"{unknown[0]} Xid line(s) with codes not in the catalog kept as unknown_xid: {unknown[1]}"
        )
    if bad_ignored:
        summary.notes.append(f"{bad_ignored} ignored (non-Xid) line(s) had non-UTF-8 bytes")
    if cluster is None:
        summary.notes.append("cluster_id not given (--cluster): taken from the inventory by node name")
    return summary
