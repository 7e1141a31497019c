"""Outages' downtime removed from service intervals (uptime exposure), and availability.

An *outage* is a node interruption with the moment its node was back: found in DuckDB
(:func:`pipeline.analysis.downtime.outages`, whose docstring gives the rules; ``END_SOURCES`` and
``GAP_TOLERANCE`` are its constants). Downtime is only what is known: the windows [start,
min(end, window end)) of outages with a recorded end. Uptime exposure (:func:`uptime_intervals`)
removes those windows from the service intervals, so MTBF = uptime / failures (the
reliability-engineering definition: MIL-HDBK-338B 5.3; O'Connor & Kleyner, *Practical Reliability
Engineering*, 2012, 2.6). With no recorded ends the uptime and calendar exposures are identical.
Availability = uptime / (uptime + downtime): the share of the time a node was meant to serve (in
service, or out for a repair) that it was up.
"""

from __future__ import annotations

from datetime import timedelta

import polars as pl

from pipeline.transform.matching import Match

NODE = ["cluster_id", "node_id"]
END_SOURCES = ("resolved_at", "inventory", "open", "unknown")
GAP_TOLERANCE = timedelta(minutes=30)
EXPOSURE_BASES = ("uptime", "calendar")
_WINDOWS_OF = "(SELECT _node, start_utc AS out_from, end_utc AS out_to FROM {outages})"


def _hours(end: pl.Expr, start: pl.Expr) -> pl.Expr:
    return (end - start).dt.total_seconds(fractional=True) / 3600


def uptime_intervals(
    exposure: pl.DataFrame, outages: pl.DataFrame | str, con=None, nodes: str | None = None
) -> pl.DataFrame:
    """``exposure`` (:func:`pipeline.transform.exposure_intervals`) with the outage windows of
    recorded ends removed: an interval that holds a window [start, min(end, interval end)) is split
    around it, ``node_hours`` and ``gpu_hours`` recomputed per piece. ``instances`` and
    ``size_bucket`` stay the calendar ones (a cluster's size does not shrink while a node is being
    repaired). Intervals, never hourly rows; with no recorded ends the result equals ``exposure``.
    Windows that overlap (not from :func:`pipeline.analysis.downtime.outages`, whose outages of a
    node never do) are removed as their union. An interval that starts as an outage starts (or
    ends as one ends) keeps that instant as a piece of 0 h: a failure then was in service. When no
    window falls inside an interval, the result *is* ``exposure`` (the same frame, not a copy: callers
    test ``is`` and match failures once).

    The rule is :data:`pipeline.transform.matching.UPTIME_PIECES` (one implementation, in DuckDB,
    time linear in the output). ``outages`` is a frame, or literal SQL of a relation on the DuckDB
    connection ``con`` with ``_node``, ``start_utc`` and ``end_utc``, its nodes numbered by the
    table ``nodes`` there (where the outages were found:
    :func:`pipeline.analysis.downtime.outage_table`; their windows are then never read into Polars)."""
    if isinstance(outages, str):
        windows = _WINDOWS_OF.format(outages=outages)  # literal SQL of the caller's, never user text
    else:
        windows = outages.select(*NODE, out_from="start_utc", out_to="end_utc")
    with Match(exposure, downtime=windows, con=con, nodes=nodes) as match:
        return exposure if match.pieces_are_intervals() else uptime_rows(exposure, match.pieces())


def uptime_rows(exposure: pl.DataFrame, pieces: pl.DataFrame) -> pl.DataFrame:
    """The rows of :func:`uptime_intervals` from the pieces (``_interval``: a row of ``exposure``,
    ``start_utc``, ``end_utc``, in (interval, start) order) that the rule found in DuckDB."""
    start_type, end_type = exposure.schema["start_utc"], exposure.schema["end_utc"]
    return (
        exposure.gather(pieces["_interval"])
        .with_columns(
            start_utc=pieces["start_utc"].cast(start_type), end_utc=pieces["end_utc"].cast(end_type)
        )
        .with_columns(node_hours=_hours(pl.col("end_utc"), pl.col("start_utc")))
        .with_columns(gpu_hours=pl.col("node_hours") * pl.col("gpus_per_node"))
    )


def availability(
    exposure: pl.DataFrame, uptime: pl.DataFrame, outages: pl.DataFrame, by: list[str]
) -> pl.DataFrame:
    """Per group of ``by`` (exposure keys, e.g. cluster_id): ``in_service_node_hours`` (calendar),
    ``uptime_node_hours``, ``downtime_node_hours`` (all known downtime in the window, in service
    or out for repair) and ``availability`` = uptime / (uptime + downtime), null for a group with no
    node-hours in service (not in the inventory: its uptime is unknown, not zero)."""
    keys = by or [pl.lit(0).alias("_all")]
    calendar = exposure.group_by(keys).agg(in_service_node_hours=pl.col("node_hours").sum())
    up = uptime.group_by(keys).agg(uptime_node_hours=pl.col("node_hours").sum())
    down = outages.group_by(keys).agg(downtime_node_hours=pl.col("downtime_hours").sum())
    on = by or ["_all"]
    return (
        calendar.join(up, on=on, how="full", coalesce=True)
        .join(down, on=on, how="full", coalesce=True)
        .with_columns(pl.col("^.*_node_hours$").fill_null(0.0))
        .with_columns(
            availability=pl.when(pl.col("in_service_node_hours") > 0).then(
                pl.col("uptime_node_hours") / (pl.col("uptime_node_hours") + pl.col("downtime_node_hours"))
            )
        )
        .drop("_all", strict=False)
    )
