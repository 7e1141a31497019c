"""Canonical incidents and inventory files (CSV, JSONL, Parquet; plain or ``.gz``).

Streamed with Polars as strings in batches of :data:`BATCH_ROWS` rows, so memory stays bounded
for GB-sized files; each batch is validated in SQL so that every bad row gets one reason. SQL
reads a batch by its Python variable name (a DuckDB replacement scan), so it is freed with the
batch; ``con.register`` would hold every batch until the file's transaction commits. An
incident's content key is (time, cluster, node, category, GPU, message), the category compared
in lower case (as it was stored before categories were free text): a row already stored, by
an earlier file or an earlier batch of this one, is a duplicate (checked only where one can be:
see :mod:`pipeline.store.canonical_events`). The category is stored as written (trimmed) with its class from
:mod:`pipeline.store.taxonomy` (joined as the rows are stored when the category map is given, else classified
after the file); columns beyond the canonical ones are kept as JSON ``attributes``. Inventory
rows are keyed by (cluster, node, in_service_from); a later file may close an interval an
earlier one left open, so the newest row for that key wins.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from pipeline import warehouse
from pipeline.categories import CategoryMap
from pipeline.readers.canonical_checks import stage_sql
from pipeline.readers.canonical_source import (
    COLUMNS,
    ROW,
    canonical_frame,
    csv_lines,
    csv_separator,
    jsonl_lines,
    read_error,
)
from pipeline.readers.contract import Head, ReadContext
from pipeline.readers.json_array import is_json_document
from pipeline.readers.lines import (
    check_decompressed_size,
    read_lines,
)
from pipeline.readers.options import ReaderOptions
from pipeline.store import canonical_events as canonical_store
from pipeline.store import inventory, taxonomy
from pipeline.store.files import (
    FileSummary,
    count,
    insert_rejects,
    record_counts,
    register_file,
)

BATCH_ROWS = 250_000
"""Rows per batch: large enough that per-batch SQL costs little, small enough to bound memory."""
_RECORD_FORMATS = ("parquet", "json")  # a rejected row's raw text is its values, not a line of the file


def _stream(
    frame: pl.LazyFrame, path: Path, fmt: str, batch_rows: int, take: Callable[[pl.DataFrame], None]
) -> int:
    """Pass the file to ``take`` in batches and return the rows read. A Polars error (a ragged or
    badly quoted row, invalid UTF-8) becomes an :class:`InputError`; an error raised by ``take``
    (Ctrl-C included) stops the scan and comes out as it is."""
    rows, failed = 0, []

    def step(batch: pl.DataFrame) -> bool:
        nonlocal rows
        try:
            take(batch)
        except BaseException as exc:  # raised below, outside Polars, so it is not taken for Polars'
            failed.append(exc)
            return True
        rows += batch.height
        return False

    try:
        frame.sink_batches(step, chunk_size=batch_rows, engine="streaming")
    except Exception as exc:
        raise read_error(path, fmt, exc) from exc
    if failed:
        raise failed[0]
    return rows


_KEEP_INVENTORY = """
INSERT INTO fresh
SELECT cluster_id, node_id, instance_type, gpus_per_node, timezone('UTC', from_ts),
       timezone('UTC', to_ts), line
FROM staged WHERE reason IS NULL
"""

# Per file: the rejected lines and their original text (the valid inventory rows of all batches
# wait in the store's ``fresh``, :func:`pipeline.store.inventory.stage`).
WORK_TABLES = """
CREATE OR REPLACE TEMP TABLE rejected (line BIGINT, reason VARCHAR);
CREATE OR REPLACE TEMP TABLE raw_lines (line BIGINT, raw VARCHAR);
"""


class _Classes:
    """The file's categories classified as batches bring them (each once), or none without a map."""

    def __init__(self, category_map: CategoryMap | None) -> None:
        self.category_map = category_map
        self.frame = taxonomy.classes_frame([], CategoryMap())

    def add(self, staged: pa.Table) -> pl.DataFrame:
        if self.category_map is not None:
            new = set(pc.unique(staged["category"]).drop_null().to_pylist()) - set(self.frame["category"])
            if new:
                self.frame = pl.concat([self.frame, taxonomy.classes_frame(sorted(new), self.category_map)])
        return self.frame

    def notes(self, con, file_id: int) -> list[str]:
        """The taxonomy's notes on the file's new events of categories classed by words or unknown."""
        noted = self.frame.filter(~pl.col("known") | pl.col("words").is_not_null())["category"].to_list()
        if not noted:
            return []
        counts = con.sql(
            "SELECT category, count(*) FROM events WHERE file_id = ? AND list_contains(?, category)"
            " GROUP BY category",
            params=[file_id, noted],
        ).fetchall()
        return taxonomy.category_notes(counts, self.frame)


