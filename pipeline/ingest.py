"""Ingest: input files -> warehouse tables ``events``, ``incidents``, ``inventory``, ``rejects``.

Rules that every reader follows:

* **Idempotent.** A file whose sha256 is already in ``ingested_files`` is skipped; an event whose
  content key (time, cluster, node, category, GPU, message) is already stored counts as a
  duplicate, so a log that grew adds only its new lines.
* **Nothing lost.** A row that cannot be used goes to ``rejects`` with file, line, raw text and the
  reason; the per-file summary counts read = ingested + duplicate + rejected.
* **All or nothing per file.** Each file is written in one transaction.
* **UTC.** Times with an offset are converted; naive times are read in ``timezone`` (default UTC).
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from pipeline import warehouse
from pipeline.categories import FailureCategory

INCIDENT_COLUMNS = ("timestamp", "cluster_id", "node_id", "category")
INCIDENT_OPTIONAL = ("gpu_index", "job_id", "message", "resolved_at")
INVENTORY_COLUMNS = ("cluster_id", "node_id", "instance_type", "gpus_per_node", "in_service_from")
INVENTORY_OPTIONAL = ("in_service_to",)
FORMATS = ("csv", "jsonl", "parquet")


class InputError(Exception):
    """Input that cannot be read as a whole; the message names the file and how to fix it."""


@dataclass
class FileSummary:
    path: str
    kind: str
    format: str
    rows_read: int = 0
    rows_ingested: int = 0
    rows_duplicate: int = 0
    rows_rejected: int = 0
    skipped: bool = False
    ignored_columns: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def detect_format(path: Path) -> str:
    name = path.name.lower().removesuffix(".gz")
    for suffix, fmt in (
        (".csv", "csv"),
        (".jsonl", "jsonl"),
        (".ndjson", "jsonl"),
        (".json", "jsonl"),
        (".parquet", "parquet"),
    ):
        if name.endswith(suffix):
            return fmt
    raise InputError(f"{path}: cannot tell the format from the name; use --format {'|'.join(FORMATS)}")


def _read_table(path: Path, fmt: str) -> tuple[pl.DataFrame, int]:
    """All columns as strings plus ``line``: the 1-based line (row for Parquet) in the file."""
    try:
        if fmt == "csv":
            frame, first_line = pl.read_csv(path, infer_schema=False), 2
        elif fmt == "jsonl":
            frame, first_line = pl.read_ndjson(path, infer_schema_length=None), 1
        else:
            frame, first_line = pl.read_parquet(path), 1
    except Exception as exc:  # polars raises many types; the user needs the file and the reason
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{path}: cannot read as {fmt}: {reason}") from exc
    frame = frame.select(pl.all().cast(pl.String))
    return frame.with_row_index("line", offset=first_line).with_columns(
        pl.col("line").cast(pl.Int64)
    ), first_line


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
    opener = gzip.open if path.name.endswith(".gz") else open
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
INSERT INTO events
SELECT event_key, $file_id, line, timezone('UTC', ts), cluster_id, node_id, category,
       list_contains($interrupting, category), gpu_index, job_id, message,
       timezone('UTC', resolved_at)
FROM staged s
WHERE reason IS NULL
  AND NOT EXISTS (SELECT 1 FROM events e WHERE e.event_key = s.event_key)
QUALIFY row_number() OVER (PARTITION BY event_key ORDER BY line) = 1
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
INSERT INTO inventory
SELECT cluster_id, node_id, instance_type, gpus_per_node, from_utc, to_utc, $file_id, line
FROM fresh;
"""


def _insert_rejects(con, file_id: int | None, path: Path, rejects: pl.DataFrame) -> None:
    """``rejects`` has columns line, raw, reason."""
    now = datetime.now(UTC).replace(tzinfo=None)
    con.register("rejects_frame", rejects)
    try:
        con.execute(
            "INSERT INTO rejects SELECT $file_id, $path, line, raw, reason, $now FROM rejects_frame",
            {"file_id": file_id, "path": str(path), "now": now},
        )
    finally:
        con.unregister("rejects_frame")


