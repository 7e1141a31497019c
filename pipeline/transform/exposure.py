"""Exposure in DuckDB: the service intervals of a window, and their node-hours summed exactly.

The one implementation of each rule, as :mod:`.matching` is for the interval match:
``failcast rates`` runs these queries on the warehouse's inventory
(:class:`pipeline.analysis.counts.FailureCounts`: no interval row reaches Python), and
:func:`pipeline.transform.exposure_intervals` runs the same query on a Polars frame in an in-memory
DuckDB (``analyze`` and every command that needs the intervals as rows).

Rules:

1. the service intervals (:func:`intervals_query`): each inventory row clipped to the window
   ``[since, until]`` (an open interval ends at ``until``), kept when it is not empty; its
   node-hours, GPU-hours, and its cluster's time-averaged instance count (the cluster's node-hours
   over the span from its first interval start to its last end) and size bucket (the power of
   two nearest it);
2. node-hours and GPU-hours summed by group (:func:`sums_query`, optionally split at calendar
   periods).

**Exact sums.** A duration is a whole number of microseconds; durations are summed as integers
(DuckDB ``sum(BIGINT)`` is a HUGEINT, Polars sums Int128: no overflow short of 5e24 node-years;
Int64 would overflow past 292,000 node-years, or 36,500 of 8-GPU nodes in GPU-hours) and
turned into hours once per group by :func:`hours_sql` / :func:`hours`, the same IEEE operations in
both engines: whole hours plus the remainder's fraction,
``(us // 3600e6)::DOUBLE + (us % 3600e6)::DOUBLE / 3600e6``, each step exact or correctly
rounded. So a sum does not depend on the order of its rows (float sums did: Polars' threaded
group-by moved the lemon dispersion by 1e-8 when the input rows were shuffled, and DuckDB's sums,
added in another order, moved lemon p-values by 2e-7, issue 30), and DuckDB and Polars
(:func:`pipeline.transform.exposure_sums`, tested equal on random fleets) give the same hours to
the last bit.
"""

from __future__ import annotations

from datetime import datetime

import polars as pl

from pipeline import warehouse

US_PER_HOUR = 3_600_000_000
INTERVAL_COLUMNS = (
    "cluster_id",
    "node_id",
    "instance_type",
    "gpus_per_node",
    "in_service_from_utc",
    "in_service_to_utc",
)
"""The inventory's columns the service intervals read."""


def hours_sql(micros: str) -> str:
    """SQL: the hours of an integer count of microseconds ``micros`` (see the module docstring)."""
    return f"((({micros}) // {US_PER_HOUR})::DOUBLE + (({micros}) % {US_PER_HOUR})::DOUBLE / {US_PER_HOUR})"


