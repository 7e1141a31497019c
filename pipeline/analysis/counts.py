"""Failure counts and exposure sums of ``failcast rates``, computed inside DuckDB.

The rates view needs counts, not rows: failures per group, node-hours per group, the failures
left out by reason. :class:`FailureCounts` computes them where the incidents are stored and hands
Polars only those aggregates (:func:`pipeline.transform.rates_from_counts` turns them into rate
tables), instead of reading the interrupting incidents into Polars and running the transforms on
rows. Every step is the only implementation of its rule: steps 1 and 2 here and in
:mod:`pipeline.analysis.downtime` (every command reads its interruptions and outages from them),
steps 3-5 in :mod:`pipeline.transform.matching`, whose queries run here on these tables and, for
the commands that need rows, on their frames (tests/test_analysis_counts.py and
tests/transform/test_interval_joins.py hold them to references on fleets with every edge case):

1. node interruptions (:func:`node_interruptions` reads them as rows: the one implementation of
   the rule, for every command): the interrupting incidents
   sorted by cluster, node, time, category and table order; a node's first incident and each
   one more than the window after the one before start a run; runs longer than the window are
   chained in NumPy (:func:`pipeline.transform.interruptions.chained_starts`, only their rows
   are updated); an interruption keeps its first incident's columns and the latest
   ``resolved_at_utc`` of its incidents;
2. outages with a recorded end (:func:`pipeline.analysis.downtime.outages`, the same query on
   these tables): the end is the interruption's own resolution, else the start of the node's next
   service interval when the one it was in ends at the failure (within ``GAP_TOLERANCE``); a
   failure before the latest end of the node's earlier outages joins them;
3. uptime pieces (:data:`pipeline.transform.matching.UPTIME_PIECES`): the calendar service
   intervals split around those outages (basis "uptime"; "calendar" keeps the intervals);
4. failures in service (:data:`pipeline.transform.matching.MATCHED`): an interruption counts in
   the earliest piece of its node whose closed span holds it;
5. counts by group, node-hours by group (split at calendar periods for ``--period``) and the
   left-out counts by reason (:data:`pipeline.transform.matching.LEFT_OUT`).

The service intervals are built here too, from the warehouse's inventory, by the rule of
:func:`pipeline.transform.exposure_intervals` (:func:`pipeline.transform.exposure.intervals_query`,
one SQL text), and node-hours are summed here by its twin of
:func:`pipeline.transform.exposure_sums` (:func:`pipeline.transform.exposure.sums_query`): exact
sums of whole microseconds, so ``rates``, ``lemons`` and ``analyze`` divide by the same hours to
the last bit in any row order (float sums, added in another order, moved the sample's lemon
p-values by 2e-7). No row of the inventory, the intervals or the failures reaches Python.

Every match of an interruption or an outage to an interval is an as-of join by node (or one
``unnest`` per interval of the periods or up segments it meets), whose size is the output; a join
on the node with a range filter grew as interruptions x intervals per node (issue 27).

Why: at 10 M incidents (3.4 M interrupting) the row frames of steps 1-4 held 3.5 GB in Polars;
DuckDB keeps them within its memory cap (spilling past it) and sorts the string keys faster.
bench/RESULTS.md, "Issue 18, rates in DuckDB (h18s)", has the numbers. Intermediate results are
temporary tables of the connection (allowed on a read-only one), dropped by :meth:`close`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import numpy as np
import polars as pl

from pipeline import transform, warehouse
from pipeline.analysis import downtime
from pipeline.transform import exposure as exposure_rules
from pipeline.transform import matching

# group keys a count may use: a literal SQL expression each (never user text in SQL)
_KEYS = {
    "cluster_id": "x.cluster_id",
    "node_id": "x.node_id",
    "instance_type": "x.instance_type",
    "size_bucket": "x.size_bucket",
    "category": "i.category",
    "failure_class": "i.failure_class",
}
KEYS = tuple(_KEYS)

_NODES = """
CREATE OR REPLACE TEMP TABLE _fc_nodes AS
SELECT cluster_id, node_id, row_number() OVER (ORDER BY cluster_id, node_id) AS _node FROM (
    SELECT DISTINCT cluster_id, node_id FROM incidents WHERE interrupting
    UNION SELECT cluster_id, node_id FROM inventory
)
"""

_FAULTS = """
CREATE OR REPLACE TEMP TABLE _fc_faults AS
WITH f AS (
    SELECT n._node, f.timestamp_utc, f.category, f.failure_class, f.resolved_at_utc{attributes},
        row_number() OVER w AS _n,
        coalesce(epoch_us(f.timestamp_utc) - epoch_us(lag(f.timestamp_utc) OVER w) > $window_us, true)
            AS _start,
        coalesce(epoch_us(lead(f.timestamp_utc) OVER w) - epoch_us(f.timestamp_utc) > $window_us, true)
            AS _ends
    FROM ({query}) f JOIN _fc_nodes n ON n.cluster_id = f.cluster_id AND n.node_id = f.node_id
    WHERE f.interrupting
    WINDOW w AS (PARTITION BY n._node ORDER BY f.timestamp_utc, f.category, f.table_row)
)
SELECT * EXCLUDE (_ends), _start AND _ends AS _alone FROM f
"""
_RUNS = "SELECT _node, _n, epoch_us(timestamp_utc), _start FROM _fc_faults ORDER BY _node, _n"
_CHAINED = "UPDATE _fc_faults f SET _start = true FROM _fc_changed c WHERE f._node = c._node AND f._n = c._n"

# an interruption is named by its node and its first incident's number _n (in time order). Most
# are one incident (_alone: a run start whose next incident is past the window; the chain only
# adds starts, so it stays alone) and are kept as they are; only the others are grouped. It keeps
# its first incident's columns (arg_min_null: that incident's value, null or not) and the latest
# resolution of its incidents; {detail} adds what read_failures returns besides (attributes,
# categories in time order, faults, the last fault's time)
_INTERRUPTIONS = """
CREATE OR REPLACE TEMP TABLE _fc_interruptions AS
SELECT _node, _n, timestamp_utc, category, failure_class, resolved_at_utc{alone}
FROM _fc_faults WHERE _alone
UNION ALL
SELECT _node, min(_n), min(timestamp_utc), arg_min_null(category, _n), arg_min_null(failure_class, _n),
    max(resolved_at_utc){grouped}
