"""Canonical incidents and inventory files (CSV, JSONL, Parquet; plain or ``.gz``).

Streamed with Polars as strings in batches of :data:`BATCH_ROWS` rows, so memory stays bounded
for GB-sized files; each batch is validated in SQL so that every bad row gets one reason. SQL
reads a batch by its Python variable name (a DuckDB replacement scan), so it is freed with the
batch; ``con.register`` would hold every batch until the file's transaction commits. An
incident's content key is (time, cluster, node, category, GPU, message), the category compared
in lower case (as it was stored before categories were free text): a row already stored, by
an earlier file or an earlier batch of this one, is a duplicate (checked only where one can be:
see :mod:`.canonical_store`). The category is stored as written (trimmed) with its class from
:mod:`.taxonomy` (joined as the rows are stored when the category map is given, else classified
after the file); columns beyond the canonical ones are kept as JSON ``attributes``. Inventory
rows are keyed by (cluster, node, in_service_from); a later file may close an interval an
earlier one left open, so the newest row for that key wins.
"""

from __future__ import annotations

import glob
import gzip
import io
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from pipeline import warehouse
from pipeline.categories import CategoryMap
from pipeline.readers.canonical_checks import stage_sql
from pipeline.readers.json_array import read_json_records
from pipeline.readers.lines import (
    BOM,
    MAX_DECOMPRESSED_BYTES,
    check_decompressed_size,
    first_non_utf8,
    head_text,
    is_gzip,
    not_utf8,
    read_lines,
)
from pipeline.store import canonical_events as canonical_store
from pipeline.store import inventory, taxonomy
from pipeline.store.files import (
    FileSummary,
    InputError,
    count,
    insert_rejects,
    record_counts,
    register_file,
)

INCIDENT_COLUMNS = ("timestamp", "cluster_id", "node_id", "category")
INCIDENT_OPTIONAL = ("gpu_index", "job_id", "message", "resolved_at")
INVENTORY_COLUMNS = ("cluster_id", "node_id", "instance_type", "gpus_per_node", "in_service_from")
INVENTORY_OPTIONAL = ("in_service_to",)
TABLE_FORMATS = ("csv", "jsonl", "json", "parquet")
_COLUMNS = {
    "incidents": (*INCIDENT_COLUMNS, *INCIDENT_OPTIONAL),
    "inventory": (*INVENTORY_COLUMNS, *INVENTORY_OPTIONAL),
}
BATCH_ROWS = 250_000
"""Rows per batch: large enough that per-batch SQL costs little, small enough to bound memory."""
_SEPARATORS = (",", "\t", ";", "|")
_RECORD_FORMATS = ("parquet", "json")  # a rejected row's raw text is its values, not a line of the file
_ROW = "__failcast_row"  # the row index while scanning; renamed to ``line`` once columns are mapped


def _scan(path: Path, fmt: str) -> pl.LazyFrame:
    """The file with its 1-based line (row for Parquet, record for JSONL, the line where a JSON
    document's record starts) in ``_ROW``. A blank CSV line is a row of nulls, so CSV rows keep
    their line numbers, and :func:`_csv_lines` moves the rows after a quoted field that spans
    lines; JSONL records get theirs from :func:`_jsonl_lines`."""
    if fmt == "csv":  # glob=False: a file named incidents[1].csv or *.csv is that one file, not a pattern
        return pl.scan_csv(
            path,
            separator=csv_separator(head_text(path)),
            infer_schema=False,
            glob=False,
            row_index_name=_ROW,
            row_index_offset=2,
        )
    if fmt == "json":
        return read_json_records(path, _ROW).lazy()
    if fmt == "jsonl":
        as_bytes = glob.has_magic(str(path)) or head_text(path, 3).startswith(BOM)
        return pl.scan_ndjson(
            _jsonl_bytes(path) if as_bytes else path,
            infer_schema_length=None,
            row_index_name=_ROW,
            row_index_offset=1,
        )
    return pl.scan_parquet(path, glob=False, row_index_name=_ROW, row_index_offset=1)


