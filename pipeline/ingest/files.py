"""The orchestration of an ingest: each file's format (named or sniffed), the sha256 skip, one
transaction per file around its reader, the refusal of a mostly rejected file, the taxonomy after
each file, and the incident rebuild after all of them. ``failcast ingest``, the scheduled run and
``failcast extract`` (one file on a scratch warehouse: :func:`read_file`) go through here."""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from pipeline import rebuild, warehouse
from pipeline.categories import CategoryMap
from pipeline.readers import FORMATS, ReadContext, detect_format, reader
from pipeline.readers.kernel_log import SpanWorkers, parallel_parts
from pipeline.readers.lines import head_text, is_gzip
from pipeline.readers.options import MIN_REFUSED, ReaderOptions
from pipeline.store import canonical_events, lake, taxonomy
from pipeline.store.files import FileSummary, InputError, checked_timezone, sha256_of


def expand_pattern(pattern: str) -> list[Path]:
    """The files a path or glob names (``**`` recursive), each once by real path: a symlink loop
    makes ``**`` match one file under many names. An existing file is taken as named even if its
    name has glob characters (``[``, ``*``); a plain path that does not exist is returned as is, so
    ingest reports it as missing."""
    literal = os.path.lexists(pattern) or not glob.has_magic(pattern)
    matched = [pattern] if literal else sorted(glob.glob(pattern, recursive=True))
    files: dict[str, Path] = {}
    for match in matched:
        files.setdefault(os.path.realpath(match), Path(match))
    return list(files.values())


def _guess_format(path: Path, fmt: str | None) -> str | None:
    """The format given or detected, None if it cannot be told (:func:`detect_format` says why)."""
    try:
        return fmt or detect_format(path)
    except InputError:
        return None


@contextmanager
def session_timezone(con, timezone: str) -> Iterator[None]:
    """Naive times in the block are read in ``timezone`` (the readers' SQL casts in the session
    time zone); UTC again after it."""
    con.execute(f"SET TimeZone = '{checked_timezone(con, timezone)}'")
    try:
        yield
    finally:
        con.execute("SET TimeZone = 'UTC'")


def read_file(
    con,
    path: Path,
    *,
    sha: str | Callable[[], str],
    fmt: str,
    options: ReaderOptions,
    progress: Callable[[int], None] | None = None,
    workers: SpanWorkers | None = None,
    category_map: CategoryMap | None = None,
) -> FileSummary:
    """Parse one file with its format's reader (:mod:`pipeline.readers`) into the warehouse
    ``con``: the one parsing step of ``ingest`` and of ``extract`` (which runs it on a scratch
    warehouse per file, on a worker). The caller holds the transaction and the session time zone
    (:func:`session_timezone`); the new events are left unclassified (the taxonomy runs after the
    file), except a canonical file's when a ``category_map`` is given: those are stored
    classified."""
    ctx = ReadContext(con, path, sha, fmt, options, progress, workers, category_map)
    return reader(fmt).read(ctx)


def refuse_mostly_rejected(con, summary: FileSummary, max_rejected_percent: float) -> None:
    """An :class:`InputError` when more than ``max_rejected_percent`` of the file's records (lines
    that carried one: read - ignored), and at least :data:`MIN_REFUSED`, were rejected. Called
    inside the file's transaction, so the file is then stored not at all, rather than by its few
    rows that happened to parse: exit 2 with the first reason, instead of exit 0 and rates biased by
    what is left."""
    records = summary.rows_read - summary.rows_ignored
    if summary.rows_rejected < MIN_REFUSED or summary.rows_rejected * 100 <= max_rejected_percent * records:
        return
    first = con.sql(
        "SELECT line, reason FROM rejects WHERE file_id = ? ORDER BY line LIMIT 1",
        params=[summary.file_id],
    ).fetchall()
    example = f"; line {first[0][0]}: {first[0][1]}" if first else ""
    raise InputError(
        f"{summary.path}: {summary.rows_rejected:,} of {records:,} records rejected "
        f"({100 * summary.rows_rejected / records:.0f}%, more than --max-rejected {max_rejected_percent:g}%)"
        f"{example}. Nothing from this file was stored: fix how it is read (--map, --timezone, --format"
        f"{_TIME_FORMAT_ADVICE if first and 'ISO 8601' in first[0][1] else ''}) or the file, or raise "
        "--max-rejected ([ingest] max_rejected_percent in failcast.toml)"
    )


_TIME_FORMAT_ADVICE = ", --time-format for times such as 01.03.2026 05:26 or 03/01/2026 5:26 PM"


def check_readable(path: Path) -> None:
    """An :class:`InputError` naming the problem unless ``path`` is a regular file we may read."""
    if path.is_dir():
        raise InputError(f"{path}: is a directory: pass files or a glob (e.g. '{path}/*.csv')")
    if path.exists() and not path.is_file():
        raise InputError(f"{path}: not a regular file (a FIFO or device): pass files or a glob")
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    try:
        path.open("rb").close()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror}); check the file's permissions") from exc


