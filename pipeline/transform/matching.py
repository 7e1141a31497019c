"""The interval rules, in DuckDB: uptime pieces, the match of failures to intervals, the left-out
reasons. The one implementation of each (issue 30 item 3): ``failcast rates`` runs these queries on
its own tables in the warehouse (:class:`pipeline.analysis.counts.FailureCounts`), and the Polars
transforms (:func:`pipeline.transform.uptime_intervals`, :func:`pipeline.transform.failures_in_service`,
:func:`pipeline.transform.failures_left_out`, so ``analyze``, ``lemons``, ``repairs`` and every
other command) run the same queries on their frames in an in-memory DuckDB (:class:`Match`).

The queries read tables of fixed names and columns, nodes numbered ``_node`` (integers: the
sorts and as-of joins compare one number, not two strings):

- ``_fc_interruptions`` (``_node``, ``_n``: the failure's number, ``timestamp_utc``);
- ``_fc_intervals`` (``_interval``: the interval's number, ``_node``, ``start_utc``, ``end_utc``);
- ``_fc_downtime`` (``_node``, ``out_from``, ``out_to``): the outages' known downtime.

Rules (the closed-interval rule in :mod:`pipeline.transform.fleet`'s docstring):

1. uptime pieces (:data:`UPTIME_PIECES`): the gaps between a node's downtime windows (of positive
   length, merged where they overlap or touch) are its up segments; each piece is an interval
   clipped to one segment it meets. A piece may be one instant (an interval that starts when an
   outage starts, or ends when one ends): a failure at that instant is in service and counts
   (its node was up then), with 0 h behind it;
2. the match (:data:`MATCHED`), with ``period_at``, the instant whose calendar period a failure
   counts in (its own, or one microsecond before when it ends its piece: at a period boundary it
   counts in the period it ends): a failure counts in the earliest piece of its node (in the order
   start, interval number) whose closed span holds it;
3. left out (:data:`LEFT_OUT`), in this order: before the window start, after its end, node with
   no piece, node out of service.

Every match is an as-of join by node, whose size is the output: never a join on the node with a
range filter, which grows as failures x intervals per node (issue 27).
"""

from __future__ import annotations

from contextlib import ExitStack
from datetime import datetime

import polars as pl

from pipeline import warehouse

# the gaps between a node's downtime windows (of positive length, merged where they overlap or
# touch: a running maximum of their ends) are its up segments, numbered in (node, time) order;
# the first before its first window and the last after its last one are unbounded (-infinity,
# infinity). An interval [s, e] meets the segments from the first ending at or after s to the
# last starting at or before e (two as-of joins); each piece is the interval clipped to one of
# them, kept when it is not empty (one instant is a piece: an interval starting as an outage
# starts). Output-sized: never intervals x outages per node
UPTIME_PIECES = """
CREATE OR REPLACE TEMP TABLE _fc_pieces AS
WITH w AS (
    SELECT _node, out_from, out_to, max(out_to) OVER (
        PARTITION BY _node ORDER BY out_from, out_to ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    ) AS _before
    FROM _fc_downtime WHERE out_to > out_from
), segments AS (
    SELECT _node, coalesce(_before, '-infinity'::TIMESTAMP) AS seg_from, out_from AS seg_to
    FROM w WHERE _before IS NULL OR out_from > _before
    UNION ALL
    SELECT _node, max(out_to), 'infinity'::TIMESTAMP FROM w GROUP BY _node
), numbered AS (
    SELECT *, row_number() OVER (ORDER BY _node, seg_to) AS _g FROM segments
), bounds AS (
    SELECT x._interval, x._node, x.start_utc, x.end_utc, f._g AS _first, l._g AS _last
    FROM _fc_intervals x
    ASOF LEFT JOIN numbered f ON f._node = x._node AND f.seg_to >= x.start_utc
    ASOF LEFT JOIN numbered l ON l._node = x._node AND l.seg_from <= x.end_utc
)
SELECT _interval, _node, start_utc, end_utc FROM bounds WHERE _first IS NULL
UNION ALL
SELECT b._interval, b._node, greatest(b.start_utc, g.seg_from), least(b.end_utc, g.seg_to)
FROM (SELECT *, unnest(range(_first, _last + 1)) AS _g FROM bounds WHERE _last >= _first) b
JOIN numbered g USING (_g)
WHERE least(b.end_utc, g.seg_to) >= greatest(b.start_utc, g.seg_from)
"""

