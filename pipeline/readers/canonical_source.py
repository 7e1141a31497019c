"""A canonical file's columns under canonical names: the scan of each table format (CSV, JSON
Lines, one JSON document, Parquet) with every record's physical line, the user's ``--map``, headers
written for people (``Node ID``), the file's kind (incidents or inventory) told by its columns.
:mod:`.canonical` streams the result in batches, validates and stores them.
"""

from __future__ import annotations

import glob
import gzip
import io
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import polars as pl

from pipeline.readers.json_array import read_json_records
from pipeline.readers.lines import BOM, first_non_utf8, head_text, is_gzip, not_utf8, read_lines
from pipeline.store.files import InputError

INCIDENT_COLUMNS = ("timestamp", "cluster_id", "node_id", "category")
INCIDENT_OPTIONAL = ("gpu_index", "job_id", "message", "resolved_at")
INVENTORY_COLUMNS = ("cluster_id", "node_id", "instance_type", "gpus_per_node", "in_service_from")
INVENTORY_OPTIONAL = ("in_service_to",)
COLUMNS = {
    "incidents": (*INCIDENT_COLUMNS, *INCIDENT_OPTIONAL),
    "inventory": (*INVENTORY_COLUMNS, *INVENTORY_OPTIONAL),
}
_SEPARATORS = (",", "\t", ";", "|")
ROW = "__failcast_row"  # the row index while scanning; renamed to ``line`` once columns are mapped


def _scan(path: Path, fmt: str) -> pl.LazyFrame:
    """The file with its 1-based line (row for Parquet, record for JSONL, the line where a JSON
    document's record starts) in ``ROW``. A blank CSV line is a row of nulls, so CSV rows keep
    their line numbers, and :func:`csv_lines` moves the rows after a quoted field that spans
    lines; JSONL records get theirs from :func:`jsonl_lines`."""
    if fmt == "csv":  # glob=False: a file named incidents[1].csv or *.csv is that one file, not a pattern
        return pl.scan_csv(
            path,
            separator=csv_separator(head_text(path)),
            infer_schema=False,
            glob=False,
            row_index_name=ROW,
            row_index_offset=2,
        )
    if fmt == "json":
        return read_json_records(path, ROW).lazy()
    if fmt == "jsonl":
        as_bytes = glob.has_magic(str(path)) or head_text(path, 3).startswith(BOM)
        return pl.scan_ndjson(
            _jsonl_bytes(path) if as_bytes else path,
            infer_schema_length=None,
            row_index_name=ROW,
            row_index_offset=1,
        )
    return pl.scan_parquet(path, glob=False, row_index_name=ROW, row_index_offset=1)


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


def jsonl_lines(path: Path, max_decompressed_bytes: int) -> Callable[[pl.Series], pl.Series]:
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


def csv_lines(columns: Sequence[str]) -> Callable[[pl.DataFrame], pl.Series]:
    """Map a CSV batch's row numbers (Polars: header + rows, a blank line being a row) to physical
    lines: a quoted field that spans lines holds its newlines in its value, so each row starts as
    many lines later as the newlines in the values (and the header's names) before it. Batches
    must come in file order (they do: the sink keeps the order); the count carries across them."""
    before = sum(name.count("\n") for name in columns)

    def to_line(batch: pl.DataFrame) -> pl.Series:
        nonlocal before
        counts = (pl.col(c).str.count_matches("\n", literal=True).fill_null(0) for c in columns)
        inside = batch.select(pl.sum_horizontal(counts).cast(pl.Int64)).to_series()
        line = batch[ROW] + before + inside.cum_sum() - inside
        before += int(inside.sum())
        return line.alias(ROW)

    return to_line


def read_error(path: Path, fmt: str, exc: Exception) -> InputError:
    """One line naming the file: Polars messages run to many lines. They name no line, and the
    rows already read do not bound it: Polars parses ahead and may pass rows beyond the bad one.
    Text that is not UTF-8 (a spreadsheet's CSV in Windows-1252) is looked up: its line and byte."""
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if "utf-8" in reason.lower() and (where := first_non_utf8(path)):
        return not_utf8(path, fmt, *where)
    return InputError(f"{path}: cannot read as {fmt}: {reason}")


def canonical_frame(
    path: Path, fmt: str, column_map: Mapping[str, str | Sequence[str]], cluster: str | None = None
) -> tuple[pl.LazyFrame, str, list[str], list[str], dict[str, str]]:
    """The file's columns as strings under canonical names, null columns for absent optional ones
    and the line in ``ROW``; its kind; its own columns (renamed); the columns that are not used;
    the columns taken for canonical ones by their words (:func:`_by_header_words`). A file with no
    cluster_id column is of ``cluster`` (``--cluster``: one cluster's tickets and inventory)."""
    try:
        scan = _scan(path, fmt)
        columns = [c for c in scan.collect_schema().names() if c != ROW]
    except InputError:
        raise
    except Exception as exc:  # polars raises many types; the user needs the file and the reason
        raise read_error(path, fmt, exc) from exc
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
        src for canon, src in pairs if canon in missing and canon in COLUMNS[kind] and canon not in columns
    ]
    if unmatched:  # a column of this kind under no name: a typo that would drop it silently
        raise InputError(f"{path}: {_absent_columns(unmatched, columns)}")
    columns = [renamed.get(c, c) for c in columns]
    known = COLUMNS[kind]
    frame = scan.rename(renamed).select(
        pl.col(ROW).cast(pl.Int64),
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
    (see :func:`canonical_frame`), so a misspelt source does not drop a column silently. A file with two
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


_CANONICAL = tuple(dict.fromkeys(c for names in COLUMNS.values() for c in names))


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
