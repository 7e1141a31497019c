"""NVIDIA driver messages in kernel logs (syslog, journalctl, ``dmesg -T``) -> ``events``.

Line forms read (everything else in the log is an ordinary kernel message and counts as ignored):

* ISO 8601 prefix (rsyslog RFC 3339, ``journalctl -o short-iso[-precise]``), offset optional::

    2026-03-02T04:26:29.892511+00:00 node-017 kernel: [361589.124297] NVRM: Xid (PCI:0000:18:00): 79, ...

* classic syslog without a year (``/var/log/syslog``, ``messages``, ``journalctl`` default)::

    Mar  2 04:26:29 node-017 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=10895, name=python3, ...

* ``dmesg -T`` (no hostname in the line: give it with ``node``)::

    [Mon Mar  2 04:26:29 2026] NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.

A line is *relevant* when it contains ``Xid`` (``NVRM: Xid`` or NVSwitch ``SXid``) or is one of the
driver's fallen-off-the-bus messages that carry no Xid (:mod:`pipeline.xid`: ``NVRM: GPU at 0000:01:00.0 has
fallen off the bus.``, and the three-line ``NVRM: The NVIDIA GPU 0000:b3:00.0`` ... ``fallen off the
bus and is not responding to commands.``, one event at its first line); a relevant line that cannot
be used is rejected with the reason (no date, no code, not UTF-8 ...). Only lines whose bytes hold
``Xid`` or ``NVRM`` become strings (:meth:`.lines.Block.containing`). The driver's PCI id (``PCI:``
prefix optional, as on old drivers) identifies the GPU; with a bus order (the PCI bus number of each
gpu_index, identical on every node of one board type) it becomes a gpu_index. The staged lines are
stored by :mod:`.kernel_messages` (classes, multi-line messages, reasons, counts).

Years of syslog lines (they have none): :mod:`.syslog_years`.

Event key: (UTC time, node, message) - the cluster is left out because an XID line's cluster may be
resolved later from the inventory; an identical line at the same second is one event.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from pipeline import xid as xid_catalog
from pipeline.readers import lines
from pipeline.readers.contract import Head, ReadContext
from pipeline.readers.kernel_messages import STAGED_ARROW, STAGED_SCHEMA, store_staged
from pipeline.readers.lines import is_gzip, read_blocks
from pipeline.readers.syslog_years import (
    MONTH_PATTERN,
    block_month_changes,
    month_number,
    syslog_base_year,
    year_offsets_at,
)
from pipeline.store.files import FileSummary

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


def _relevant_lines(
    block: lines.Block, carry: tuple[int | None, int]
) -> tuple[pl.DataFrame, tuple[int | None, int], tuple[int, int] | None]:
    """The candidate lines of one block (``Xid`` or ``NVRM`` in the bytes, or where a truncated
    .gz ends: the only lines made strings) with the New Years passed before each; ``carry`` is
    (last syslog month, New Years so far). Also returns the first month change of the block (row,
    month)."""
    changes = block_month_changes(block)
    relevant = block.containing(b"Xid", b"NVRM")
    if block.truncated and (not len(relevant) or relevant[-1] != block.lines - 1):
        relevant = np.append(relevant, block.lines - 1)
    year_offset, new_carry = year_offsets_at(changes, relevant, carry)
    first = (int(changes["i"][0]), int(changes["month"][0])) if changes.height else None
    return block.frame(relevant).with_columns(year_offset), new_carry, first


def _parse_lines(rel: pl.DataFrame, node: str | None, bus_order: Mapping[str, int]) -> pl.DataFrame:
    """The candidate lines (``line``, ``text``, ``bad_utf8``, ``truncated``, ``year_offset``) split
    into the staged columns (:data:`.kernel_messages.STAGED_SCHEMA`) by the line-form regexes; NVRM
    lines that carry nothing (``kind`` null) are dropped (ignored), a truncated .gz's last line is
    kept to be rejected."""
    driver = xid_catalog.driver_messages(rel, "text", bus_order, keep=pl.col("truncated"))
    parts = driver.with_columns(
        pl.col("text").str.extract_groups(_ISO).alias("iso"),
        pl.col("text").str.extract_groups(_BSD).alias("bsd"),
        pl.col("text").str.extract_groups(_CTIME).alias("ct"),
    ).unnest("iso", "bsd", "ct")
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
    rest = pl.coalesce("iso_rest", "bsd_rest", "ct_rest", "text")  # a continuation line has no prefix
    staged = parts.select(
        "line",
        "text",
        "bad_utf8",
        "truncated",
        pl.lit(None, pl.String).alias("problem"),
        form.alias("form"),
        pl.col("iso_ts").str.replace(",", ".", literal=True).alias("ts_text"),
        month_number(pl.coalesce("bsd_mon", "ct_mon")).alias("month"),
        pl.coalesce("bsd_day", "ct_day").cast(pl.Int32).alias("day"),
        pl.coalesce("bsd_hms", "ct_hms").alias("hms"),
        pl.col("ct_year").cast(pl.Int32).alias("year"),
        pl.col("year_offset").cast(pl.Int32),
        pl.coalesce("iso_host", "bsd_host", pl.lit(node, pl.String)).alias("node_id"),
        rest.str.strip_chars().str.replace(_KERNEL_PREFIX, "").str.strip_chars().alias("message"),
        *(column for column in STAGED_SCHEMA if column in driver.columns and column not in rel.columns),
    )
    return staged.select(list(STAGED_SCHEMA)).cast(STAGED_SCHEMA)


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
    rows, bad_lines, bad_staged, done = 0, 0, 0, 0
    first_dated: tuple[int, int] | None = None
    held: list[pl.DataFrame] = []  # candidate lines not parsed yet: the regexes run on a few thousand
    blocks = read_blocks(span.path, span.block_bytes, span.max_decompressed_bytes, span.bounds)

    def stage(writer: pq.ParquetWriter) -> int:
        staged = _parse_lines(pl.concat(held), span.node, span.bus_order)
        writer.write_table(staged.to_arrow())
        return int(staged["bad_utf8"].sum())

    with pq.ParquetWriter(span.out, STAGED_ARROW) as writer:
        for block in blocks:
            relevant, carry, first = _relevant_lines(block, carry)
            if first_dated is None and first is not None:
                first_dated = (rows + first[0] + 1, first[1])
            rows += block.lines
            bad_lines += block.bad_utf8_lines()
            held.append(relevant)
            if sum(frame.height for frame in held) >= _PARSE_ROWS:
                bad_staged += stage(writer)
                held = []
            if progress:
                progress(block.bytes_done - done)
            done = block.bytes_done
        if held:
            bad_staged += stage(writer)
    bad_ignored = bad_lines - bad_staged
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
    ctx: ReadContext, tmp: Path, workers: SpanWorkers
) -> tuple[int, pl.DataFrame, tuple[int | None, int], bool, int]:
    """Parse the log into Parquet files of its relevant lines, one per span. A plain log of two
    spans or more (:data:`SPAN_BYTES`) is cut into byte spans parsed in parallel, each numbering
    its lines and counting New Years from its own start (:func:`_span_offsets` joins them in file
    order). Returns the lines read, the spans' offsets, the year carry, whether any syslog line was
    dated, and the number of ignored lines with non-UTF-8 bytes."""
    path, o = ctx.path, ctx.options
    size, parts = path.stat().st_size, parallel_parts(path)
    bounds = [None] if parts == 1 else [(size * i // parts, size * (i + 1) // parts) for i in range(parts)]
    block_bytes = o.block_bytes or lines.BLOCK_BYTES  # resolved once: every span reads the same blocks
    spans = [
        _Span(path, b, tmp / f"span-{i}.parquet", o.node, o.bus_index, o.max_decompressed_bytes, block_bytes)
        for i, b in enumerate(bounds)
    ]
    if parts == 1:
        parsed = [_stage_span(spans[0], ctx.progress)]
    else:
        parsed = _parse_spans(spans, workers)
        ctx.report(size)
    offsets, carry = _span_offsets(spans, parsed)
    return (
        sum(p.rows for p in parsed),
        offsets,
        carry,
        carry[0] is not None,
        sum(p.bad_ignored for p in parsed),
    )


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


def read(ctx: ReadContext) -> FileSummary:
    """One kernel log; the caller holds the transaction and the session time zone. The parsed Xid
    lines wait in a temporary directory, removed at the end (also on error and Ctrl-C). The sha256
    may still be computed beside the parse (``ctx.sha`` a function). ``ctx.workers``: the ingest's
    span threads; None (one file on its own, e.g. an extract task): threads of its own."""
    o = ctx.options
    with (
        tempfile.TemporaryDirectory(prefix="failcast-xid-") as tmp,
        nullcontext(ctx.workers) if ctx.workers is not None else SpanWorkers() as workers,
    ):
        rows, offsets, carry, any_syslog, bad_ignored = _stage_lines(ctx, Path(tmp), workers)
        summary = ctx.open_file("xid_log")
        summary.rows_read = rows
        base_year = syslog_base_year(ctx.path, o.year, carry, summary) if any_syslog else 0
        store_staged(
            ctx.con,
            ctx.path,
            summary,
            offsets=offsets,
            base_year=base_year,
            cluster=o.cluster,
            source_format=ctx.fmt,
        )
    if bad_ignored:
        summary.notes.append(f"{bad_ignored} ignored (non-Xid) line(s) had non-UTF-8 bytes")
    if o.cluster is None:
        summary.notes.append("cluster_id not given (--cluster): taken from the inventory by node name")
    return summary


_LOG_LINE = re.compile(
    r"^(?:\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}|[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} |\[)|Xid", re.M
)


def is_kernel_log(head: Head) -> bool:
    """A line with a syslog, ISO 8601 or ``[`` prefix (dmesg), or ``Xid`` anywhere: tried last."""
    return _LOG_LINE.search(head.text) is not None