# True when the rule changed nothing: every interval is its own one piece (no downtime inside any
# service interval, as in an availability trace, where a node is out of service while it is down).
# Callers then keep the intervals themselves: no copy of the exposure, and one match, not two
PIECES_ARE_INTERVALS = """
SELECT (SELECT count(*) FROM _fc_pieces) = (SELECT count(*) FROM _fc_intervals) AND NOT EXISTS (
    SELECT 1 FROM _fc_pieces p JOIN _fc_intervals x USING (_interval)
    WHERE p.start_utc <> x.start_utc OR p.end_utc <> x.end_utc
)
"""

CALENDAR_PIECES = """
CREATE OR REPLACE TEMP TABLE _fc_pieces AS
SELECT _interval, _node, start_utc, end_utc FROM _fc_intervals
"""

# in the order (start, _interval) within a node, the first piece whose closed span holds t is the
# first ending at or after t, if it starts at or before t. Such a piece ends after every piece
# before it, so only those "record" pieces are searched; their ends strictly increase within a
# node, so the as-of match is unique. Right for touching pieces ([a, b] and [b, c]: t = b counts
# in the first) and overlapping ones (a dirty inventory). Of pieces of one interval, the order is
# their start (a piece's _interval is its interval's)
MATCHED = """
CREATE OR REPLACE TEMP TABLE _fc_matched AS
WITH records AS (
    SELECT * FROM (
        SELECT _node, _interval, start_utc, end_utc, max(end_utc) OVER (
            PARTITION BY _node ORDER BY start_utc, _interval ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
        ) AS _before
        FROM _fc_pieces
    ) WHERE _before IS NULL OR end_utc > _before
)
SELECT i._node, i._n, i.timestamp_utc, r._interval, r.start_utc, r.end_utc,
    -- the instant whose calendar period the failure counts in (--period, rates by month): one
    -- that ends its piece at a period boundary counts in the period it ends
    CASE WHEN i.timestamp_utc = r.end_utc THEN i.timestamp_utc - INTERVAL 1 MICROSECOND
         ELSE i.timestamp_utc END AS period_at
FROM _fc_interruptions i ASOF JOIN records r ON r._node = i._node AND r.end_utc >= i.timestamp_utc
WHERE r.start_utc <= i.timestamp_utc
"""

# the reasons' numbers: -1 before the window start, 0 after its end, 1 no piece, 2 out of service
LEFT_OUT = """
SELECT CASE WHEN i.timestamp_utc < $since THEN -1 WHEN i.timestamp_utc > $until THEN 0
        WHEN n._node IS NULL THEN 1 ELSE 2 END AS reason,
    count(*) AS failures
FROM _fc_interruptions i
LEFT JOIN (SELECT DISTINCT _node FROM _fc_pieces) n USING (_node)
ANTI JOIN _fc_matched m USING (_node, _n)
GROUP BY reason
"""

LEFT_OUT_REASONS = (
    "after the window end (--until)",
    "node has no service interval in the window",
    "node out of service",
)
BEFORE_WINDOW_REASON = "before the window start (--since)"
CHOSEN_REASONS = (BEFORE_WINDOW_REASON, LEFT_OUT_REASONS[0])
"""The reasons the user chose with the window (``--since``, ``--until``): said, never warned of."""


def left_out_reasons(observed_since: datetime | None) -> tuple[str, ...]:
    """The reasons of :func:`left_out_table`, in order: ``BEFORE_WINDOW_REASON`` first when the
    window has a start (without one no failure can be before it, and the tables stay as they were)."""
    return LEFT_OUT_REASONS if observed_since is None else (BEFORE_WINDOW_REASON, *LEFT_OUT_REASONS)


def left_out_table(con, observed_until: datetime, observed_since: datetime | None = None) -> pl.DataFrame:
    """:data:`LEFT_OUT` on ``con``'s tables (after :data:`MATCHED`): one row per reason of
    :func:`left_out_reasons`, ``failures`` 0 included."""
    counted = dict(con.execute(LEFT_OUT, {"since": observed_since, "until": observed_until}).fetchall())
    reasons = left_out_reasons(observed_since)
    first = -1 if observed_since is not None else 0
    return pl.DataFrame(
        {"reason": reasons, "failures": [counted.get(i, 0) for i in range(first, first + len(reasons))]},
        schema={"reason": pl.String, "failures": pl.Int64},
    )


NODE = ("cluster_id", "node_id")
_NODES = """
CREATE TEMP TABLE _fc_nodes AS
SELECT cluster_id, node_id, row_number() OVER () AS _node FROM ({keys})
"""
# a frame registered as _m{name} becomes the table {name} with its node's number
_TABLE = """
CREATE TEMP TABLE {name} AS
SELECT n._node, t.* EXCLUDE (cluster_id, node_id)
FROM _m{name} t LEFT JOIN _fc_nodes n USING (cluster_id, node_id)
"""
_KEYS_OF = "SELECT cluster_id, node_id FROM _m{name}"
# the caller's tables (literal SQL of its own, never user text): Match on a connection that holds them
_NODES_OF = "CREATE TEMP TABLE _fc_nodes AS SELECT cluster_id, node_id, _node FROM {nodes}"
_DOWNTIME_OF = "CREATE TEMP TABLE _fc_downtime AS SELECT _node, out_from, out_to FROM {downtime}"
_DROP = "DROP TABLE IF EXISTS {name}"
_TABLES = ("_fc_nodes", "_fc_intervals", "_fc_interruptions", "_fc_downtime", "_fc_pieces", "_fc_matched")


