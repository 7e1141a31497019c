"""OLCF Titan GPU lifetimes (Ostrouchov et al., SC'20) -> canonical frames and competing risks.

``gc_full.csv`` has one row per installation period of a K20X GPU (serial ``SN``) in a node slot
(``location``, e.g. ``c11-2c1s4n1``); a period ending in ``DBE`` (double-bit ECC error) or ``OTB``
(off the bus) is a failure, any other end is censoring. Choices (docs/public-data.md):

* node = slot location, one GPU per node (``gpu_index`` 0), cluster ``titan``, instance type
  ``XK7-K20X``. Exposure = union of the installation periods in each slot (577 periods overlap
  another in the same slot in the source; merging stops node-hours being counted twice).
* DBE -> ``gpu_memory``, OTB -> ``gpu_fell_off_bus``; the incident time is the row's ``remove``:
  the failure ends the slot's service interval ``[insert, remove]`` and counts in it (failcast's
  closed-interval rule, :func:`pipeline.transform.in_service`).
  1 158 rows have no ``insert``: they are further events during a period (e.g. a burst of DBEs
  minutes apart before the GPU was pulled), so they are incidents but not exposure; the warehouse's
  collapse window folds such bursts into one incident.
* Times are read as UTC (the source does not say; ``timezone`` overrides).
* Slots listed in ``titan.service.txt`` are service nodes and are dropped (none appear in this copy
  of ``gc_full``; the filter protects other copies).
* ``gc_summary_loc.csv`` (optional) adds the per-GPU ``batch`` (old = 2012, new = 2016-17) and the
  per-GPU lifetime frame ``extras["gpus"]``: years in service, ``dead`` and the cause of death. A GPU
  with both DBE and OTB events in its history is attributed to its last one, so DBE and OTB are
  mutually exclusive competing causes.

Competing risks: :func:`cumulative_incidence` is the Aalen-Johansen estimate of
P(T <= t, cause = c) per batch; unlike 1 - KM with the other cause censored, the causes' curves add
up to the all-cause failure probability.
"""

from __future__ import annotations

import gzip
import warnings
from pathlib import Path

import numpy as np
import polars as pl

from pipeline.categories import FailureCategory
from pipeline.readers import public_data
from pipeline.readers.contract import Head, ReadContext
from pipeline.readers.public_data import CanonicalFrames, merge_intervals, read_text_csv
from pipeline.store.files import FileSummary

EVENT_CATEGORIES = {"DBE": FailureCategory.GPU_MEMORY, "OTB": FailureCategory.GPU_FELL_OFF_BUS}
CAUSE_CODES = {"DBE": 1, "OTB": 2}
HOURS_PER_YEAR = 365.25 * 24
COMPANIONS = ("gc_summary_loc.csv", "titan.service.txt")
"""Read from beside ``gc_full.csv[.gz]`` when present (``failcast ingest --format titan``)."""


def read_service_locations(path: Path | str) -> list[str]:
    """Locations of Titan's service nodes: third whitespace field of ``titan.service.txt``."""
    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        rows = [line.split() for line in f if line.strip()]
    bad = [i for i, r in enumerate(rows, start=1) if len(r) < 3]
    if bad:
        raise ValueError(f"{path}: line {bad[0]} has fewer than 3 fields; expected 'index hex location ...'")
    return [r[2] for r in rows]


def _times(column: str, timezone: str) -> pl.Expr:
    return (
        pl.col(column)
        .str.to_datetime("%Y-%m-%d %H:%M:%S", time_unit="us")
        .dt.replace_time_zone(timezone)
        .dt.convert_time_zone("UTC")
    )


def read_titan(
    path_full: Path | str,
    path_summary: Path | str | None = None,
    service: Path | str | None = None,
    *,
    timezone: str = "UTC",
) -> CanonicalFrames:
    """Canonical incidents (one per DBE/OTB period end) and inventory (slot service intervals)."""
    path_full = Path(path_full)
    periods = read_text_csv(path_full)
    missing = [c for c in ("SN", "location", "insert", "remove", "event") if c not in periods.columns]
    if missing:
        raise ValueError(f"{path_full}: not Titan's gc_full.csv (missing columns {missing})")
    periods = periods.with_row_index("line", offset=2).with_columns(
        pl.col("line").cast(pl.Int64),
        insert_utc=_times("insert", timezone),
        remove_utc=_times("remove", timezone),
    )
    if service is not None:
        periods = periods.filter(~pl.col("location").is_in(read_service_locations(service)))

    gpus = None
    if path_summary is not None:
        gpus = _gpu_lifetimes(Path(path_summary), periods)
        periods = periods.join(gpus.select("SN", "batch"), on="SN", how="left")
    else:
        periods = periods.with_columns(batch=pl.lit(None, pl.String))

    incidents = (
        periods.filter(pl.col("event").is_in(list(EVENT_CATEGORIES)))
        .select(
            timestamp=pl.col("remove_utc"),
            cluster_id=pl.lit("titan"),
            node_id="location",
            category=pl.col("event").replace_strict({k: v.value for k, v in EVENT_CATEGORIES.items()}),
            gpu_index=pl.lit(0, pl.Int64),
            job_id=pl.lit(None, pl.String),
            message=pl.format(
                "{} on GPU SN {} ({} batch)", "event", "SN", pl.col("batch").fill_null("unknown")
            ),
            resolved_at=pl.lit(None, pl.Datetime("us", "UTC")),
            sn="SN",
            event="event",
            batch="batch",
            line="line",
        )
        .sort("timestamp", "node_id")
    )
    slots = merge_intervals(
        periods.filter(pl.col("insert_utc").is_not_null()).select("location", "insert_utc", "remove_utc"),
        ["location"],
        "insert_utc",
        "remove_utc",
    )
    inventory = slots.select(
        cluster_id=pl.lit("titan"),
        node_id="location",
        instance_type=pl.lit("XK7-K20X"),
        gpus_per_node=pl.lit(1, pl.Int64),
        in_service_from="insert_utc",
        in_service_to="remove_utc",
    ).sort("node_id", "in_service_from")
    extras = {"periods": periods.drop("insert", "remove")}
    if gpus is not None:
        extras["gpus"] = gpus
    return CanonicalFrames("titan", incidents, inventory, extras)