def _ingest_one(
    con, path: Path, *, fmt: str | None, column_map: Mapping[str, str], timezone: str
) -> FileSummary:
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    fmt = fmt or detect_format(path)
    sha = sha256_of(path)
    if con.sql("SELECT 1 FROM ingested_files WHERE sha256 = ?", params=[sha]).fetchall():
        return FileSummary(str(path), "-", fmt, skipped=True)

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

    con.register("source", source)
    try:
        con.execute(f"SET TimeZone = '{_checked_timezone(con, timezone)}'")
        with warehouse.transaction(con):
            file_id = con.sql(
                "INSERT INTO ingested_files (path, sha256, size_bytes, kind, format, rows_read,"
                " rows_ingested, rows_duplicate, rows_rejected, ingested_at_utc)"
                " VALUES (?, ?, ?, ?, ?, ?, 0, 0, 0, ?) RETURNING file_id",
                params=[
                    str(path),
                    sha,
                    path.stat().st_size,
                    kind,
                    fmt,
                    source.height,
                    datetime.now(UTC).replace(tzinfo=None),
                ],
            ).fetchall()[0][0]
            if kind == "incidents":
                con.execute(_STAGE_INCIDENTS, {"categories": [c.value for c in FailureCategory]})
                before = con.sql("SELECT count(*) FROM events").fetchall()[0][0]
                con.execute(
                    _INSERT_EVENTS,
                    {
                        "file_id": file_id,
                        "interrupting": [c.value for c in FailureCategory if c.interrupting],
                    },
                )
                added = con.sql("SELECT count(*) FROM events").fetchall()[0][0] - before
            else:
                con.execute(_STAGE_INVENTORY)
                before = con.sql(
                    "SELECT count(*) FROM inventory WHERE file_id = ?", params=[file_id]
                ).fetchall()[0][0]
                con.execute(_UPSERT_INVENTORY, {"file_id": file_id})
                added = (
                    con.sql("SELECT count(*) FROM inventory WHERE file_id = ?", params=[file_id]).fetchall()[
                        0
                    ][0]
                    - before
                )
            bad = con.sql("SELECT line, reason FROM staged WHERE reason IS NOT NULL").pl()
            raw = _raw_lines(path, fmt, frame, bad["line"].to_list())
            _insert_rejects(
                con,
                file_id,
                path,
                bad.with_columns(
                    raw=pl.col("line").replace_strict(raw, default=None, return_dtype=pl.String)
                ),
            )
            summary.rows_rejected = bad.height
            summary.rows_ingested = added
            summary.rows_duplicate = source.height - bad.height - added
            con.execute(
                "UPDATE ingested_files SET rows_ingested = ?, rows_duplicate = ?,"
                " rows_rejected = ? WHERE file_id = ?",
                [summary.rows_ingested, summary.rows_duplicate, summary.rows_rejected, file_id],
            )
    finally:
        con.execute("SET TimeZone = 'UTC'")
        con.unregister("source")
    return summary


def _checked_timezone(con, timezone: str) -> str:
    """A time zone name DuckDB knows; checked against its list so it is safe to place in SET."""
    known = con.sql("SELECT 1 FROM pg_timezone_names() WHERE name = ?", params=[timezone]).fetchall()
    if not known:
        raise InputError(
            f"unknown time zone {timezone!r}; use an IANA name such as UTC or America/Los_Angeles"
        )
    return timezone


def ingest_files(
    con,
    paths: Iterable[Path | str],
    *,
    fmt: str | None = None,
    column_map: Mapping[str, str] | None = None,
    timezone: str = "UTC",
    window_seconds: float = 600.0,
) -> list[FileSummary]:
    """Ingest each file in its own transaction, then rebuild ``incidents`` from ``events``."""
    summaries = [
        _ingest_one(con, Path(p), fmt=fmt, column_map=column_map or {}, timezone=timezone) for p in paths
    ]
    with warehouse.transaction(con):
        warehouse.rebuild_incidents(con, window_seconds=window_seconds)
    return summaries


def parse_column_map(pairs: Iterable[str]) -> dict[str, str]:
    """``["node_id=hostname", ...]`` -> ``{"node_id": "hostname"}`` with a clear error."""
    known = {*INCIDENT_COLUMNS, *INCIDENT_OPTIONAL, *INVENTORY_COLUMNS, *INVENTORY_OPTIONAL}
    mapping: dict[str, str] = {}
    for pair in pairs:
        canon, sep, source = pair.partition("=")
        if not sep or not canon or not source:
            raise InputError(f"--map {pair!r}: expected CANONICAL=SOURCE, e.g. node_id=hostname")
        if canon not in known:
            raise InputError(
                f"--map {pair!r}: {canon!r} is not a canonical column ({', '.join(sorted(known))})"
            )
        mapping[canon] = source
    return mapping