def _ingest_one(
    con,
    path: Path,
    options: ReaderOptions,
    category_map: CategoryMap,
    progress: Callable[[int], None] | None,
    workers: SpanWorkers,
) -> FileSummary:
    check_readable(path)
    fmt = options.fmt
    size = path.stat().st_size
    if size == 0 or (is_gzip(path) and not head_text(path, 1)):
        if progress:
            progress(size)
        return FileSummary(str(path), "-", fmt or "-", notes=["empty file: nothing to ingest"])
    hasher = None
    if (
        parallel_parts(path) > 1
        and _guess_format(path, fmt) == "kernel-log"
        and not con.sql("SELECT 1 FROM ingested_files WHERE size_bytes = ?", params=[size]).fetchall()
    ):  # no stored file has this size, so none has this content: hashed while it is parsed
        hasher = ThreadPoolExecutor(1, thread_name_prefix="sha256")
    if hasher is None:
        sha: str | Callable[[], str] = sha256_of(path)
        stored = con.sql(
            "SELECT kind, format FROM ingested_files WHERE sha256 = ? ORDER BY file_id LIMIT 1", params=[sha]
        ).fetchall()
        if stored:
            if progress:
                progress(size)
            return _already_ingested(path, *stored[0], fmt)
    else:
        sha = hasher.submit(sha256_of, path).result
    fmt = fmt or detect_format(path)
    try:
        with session_timezone(con, options.timezone), warehouse.transaction(con):
            summary = read_file(
                con,
                path,
                sha=sha,
                fmt=fmt,
                options=options,
                progress=progress,
                workers=workers,
                category_map=category_map,
            )
            refuse_mostly_rejected(con, summary, options.max_rejected_percent)
            summary.notes.extend(taxonomy.classify_new_events(con, category_map))
    finally:
        if hasher is not None:
            hasher.shutdown()
    return summary


def _already_ingested(path: Path, kind: str, stored_format: str, fmt: str | None) -> FileSummary:
    """A file whose bytes are stored: skipped, as the kind and format it was read as. A --format
    other than that one does not read it again (its records are stored once): say so."""
    summary = FileSummary(str(path), kind, stored_format, skipped=True)
    if fmt is not None and fmt != stored_format:
        summary.notes.append(
            f"read as {stored_format} before: --format {fmt} does not read it again; its records "
            "stay as stored (ingest into a new warehouse to read it another way)"
        )
    return summary


def ingest_files(
    con,
    paths: Iterable[Path | str],
    options: ReaderOptions | None = None,
    *,
    category_map: CategoryMap | None = None,
    window_seconds: float = 600.0,
    estimate_exposure: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[FileSummary]:
    """Ingest each file in its own transaction, then rebuild ``incidents`` from ``events``.

    ``options``: how the files are read (:class:`ReaderOptions`; default: formats detected, UTC).
    ``category_map``: the user's taxonomy (:mod:`pipeline.store.taxonomy`); a map other than the
    one the warehouse was built with reclassifies every stored event. ``window_seconds``: events of
    one node and fault closer than this are one incident. ``estimate_exposure``: GPUs per node of an
    inventory estimated from the nodes seen, when there is no inventory. ``progress`` is called
    with the number of bytes just read (compressed bytes for ``.gz``). A directory holding a lake
    (``failcast extract``) is merged input by input (:mod:`pipeline.store.lake`).
    """
    options = options or ReaderOptions()
    if options.fmt is not None and options.fmt not in FORMATS:
        raise InputError(f"unknown format {options.fmt!r}; use one of {', '.join(FORMATS)}")
    category_map = category_map or CategoryMap()
    canonical_events.rekey_stored_incidents(con)  # once per warehouse, before any new key meets the stored
    summaries: list[FileSummary] = []
    try:
        with SpanWorkers() as workers:  # the threads parsing large kernel logs, for every file
            for path in map(Path, paths):
                if lake.is_lake(path):  # each input's summary kept as it commits, should a later one fail
                    for summary in lake.ingest_lake(con, path, category_map=category_map):
                        summaries.append(summary)
                else:
                    summaries.append(_ingest_one(con, path, options, category_map, progress, workers))
    except InputError as exc:
        if not summaries:
            raise
        _rebuild(con, window_seconds, estimate_exposure, category_map)  # the files before it are committed
        stored = sum(not s.skipped and s.file_id is not None for s in summaries)
        if not stored:
            raise
        raise InputError(
            f"{exc} ({stored} file(s) before it were ingested and stay; once it is fixed, ingesting all"
            " again skips them)"
        ) from exc
    _rebuild(con, window_seconds, estimate_exposure, category_map)
    return summaries


def _rebuild(con, window_seconds: float, estimate_exposure: int | None, category_map: CategoryMap) -> None:
    with warehouse.transaction(con):
        refresh_incidents(con, window_seconds=window_seconds, category_map=category_map)
        warehouse.estimate_inventory(con, gpus_per_node=estimate_exposure)


def refresh_incidents(con, *, window_seconds: float, category_map: CategoryMap | None = None) -> None:
    """Reclassify the stored events if the category map changed, then rebuild ``incidents`` (in
    full after a reclassification, else only what changed). Call inside a transaction."""
    category_map = category_map or CategoryMap()
    changed = taxonomy.apply_category_map(con, category_map)
    rebuild.rebuild_incidents(
        con, window_seconds=window_seconds, category_map=category_map.fingerprint, full=changed
    )