def csv_separator(head: str) -> str:
    """The separator of a delimited file from its header line: a comma, or the tab, semicolon
    (spreadsheets in locales where the comma is the decimal mark) or pipe the header has more of."""
    header = next((line for line in head.splitlines() if line.strip()), "")
    return max(_SEPARATORS, key=header.count) if header.count(",") == 0 else ","


def _jsonl_bytes(path: Path) -> io.BytesIO:
    """The file's bytes without a byte order mark: Polars reads a BOM as bad JSON (CSV it strips
    itself), and ``scan_ndjson`` has no ``glob=False`` for names with ``[`` or ``*``."""
    with gzip.open(path, "rb") if is_gzip(path) else path.open("rb") as f:
        return io.BytesIO(f.read().removeprefix(BOM.encode()))


def _jsonl_lines(path: Path, max_decompressed_bytes: int) -> Callable[[pl.Series], pl.Series]:
    """Map 1-based JSONL record numbers to line numbers. Polars skips lines of only spaces, tabs and
    carriage returns (polars-io ``json_lines``), so its row index counts records, not lines. One
    streamed pass notes each run of such lines as the records before it and the lines skipped up to
    its end: memory grows with the runs, not the file; a record's line is then its number plus the
    lines skipped before it, found by binary search."""
    run_records, run_lengths = [np.empty(0, np.int64)], [np.zeros(1, np.int64)]
    blank = 0
    for batch in read_lines(path, max_bytes=max_decompressed_bytes):
        lines = batch.frame.filter(pl.col("text").str.contains(r"^[ \t\r]*$"))["line"].to_numpy()
        records, lengths = np.unique(lines - 1 - blank - np.arange(len(lines)), return_counts=True)
        run_records.append(records)
        run_lengths.append(lengths)
        blank += len(lines)
    records_before = np.concatenate(run_records)
    skipped = np.cumsum(np.concatenate(run_lengths))  # [i]: lines skipped in the first i runs

    def to_line(record: pl.Series) -> pl.Series:
        number = record.to_numpy()
        return pl.Series(record.name, number + skipped[np.searchsorted(records_before, number)])

    return to_line


def _csv_lines(columns: Sequence[str]) -> Callable[[pl.DataFrame], pl.Series]:
    """Map a CSV batch's row numbers (Polars: header + rows, a blank line being a row) to physical
    lines: a quoted field that spans lines holds its newlines in its value, so each row starts as
    many lines later as the newlines in the values (and the header's names) before it. Batches
    must come in file order (they do: the sink keeps the order); the count carries across them."""
    before = sum(name.count("\n") for name in columns)

    def to_line(batch: pl.DataFrame) -> pl.Series:
        nonlocal before
        counts = (pl.col(c).str.count_matches("\n", literal=True).fill_null(0) for c in columns)
        inside = batch.select(pl.sum_horizontal(counts).cast(pl.Int64)).to_series()
        line = batch[_ROW] + before + inside.cum_sum() - inside
        before += int(inside.sum())
        return line.alias(_ROW)

    return to_line


def _read_error(path: Path, fmt: str, exc: Exception) -> InputError:
    """One line naming the file: Polars messages run to many lines. They name no line, and the
    rows already read do not bound it: Polars parses ahead and may pass rows beyond the bad one.
    Text that is not UTF-8 (a spreadsheet's CSV in Windows-1252) is looked up: its line and byte."""
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if "utf-8" in reason.lower() and (where := first_non_utf8(path)):
        return not_utf8(path, fmt, *where)
    return InputError(f"{path}: cannot read as {fmt}: {reason}")


