"""Canonical incidents and inventory files (CSV, JSONL, Parquet; plain or ``.gz``).

Read whole with Polars as strings, validated in SQL so that every bad row gets one reason. An
incident's content key is (time, cluster, node, category, GPU, message): a row already stored is a
duplicate. Inventory rows are keyed by (cluster, node, in_service_from); a later file may close an
interval an earlier one left open, so the newest row for that key wins.
"""

from __future__ import annotations

import glob
import gzip
import io
import itertools
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import polars as pl

from pipeline.categories import FailureCategory
from pipeline.ingest.common import (
    FileSummary,
    InputError,
    count,
    insert_rejects,
    record_counts,
    register_file,
    registered,
)
from pipeline.ingest.lines import BOM, MAX_DECOMPRESSED_BYTES, check_decompressed_size, head_text, is_gzip

INCIDENT_COLUMNS = ("timestamp", "cluster_id", "node_id", "category")
INCIDENT_OPTIONAL = ("gpu_index", "job_id", "message", "resolved_at")
INVENTORY_COLUMNS = ("cluster_id", "node_id", "instance_type", "gpus_per_node", "in_service_from")
INVENTORY_OPTIONAL = ("in_service_to",)
TABLE_FORMATS = ("csv", "jsonl", "parquet")


def _read_table(path: Path, fmt: str) -> tuple[pl.DataFrame, int]:
    """All columns as strings plus ``line``: the 1-based line (row for Parquet) in the file."""
    try:  # glob=False: a file named incidents[1].csv or *.csv is that one file, not a pattern
        if fmt == "csv":
            frame, first_line = pl.read_csv(path, infer_schema=False, glob=False), 2
        elif fmt == "jsonl":
            as_bytes = glob.has_magic(str(path)) or head_text(path, 3).startswith(BOM)
            frame, first_line = (
                pl.read_ndjson(_jsonl_bytes(path) if as_bytes else path, infer_schema_length=None),
                1,
            )
        else:
            frame, first_line = pl.read_parquet(path, glob=False), 1
    except Exception as exc:  # polars raises many types; the user needs the file and the reason
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{path}: cannot read as {fmt}: {reason}") from exc
    frame = frame.select(pl.all().cast(pl.String))
    return frame.with_row_index("line", offset=first_line).with_columns(
        pl.col("line").cast(pl.Int64)
    ), first_line


def _jsonl_bytes(path: Path) -> io.BytesIO:
    """The file's bytes without a byte order mark: Polars reads a BOM as bad JSON (CSV it strips
    itself), and ``read_ndjson`` has no ``glob=False`` for names with ``[`` or ``*``."""
    with gzip.open(path, "rb") if is_gzip(path) else path.open("rb") as f:
        return io.BytesIO(f.read().removeprefix(BOM.encode()))


def _apply_mapping(frame: pl.DataFrame, column_map: Mapping[str, str], path: Path) -> pl.DataFrame:
    """Rename source columns to canonical names (``column_map`` is canonical -> source)."""
    missing = [src for src in column_map.values() if src not in frame.columns]
    if missing:
        raise InputError(
            f"{path}: --map names column(s) {missing} that the file does not have (it has {frame.columns})"
        )
    return frame.rename({src: canon for canon, src in column_map.items()})


def _detect_kind(columns: Sequence[str], path: Path) -> str:
    if all(c in columns for c in INCIDENT_COLUMNS):
        return "incidents"
    if all(c in columns for c in INVENTORY_COLUMNS):
        return "inventory"
    need_inc = [c for c in INCIDENT_COLUMNS if c not in columns]
    need_inv = [c for c in INVENTORY_COLUMNS if c not in columns]
    raise InputError(
        f"{path}: not an incidents file (missing {need_inc}) nor an inventory file (missing "
        f"{need_inv}); rename columns with --map CANONICAL=SOURCE, e.g. --map node_id=hostname"
    )


def _raw_lines(path: Path, fmt: str, frame: pl.DataFrame, lines: Iterable[int]) -> dict[int, str]:
    """The original text of the given lines (rows as JSON for Parquet), for the rejects table."""
    wanted = sorted(set(lines))
    if not wanted:
        return {}
    if fmt == "parquet":
        rows = frame.filter(pl.col("line").is_in(wanted))
        return {
            r["line"]: str({k: v for k, v in r.items() if k != "line"}) for r in rows.iter_rows(named=True)
        }
    opener = gzip.open if is_gzip(path) else open
    found: dict[int, str] = {}
    with opener(path, "rt", encoding="utf-8", errors="replace", newline="") as f:
        targets = iter(wanted)
        target = next(targets)
        for number, text in enumerate(itertools.islice(f, wanted[-1]), start=1):
            if number == target:
                found[number] = text.rstrip("\r\n")
                target = next(targets, None)
                if target is None:
                    break
    return found


