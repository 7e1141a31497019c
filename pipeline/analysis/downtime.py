"""Outages: node interruptions with their end, in DuckDB (the one implementation of the rule).

An *outage* is an interruption (:func:`pipeline.analysis.counts.node_interruptions`) together with
the moment its node was back. The end comes from, in this order:

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
running is part of that outage, not a new one: the outage's end is the later of the two ends (its
source that of the first interruption with that end) and ``interruptions`` counts both.

Repair hours = min(end, window end) - start; ``resolved`` is True when the end is at or before the
window end (a later end is right-censored at the window end, as in any survival analysis).
Downtime is the window [start, min(end, window end)) of an outage with a recorded end; uptime
exposure (:func:`pipeline.transform.uptime_intervals`) removes those windows from the service
intervals, so MTBF = uptime / failures (MIL-HDBK-338B 5.3; O'Connor & Kleyner, *Practical
Reliability Engineering*, 2012, 2.6).

Why in DuckDB: ``failcast rates`` counts in DuckDB (:class:`pipeline.analysis.counts.FailureCounts`
finds its downtime with :data:`OUTAGES` on its own tables) and ``analyze``, ``repairs`` and the
other views get the rows of the same query from :func:`outages`. Every match of a failure to an
inventory row is an as-of join by node, whose size is the failures (issue 27).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import polars as pl

from pipeline import warehouse
from pipeline.transform import GAP_TOLERANCE

# {source}: the interruptions (node keys, timestamp_utc, resolved_at_utc, _order: their order
# among equal times, any kept columns); {service}: the inventory (node keys, in_service_from_utc,
# in_service_to_utc). Node keys, kept columns and aggregates are literal SQL from this module
_HOURS = "(epoch_us({end}) - epoch_us({start}))::DOUBLE / 1000000 / 3600"
OUTAGES = """
WITH frame AS (
    SELECT *, row_number() OVER (ORDER BY {keys}, timestamp_utc, _order) AS _row
    FROM {source} WHERE timestamp_utc <= $until
), removals AS (
    SELECT {keys}, in_service_to_utc AS removed_utc FROM {service} WHERE in_service_to_utc IS NOT NULL
), returns AS (
    SELECT {keys}, in_service_from_utc AS back_utc FROM {service} WHERE in_service_from_utc IS NOT NULL
), closing AS (
    SELECT f._row, {f_keys}, r.removed_utc
    FROM frame f ASOF JOIN removals r ON {same_r} AND r.removed_utc >= f.timestamp_utc
    WHERE r.removed_utc <= f.timestamp_utc + to_microseconds($tolerance_us)
), reopened AS (
    SELECT c._row, b.back_utc
    FROM closing c ASOF JOIN returns b ON {same_b} AND b.back_utc >= c.removed_utc
), ends AS (
    SELECT f.*,
        CASE WHEN f.resolved_at_utc >= f.timestamp_utc THEN f.resolved_at_utc ELSE r.back_utc END AS end_utc,
        CASE WHEN f.resolved_at_utc >= f.timestamp_utc THEN 'resolved_at'
            WHEN r.back_utc IS NOT NULL THEN 'inventory' END AS end_source
    FROM frame f LEFT JOIN reopened r USING (_row)
), numbered AS (
    SELECT *, sum((_running_end IS NULL OR timestamp_utc >= _running_end)::INTEGER) OVER (
        PARTITION BY {keys} ORDER BY _row
    ) AS _k
    FROM (
        SELECT *, max(coalesce(end_utc, timestamp_utc)) OVER (
            PARTITION BY {keys} ORDER BY _row ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
        ) AS _running_end
        FROM ends
    )
), grouped AS (
    SELECT {keys}, _k, min(_row) AS _first, min(timestamp_utc) AS start_utc,
        max(end_utc) AS end_utc,
        arg_max(end_source, (epoch_us(end_utc)::HUGEINT << 40) - _row) AS end_source,
        count(*)::UINTEGER AS interruptions
    FROM numbered GROUP BY {keys}, _k
), sourced AS (
    SELECT * EXCLUDE (end_source), coalesce(end_source, CASE
        WHEN lead(_k) OVER (PARTITION BY {keys} ORDER BY _k) IS NULL THEN 'open' ELSE 'unknown' END
    ) AS end_source
    FROM grouped
)
SELECT {kept}, s.start_utc, s.end_utc, s.end_source, s.interruptions,
    CASE WHEN s.end_source <> 'unknown' THEN {repair} END AS repair_hours,
    coalesce(s.end_utc <= $until, false) AS resolved,
    ({downtime_us})::DOUBLE / 1000000 / 3600 AS downtime_hours,
    {downtime_us} AS downtime_us