def _source(
    path: Path, fmt: str, column_map: Mapping[str, str | Sequence[str]], cluster: str | None = None
) -> tuple[pl.LazyFrame, str, list[str], list[str], dict[str, str]]:
    """The file's columns as strings under canonical names, null columns for absent optional ones
    and the line in ``_ROW``; its kind; its own columns (renamed); the columns that are not used;
    the columns taken for canonical ones by their words (:func:`_by_header_words`). A file with no
    cluster_id column is of ``cluster`` (``--cluster``: one cluster's tickets and inventory)."""
    try:
        scan = _scan(path, fmt)
        columns = [c for c in scan.collect_schema().names() if c != _ROW]
    except InputError:
        raise
    except Exception as exc:  # polars raises many types; the user needs the file and the reason
        raise _read_error(path, fmt, exc) from exc
    pairs = map_pairs(column_map)
    renamed = _applicable_map(pairs, columns, path) | _unnamed(columns)
    worded = _by_header_words(columns, {canon for canon, _ in pairs})
    renamed |= worded
    missing = {canon: sources for canon, sources in column_map.items() if canon not in renamed.values()}
    absent = [src for canon, src in pairs if canon in missing]
    advice = _absent_columns(absent, columns) if absent else ""
    named = [renamed.get(c, c) for c in columns]
    given = {"cluster_id": cluster} if cluster is not None and "cluster_id" not in named else {}
    kind = _detect_kind([*named, *given], path, advice)
    unmatched = [
        src for canon, src in pairs if canon in missing and canon in _COLUMNS[kind] and canon not in columns
    ]
    if unmatched:  # a column of this kind under no name: a typo that would drop it silently
        raise InputError(f"{path}: {_absent_columns(unmatched, columns)}")
    columns = [renamed.get(c, c) for c in columns]
    known = _COLUMNS[kind]
    frame = scan.rename(renamed).select(
        pl.col(_ROW).cast(pl.Int64),
        *(pl.col(c).cast(pl.String) for c in columns),
        *(pl.lit(given.get(c), pl.String).alias(c) for c in known if c not in columns),
    )
    return frame, kind, columns, [c for c in columns if c not in known], worded


# Polars' names for header cells with no name (a spreadsheet's trailing commas): "", then
# "_duplicated_0", "_duplicated_1" ...
_NO_NAME = re.compile(r"\s*|_duplicated_\d+")


def _unnamed(columns: Sequence[str]) -> dict[str, str]:
    """Header cells with no name, named by their position (``column_5``) so that their values,
    if any, are attributes a user can name in ``--by``, not a key ``""``."""
    names = {c: f"column_{i}" for i, c in enumerate(columns, 1) if _NO_NAME.fullmatch(c)}
    return {c: name for c, name in names.items() if name not in columns}


def map_pairs(column_map: Mapping[str, str | Sequence[str]]) -> list[tuple[str, str]]:
    """``--map`` entries as (canonical, source) pairs: a canonical column may have several sources
    (the ticket system's ``host``, the CMDB's ``hostname``), each file using the one it has."""
    return [
        (canon, source)
        for canon, sources in column_map.items()
        for source in ([sources] if isinstance(sources, str) else sources)
    ]


def _applicable_map(pairs: Sequence[tuple[str, str]], columns: Sequence[str], path: Path) -> dict[str, str]:
    """Source column -> canonical name, for the ``--map`` entries whose source the file has. One
    map serves every file of an ingest (tickets beside an inventory, in one command or a scheduled
    run); an entry whose column is of the file's kind but missing under every name is an error
    (see :func:`_source`), so a misspelt source does not drop a column silently. A file with two
    names for one column (the canonical one, or two sources) is refused: which one holds it?"""
    present: dict[str, list[str]] = {}
    for canon, src in pairs:
        if src in columns:
            present.setdefault(canon, [canon] if canon in columns else []).append(src)
    both = {canon: names for canon, names in present.items() if len(names) > 1}
    if both:
        canon, names = next(iter(both.items()))
        raise InputError(
            f"{path}: --map {canon}: the file has columns {names} for it; drop the --map entry or one column"
        )
    return {names[0]: canon for canon, names in present.items()}


_CANONICAL = tuple(dict.fromkeys(c for names in _COLUMNS.values() for c in names))


