"""Node interruptions, times between failures and failures on the operating clock.

A node's faults within ``INTERRUPTION_WINDOW_MINUTES`` are one interruption, by its root cause
(collapsed inside DuckDB, :func:`pipeline.analysis.counts.node_interruptions`, with this module's
:func:`chained_starts`); times between failures are the gaps between a node's (or a
cluster's) interruptions in service (:func:`times_between_failures`, same interval rule as the
rates, :func:`pipeline.transform.fleet.in_service`). Trend tests run on each cluster's operating
clock (node-hours accrued, :func:`failure_operating_times`), so a cluster that grows is not read as
a rising rate.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from pipeline.transform.fleet import failures_in_service

INTERRUPTION_WINDOW_MINUTES = 30.0


def chained_starts(t: np.ndarray, run_starts: np.ndarray, window: int) -> np.ndarray:
    """The interruptions' first incidents, given each incident's time ``t`` (integers, sorted
    within each node) and ``run_starts``: True where a run of incidents closer than ``window``
    (in ``t``'s unit) begins, a node's first incident included. A run no longer than the window is
    one interruption; within a longer run the starts are the chain i -> next(i), next(i) being the
    first incident later than t(i) + window.

    Both steps are vectorised so a node logging a fault every few minutes for weeks costs
    log(run length) array passes, not one pass per interruption: next() by bisection of all rows
    at once, the chain by pointer doubling (mark next^(2^k) of the marked rows, then square next,
    until nothing new is marked). NumPy only, so the DuckDB count (:mod:`pipeline.analysis.counts`)
    chains its runs with the same code.
    """
    starts = np.array(run_starts, dtype=bool)
    if not starts.size:
        return starts
    firsts = np.flatnonzero(starts)
    lengths = np.diff(np.append(firsts, t.size))
    last = firsts + lengths - 1
    in_long = np.repeat(t[last] - t[firsts] > window, lengths)
    if not in_long.any():
        return starts
    long_rows = np.flatnonzero(in_long)
    t = t[long_rows]
    late_after = t + window
    is_first = starts[long_rows]
    rows = np.arange(t.size)
    run_end = np.maximum.accumulate(np.where(is_first, rows, 0)) + np.repeat(
        lengths[in_long[firsts]], lengths[in_long[firsts]]
    )
    low, high = rows + 1, run_end
    while (active := low < high).any():
        mid = (low + high) // 2
        late = t[np.minimum(mid, t.size - 1)] > late_after
        high = np.where(active & late, mid, high)
        low = np.where(active & ~late, mid + 1, low)
    # a window reaching its run's end jumps to the next run's first row (a start anyway); t.size is
    # past the last run and maps to itself
    jump = np.append(low, t.size)
    marked = np.append(is_first, False)
    while True:
        reached = marked.copy()
        reached[jump[marked]] = True
        reached[-1] = False
        if (reached == marked).all():
            break
        marked, jump = reached, jump[jump]
    starts[long_rows] = marked[:-1]
    return starts


FIRST_GAP_CHOICES = ("drop", "keep")


def times_between_failures(
    incidents: pl.DataFrame,
    exposure: pl.DataFrame,
    *,
    level: str = "node",
    first_gap: str = "drop",
    in_service: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Durations (hours) between successive interrupting failures, right-censored at the end of
    each service interval (node level) or of the cluster's observed window (cluster level).

    ``first_gap`` decides what to do with the span from a window's start to its first failure
    (or to its end when it has none). That span is a full time-between-failures only if the node
    was as good as new at the window start. When observation starts on a node already running
    (logs begin after installation, or the stationary renewal of ``pipeline.sample``), it is a
    *forward-recurrence* time, longer-tailed than a real gap: keeping it biases the Weibull
    shape up towards 1 and the MTBF up (2245 h for a true 2000 h on the sample fleet). "drop"
    (default) fits only the gaps that start at a failure, which is exact for any renewal
    process whatever the age at window start (the process after a failure is independent of its
    past), at the price of the windows with no failure. "keep" uses every span, right for nodes
    observed from installation.

    Only failures while the node was in service count (:func:`failures_in_service`); a failure
    at an interval's end closes that interval's last gap (the censored tail there is empty).

    Returns ``cluster_id`` (and ``node_id`` at node level), ``instances``, ``duration_hours``,
    ``observed`` (True for a failure, False for a censored tail) and ``first_gap``.
    ``in_service`` as in :func:`pipeline.transform.failure_rates` (the match of these incidents to
    these intervals, when the caller has it).
    """
    if level not in ("node", "cluster"):
        raise ValueError(f"level must be 'node' or 'cluster', not {level!r}")
    if first_gap not in FIRST_GAP_CHOICES:
        raise ValueError(f"first_gap must be one of {', '.join(FIRST_GAP_CHOICES)}, not {first_gap!r}")
    if in_service is None:
        in_service = failures_in_service(incidents, exposure, with_interval=True)
    hits = in_service.filter(pl.col("interrupting"))
    # each failure and each window's end as (window number, time): numbers, not the node's names,
    # are sorted and compared (issue 27: at 5 M failures a join on names held GBs)
    if level == "node":
        keys = ["cluster_id", "node_id"]
        windows = exposure.select(*keys, "instances", "start_utc", "end_utc")
        window_of = hits["_interval"]  # the window is the matched interval itself
    else:
        keys = ["cluster_id"]
        windows = exposure.group_by("cluster_id").agg(
            pl.col("instances").first(), pl.col("start_utc").min(), pl.col("end_utc").max()
        )
        number = windows.select("cluster_id").with_row_index("window")
        window_of = hits.select("cluster_id").join(number, on="cluster_id", maintain_order="left")["window"]
    events = pl.concat(
        [
            pl.DataFrame(
                {"window": window_of.cast(pl.UInt32), "time_utc": hits["timestamp_utc"]}
            ).with_columns(observed=pl.lit(True)),
            windows.select(time_utc="end_utc").with_row_index("window").with_columns(observed=pl.lit(False)),
        ],
        how="vertical_relaxed",
    ).sort("window", "time_utc", "observed", descending=[False, False, True])
    events = events.with_columns(start_utc=windows["start_utc"].gather(events["window"]))
    same_window = pl.col("window") == pl.col("window").shift(1)
    durations = (
        events.with_columns(previous_utc=pl.when(same_window).then(pl.col("time_utc").shift(1)))
        .with_columns(
            first_gap=pl.col("previous_utc").is_null(),
            duration_hours=(
                pl.col("time_utc") - pl.col("previous_utc").fill_null(pl.col("start_utc"))
            ).dt.total_seconds(fractional=True)
            / 3600,
        )
        .filter(pl.col("observed") | (pl.col("duration_hours") > 0))
    )
    del events
    if first_gap == "drop":
        durations = durations.filter(~pl.col("first_gap"))
    named = windows.select(*keys, "instances").gather(durations["window"])
    return pl.concat([named, durations.select("duration_hours", "observed", "first_gap")], how="horizontal")


def _cumulative_exposure(starts: np.ndarray, ends: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Node-hours accrued by ``at`` over intervals [starts, ends]: a piecewise-linear clock whose
    slope is the number of nodes in service."""
    edges = np.concatenate([starts, ends])
    order = np.argsort(edges, kind="stable")
    edges = edges[order]
    active = np.cumsum(np.concatenate([np.ones_like(starts), -np.ones_like(ends)])[order])
    accrued = np.concatenate([[0.0], np.cumsum(active[:-1] * np.diff(edges))])
    return np.interp(at, edges, accrued)


def failure_operating_times(
    incidents: pl.DataFrame, exposure: pl.DataFrame, *, in_service: pl.DataFrame | None = None
) -> pl.DataFrame:
    """Each cluster's interrupting failures on its *operating* clock, the node-hours accrued
    since the cluster's first service start, with the cluster's total ``observed_node_hours``.

    Trend tests run on this clock so that nodes joining or leaving (a growing cluster) are not
    mistaken for a rising or falling failure rate. ``in_service`` as in
    :func:`times_between_failures`.
    """
    schema = {"cluster_id": pl.String, "operating_node_hours": pl.Float64, "observed_node_hours": pl.Float64}
    if in_service is None:
        in_service = failures_in_service(incidents, exposure)
    # only the columns used: these frames are as long as the failures and the intervals
    failures = (
        in_service.lazy()
        .filter("interrupting")
        .select("cluster_id", t=pl.col("timestamp_utc").dt.epoch("us") / 3.6e9)
        .collect()
    )
    windows = exposure.select(
        "cluster_id", a=pl.col("start_utc").dt.epoch("us") / 3.6e9, b=pl.col("end_utc").dt.epoch("us") / 3.6e9
    )
    frames = [pl.DataFrame(schema=schema)]
    for (cluster,), nodes in windows.group_by("cluster_id"):
        starts, ends = nodes["a"].to_numpy(), nodes["b"].to_numpy()
        at = np.sort(failures.filter(pl.col("cluster_id") == cluster)["t"].to_numpy())
        frames.append(
            pl.DataFrame(
                {
                    "cluster_id": [cluster] * at.size,
                    "operating_node_hours": _cumulative_exposure(starts, ends, at),
                    "observed_node_hours": [float((ends - starts).sum())] * at.size,
                },
                schema=schema,
            )
        )
    return pl.concat(frames).sort("cluster_id", "operating_node_hours")
