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
from pipeline.transform.keys import key_codes
from pipeline.transform.matching import Match

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
INTERVAL_MATCH_COLUMNS = ("_interval", "timestamp_utc", "interrupting")
"""What :func:`times_between_failures` reads of its match (``in_service``)."""


def interval_matches(incidents: pl.DataFrame, exposure: pl.DataFrame) -> pl.DataFrame:
    """The incidents in service on ``exposure`` (the one rule, :class:`pipeline.transform.Match`),
    each once, in their order, as :func:`times_between_failures` reads them
    (``INTERVAL_MATCH_COLUMNS``: the matched interval's row in ``exposure``, the time, whether it
    interrupts): not the names or the interval's attributes
    (:func:`pipeline.transform.failures_in_service`), 13 bytes a failure (issue 27)."""
    with Match(exposure, failures=incidents) as match:
        matched = match.matched()
    return pl.DataFrame(
        {"_interval": matched["_interval"]}
        | {c: incidents[c].gather(matched["_n"]) for c in INTERVAL_MATCH_COLUMNS[1:]}
    )


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
    ``in_service``: the match of these incidents to these intervals, when the caller has it
    (:func:`interval_matches`, or :func:`pipeline.transform.failures_in_service` with
    ``with_interval``); only its ``INTERVAL_MATCH_COLUMNS`` are read.
    """
    if level not in ("node", "cluster"):
        raise ValueError(f"level must be 'node' or 'cluster', not {level!r}")
    if first_gap not in FIRST_GAP_CHOICES:
        raise ValueError(f"first_gap must be one of {', '.join(FIRST_GAP_CHOICES)}, not {first_gap!r}")
    if in_service is None:
        in_service = interval_matches(incidents, exposure)
    # each failure and each window's end as (window number, time): numbers, not the node's names,
    # are sorted and compared, and only those two columns of the failures are read (issue 27: at
    # 5 M failures a join on names held GBs)
    interrupting = in_service["interrupting"]
    interval = in_service["_interval"].filter(interrupting)  # the matched interval: its node's window
    if level == "node":
        keys = ["cluster_id", "node_id"]
        windows = exposure.select(*keys, "instances", "start_utc", "end_utc")
        window_of = interval
    else:
        keys = ["cluster_id"]
        clusters = key_codes(exposure, keys).codes
        windows = (
            exposure.select(*keys, "instances", "start_utc", "end_utc")
            .with_columns(window=clusters)
            .group_by("window")
            .agg(
                pl.col("cluster_id", "instances").first(), pl.col("start_utc").min(), pl.col("end_utc").max()
            )
            .sort("window")
            .drop("window")
        )
        window_of = pl.Series(clusters).gather(interval)
    events = pl.concat(
        [
            pl.DataFrame(
                {
                    "window": window_of.cast(pl.UInt32),
                    "time_utc": in_service["timestamp_utc"].filter(interrupting),
                }
            ).with_columns(observed=pl.lit(True)),
            windows.select(time_utc="end_utc").with_row_index("window").with_columns(observed=pl.lit(False)),
        ],
        how="vertical_relaxed",
    ).sort("window", "time_utc", "observed", descending=[False, False, True])
    del interval, window_of
    same_window = pl.col("window") == pl.col("window").shift(1)
    durations = (
        events.lazy()
        .with_columns(previous_utc=pl.when(same_window).then(pl.col("time_utc").shift(1)))
        .with_columns(
            first_gap=pl.col("previous_utc").is_null(),
            duration_hours=(
                pl.col("time_utc")
                - pl.col("previous_utc").fill_null(pl.lit(windows["start_utc"]).gather(pl.col("window")))
            ).dt.total_seconds(fractional=True)
            / 3600,
        )
        .filter(pl.col("observed") | (pl.col("duration_hours") > 0))
        .filter(True if first_gap == "keep" else ~pl.col("first_gap"))
        .select("window", "duration_hours", "observed", "first_gap")
        .collect()
    )
    del events
    named = windows.select(*keys, "instances").gather(durations["window"])
    return pl.concat([named, durations.drop("window")], how="horizontal")


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
    # clusters by number (:func:`pipeline.transform.key_codes`), hours as arrays: no frame of the
    # failures' or intervals' names is joined, grouped or copied (issue 27)
    clusters, count, (cluster_of,) = key_codes(exposure, ["cluster_id"], in_service)
    hours = lambda c: (c.dt.epoch("us") / 3.6e9).to_numpy()  # noqa: E731
    interrupting = in_service["interrupting"].to_numpy()
    at, cluster_of = hours(in_service["timestamp_utc"])[interrupting], cluster_of[interrupting]
    # each cluster's intervals together, in their order, and its failures (sorted per cluster)
    windows = np.argsort(clusters, kind="stable")
    window_cuts = np.searchsorted(clusters[windows], np.arange(count + 1))
    names = exposure["cluster_id"].gather(windows[window_cuts[:-1]])
    a, b = hours(exposure["start_utc"])[windows], hours(exposure["end_utc"])[windows]
    del windows, clusters
    failures = np.argsort(cluster_of, kind="stable")
    at, cluster_of = at[failures], cluster_of[failures]
    failure_cuts = np.searchsorted(cluster_of, np.arange(count + 1))
    del failures, cluster_of
    frames = [pl.DataFrame(schema=schema)]
    # by cluster name, each cluster's times ascending: the frame is built in its sorted order, not
    # sorted as a copy
    for k in np.argsort(names.to_numpy(), kind="stable"):
        starts, ends = a[window_cuts[k] : window_cuts[k + 1]], b[window_cuts[k] : window_cuts[k + 1]]
        times = np.sort(at[failure_cuts[k] : failure_cuts[k + 1]])
        frames.append(
            pl.DataFrame(
                {
                    "operating_node_hours": np.sort(_cumulative_exposure(starts, ends, times)),
                    "observed_node_hours": np.full(times.size, float((ends - starts).sum())),
                }
            ).select(pl.lit(names[int(k)], pl.String).alias("cluster_id"), pl.all())
        )
    return pl.concat(frames)
