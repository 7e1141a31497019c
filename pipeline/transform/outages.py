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

from pipeline.transform.fleet import finest_time_unit

NODE = ["cluster_id", "node_id"]
END_SOURCES = ("resolved_at", "inventory", "open", "unknown")
GAP_TOLERANCE = timedelta(minutes=30)
EXPOSURE_BASES = ("uptime", "calendar")
# a forward as-of join by node: the first right row at or after the left time (both sorted by time)
_FORWARD = {"by": NODE, "strategy": "forward", "check_sortedness": False}
_BACKWARD = {"by": NODE, "strategy": "backward", "check_sortedness": False}


def _hours(end: pl.Expr, start: pl.Expr) -> pl.Expr:
    return (end - start).dt.total_seconds(fractional=True) / 3600


def uptime_intervals(exposure: pl.DataFrame, outages: pl.DataFrame) -> pl.DataFrame:
    """``exposure`` (:func:`pipeline.transform.exposure_intervals`) with the outage windows of
    recorded ends removed: an interval that holds a window [start, min(end, interval end)) is split
    around it, ``node_hours`` and ``gpu_hours`` recomputed per piece. ``instances`` and
    ``size_bucket`` stay the calendar ones (a cluster's size does not shrink while a node is being
    repaired). Intervals, never hourly rows; with no recorded ends the result equals ``exposure``.
    Windows that overlap (not from :func:`pipeline.analysis.downtime.outages`, whose outages of a
    node never do) are removed as their union.

    Which failures count is still decided on the calendar intervals (a failure at the start of its
    outage is the end of an up piece): pass ``exposure`` as ``service`` to
    :func:`pipeline.transform.failure_rates`.

    How, in time linear in the output: a node's windows (of positive length) are merged into
    disjoint spans 0..m-1 in time order, whose gaps are the node's up segments 0..m (segment k
    runs from the end of span k-1 to the start of span k, unbounded before the first span and
    after the last). Interval [s, e] meets the segments from the number of spans starting at or
    before s to the number ending before e: two backward as-of joins by node give both numbers,
    and each piece is an interval clipped to one segment. Never a join of intervals and windows
    on the node with an overlap filter, whose size is intervals x windows per node."""
    rows = exposure.lazy().with_row_index("_interval")
    unit = finest_time_unit(exposure.schema["start_utc"], outages.schema["end_utc"])
    windows = (
        outages.lazy()
        .select(*NODE, pl.col("start_utc").alias("out_from"), pl.col("end_utc").alias("out_to"))
        .with_columns(pl.col("out_from", "out_to").dt.cast_time_unit(unit))
    )
    after_earlier = (pl.col("out_from") > pl.col("out_to").cum_max().shift(1)).fill_null(True)
    spans = (
        windows.filter(pl.col("out_to") > pl.col("out_from"))
        .sort(*NODE, "out_from")
        .with_columns(_k=(after_earlier.cum_sum() - 1).cast(pl.Int64).over(NODE))
        .group_by(*NODE, "_k")
        .agg(pl.col("out_from").min(), pl.col("out_to").max())
        .sort(*NODE, "_k")
    )
    segments = pl.concat(
        [
            spans.select(*NODE, "_k", seg_from=pl.col("out_to").shift(1).over(NODE), seg_to="out_from"),
            spans.group_by(NODE).agg(
                _k=pl.len().cast(pl.Int64),
                seg_from=pl.col("out_to").max(),
                seg_to=pl.lit(None, pl.Datetime(unit)),
            ),
        ],
        how="diagonal_relaxed",
    )
    # segments [first, last] of each interval: spans starting at or before its start, ending before its end
    bounds = rows.select("_interval", *NODE, pl.col("start_utc", "end_utc").dt.cast_time_unit(unit))
    first = bounds.sort("start_utc").join_asof(
        spans.select(*NODE, "out_from", first=pl.col("_k") + 1).sort("out_from"),
        left_on="start_utc",
        right_on="out_from",
        **_BACKWARD,
    )
    last = bounds.sort("end_utc").join_asof(
        spans.select(*NODE, "out_to", last=pl.col("_k") + 1).sort("out_to"),
        left_on="end_utc",
        right_on="out_to",
        allow_exact_matches=False,
        **_BACKWARD,
    )
    pieces = (
        first.select("_interval", *NODE, "start_utc", "end_utc", pl.col("first").fill_null(0))
        .join(last.select("_interval", pl.col("last").fill_null(0)), on="_interval")
        .filter(pl.col("last") >= pl.col("first"))
        .with_columns(_k=pl.int_ranges("first", pl.col("last") + 1))
        .explode("_k")
        .join(segments, on=[*NODE, "_k"], how="left")
        .select(
            "_interval",
            piece_from=pl.max_horizontal("start_utc", "seg_from"),
            piece_to=pl.min_horizontal("end_utc", "seg_to"),
        )
        .filter(pl.col("piece_to") > pl.col("piece_from"))
    )
    start_type, end_type = exposure.schema["start_utc"], exposure.schema["end_utc"]
    return (
        rows.join(pieces, on="_interval")
        .sort("_interval", "piece_from")
        .with_columns(
            start_utc=pl.col("piece_from").cast(start_type), end_utc=pl.col("piece_to").cast(end_type)
        )
        .with_columns(node_hours=_hours(pl.col("end_utc"), pl.col("start_utc")))
        .with_columns(gpu_hours=pl.col("node_hours") * pl.col("gpus_per_node"))
        .select(exposure.columns)
        .collect()
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
