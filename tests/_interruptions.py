"""Node interruptions of incident frames, by the one implementation of the rule.

:func:`pipeline.analysis.counts.node_interruptions` collapses the incidents of a warehouse inside
DuckDB (what ``rates``, ``analyze`` and every view count). Tests that build incident frames by hand
store them as the ``incidents`` table of an in-memory DuckDB and collapse them there, so they test
the code the commands run, not a twin of it. tests/transform/test_fleet.py holds the row-by-row
reference the rule is checked against.
"""

from __future__ import annotations

import duckdb
import polars as pl

from pipeline import transform
from pipeline.analysis import counts

_ADDED = ("categories", "faults", "last_fault_utc")


def node_interruptions(
    incidents: pl.DataFrame, *, window_minutes: float = transform.INTERRUPTION_WINDOW_MINUTES
) -> pl.DataFrame:
    """``incidents``' interrupting rows collapsed into node interruptions: each interruption is
    its first incident's row (every column of ``incidents``) plus ``categories``, ``faults`` and
    ``last_fault_utc``, in (cluster, node, time, category, input) order."""
    unit = incidents.schema["timestamp_utc"]
    added = {
        "failure_class": pl.col("category"),
        "resolved_at_utc": pl.lit(None, pl.Datetime("us")),
        "attributes": pl.lit(None, pl.String),
    }
    frame = incidents.with_columns(pl.col("timestamp_utc").dt.cast_time_unit("us")).with_columns(
        **{name: value for name, value in added.items() if name not in incidents.columns}
    )
    con = duckdb.connect()
    con.execute("CREATE TABLE incidents AS SELECT * FROM frame")  # rowid: the frame's order
    con.execute("CREATE TABLE inventory (cluster_id VARCHAR, node_id VARCHAR)")
    collapsed = counts.node_interruptions(con, window_minutes=window_minutes)
    con.close()
    # the first incident of an interruption is the first row of its (node, time, category) in
    # that order: an earlier one would be in the same interruption, and first
    key = ["cluster_id", "node_id", "timestamp_utc", "category"]
    firsts = (
        frame.filter(pl.col("interrupting").fill_null(False))
        .sort(key, maintain_order=True)
        .unique(subset=key, keep="first", maintain_order=True)
        .drop("resolved_at_utc")
    )
    result = collapsed.select(*key, "resolved_at_utc", *_ADDED).join(
        firsts, on=key, how="left", maintain_order="left"
    )
    times = [pl.col(c).dt.cast_time_unit(unit.time_unit) for c in ("timestamp_utc", "last_fault_utc")]
    if "resolved_at_utc" in incidents.columns:
        times.append(pl.col("resolved_at_utc").cast(incidents.schema["resolved_at_utc"]))
    return result.with_columns(times).select(*incidents.columns, *_ADDED)