# Validation in SQL over the string frame: parse, check, and give each bad row one reason.
# TRY_CAST to TIMESTAMPTZ honours offsets and reads naive times in the session time zone.
_STAGE_INCIDENTS = """
CREATE OR REPLACE TEMP TABLE staged AS
WITH parsed AS (
    SELECT line,
           trim(timestamp) AS ts_text,
           TRY_CAST(trim(timestamp) AS TIMESTAMPTZ) AS ts,
           nullif(trim(cluster_id), '') AS cluster_id,
           nullif(trim(node_id), '') AS node_id,
           lower(trim(category)) AS category,
           nullif(trim(gpu_index), '') AS gpu_text,
           TRY_CAST(nullif(trim(gpu_index), '') AS INTEGER) AS gpu_index,
           nullif(trim(job_id), '') AS job_id,
           message,
           nullif(trim(resolved_at), '') AS resolved_text,
           TRY_CAST(nullif(trim(resolved_at), '') AS TIMESTAMPTZ) AS resolved_at
    FROM source
)
SELECT *,
       CASE
         WHEN ts_text IS NULL OR ts_text = '' THEN 'timestamp is empty'
         WHEN ts IS NULL THEN 'timestamp ' || ts_text || ' is not ISO 8601'
         WHEN cluster_id IS NULL THEN 'cluster_id is empty'
         WHEN node_id IS NULL THEN 'node_id is empty'
         WHEN category IS NULL OR NOT list_contains($categories, category)
           THEN 'unknown category ' || coalesce(category, '(empty)') || '; expected one of '
                || array_to_string($categories, ', ')
         WHEN gpu_text IS NOT NULL AND (gpu_index IS NULL OR gpu_index < 0)
           THEN 'gpu_index ' || gpu_text || ' is not a non-negative integer'
         WHEN resolved_text IS NOT NULL AND resolved_at IS NULL
           THEN 'resolved_at ' || resolved_text || ' is not ISO 8601'
         WHEN resolved_at < ts THEN 'resolved_at is before timestamp'
       END AS reason,
       md5(concat_ws(chr(31), CAST(ts AS VARCHAR), cluster_id, node_id, category,
                     CAST(gpu_index AS VARCHAR), coalesce(message, ''))) AS event_key
FROM parsed
"""

_INSERT_EVENTS = """
INSERT INTO events (event_key, file_id, line, timestamp_utc, cluster_id, node_id, category,
                    interrupting, gpu_index, job_id, message, resolved_at_utc, source_format)
SELECT event_key, $file_id, line, timezone('UTC', ts), cluster_id, node_id, category,
       list_contains($interrupting, category), gpu_index, job_id, message,
       timezone('UTC', resolved_at), 'canonical'
FROM staged s
SEMI JOIN (SELECT event_key, min(line) AS line FROM staged WHERE reason IS NULL GROUP BY event_key) first
    USING (event_key, line)
WHERE reason IS NULL
  AND NOT EXISTS (SELECT 1 FROM events e WHERE e.event_key = s.event_key)
"""

_STAGE_INVENTORY = """
CREATE OR REPLACE TEMP TABLE staged AS
WITH parsed AS (
    SELECT line,
           nullif(trim(cluster_id), '') AS cluster_id,
           nullif(trim(node_id), '') AS node_id,
           nullif(trim(instance_type), '') AS instance_type,
           trim(gpus_per_node) AS gpus_text,
           TRY_CAST(trim(gpus_per_node) AS INTEGER) AS gpus_per_node,
           trim(in_service_from) AS from_text,
           TRY_CAST(trim(in_service_from) AS TIMESTAMPTZ) AS from_ts,
           nullif(trim(in_service_to), '') AS to_text,
           TRY_CAST(nullif(trim(in_service_to), '') AS TIMESTAMPTZ) AS to_ts
    FROM source
)
SELECT *,
       CASE
         WHEN cluster_id IS NULL THEN 'cluster_id is empty'
         WHEN node_id IS NULL THEN 'node_id is empty'
         WHEN instance_type IS NULL THEN 'instance_type is empty'
         WHEN gpus_per_node IS NULL OR gpus_per_node < 1
           THEN 'gpus_per_node ' || coalesce(gpus_text, '(empty)') || ' is not a positive integer'
         WHEN from_ts IS NULL
           THEN 'in_service_from ' || coalesce(from_text, '(empty)') || ' is not ISO 8601'
         WHEN to_text IS NOT NULL AND to_ts IS NULL
           THEN 'in_service_to ' || to_text || ' is not ISO 8601'
         WHEN to_ts < from_ts THEN 'in_service_to is before in_service_from'
       END AS reason
FROM parsed
"""