def hours(frame: pl.DataFrame, micros: str) -> pl.Series:
    """Polars: :func:`hours_sql` of ``frame``'s integer column ``micros``, the same operations, so
    the same bits. The division runs in NumPy, IEEE's correctly rounded one as in DuckDB: Polars
    multiplies by the reciprocal of a scalar divisor, a last bit off (5 us: 0x1.7dc65dee09bce-30
    h against 0x1.7dc65dee09bcf-30)."""
    parts = frame.select(
        whole=(pl.col(micros) // US_PER_HOUR).cast(pl.Float64),
        rest=(pl.col(micros) % US_PER_HOUR).cast(pl.Float64),
    )
    return pl.Series(parts["whole"].to_numpy() + parts["rest"].to_numpy() / US_PER_HOUR, dtype=pl.Float64)


def micros(end: pl.Expr, start: pl.Expr) -> pl.Expr:
    """Polars: ``end - start`` in whole microseconds, as Int128 (sums of them do not overflow)."""
    return (end - start).dt.total_microseconds().cast(pl.Int128)


# rule 1 on a relation with _row (its order), cluster_id, gpus_per_node, in_service_from_utc,
# in_service_to_utc and any other columns, passed through; $until, $since (NULL: none)
_CLIPPED = """
SELECT * EXCLUDE (in_service_from_utc, in_service_to_utc),
    CASE WHEN $since IS NULL OR in_service_from_utc >= $since THEN in_service_from_utc
         ELSE $since END AS start_utc,
    CASE WHEN in_service_to_utc IS NULL OR in_service_to_utc > $until THEN $until
         ELSE in_service_to_utc END AS end_utc
FROM {inventory}
"""
_SPAN_US = "epoch_us(max(end_utc)) - epoch_us(min(start_utc))"
_INTERVALS = f"""
WITH kept AS (
    SELECT *, epoch_us(end_utc) - epoch_us(start_utc) AS _us
    FROM ({_CLIPPED}) WHERE end_utc > start_utc
), clusters AS (
    SELECT cluster_id, {hours_sql("sum(_us)")} / {hours_sql(_SPAN_US)} AS instances
    FROM kept GROUP BY cluster_id
)
SELECT k.* EXCLUDE (_us), {hours_sql("k._us")} AS node_hours, node_hours * k.gpus_per_node AS gpu_hours,
    c.instances, CAST(2 ** round(log2(greatest(c.instances, 1))) AS BIGINT) AS size_bucket
FROM kept k JOIN clusters c USING (cluster_id)
"""  # noqa: S608 - literal SQL only
_SERVICE = "SELECT count(*) > 0 FROM ({clipped}) WHERE end_utc > start_utc"
_WAREHOUSE_INVENTORY = f"(SELECT rowid AS _row, {', '.join(INTERVAL_COLUMNS)} FROM inventory)"  # noqa: S608
_FRAME_INVENTORY = "_fc_inventory"
# what the frame's rows get from DuckDB: the numbers, in the inventory's order (the names stay in
# Polars, gathered by _row: no string crosses into DuckDB and back)
_FRAME_INTERVALS = """
SELECT _row, start_utc, end_utc, node_hours, gpu_hours, instances, size_bucket
FROM ({intervals}) ORDER BY _row
"""


def intervals_query(inventory: str = _WAREHOUSE_INVENTORY) -> str:
    """Rule 1 as SQL on ``inventory`` (a literal relation: the warehouse's table by default),
    parameters ``until`` and ``since`` (:func:`window_parameters`): the interval's columns,
    ``start_utc``, ``end_utc``, ``node_hours``, ``gpu_hours``, ``instances``, ``size_bucket`` and
    ``_row``, the interval's inventory row (its rowid in the warehouse), in no order."""
    return _INTERVALS.format(inventory=inventory)


def window_parameters(observed_until: datetime, observed_since: datetime | None) -> dict:
    """The parameters of :func:`intervals_query` and :func:`has_service`."""
    return {"until": observed_until, "since": observed_since}


def has_service(con, observed_until: datetime, observed_since: datetime | None = None) -> bool:
    """True when some node of the warehouse behind ``con`` was in service in the window (rule 1 keeps
    an interval): without one, no rate has hours to divide by."""
    query = _SERVICE.format(clipped=_CLIPPED.format(inventory=_WAREHOUSE_INVENTORY))
    return bool(con.execute(query, window_parameters(observed_until, observed_since)).fetchall()[0][0])


def frame_intervals(
    inventory: pl.DataFrame, observed_until: datetime, observed_since: datetime | None = None
) -> pl.DataFrame:
    """Rule 1 on a Polars frame (the columns :data:`INTERVAL_COLUMNS`), run in an in-memory DuckDB
    (:func:`pipeline.warehouse.computing`) on the cluster, GPUs and times only; the names are the
    frame's own rows, gathered; the times keep the frame's types."""
    rows = inventory.select("cluster_id", "gpus_per_node", *INTERVAL_COLUMNS[4:]).with_row_index("_row")
    with warehouse.computing() as con:
        warehouse.register(con, _FRAME_INVENTORY, rows)
        parameters = window_parameters(observed_until, observed_since)
        query = _FRAME_INTERVALS.format(intervals=intervals_query(_FRAME_INVENTORY))
        found = warehouse.frame(con.sql(query, params=parameters))
    del rows
    names = inventory.select(INTERVAL_COLUMNS[:4])
    if found.height < inventory.height:
        names = names.gather(found["_row"])
    time = inventory.schema["in_service_from_utc"]
    numbers = found.drop("_row").cast({"start_utc": time, "end_utc": time})
    return pl.concat([names, numbers], how="horizontal")


# rule 2 on a relation of pieces with start_utc, end_utc, gpus_per_node and the group keys; the
# keys and the period's unit are literal SQL chosen by the caller (never user text). Without keys,
# one row (0 h without pieces), as Polars' group-by of a literal gives
_SUMS = """
SELECT {keys}coalesce(sum(_us), 0) AS _node_us, coalesce(sum(_us::HUGEINT * gpus_per_node), 0) AS _gpu_us
FROM (SELECT *, epoch_us(end_utc) - epoch_us(start_utc) AS _us FROM ({pieces})){group}
"""
_PERIOD_PIECES = """
SELECT * REPLACE (
    greatest(start_utc, period) AS start_utc, least(end_utc, period + INTERVAL {step}) AS end_utc
)
FROM (
    SELECT *, unnest(generate_series(date_trunc('{unit}', start_utc), end_utc, INTERVAL {step})) AS period
    FROM ({pieces})
)
WHERE least(end_utc, period + INTERVAL {step}) > greatest(start_utc, period)
"""
PERIOD_UNITS = {"day": "1 day", "week": "1 week", "month": "1 month"}
_HOURS = f"""
SELECT * EXCLUDE (_node_us, _gpu_us), {hours_sql("_node_us")} AS exposure_node_hours,
    {hours_sql("_gpu_us")} AS exposure_gpu_hours
FROM ({{sums}})
"""  # noqa: S608 - literal SQL only


def sums_query(pieces: str, keys: list[str], period: str | None = None) -> str:
    """Rule 2 as SQL: ``exposure_node_hours`` and ``exposure_gpu_hours`` of the rows of ``pieces``
    (literal SQL with ``start_utc``, ``end_utc``, ``gpus_per_node`` and the columns ``keys``) per
    group of ``keys``, and ``period`` ("day", "week", "month": each piece split at the calendar
    period's boundaries, weeks from Monday) as a ``period`` column. The twin of
    :func:`pipeline.transform.exposure_sums`, which it equals to the last bit."""
    if period is not None:
        pieces = _PERIOD_PIECES.format(pieces=pieces, unit=period, step=f"'{PERIOD_UNITS[period]}'")
        keys = [*keys, "period"]
    sums = _SUMS.format(
        keys="".join(f"{k}, " for k in keys), pieces=pieces, group=" GROUP BY ALL" * bool(keys)
    )
    return _HOURS.format(sums=sums)
