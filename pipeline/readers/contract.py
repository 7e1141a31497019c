"""The one contract between the store and a reader: what a reader is handed (:class:`ReadContext`)
and what a format is told by (:class:`Head`, the start of a file for sniffing).

A reader is a module of :mod:`pipeline.readers` with one function ``read(ctx: ReadContext) ->
FileSummary``. It reads ``ctx.path`` with ``ctx.options`` (the frozen :class:`ReaderOptions`),
stages what it parsed on ``ctx.con`` (temporary tables, or Parquet files it spills and DuckDB
reads), hands the staged rows to the store's functions (:mod:`pipeline.store`: new events
deduplicated by content key, stored open events closed, jobs or inventory replaced, rejects and
the file's counts) and returns its line accounting: read = ingested + duplicate + rejected +
ignored. The caller (:func:`pipeline.ingest.ingest_files`, or ``failcast extract`` on a scratch
warehouse) holds the file's transaction and the session time zone, classifies the new events and
refuses a mostly rejected file; the reader does none of that.

Why a connection and not a generator of batches (as Polars' ``register_io_source``): the fast
readers parse inside DuckDB (the kernel log's Xid lines are spilled to Parquet and parsed in one
SQL pass; canonical batches are validated and hashed in SQL on a second cursor while the previous
batch is stored), and a DuckDB relation lives on its connection, so batches handed up as Polars
frames would have to leave DuckDB and come back (bench/RESULTS.md, issue 18). The store owns every
statement that writes a warehouse table; the reader owns its parse and its staging tables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import polars as pl

from pipeline.categories import CategoryMap
from pipeline.readers.lines import BOM, head_text, read_lines
from pipeline.readers.options import ReaderOptions
from pipeline.store.files import FileSummary, register_file


@dataclass(frozen=True)
class ReadContext:
    """One file to read. ``con``: the store's connection, inside the file's transaction, session
    time zone set (``options.timezone``). ``sha``: the file's sha256, or a function that returns it
    once a thread hashing beside the parse is done (a large kernel log). ``progress`` is called with
    the bytes just read (compressed bytes for ``.gz``). ``workers``: the ingest's threads for
    parsing large files in parallel (:class:`pipeline.readers.kernel_log.SpanWorkers`; None: the
    reader starts its own). ``category_map``: the user's taxonomy, for a reader that stores its
    rows classified (the canonical one); None: :mod:`pipeline.store.taxonomy` classifies them after
    the file."""

    con: Any
    path: Path
    sha: str | Callable[[], str]
    fmt: str
    options: ReaderOptions
    progress: Callable[[int], None] | None = None
    workers: Any = None
    category_map: CategoryMap | None = None

    def open_file(self, kind: str) -> FileSummary:
        """Register the file in ``ingested_files`` as ``kind`` and return its summary (with
        ``file_id``); waits for the sha256 if it is still being computed."""
        sha = self.sha if isinstance(self.sha, str) else self.sha()
        summary = FileSummary(str(self.path), kind, self.fmt)
        summary.file_id = register_file(self.con, self.path, sha, kind, self.fmt)
        return summary

    def report(self, done: int) -> None:
        """Pass ``done`` bytes read to ``progress``, if any."""
        if self.progress:
            self.progress(done)

    def lines(self) -> Iterator[pl.DataFrame]:
        """The file's lines in batches (:func:`.lines.read_lines`: ``line``, ``text``, ``bad_utf8``,
        ``truncated``; blocks of ``options.block_bytes``, a ``.gz`` up to its limit), each batch's
        bytes passed to ``progress`` once the reader has taken it."""
        done = 0
        for batch in read_lines(self.path, self.options.block_bytes, self.options.max_decompressed_bytes):
            yield batch.frame
            self.report(batch.bytes_done - done)
            done = batch.bytes_done

    def text(self) -> tuple[str, bool]:
        """The whole file as one text (an export small enough to read whole: cloud events, health
        agent detections), and whether it was cut short by a truncated ``.gz``."""
        parts, truncated = [], False
        for frame in self.lines():
            truncated |= bool(frame["truncated"].any())
            parts.append("\n".join(frame["text"].to_list()))
        return "\n".join(parts), truncated


class Head:
    """A file's start for format sniffing: its name (lower case, ``.gz`` off), its first 64 KiB as
    text (decompressed, without a byte order mark) and first non-blank line, its first four bytes.
    Each is read once, when a sniff first asks for it (a ``.parquet`` name needs no text)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = path.name.lower().removesuffix(".gz")

    def named(self, *suffixes: str) -> bool:
        return self.name.endswith(suffixes)

    @cached_property
    def text(self) -> str:
        return head_text(self.path).removeprefix(BOM)

    @cached_property
    def first_line(self) -> str:
        return next((line for line in self.text.splitlines() if line.strip()), "")

    @cached_property
    def magic(self) -> bytes:
        with self.path.open("rb") as f:
            return f.read(4)