def _header_words(name: str) -> str:
    """``' Node ID '``, ``Node-Id``, ``NODE_ID`` -> ``node_id``."""
    return "_".join(re.split(r"[\s_-]+", name.strip().lower())).strip("_")


def _by_header_words(columns: Sequence[str], mapped: set[str]) -> dict[str, str]:
    """Source column -> canonical name, for the canonical columns a file writes in other case or
    with spaces or hyphens (``Timestamp``, `` Cluster ID ``, ``node-id``: spreadsheets and BI tools
    write headers for people). Only where the file lacks the exact name, ``--map`` gives none, and
    one column alone has those words: two candidates stay as they are (then the file is refused or
    the column kept as an attribute, as before)."""
    found: dict[str, str] = {}
    for canon in _CANONICAL:
        if canon in columns or canon in mapped:
            continue
        candidates = [c for c in columns if c not in _CANONICAL and _header_words(c) == canon]
        if len(candidates) == 1:
            found[candidates[0]] = canon
    return found


def _absent_columns(absent: Sequence[str], columns: Sequence[str]) -> str:
    hint = ""
    if any("," in src for src in absent):  # --map node_id=Hostname,host
        hint = "; a column with several names takes one --map each: --map node_id=a --map node_id=b"
    return f"--map names column(s) {list(absent)} that the file does not have (it has {list(columns)}){hint}"


def _detect_kind(columns: Sequence[str], path: Path, map_advice: str) -> str:
    if all(c in columns for c in INCIDENT_COLUMNS):
        return "incidents"
    if all(c in columns for c in INVENTORY_COLUMNS):
        return "inventory"
    need_inc = [c for c in INCIDENT_COLUMNS if c not in columns]
    need_inv = [c for c in INVENTORY_COLUMNS if c not in columns]
    one_cluster = (
        ", or --cluster NAME for a file of one cluster" if "cluster_id" in need_inc + need_inv else ""
    )
    raise InputError(
        f"{path}: not an incidents file (missing {need_inc}) nor an inventory file (missing {need_inv}); "
        + (map_advice or "rename columns with --map CANONICAL=SOURCE, e.g. --map node_id=hostname")
        + one_cluster
    )


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
        raise _read_error(path, fmt, exc) from exc
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
    rows = batch.filter(pl.col(_ROW).is_in([line for (line,) in bad]))
    raw = pl.DataFrame(  # noqa: F841 (read by the SQL below)
        {"line": rows[_ROW], "raw": [str(row) for row in rows.select(columns).iter_rows(named=True)]},
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


def ingest_canonical(
    con,
    path: Path,
    *,
    sha: str,
    fmt: str,
    column_map: Mapping[str, str | Sequence[str]],
    max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES,
    batch_rows: int = BATCH_ROWS,
    category_map: CategoryMap | None = None,
    time_format: str | None = None,
    cluster: str | None = None,
) -> FileSummary:
    """One canonical incidents or inventory file; the caller holds the transaction and time zone.
    With a ``category_map`` the new events are stored classified (else :mod:`.taxonomy` does it).
    ``time_format``: the strptime format of times that are not ISO 8601 (``--time-format``);
    ``cluster``: the cluster of a file with no cluster_id column (``--cluster``)."""
    check_decompressed_size(path, max_decompressed_bytes)  # Polars decompresses a .gz whole, in memory
    frame, kind, columns, extra, worded = _source(path, fmt, column_map, cluster)
    known = _COLUMNS[kind]
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
    to_line = _jsonl_lines(path, max_decompressed_bytes) if fmt == "jsonl" else None
    csv_lines = _csv_lines(columns) if fmt == "csv" else None

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
                batch = batch.with_columns(to_line(batch[_ROW]))
            if csv_lines:
                batch = batch.with_columns(csv_lines(batch))
            source = batch.select(  # noqa: F841 (read by SQL)
                pl.col(_ROW).alias("line"), *known, *_attributes(kind, extra)
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
