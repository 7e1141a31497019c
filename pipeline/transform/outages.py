"""Outages: node interruptions with their end, and service intervals with the downtime removed.

An *outage* is an interruption (:func:`pipeline.transform.node_interruptions`) together with the
moment its node was back. The end comes from, in this order:

1. ``resolved_at`` — the incident's own resolution time (``resolved_at_utc`` in the warehouse; a
   fault start/end table is exactly this: one row per fault with its end); an end equal to the
   start is a repair of 0 h (a fault cleared at once), not a missing end;
2. ``inventory`` — a gap in the inventory: the node's service interval ends at the failure or
   within ``gap_tolerance`` after it (availability traces close an up interval at each failure;
   a node is removed for repair at its failure), and a later interval of the same node starts:
   the outage ends at that start.

Otherwise the outage has no recorded end. If it is the node's last interruption before the window
end it is ``open``: still down or never recorded, its repair time right-censored at the window
end. If the node failed again later it did come back, at an unknown time: ``unknown``, left out of
repair statistics and of downtime (counted, so the output can say how many).

A failure that starts while an earlier outage of the same node (with a recorded end) is still
running is part of that outage, not a new one: the outage's end is the later of the two ends and
``interruptions`` counts both.

Repair hours = min(end, window end) - start; ``resolved`` is True when the end is at or before the
window end (a later end is right-censored at the window end, as in any survival analysis).

Downtime is only what is known: the windows [start, min(end, window end)) of outages with a
recorded end. Uptime exposure (:func:`uptime_intervals`) removes those windows from the service
intervals, so MTBF = uptime / failures (the reliability-engineering definition: MIL-HDBK-338B
5.3; O'Connor & Kleyner, *Practical Reliability Engineering*, 2012, 2.6). With no recorded ends the
uptime and calendar exposures are identical. Availability = uptime / (uptime + downtime): the
share of the time a node was meant to serve (in service, or out for a repair) that it was up.
"""

from __future__ import annotations

from datetime import datetime, timedelta

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


def _inventory_ends(starts: pl.DataFrame, inventory: pl.DataFrame, gap_tolerance: timedelta) -> pl.DataFrame:
    """Per interruption (``_row``): the start of the node's next service interval when the interval
    it was in ends at the failure (or within ``gap_tolerance`` after it).

    Two forward as-of joins by node, each the size of ``starts``: the first end at or after the
    failure (the earliest one in the tolerance, if it is in it), then the first start at or after
    that end (the node's return). Never a join on the node and a range filter, whose size is
    failures x intervals per node."""
    unit = finest_time_unit(starts.schema["timestamp_utc"], inventory.schema["in_service_to_utc"])
    service = inventory.select(
        *NODE, pl.col("in_service_from_utc", "in_service_to_utc").dt.cast_time_unit(unit)
    )
    ends = service.select(*NODE, removed_utc="in_service_to_utc").drop_nulls().sort("removed_utc")
    returns = service.select(*NODE, inventory_end_utc="in_service_from_utc").drop_nulls()
    closing = (
        starts.select("_row", *NODE, pl.col("timestamp_utc").dt.cast_time_unit(unit))
        .sort("timestamp_utc")
        .join_asof(ends, left_on="timestamp_utc", right_on="removed_utc", **_FORWARD)
        .filter(pl.col("removed_utc") <= pl.col("timestamp_utc") + gap_tolerance)
    )
    return (
        closing.sort("removed_utc")
        .join_asof(
            returns.sort("inventory_end_utc"), left_on="removed_utc", right_on="inventory_end_utc", **_FORWARD
        )
        .filter(pl.col("inventory_end_utc").is_not_null())
        .select("_row", "inventory_end_utc")
    )