class _Writer:
    """Runs the store step of each batch on one worker thread, in order, one batch at a time, so
    that the caller validates the next batch meanwhile: with the warehouse on one thread (see
    :func:`warehouse.serial_appends`) that keeps the second core busy. A failed step raises on the
    next :meth:`submit` or :meth:`wait`; leaving the block waits for a step still running, so the
    caller's rollback never meets a statement on the same connection."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="failcast-store")
        self.pending: Future | None = None

    def submit(self, step: Callable[..., None], *args) -> None:
        self.wait()
        self.pending = self.pool.submit(step, *args)

    def wait(self) -> None:
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.result()

    def __enter__(self) -> _Writer:
        return self

    def __exit__(self, *exc) -> None:
        self.pool.shutdown(wait=True)


def _keep_raw_rows(con, batch: pl.DataFrame, staged: pa.Table, columns: Sequence[str]) -> None:
    """Parquet has no lines, a JSON document's record spans many: a rejected row's text is its
    values, as a dict of the file's columns."""
    bad = con.sql("SELECT line FROM staged WHERE reason IS NOT NULL").fetchall()
    if not bad:
        return
    rows = batch.filter(pl.col(ROW).is_in([line for (line,) in bad]))
    raw = pl.DataFrame(  # noqa: F841 (read by the SQL below)
        {"line": rows[ROW], "raw": [str(row) for row in rows.select(columns).iter_rows(named=True)]},
        schema={"line": pl.Int64, "raw": pl.String},
    )
    con.execute("INSERT INTO raw_lines SELECT line, raw FROM raw")


def _keep_raw_lines(con, path: Path, max_decompressed_bytes: int) -> None:
    """The original text of the rejected lines, reading the file only up to the last of them."""
    last = count(con, "SELECT max(line) FROM rejected")
    if last is None:
        return
    for batch in read_lines(path, max_bytes=max_decompressed_bytes):
        block = batch.frame.select("line", raw="text")
        con.execute("INSERT INTO raw_lines SELECT line, raw FROM block SEMI JOIN rejected USING (line)")
        if block.height and block["line"][-1] >= last:
            return


def _attributes(kind: str, extra: Sequence[str]) -> list[pl.Expr]:
    """An incidents file's extra columns as one JSON object per row (``attributes``; NULL without
    extra columns). Values stay text, as read."""
    if kind != "incidents":
        return []
    if not extra:
        return [pl.lit(None, pl.String).alias("attributes")]
    return [pl.struct(*extra).struct.json_encode().alias("attributes")]


DEFAULT_OPTIONS = ReaderOptions()


