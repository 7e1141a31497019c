"""What every public-data reader returns (:class:`CanonicalFrames`), where the public data sets
live, and how a reader's frames are stored (:func:`ingest`).

A reader (:mod:`.lanl`, :mod:`.titan`, :mod:`.bgl`) turns a public format into failcast's canonical
frames (the columns of a canonical incidents or inventory file) plus study-specific extra columns
and frames, so the same data can be ingested into a warehouse (``failcast ingest --format lanl``)
and analysed with the study's own variables (root cause, batch, repair minutes) in a notebook.

Storing (``failcast ingest --format lanl|titan|bgl PATH``): the frames go through the canonical
reader (the same validation, content-key dedup and rejects as any incidents/inventory file) inside
the file's transaction. The bookkeeping then names the source file, not the intermediate CSVs:

* ``ingested_files`` gets two rows for it (kinds ``incidents`` and ``inventory``; BGL has no
  inventory, so one), both with the source's path, size, sha256 and format, so re-ingesting the same
  file is skipped and a changed file adds only new records;
* a rejected incident keeps its source line (the readers carry it in ``line``); a rejected inventory
  row is derived from many records, so its line is empty and ``raw`` is the canonical row;
* lines the reader itself could not use (BGL alerts without a node, unknown tags ...) land in
  ``rejects`` with the reader's reason.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from pipeline.readers.canonical import ingest_canonical
from pipeline.readers.canonical_source import (
    INCIDENT_COLUMNS,
    INCIDENT_OPTIONAL,
    INVENTORY_COLUMNS,
    INVENTORY_OPTIONAL,
)
from pipeline.readers.contract import ReadContext
from pipeline.store.files import FileSummary, InputError, insert_rejects, registered

SHARED_DATASETS_ENV = "FAILCAST_SHARED_DATASETS"
_ISO_UTC = "%Y-%m-%dT%H:%M:%SZ"
_TIME_COLUMNS = ("timestamp", "resolved_at", "in_service_from", "in_service_to")


def shared_datasets_dir() -> Path:
    """``$FAILCAST_SHARED_DATASETS``, else ``shared/datasets`` beside the repository checkout.

    The public data sets are never copied into the repository (their licences ask for citation and
    some forbid redistribution), so tests and notebooks look for them next to it.
    """
    override = os.environ.get(SHARED_DATASETS_ENV)
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[2].parent / "shared" / "datasets"


@dataclass
class CanonicalFrames:
    """Canonical ``incidents`` and ``inventory`` (times as UTC datetimes) plus extras.

    ``incidents`` and ``inventory`` start with the canonical columns and may carry extra
    study columns after them (``write`` leaves those out); ``extras`` holds whole frames that are
    not incidents or inventory (per-system metadata, per-GPU lifetimes, rejected lines).
    """

    name: str
    incidents: pl.DataFrame
    inventory: pl.DataFrame
    extras: dict[str, pl.DataFrame] = field(default_factory=dict)

    def write(self, directory: Path | str, fmt: str = "csv") -> list[Path]:
        """Write ``<name>_incidents.<fmt>`` and ``<name>_inventory.<fmt>`` (canonical columns,
        ISO 8601 UTC times) for ``pipeline.ingest.ingest_files``; returns the two paths."""
        if fmt not in ("csv", "parquet"):
            raise ValueError(f"cannot write format {fmt!r}; use csv or parquet")
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        paths = []
        for kind, frame, columns in (
            ("incidents", self.incidents, (*INCIDENT_COLUMNS, *INCIDENT_OPTIONAL)),
            ("inventory", self.inventory, (*INVENTORY_COLUMNS, *INVENTORY_OPTIONAL)),
        ):
            canonical = frame.select(
                pl.col(c).dt.strftime(_ISO_UTC) if c in _TIME_COLUMNS else pl.col(c) for c in columns
            )
            path = directory / f"{self.name}_{kind}.{fmt}"
            if fmt == "csv":
                canonical.write_csv(path)
            else:
                canonical.write_parquet(path)
            paths.append(path)
        return paths


def merge_intervals(intervals: pl.DataFrame, keys: list[str], start: str, end: str) -> pl.DataFrame:
    """Union of overlapping or touching ``[start, end)`` intervals per key, so exposure is never
    counted twice (LANL node sets that overlap, Titan GPU periods that overlap in one slot)."""
    return (
        intervals.sort([*keys, start])
        .with_columns(_reach=pl.col(end).cum_max().shift(1).over(keys))
        .with_columns(
            _new=(pl.col("_reach").is_null() | (pl.col(start) > pl.col("_reach"))).cum_sum().over(keys)
        )
        .group_by([*keys, "_new"], maintain_order=True)
        .agg(pl.col(start).min(), pl.col(end).max())
        .drop("_new")
    )


def read_text_csv(path: Path | str) -> pl.DataFrame:
    """A public data set's CSV (plain or gzip), every column as text; unreadable -> ValueError naming it."""
    try:
        return pl.read_csv(path, infer_schema=False)
    except (pl.exceptions.PolarsError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{path}: cannot read as CSV: {first}") from None


def _source_rows(frames: CanonicalFrames) -> int:
    """Records (lines or CSV rows) the reader read from the source file."""
    if "lines" in frames.extras:  # BGL: every log line
        return int(frames.extras["lines"]["lines"][0])
    if "periods" in frames.extras:  # Titan: every installation period
        return frames.extras["periods"].height
    return frames.incidents.height  # LANL: one record per line


_FIX_FILE = "UPDATE ingested_files SET path = ?, size_bytes = ?, format = ? WHERE file_id = ?"
_FIX_REJECTS = "UPDATE rejects SET path = ? WHERE file_id = ?"
_SOURCE_LINES = """
UPDATE rejects r SET line = m.source_line FROM line_map m
WHERE r.file_id = $file_id AND r.line = m.csv_line
"""


def ingest(ctx: ReadContext, read: Callable[[], tuple[CanonicalFrames, list[str]]]) -> FileSummary:
    """Store the frames (and notes) that ``read`` makes of ``ctx.path`` as incidents and inventory
    (the caller holds the transaction); a file ``read`` cannot read is an :class:`InputError`.
    Read = ingested + duplicate + rejected + ignored in source records; ignored are records that
    carry no failure (BGL non-alert lines, Titan periods that end without DBE/OTB: those give
    exposure)."""
    con, path, sha, fmt = ctx.con, ctx.path, ctx.sha, ctx.fmt
    try:
        frames, notes = read()
    except (ValueError, OSError, pl.exceptions.PolarsError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{path}: cannot read as {fmt}: {reason}") from exc
    size = path.stat().st_size
    with tempfile.TemporaryDirectory(prefix="failcast-") as tmp:
        incidents_csv, inventory_csv = frames.write(tmp)
        parts = [ingest_canonical(con, incidents_csv, sha=sha, fmt="csv")]
        if frames.inventory.height:
            parts.append(ingest_canonical(con, inventory_csv, sha=sha, fmt="csv"))
    for part in parts:
        con.execute(_FIX_FILE, [str(path), size, fmt, part.file_id])
        con.execute(_FIX_REJECTS, [str(path), part.file_id])
    incidents = parts[0]
    line_map = frames.incidents.select(
        csv_line=pl.int_range(2, frames.incidents.height + 2, dtype=pl.Int64), source_line="line"
    )
    with registered(con, "line_map", line_map):
        con.execute(_SOURCE_LINES, {"file_id": incidents.file_id})
    if len(parts) > 1:
        con.execute("UPDATE rejects SET line = NULL WHERE file_id = ?", [parts[1].file_id])
    reader_rejects = frames.extras.get("rejects")
    if reader_rejects is not None and reader_rejects.height:
        insert_rejects(con, incidents.file_id, path, reader_rejects.select("line", "raw", "reason"))
    rejected = incidents.rows_rejected + (reader_rejects.height if reader_rejects is not None else 0)
    if len(parts) > 1:
        inv = parts[1]
        notes.append(
            f"inventory: {inv.rows_read} node service intervals derived from the file, {inv.rows_ingested} "
            f"new or changed, {inv.rows_rejected} rejected"
        )
    read = _source_rows(frames)
    ctx.report(size)
    return FileSummary(
        str(path),
        "incidents",
        fmt,
        rows_read=read,
        rows_ingested=incidents.rows_ingested,
        rows_duplicate=incidents.rows_duplicate,
        rows_rejected=rejected,
        rows_ignored=read - incidents.rows_ingested - incidents.rows_duplicate - rejected,
        file_id=incidents.file_id,
        notes=notes,
    )