# An inventory row is identified by (cluster, node, in_service_from); a later file may close an
# interval that an earlier one left open, so the newest row for that key wins.
_UPSERT_INVENTORY = """
CREATE OR REPLACE TEMP TABLE fresh AS
SELECT cluster_id, node_id, instance_type, gpus_per_node, timezone('UTC', from_ts) AS from_utc,
       timezone('UTC', to_ts) AS to_utc, line
FROM staged s WHERE reason IS NULL
QUALIFY row_number() OVER (PARTITION BY cluster_id, node_id, from_ts ORDER BY line DESC) = 1;
DELETE FROM fresh f USING inventory i
WHERE i.cluster_id = f.cluster_id AND i.node_id = f.node_id
  AND i.in_service_from_utc = f.from_utc AND i.instance_type = f.instance_type
  AND i.gpus_per_node = f.gpus_per_node
  AND i.in_service_to_utc IS NOT DISTINCT FROM f.to_utc;
DELETE FROM inventory i USING fresh f
WHERE i.cluster_id = f.cluster_id AND i.node_id = f.node_id
  AND i.in_service_from_utc = f.from_utc;
INSERT INTO inventory (cluster_id, node_id, instance_type, gpus_per_node, in_service_from_utc,
                       in_service_to_utc, file_id, line)
SELECT cluster_id, node_id, instance_type, gpus_per_node, from_utc, to_utc, $file_id, line
FROM fresh;
"""


def ingest_canonical(
    con,
    path: Path,
    *,
    sha: str,
    fmt: str,
    column_map: Mapping[str, str],
    max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES,
) -> FileSummary:
    """One canonical incidents or inventory file; the caller holds the transaction and time zone."""
    check_decompressed_size(path, max_decompressed_bytes)  # Polars reads a .gz whole, in memory
    frame, _ = _read_table(path, fmt)
    frame = _apply_mapping(frame, column_map, path)
    kind = _detect_kind(frame.columns, path)
    known = (
        ("line", *INCIDENT_COLUMNS, *INCIDENT_OPTIONAL)
        if kind == "incidents"
        else ("line", *INVENTORY_COLUMNS, *INVENTORY_OPTIONAL)
    )
    ignored = [c for c in frame.columns if c not in known]
    source = frame.select(
        [pl.col(c) if c in frame.columns else pl.lit(None, pl.String).alias(c) for c in known]
    )
    summary = FileSummary(str(path), kind, fmt, rows_read=source.height, ignored_columns=ignored)
    with registered(con, "source", source):
        file_id = register_file(con, path, sha, kind, fmt)
        summary.file_id = file_id
        if kind == "incidents":
            con.execute(_STAGE_INCIDENTS, {"categories": [c.value for c in FailureCategory]})
            before = count(con, "SELECT count(*) FROM events")
            con.execute(
                _INSERT_EVENTS,
                {
                    "file_id": file_id,
                    "interrupting": [c.value for c in FailureCategory if c.interrupting],
                },
            )
            added = count(con, "SELECT count(*) FROM events") - before
        else:
            con.execute(_STAGE_INVENTORY)
            con.execute(_UPSERT_INVENTORY, {"file_id": file_id})
            added = count(con, "SELECT count(*) FROM inventory WHERE file_id = ?", [file_id])
        bad = con.sql("SELECT line, reason FROM staged WHERE reason IS NOT NULL").pl()
        raw = _raw_lines(path, fmt, frame, bad["line"].to_list())
        insert_rejects(
            con,
            file_id,
            path,
            bad.with_columns(raw=pl.col("line").replace_strict(raw, default=None, return_dtype=pl.String)),
        )
        summary.rows_rejected = bad.height
        summary.rows_ingested = added
        summary.rows_duplicate = source.height - bad.height - added
        record_counts(con, file_id, summary)
    return summary