def _gpu_lifetimes(path: Path, periods: pl.DataFrame) -> pl.DataFrame:
    """One row per GPU: batch, hours in service, dead, cause (last DBE/OTB in its history)."""
    summary = read_text_csv(path)
    missing = [c for c in ("SN", "time", "batch", "dead") if c not in summary.columns]
    if missing:
        raise ValueError(f"{path}: not Titan's gc_summary_loc.csv (missing columns {missing})")
    last_event = (
        periods.filter(pl.col("event").is_not_null())
        .sort("remove_utc")
        .group_by("SN")
        .agg(last_event=pl.col("event").last())
    )
    return (
        summary.join(last_event, on="SN", how="left")
        .select(
            "SN",
            "batch",
            service_hours=pl.col("time").cast(pl.Float64) / 3600,
            dead=pl.col("dead") == "TRUE",
            cause=pl.when(pl.col("dead") == "TRUE").then("last_event"),
            col=pl.col("col").cast(pl.Int64),
            cage=pl.col("cage").cast(pl.Int64),
            node=pl.col("node").cast(pl.Int64),
        )
        .with_columns(service_years=pl.col("service_hours") / HOURS_PER_YEAR)
    )


def cumulative_incidence(
    gpus: pl.DataFrame, by: str = "batch", *, years: tuple[float, ...] = ()
) -> pl.DataFrame:
    """Aalen-Johansen cumulative incidence of each cause per group, at ``years`` (or every event
    time when empty): columns ``by``, cause, years, cumulative_incidence, ci_low, ci_high."""
    import lifelines  # here, not at the top: ingest sniffs this module and stays without lifelines

    rows = []
    for (group,), part in gpus.group_by(by, maintain_order=True):
        code = part["cause"].replace_strict(CAUSE_CODES, default=0, return_dtype=pl.Int64).to_numpy()
        durations = part["service_years"].to_numpy()
        for cause, value in CAUSE_CODES.items():
            if not np.any(code == value):
                continue
            with warnings.catch_warnings():  # tied times are jittered (seeded): expected, documented
                warnings.filterwarnings("ignore", message="Tied event times")
                fitter = lifelines.AalenJohansenFitter(seed=0).fit(durations, code, event_of_interest=value)
            curve = fitter.cumulative_density_.iloc[:, 0]
            ci = fitter.confidence_interval_cumulative_density_
            grid = np.asarray(years, float) if years else curve.index.to_numpy(float)
            at = np.searchsorted(curve.index.to_numpy(float), grid, side="right") - 1
            pick = np.clip(at, 0, None)
            valid = at >= 0
            rows.append(
                pl.DataFrame(
                    {
                        by: group,
                        "cause": cause,
                        "years": grid,
                        "cumulative_incidence": np.where(valid, curve.to_numpy()[pick], 0.0),
                        "ci_low": np.where(valid, ci.iloc[:, 0].to_numpy()[pick], 0.0),
                        "ci_high": np.where(valid, ci.iloc[:, 1].to_numpy()[pick], 0.0),
                    }
                )
            )
    return pl.concat(rows)


def companion(path: Path, name: str) -> Path | None:
    """``name`` or ``name.gz`` in the folder of ``path``, if there."""
    for candidate in (f"{name}.gz", name):
        if (path.parent / candidate).is_file():
            return path.parent / candidate
    return None


def is_titan(head: Head) -> bool:
    """Titan's gc_full.csv: a header naming the serial number, slot, insert, remove and event
    (its companions name other columns: they are read beside it, not on their own)."""
    return {"SN", "location", "insert", "remove", "event"} <= set(head.first_line.split(","))


def read(ctx: ReadContext) -> FileSummary:
    """``failcast ingest --format titan gc_full.csv[.gz]``: its incidents and inventory, with the
    companions (:data:`COMPANIONS`) found beside it, named in the notes; naive times are read in
    ``--timezone``."""

    def frames() -> tuple[CanonicalFrames, list[str]]:
        found = [companion(ctx.path, name) for name in COMPANIONS]
        notes = [
            f"titan companion {name}: {p if p else 'not found beside the file, not used'}"
            for name, p in zip(COMPANIONS, found, strict=True)
        ]
        return read_titan(ctx.path, *found, timezone=ctx.options.timezone), notes

    return public_data.ingest(ctx, frames)