def ingest_canonical(
    con,
    path: Path,
    *,
    sha: str,
    fmt: str,
    options: ReaderOptions = DEFAULT_OPTIONS,
    batch_rows: int = BATCH_ROWS,
    category_map: CategoryMap | None = None,
) -> FileSummary:
    """One canonical incidents or inventory file; the caller holds the transaction and time zone.
    With a ``category_map`` the new events are stored classified (else
    :mod:`pipeline.store.taxonomy` does it). Of the ``options``: ``column_map`` (``--map``), the
    size limit, ``time_format`` (the strptime format of times that are not ISO 8601,
    ``--time-format``) and ``cluster`` (of a file with no cluster_id column, ``--cluster``)."""
    o = options
    max_decompressed_bytes, time_format = o.max_decompressed_bytes, o.time_format
    check_decompressed_size(path, max_decompressed_bytes)  # Polars decompresses a .gz whole, in memory
    frame, kind, columns, extra, worded = canonical_frame(path, fmt, o.column_map, o.cluster)
    known = COLUMNS[kind]
    summary = FileSummary(str(path), kind, fmt, ignored_columns=extra)
    if worded:
        names = ", ".join(f"{src!r} as {canon}" for src, canon in worded.items())
        summary.notes.append(f"columns read by their words: {names}")
    file_id = summary.file_id = register_file(con, path, sha, kind, fmt)
    classes = _Classes(category_map)
    closings = canonical_store.Closings()
    if kind == "incidents":
        summary.attribute_columns, summary.ignored_columns = extra, []
    stage = stage_sql(kind, time_format=time_format is not None)
    params = {"time_format": time_format} if time_format is not None else None

    def keep(staged: pa.Table) -> None:
        if kind == "incidents":
            canonical_store.insert_new_events(con, staged, classes.add(staged), file_id, closings)
        else:
            con.execute(_KEEP_INVENTORY)

    con.execute(WORK_TABLES)
    inventory.stage(con)
    events_before = count(con, "SELECT count(*) FROM events")
    to_line = jsonl_lines(path, max_decompressed_bytes) if fmt == "jsonl" else None
    to_csv_line = csv_lines(columns) if fmt == "csv" else None

    def store(batch: pl.DataFrame, staged: pa.Table) -> None:
        """Keep a staged batch's new events (or valid inventory rows) and note its rejects."""
        keep(staged)
        con.execute("INSERT INTO rejected SELECT line, reason FROM staged WHERE reason IS NOT NULL")
        if fmt in _RECORD_FORMATS:
            _keep_raw_rows(con, batch, staged, columns)

    with warehouse.serial_appends(con) as stager, _Writer() as writer:

        def take(batch: pl.DataFrame) -> None:
            """Validate a batch (on ``stager``) while the previous one is being stored."""
            if to_line:
                batch = batch.with_columns(to_line(batch[ROW]))
            if to_csv_line:
                batch = batch.with_columns(to_csv_line(batch))
            source = batch.select(  # noqa: F841 (read by SQL)
                pl.col(ROW).alias("line"), *known, *_attributes(kind, extra)
            ).to_arrow()
            writer.submit(store, batch, stager.sql(stage, params=params).to_arrow_table())

        summary.rows_read = _stream(frame, path, fmt, batch_rows, take)
        writer.wait()
    if kind == "incidents":
        new_events = count(con, "SELECT count(*) FROM events") - events_before
        summary.rows_ingested = new_events + closings.closed  # a closing row is taken in, as in slurm_events
        summary.notes.extend(classes.notes(con, file_id) + closings.notes())
    else:
        summary.rows_ingested = inventory.replace_inventory(con, file_id)
    if fmt not in _RECORD_FORMATS:
        _keep_raw_lines(con, path, max_decompressed_bytes)
    bad = con.sql(
        "SELECT line, raw, reason FROM rejected LEFT JOIN raw_lines USING (line) ORDER BY line"
    ).pl()
    insert_rejects(con, file_id, path, bad)
    summary.rows_rejected = bad.height
    summary.rows_duplicate = summary.rows_read - bad.height - summary.rows_ingested
    record_counts(con, file_id, summary)
    return summary


def read(ctx: ReadContext) -> FileSummary:
    """The reader of ``csv``, ``jsonl``, ``json`` and ``parquet`` (:mod:`pipeline.readers`)."""
    summary = ingest_canonical(
        ctx.con, ctx.path, sha=ctx.sha, fmt=ctx.fmt, options=ctx.options, category_map=ctx.category_map
    )
    ctx.report(ctx.path.stat().st_size)
    return summary


# Sniffs (pipeline.readers.READERS): a table's name first, then its content.
def is_csv_name(head: Head) -> bool:
    return head.named(".csv", ".tsv")


def is_json_name(head: Head) -> bool:
    return head.named(".json") and is_json_document(head.text)


def is_jsonl_name(head: Head) -> bool:
    return head.named(".jsonl", ".ndjson") or (head.named(".json") and not is_json_document(head.text))


def is_parquet(head: Head) -> bool:
    return head.named(".parquet") or head.magic == b"PAR1"


def is_csv_header(head: Head) -> bool:
    names = head.first_line.lower().split(csv_separator(head.first_line))
    return bool({"node_id", "cluster_id", "timestamp"} & {c.strip().strip('"') for c in names})


def is_json_content(head: Head) -> bool:
    return is_json_document(head.text)


def is_jsonl_content(head: Head) -> bool:
    return head.first_line.lstrip().startswith("{")