class Match:
    """The rules of the module docstring run on Polars frames, in an in-memory DuckDB (the frames
    are scanned where they are): ``intervals`` (``cluster_id``, ``node_id``, ``start_utc``,
    ``end_utc``; row i is interval i) and, for :meth:`pieces`, the ``downtime`` windows
    (``cluster_id``, ``node_id``, ``out_from``, ``out_to``); for :meth:`matched` and
    :meth:`left_out`, the ``failures`` (``cluster_id``, ``node_id``, ``timestamp_utc``; row i is
    failure i) are matched to the pieces (the intervals themselves without ``downtime``). A
    context manager: the connection closes at its end.

    On the caller's connection ``con`` (its tables are dropped at the end), ``nodes`` may name a
    table there that numbers every node of ``intervals`` (``cluster_id``, ``node_id``, ``_node``),
    and ``downtime`` be literal SQL of a relation there with ``_node``, ``out_from``, ``out_to``:
    windows already in DuckDB (the outages of :func:`pipeline.analysis.downtime.outage_table`) are
    then neither read into Polars nor joined on the node's names again."""

    def __init__(
        self,
        intervals: pl.DataFrame,
        *,
        failures: pl.DataFrame | None = None,
        downtime: pl.DataFrame | str | None = None,
        con=None,
        nodes: str | None = None,
    ) -> None:
        if (con is None or nodes is None) and isinstance(downtime, str):
            raise ValueError("downtime as SQL needs the connection it is on and its nodes' numbers")
        self._space = ExitStack()
        if con is None:  # the warehouse's cap, spilling past it; no progress bar
            con = self._space.enter_context(warehouse.computing())
        else:
            self._space.callback(self._drop)
        self.con = con
        frames = {"_fc_intervals": intervals.select(*NODE, "start_utc", "end_utc")}
        frames["_fc_intervals"] = frames["_fc_intervals"].with_row_index("_interval")
        if failures is not None:
            frames["_fc_interruptions"] = failures.select(*NODE, "timestamp_utc").with_row_index("_n")
        if isinstance(downtime, pl.DataFrame):
            frames["_fc_downtime"] = downtime.select(*NODE, "out_from", "out_to")
        for name, frame in frames.items():
            warehouse.register(con, f"_m{name}", frame)
        if nodes is None:
            con.execute(_NODES.format(keys=" UNION ".join(_KEYS_OF.format(name=name) for name in frames)))
        else:
            con.execute(_NODES_OF.format(nodes=nodes))
        for name in frames:
            con.execute(_TABLE.format(name=name))
            con.unregister(f"_m{name}")
        if isinstance(downtime, str):
            con.execute(_DOWNTIME_OF.format(downtime=downtime))
        con.execute(CALENDAR_PIECES if downtime is None else UPTIME_PIECES)
        if failures is not None:
            con.execute(MATCHED)

    def _drop(self) -> None:
        for name in _TABLES:
            self.con.execute(_DROP.format(name=name))

    def pieces(self) -> pl.DataFrame:
        """``_interval``, ``start_utc``, ``end_utc`` of every piece, in (interval, start) order."""
        return warehouse.frame(
            self.con.sql("SELECT _interval, start_utc, end_utc FROM _fc_pieces ORDER BY _interval, start_utc")
        )

    def pieces_are_intervals(self) -> bool:
        """True when every interval is its own one piece (:data:`PIECES_ARE_INTERVALS`)."""
        return bool(self.con.execute(PIECES_ARE_INTERVALS).fetchall()[0][0])

    def matched(self) -> pl.DataFrame:
        """``_n`` (the failure's row), ``_interval`` (its interval's row) and ``period_at`` (the
        instant whose calendar period it counts in) of every failure that counts, in the failures'
        order."""
        return warehouse.frame(self.con.sql("SELECT _n, _interval, period_at FROM _fc_matched ORDER BY _n"))

    def left_out(self, observed_until: datetime, observed_since: datetime | None = None) -> pl.DataFrame:
        """:func:`left_out_table` of the failures."""
        return left_out_table(self.con, observed_until, observed_since)

    def close(self) -> None:
        self._space.close()

    def __enter__(self) -> Match:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