FROM sourced s JOIN frame f ON f._row = s._first ORDER BY s._first
"""
_REPAIR = _HOURS.format(end="least(coalesce(s.end_utc, $until), $until)", start="s.start_utc")
# downtime in whole microseconds: sums of it are exact and independent of their order
_DOWNTIME_US = (
    "CASE WHEN s.end_utc IS NOT NULL THEN epoch_us(least(s.end_utc, $until)) - epoch_us(s.start_utc) "
    "ELSE 0 END"
)
OUTAGES = OUTAGES.replace("{repair}", _REPAIR).replace("{downtime_us}", _DOWNTIME_US)


_NODE_NUMBERS = """
CREATE OR REPLACE TEMP TABLE _fo_nodes AS
SELECT cluster_id, node_id, row_number() OVER (ORDER BY cluster_id, node_id) AS _node FROM (
    SELECT cluster_id, node_id FROM _fo_interruptions UNION SELECT cluster_id, node_id FROM _fo_service
)
"""
_NUMBERED = """(
    SELECT n._node, t.* EXCLUDE (cluster_id, node_id)
    FROM {name} t LEFT JOIN _fo_nodes n USING (cluster_id, node_id)
)"""


def outages_query(source: str, service: str, keys: Sequence[str], kept: Sequence[str]) -> str:
    """:data:`OUTAGES` over the relations ``source`` and ``service`` (literal SQL), by the node
    ``keys``; ``kept`` are the output's columns before ``start_utc``: node keys as they are, any
    other column of ``source`` from the outage's first interruption."""
    same = " AND ".join(f"{{side}}.{k} = {{other}}.{k}" for k in keys)
    return OUTAGES.format(
        keys=", ".join(keys),
        f_keys=", ".join(f"f.{k}" for k in keys),
        same_r=same.format(side="r", other="f"),
        same_b=same.format(side="b", other="c"),
        source=source,
        service=service,
        kept=", ".join(f"f.{c}" for c in kept),
    )


