"""One public data set file -> warehouse (``failcast ingest --format lanl|titan|bgl PATH``).

The reader turns the file into canonical frames, which go through the canonical ingest (the same
validation, content-key dedup and rejects as any incidents/inventory file) inside the transaction
that :func:`pipeline.ingest.ingest_files` holds for the source file. The bookkeeping then names the
source file, not the intermediate CSVs:

* ``ingested_files`` gets two rows for it (kinds ``incidents`` and ``inventory``; BGL has no
  inventory, so one), both with the source's path, size, sha256 and format, so re-ingesting the same
  file is skipped and a changed file adds only new records;
* a rejected incident keeps its source line (the readers carry it in ``line``); a rejected inventory
  row is derived from many records, so its line is empty and ``raw`` is the canonical row;
* lines the reader itself could not use (BGL alerts without a node, unknown tags ...) land in
  ``rejects`` with the reader's reason.

Titan needs companions: ``gc_full.csv[.gz]`` is the file to ingest; ``gc_summary_loc.csv[.gz]``
(batch per GPU) and ``titan.service.txt[.gz]`` (service nodes to drop) are read from beside it when
present, and the summary's notes say which were used.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import polars as pl

from pipeline.readers.bgl import read_bgl
from pipeline.readers.canonical import ingest_canonical
from pipeline.readers.lanl import read_lanl
from pipeline.readers.public_data import CanonicalFrames
from pipeline.readers.titan import read_titan
from pipeline.store.files import FileSummary, InputError, insert_rejects, registered

TITAN_COMPANIONS = ("gc_summary_loc.csv", "titan.service.txt")


def companion(path: Path, name: str) -> Path | None:
    """``name`` or ``name.gz`` in the folder of ``path``, if there."""
    for candidate in (f"{name}.gz", name):
        if (path.parent / candidate).is_file():
            return path.parent / candidate
    return None


def read_dataset(path: Path, fmt: str, *, timezone: str = "UTC") -> tuple[CanonicalFrames, list[str]]:
    """The reader's frames and notes for the summary; an unreadable file is an ``InputError``.
    ``timezone`` is for Titan's naive times (LANL's are known to be America/Denver, BGL's epochs)."""
    try:
        if fmt == "lanl":
            return read_lanl(path), []
        if fmt == "bgl":
            return read_bgl(path), []
        if fmt == "titan":
            found = [companion(path, name) for name in TITAN_COMPANIONS]
            notes = [
                f"titan companion {name}: {p if p else 'not found beside the file, not used'}"
                for name, p in zip(TITAN_COMPANIONS, found, strict=True)
            ]
            return read_titan(path, *found, timezone=timezone), notes
    except (ValueError, OSError, pl.exceptions.PolarsError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{path}: cannot read as {fmt}: {reason}") from exc
    raise InputError(f"unknown public data format {fmt!r}; use lanl, titan or bgl")


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


def ingest_dataset(
    con,
    path: Path,
    *,
    sha: str,
    fmt: str,
    timezone: str = "UTC",
    progress: Callable[[int], None] | None = None,
) -> FileSummary:
    """Read ``path`` with the ``fmt`` reader and ingest its incidents and inventory (the caller
    holds the transaction). Read = ingested + duplicate + rejected + ignored in source records;
    ignored are records that carry no failure (BGL non-alert lines, Titan periods that end
    without DBE/OTB: those give exposure)."""
    frames, notes = read_dataset(path, fmt, timezone=timezone)
    size = path.stat().st_size
    with tempfile.TemporaryDirectory(prefix="failcast-") as tmp:
        incidents_csv, inventory_csv = frames.write(tmp)
        parts = [ingest_canonical(con, incidents_csv, sha=sha, fmt="csv", column_map={})]
        if frames.inventory.height:
            parts.append(ingest_canonical(con, inventory_csv, sha=sha, fmt="csv", column_map={}))
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
    if progress:
        progress(size)
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
