"""The result every public-data reader returns, and where the public data sets live.

A reader turns a public format into failcast's canonical frames (the columns that
:func:`pipeline.ingest.ingest_files` reads) plus study-specific extra columns and frames, so the
same data can be ingested into a warehouse today (``CanonicalFrames.write`` then ``failcast
ingest``) and analysed with the study's own variables (root cause, batch, repair minutes) in a
notebook.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from pipeline.readers.canonical import (
    INCIDENT_COLUMNS,
    INCIDENT_OPTIONAL,
    INVENTORY_COLUMNS,
    INVENTORY_OPTIONAL,
)

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