def query_parameters(observed_until: datetime, gap_tolerance: timedelta = GAP_TOLERANCE) -> dict:
    """The parameters of :data:`OUTAGES`: the window end (naive UTC) and the tolerance in µs."""
    return {"until": _naive_utc(observed_until), "tolerance_us": gap_tolerance // timedelta(microseconds=1)}


# the rows outages() returns, in the query's (node, start) order; downtime_us stays in DuckDB
_CREATE_OUTAGES = "CREATE OR REPLACE TEMP TABLE _fo_outages AS {query}"
_OUTAGE_ROWS = """
SELECT _order, start_utc, end_utc, end_source, interruptions, repair_hours, resolved, downtime_hours
FROM _fo_outages ORDER BY _row
"""
# what the repair statistics of an analysis read (pipeline.analysis.repairs): the outages that
# began in the window, one row per group key, repair time and resolved, with how many outages it
# stands for and the sums of their interruptions and downtime (whole microseconds). {key}: literal
# SQL of REPAIR_KEYS
_REPAIR_GROUPS = """
SELECT {key}repair_hours, resolved, count(*) AS _outages,
    sum(interruptions)::BIGINT AS interruptions, sum(downtime_us)::BIGINT AS downtime_us
FROM _fo_outages o JOIN _fo_nodes n USING (_node)
WHERE {in_window}
GROUP BY ALL ORDER BY ALL
"""
REPAIR_KEYS = {(): "", ("category",): "o._category, ", ("cluster_id",): "n.cluster_id, "}
"""The groupings of :func:`repair_groups`: the fleet's, by category (``_category``: a number per
category, the caller's), by cluster (what :func:`pipeline.analysis.repair_analysis` summarises)."""
_BEFORE_WINDOW = "SELECT count(*) FROM _fo_outages WHERE start_utc < $since"
OUTAGE_TABLE, OUTAGE_NODES = "_fo_outages", "_fo_nodes"
"""The tables of :func:`outage_table`: what :func:`pipeline.transform.uptime_intervals` removes
from the service intervals on that connection (its nodes numbered by the second)."""


@contextmanager
def outage_table(
    con,
    interruptions: pl.DataFrame,
    inventory: pl.DataFrame,
    observed_until: datetime,
    *,
    gap_tolerance: timedelta = GAP_TOLERANCE,
    columns: Sequence[str] = (),
) -> Iterator[None]:
    """While the block runs, the temporary table ``_fo_outages`` on the DuckDB connection ``con``:
    one row per outage (see the module docstring) of the interruptions up to ``observed_until``,
    with ``_node`` (its node's number in ``_fo_nodes``, which holds ``cluster_id`` and
    ``node_id``), ``_row`` (its order: node, then start), ``_order`` (the row of its first
    interruption in ``interruptions``), ``columns`` of ``interruptions`` (from its first
    interruption), then the columns :func:`outages` returns and ``downtime_us`` (the downtime in
    whole microseconds). Both tables are dropped at the end. The frames are scanned where they are
    (only the columns the query reads), not copied."""
    keys = ("cluster_id", "node_id")
    time = pl.col("timestamp_utc").dt.cast_time_unit("us")
    resolved = (
        pl.col("resolved_at_utc").cast(pl.Datetime("us"))
        if "resolved_at_utc" in interruptions.columns
        else pl.lit(None, pl.Datetime("us"))
    )
    # the columns the query reads, not a copy of every column (5 M interruptions: ~0.4 GB)
    frame = interruptions.select(*keys, time, *columns, resolved_at_utc=resolved).with_row_index("_order")
    service = inventory.select(
        *keys, pl.col("in_service_from_utc", "in_service_to_utc").dt.cast_time_unit("us")
    )
    warehouse.register(con, "_fo_interruptions", frame)
    warehouse.register(con, "_fo_service", service)
    try:
        # nodes numbered in (cluster, node) order, so the query sorts and as-of joins on one
        # integer, not two strings, and returns the outages in the same order
        con.execute(_NODE_NUMBERS)
        query = outages_query(
            _NUMBERED.format(name="_fo_interruptions"),
            _NUMBERED.format(name="_fo_service"),
            ["_node"],
            ["_node", "_row", "_order", *columns],
        )
        con.execute(_CREATE_OUTAGES.format(query=query), query_parameters(observed_until, gap_tolerance))
    finally:
        con.unregister("_fo_interruptions")
        con.unregister("_fo_service")
    try:
        yield
    finally:
        con.execute("DROP TABLE IF EXISTS _fo_outages")
        con.execute("DROP TABLE IF EXISTS _fo_nodes")


def outages(
    con,
    interruptions: pl.DataFrame,
    inventory: pl.DataFrame,
    observed_until: datetime,
    *,
    gap_tolerance: timedelta = GAP_TOLERANCE,
) -> pl.DataFrame:
    """One row per outage (see the module docstring) of the interruptions up to ``observed_until``,
    computed on the DuckDB connection ``con`` (:func:`outage_table`).

    ``interruptions`` needs ``cluster_id``, ``node_id``, ``timestamp_utc`` and may carry
    ``resolved_at_utc``; its other columns (category, class, any ``--by`` key) are kept from the
    outage's first interruption. Returns those columns plus ``start_utc``, ``end_utc`` (null: no
    recorded end), ``end_source`` (one of :data:`pipeline.transform.END_SOURCES`), ``interruptions`` (how many
    interruptions the outage holds), ``repair_hours`` (censored at the window end; null for
    ``unknown``), ``resolved`` and ``downtime_hours`` (within the window, 0 without a recorded end).
    """
    kept = [c for c in interruptions.columns if c not in ("timestamp_utc", "resolved_at_utc")]
    with outage_table(con, interruptions, inventory, observed_until, gap_tolerance=gap_tolerance):
        found = warehouse.frame(con.sql(_OUTAGE_ROWS))
    # only each outage's first interruption (its _order) comes back from DuckDB: the kept columns
    # (strings, lists) are taken from the frame where they are, never copied through DuckDB and Arrow
    first = interruptions.select(kept).gather(found["_order"])
    return pl.concat([first, found.drop("_order")], how="horizontal")


def _naive_utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo is not None else moment


def repair_groups(
    con, observed_since: datetime | None = None
) -> tuple[dict[tuple[str, ...], pl.DataFrame], int]:
    """What the repair statistics of an analysis read of the outages of :func:`outage_table` (kept
    column ``_category``: a number per category, decoded by the caller), and how many began
    before ``observed_since`` (0 without one).

    The groups, for each key tuple of :data:`REPAIR_KEYS`: the outages that began in the window
    (not before ``observed_since``), one row per key value, ``repair_hours`` and ``resolved``, with
    ``_outages`` (how many outages the row stands for), ``interruptions`` and ``downtime_us``
    (their sums). Repair times repeat (records in whole seconds or minutes): a row per distinct
    time and group, not one per outage (issue 27: 5 M outages at 10 M availability rows), and
    every count, sum and Kaplan–Meier fit of :func:`pipeline.analysis.repair_summary` is the same
    on them (a weight per time)."""
    in_window, params = "true", None
    if observed_since is not None:
        in_window, params = "start_utc >= $since", {"since": _naive_utc(observed_since)}
    groups = {
        keys: warehouse.frame(con.sql(_REPAIR_GROUPS.format(key=key, in_window=in_window), params=params))
        for keys, key in REPAIR_KEYS.items()
    }
    before = 0 if params is None else con.execute(_BEFORE_WINDOW, params).fetchall()[0][0]
    return groups, before