def outages(
    interruptions: pl.DataFrame,
    inventory: pl.DataFrame,
    observed_until: datetime,
    *,
    gap_tolerance: timedelta = GAP_TOLERANCE,
) -> pl.DataFrame:
    """One row per outage (see the module docstring) of the interruptions up to ``observed_until``.

    ``interruptions`` needs ``cluster_id``, ``node_id``, ``timestamp_utc`` and may carry
    ``resolved_at_utc``; its other columns (category, class, any ``--by`` key) are kept from the
    outage's first interruption. Returns those columns plus ``start_utc``, ``end_utc`` (null: no
    recorded end), ``end_source`` (one of ``END_SOURCES``), ``repair_hours`` (censored at the window
    end; null for ``unknown``), ``resolved``, ``downtime_hours`` (within the window, 0 without a
    recorded end) and ``interruptions`` (how many interruptions the outage holds).
    """
    frame = interruptions.filter(pl.col("timestamp_utc") <= observed_until)
    if "resolved_at_utc" not in frame.columns:
        frame = frame.with_columns(resolved_at_utc=pl.lit(None, pl.Datetime("us")))
    frame = frame.sort(*NODE, "timestamp_utc", maintain_order=True).with_row_index("_row")
    gaps = _inventory_ends(frame.select("_row", *NODE, "timestamp_utc"), inventory, gap_tolerance)
    resolved_at = pl.col("resolved_at_utc").cast(pl.Datetime("us"))
    # the one rule of an incident's own end: a resolution at or after the failure (at it: a
    # 0-hour repair)
    recorded = resolved_at >= pl.col("timestamp_utc")
    known = (
        frame.join(gaps, on="_row", how="left")
        .with_columns(
            end_utc=pl.when(recorded)
            .then(resolved_at)
            .otherwise(pl.col("inventory_end_utc").cast(pl.Datetime("us"))),
            end_source=pl.when(recorded)
            .then(pl.lit("resolved_at"))
            .when(pl.col("inventory_end_utc").is_not_null())
            .then(pl.lit("inventory")),
        )
        # a failure before the latest recorded end of the node's earlier outages belongs to them
        .with_columns(
            _running_end=pl.col("end_utc").fill_null(pl.col("timestamp_utc")).cum_max().shift(1).over(NODE)
        )
        .with_columns(
            _outage=(
                pl.col("_running_end").is_null() | (pl.col("timestamp_utc") >= pl.col("_running_end"))
            ).cum_sum()
        )
    )
    until = pl.lit(observed_until).cast(pl.Datetime("us"))
    keep = [c for c in frame.columns if c not in ("_row", "timestamp_utc", "resolved_at_utc")]
    columns = ["_outage", *keep, "start_utc", "end_utc", "end_source", "interruptions"]
    # most outages are one interruption: their rows are kept as they are, only the others grouped
    outage = pl.col("_outage")
    alone = (outage != outage.shift(1)).fill_null(True) & (outage != outage.shift(-1)).fill_null(True)
    singles = known.filter(alone).with_columns(
        start_utc=pl.col("timestamp_utc"), interruptions=pl.lit(1, pl.UInt32)
    )
    grouped = (
        known.filter(~alone)
        .group_by("_outage", maintain_order=True)
        .agg(
            *[pl.col(c).first() for c in keep],
            start_utc=pl.col("timestamp_utc").first(),
            end_utc=pl.col("end_utc").max(),
            end_source=pl.col("end_source").sort_by("end_utc", nulls_last=False).last(),
            interruptions=pl.len(),
        )
    )
    same_node = pl.all_horizontal(pl.col(k).eq_missing(pl.col(k).shift(-1)).fill_null(False) for k in NODE)
    merged = (
        pl.concat([singles.select(columns), grouped.select(columns)])
        .sort("_outage")
        .drop("_outage")
        .with_columns(_later=same_node)
        .with_columns(
            end_source=pl.col("end_source").fill_null(
                pl.when(pl.col("_later")).then(pl.lit("unknown")).otherwise(pl.lit("open"))
            ),
            start_utc=pl.col("start_utc").cast(pl.Datetime("us")),
        )
    )
    return merged.with_columns(
        repair_hours=pl.when(pl.col("end_source") != "unknown").then(
            _hours(pl.min_horizontal(pl.col("end_utc").fill_null(until), until), pl.col("start_utc"))
        ),
        resolved=pl.col("end_utc").is_not_null() & (pl.col("end_utc") <= until),
        downtime_hours=pl.when(pl.col("end_utc").is_not_null())
        .then(_hours(pl.min_horizontal(pl.col("end_utc"), until), pl.col("start_utc")))
        .otherwise(0.0),
    ).drop("_later")


def uptime_intervals(exposure: pl.DataFrame, outages: pl.DataFrame) -> pl.DataFrame:
    """``exposure`` (:func:`pipeline.transform.exposure_intervals`) with the outage windows of
    recorded ends removed: an interval that holds a window [start, min(end, interval end)) is split
    around it, ``node_hours`` and ``gpu_hours`` recomputed per piece. ``instances`` and
    ``size_bucket`` stay the calendar ones (a cluster's size does not shrink while a node is being
    repaired). Intervals, never hourly rows; with no recorded ends the result equals ``exposure``.
    Windows that overlap (not from :func:`outages`, whose outages of a node never do) are removed
    as their union.

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