FROM (
    SELECT *, sum(_start::INTEGER) OVER (PARTITION BY _node ORDER BY _n) AS _k
    FROM _fc_faults WHERE NOT _alone
)
GROUP BY _node, _k
"""
_DETAIL_ALONE = """, attributes, [category] AS categories, 1::UINTEGER AS faults,
    timestamp_utc AS last_fault_utc"""
_DETAIL_GROUPED = """, arg_min_null(attributes, _n), list(category ORDER BY _n), count(*)::UINTEGER,
    max(timestamp_utc)"""
# read_failures' rows: one per interruption, in (cluster, node, time) order
_INTERRUPTION_ROWS = """
SELECT n.cluster_id, n.node_id, i.timestamp_utc, i.category, i.failure_class, true AS interrupting,
    i.resolved_at_utc{detail}
FROM _fc_interruptions i JOIN _fc_nodes n USING (_node)
ORDER BY i._node, i._n
"""
_DETAIL_ROWS = ", i.attributes, i.categories, i.faults, i.last_fault_utc"

# the service intervals of the window (pipeline.transform.exposure, the one implementation of the
# rule), numbered by their inventory row; {clusters}: those of some clusters only
_EXPOSURE = """
CREATE OR REPLACE TEMP TABLE _fc_exposure AS
SELECT _row AS _interval, * EXCLUDE (_row) FROM ({intervals}){clusters}
"""
_OF_CLUSTERS = " WHERE list_contains($clusters, cluster_id)"
_INTERVALS = """
CREATE OR REPLACE TEMP TABLE _fc_intervals AS
SELECT x._interval, n._node, x.start_utc, x.end_utc
FROM _fc_exposure x JOIN _fc_nodes n ON n.cluster_id = x.cluster_id AND n.node_id = x.node_id
"""

# step 2: the outages of the interruptions up to the window end (pipeline.analysis.downtime, the
# one implementation of the rule) on these tables, by node number; their recorded downtime
_DOWNTIME_OF = """
CREATE OR REPLACE TEMP TABLE _fc_downtime AS
SELECT _node, start_utc AS out_from, end_utc AS out_to FROM ({outages}) WHERE end_utc IS NOT NULL
"""
_DOWNTIME = _DOWNTIME_OF.format(
    outages=downtime.outages_query(
        "(SELECT _node, _n AS _order, timestamp_utc, resolved_at_utc FROM _fc_interruptions)",
        "(SELECT n._node, v.in_service_from_utc, v.in_service_to_utc "
        "FROM inventory v JOIN _fc_nodes n ON n.cluster_id = v.cluster_id AND n.node_id = v.node_id)",
        ["_node"],
        ["_node"],
    )
)

# templates filled with literal SQL only (the column expressions of _KEYS, the tables above)
_COUNTS = """
SELECT {columns}count(*) AS failures, count(*) FILTER (WHERE x.gpus_per_node > 0) AS gpu_node_failures
FROM _fc_matched m JOIN _fc_exposure x USING (_interval){join}{group}
"""
_INCIDENT_COLUMNS = " JOIN _fc_interruptions i USING (_node, _n)"
_VALUES = "SELECT DISTINCT {columns} FROM _fc_interruptions"
# the match's period_at: the rule of which period a failure counts in (pipeline.transform.matching)
_FAILURE_PERIOD = "date_trunc($unit, m.period_at) AS period, "
# the pieces with their interval's keys, summed by the exposure rule (pipeline.transform.exposure)
_PIECE_KEYS = """
SELECT x.cluster_id, x.node_id, x.instance_type, x.size_bucket, x.gpus_per_node, p.start_utc, p.end_utc
FROM _fc_pieces p JOIN _fc_exposure x USING (_interval)
"""
_DROP = "DROP TABLE IF EXISTS {name}"
_TEMP_TABLES = (
    "_fc_exposure",
    "_fc_nodes",
    "_fc_faults",
    "_fc_interruptions",
    "_fc_intervals",
    "_fc_downtime",
    "_fc_pieces",
    "_fc_matched",
)


def _interruption_tables(con, window_minutes: float, *, detail: bool) -> None:
    """Temporary tables ``_fc_nodes`` (a number per node) and ``_fc_interruptions`` (steps 1 of the
    module docstring) on ``con``; ``detail`` adds the columns :func:`node_interruptions` returns."""
    if window_minutes < 0:
        raise ValueError("window_minutes must not be negative")
    window = timedelta(minutes=window_minutes)
    con.execute(_NODES)
    query = _FAULTS.format(
        query=warehouse.incidents_query(con, row=True), attributes=", f.attributes" * detail
    )
    con.execute(query, {"window_us": window // timedelta(microseconds=1)})
    _chain_long_runs(con, window)
    con.execute(_INTERRUPTIONS.format(alone=_DETAIL_ALONE * detail, grouped=_DETAIL_GROUPED * detail))
    con.execute("DROP TABLE _fc_faults")


def _chain_long_runs(con, window: timedelta) -> None:
    """Split the runs of close incidents longer than the window into interruptions (step 1):
    the chain in NumPy on the times and run starts, then only the changed rows updated."""
    node, n, t, runs = con.sql(_RUNS).fetchnumpy().values()
    runs = np.asarray(runs, dtype=bool)
    starts = transform.chained_starts(np.asarray(t), runs, window // timedelta(microseconds=1))
    changed = np.flatnonzero(starts != runs)
    if changed.size:
        # a changed row is never a run's first, so it becomes a start
        rows = pl.DataFrame({"_node": np.asarray(node)[changed], "_n": np.asarray(n)[changed]})
        con.register("_fc_changed", rows)
        con.execute(_CHAINED)
        con.unregister("_fc_changed")


def node_interruptions(
    con, *, window_minutes: float = transform.INTERRUPTION_WINDOW_MINUTES, detail: bool = True
) -> pl.DataFrame:
    """The node interruptions of the warehouse behind ``con``: its interrupting incidents, a node's
    incidents within ``window_minutes`` of an interruption's first incident collapsed into that
    interruption (the rule of step 1; why, in :func:`pipeline.analysis.read_failures`). One row per
    interruption in (cluster, node, time) order: its first incident's ``cluster_id``, ``node_id``,
    ``timestamp_utc``, ``category`` (the root cause), ``failure_class``, ``interrupting`` and
    ``attributes`` (JSON text), the latest ``resolved_at_utc`` of its incidents (the end one source
    records is kept when another source without ends saw the failure first), ``categories`` (all,
    in time order), ``faults`` (how many) and ``last_fault_utc``; ``detail`` False leaves out
    ``attributes`` and the last three (the statistics never read them: at 5 M interruptions they
    are 0.15 GB of 0.4). Incidents of one node at the same time and category keep their table order.

    The one implementation of the rule: ``rates`` counts these interruptions where they are
    (:class:`FailureCounts`), ``analyze`` and the other views read them from here."""
    _interruption_tables(con, window_minutes, detail=detail)
    try:
        return warehouse.frame(con.sql(_INTERRUPTION_ROWS.format(detail=_DETAIL_ROWS * detail)))
    finally:
        for name in ("_fc_interruptions", "_fc_nodes"):
            con.execute(_DROP.format(name=name))


class FailureCounts:
    """The node interruptions of the warehouse behind ``con`` (window ``window_minutes``) matched to
    its service intervals up to ``observed_until``, from ``observed_since`` (the rule of
    :func:`pipeline.transform.exposure_intervals`, run on the warehouse's inventory; ``clusters``:
    those clusters' only), with the outages' known downtime removed for ``basis`` "uptime";
    counted by :meth:`rates` and :meth:`left_out`. No row of the inventory, the intervals or the
    failures is read into Python. Holds temporary tables on ``con`` until :meth:`close`."""

    def __init__(
        self,
        con,
        observed_until: datetime,
        *,
        window_minutes: float = transform.INTERRUPTION_WINDOW_MINUTES,
        basis: str = "uptime",
        observed_since: datetime | None = None,
        clusters: Sequence[str] | None = None,
    ) -> None:
        if basis not in transform.EXPOSURE_BASES:
            raise ValueError(
                f"unknown exposure basis {basis!r}; use one of {', '.join(transform.EXPOSURE_BASES)}"
            )
        self.con = con
        self.observed_until, self.observed_since = observed_until, observed_since
        _interruption_tables(con, window_minutes, detail=False)
        parameters = exposure_rules.window_parameters(observed_until, observed_since)
        if clusters is not None:
            parameters["clusters"] = list(clusters)
        query = _EXPOSURE.format(
            intervals=exposure_rules.intervals_query(), clusters=_OF_CLUSTERS * (clusters is not None)
        )
        con.execute(query, parameters)
        con.execute(_INTERVALS)
        # the pieces summed: the intervals themselves when the rule changed nothing (no join)
        self._pieces = "SELECT * FROM _fc_exposure"
        if basis == "uptime":
            con.execute(_DOWNTIME, downtime.query_parameters(observed_until))
            con.execute(matching.UPTIME_PIECES)
            con.execute("DROP TABLE _fc_downtime")
            if not con.execute(matching.PIECES_ARE_INTERVALS).fetchall()[0][0]:
                self._pieces = _PIECE_KEYS
        else:
            con.execute(matching.CALENDAR_PIECES)
        con.execute(matching.MATCHED)

    def rates(
        self,
        by: Sequence[str] = ("cluster_id",),
        *,
        period: str | None = None,
        dispersion: float = 1.0,
        confidence: float = 0.95,
    ) -> pl.DataFrame:
        """:func:`pipeline.transform.failure_rates` of these failures and exposure (``by`` from
        :data:`KEYS`, ``period`` from :data:`pipeline.transform.PERIODS`), counted in DuckDB."""
        if unknown := [k for k in by if k not in _KEYS]:
            raise ValueError(f"cannot count rates by {unknown} in DuckDB; use any of {', '.join(KEYS)}")
        if period is not None and period not in transform.PERIODS:
            raise ValueError(f"unknown period {period!r}; use one of {', '.join(transform.PERIODS)}")
        exposure_keys = [k for k in by if k in transform.EXPOSURE_KEYS]
        incident_keys = [k for k in by if k not in transform.EXPOSURE_KEYS]
        counted = [f"{_KEYS[k]} AS {k}, " for k in [*exposure_keys, *incident_keys]]
        sums = self._exposure_sums(exposure_keys, period)
        if period:
            counted.append(_FAILURE_PERIOD)
            exposure_keys = [*exposure_keys, "period"]
        counts = self.con.sql(
            _COUNTS.format(
                columns="".join(counted),
                join=_INCIDENT_COLUMNS * bool(incident_keys),
                group=" GROUP BY ALL" * bool(counted),
            ),
            params={"unit": period} if period else None,
        ).pl()
        values = None
        if incident_keys:
            values = self.con.sql(_VALUES.format(columns=", ".join(incident_keys))).pl()
        return transform.rates_from_counts(
            sums, counts, exposure_keys, values, confidence=confidence, dispersion=dispersion
        )

    def _exposure_sums(self, keys: list[str], period: str | None) -> pl.DataFrame:
        """Node-hours and GPU-hours of the pieces by ``keys`` (and ``period``), summed in DuckDB by
        the exposure rule (:func:`pipeline.transform.exposure.sums_query`), the twin of
        :func:`pipeline.transform.exposure_sums`: exact sums, so every command divides by the same
        hours to the last bit (the lemon test turns a last-bit difference in a node's hours into
        1e-7 in its p-values)."""
        return self.con.sql(exposure_rules.sums_query(self._pieces, keys, period)).pl()

    def left_out(self) -> pl.DataFrame:
        """:func:`pipeline.transform.failures_left_out` of these failures: one row per reason."""
        return matching.left_out_table(self.con, self.observed_until, self.observed_since)

    def close(self) -> None:
        """Drop the temporary tables (the connection stays open)."""
        for name in _TEMP_TABLES:
            self.con.execute(_DROP.format(name=name))
