"""Node interruptions, times between failures and failures on the operating clock.

A node's faults within ``INTERRUPTION_WINDOW_MINUTES`` are one interruption, by its root cause
(:func:`node_interruptions`); times between failures are the gaps between a node's (or a
cluster's) interruptions in service (:func:`times_between_failures`, same interval rule as the
rates, :func:`pipeline.transform.fleet.in_service`). Trend tests run on each cluster's operating
clock (node-hours accrued, :func:`failure_operating_times`), so a cluster that grows is not read as
a rising rate.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import polars as pl

from pipeline.transform.fleet import failures_in_service

INTERRUPTION_WINDOW_MINUTES = 30.0


def node_interruptions(
    incidents: pl.DataFrame, *, window_minutes: float = INTERRUPTION_WINDOW_MINUTES
) -> pl.DataFrame:
    """Interrupting incidents of one node within ``window_minutes`` of an interruption's first
    incident, collapsed into that interruption: the first incident's row (its ``category`` is the
    root cause) plus ``categories`` (all, in time order), ``faults`` (how many) and
    ``last_fault_utc``; ``resolved_at_utc`` (when present) is the latest of its incidents', so the
    end that one source records (the Slurm event that drained the node) is kept when another
    source without ends (the kernel's Xid line) saw the failure first. Non-interrupting incidents
    are dropped. Incidents of one node at the same time and category keep their input order.

    Why: one node failure often logs several faults within minutes (XID 79, then the NCCL
    watchdog's timeout; a machine check, then the link going down). The warehouse collapses
    repeats of one fault (category and GPU); counting the different faults of one failure as
    separate failures inflates rates and adds near-zero gaps that push the Weibull shape down. The
    default 30 minutes is PyTorch's common NCCL watchdog timeout, the longest usual delay from a
    fault to its consequence; two independent failures of one node that close are rare (at a
    2 000 h MTBF and shape 0.85, about 1 gap in 1 000). The window is anchored at the first fault,
    not chained from fault to fault, so a run of echoes cannot swallow a later independent failure.
    """
    if window_minutes < 0:
        raise ValueError("window_minutes must not be negative")
    keys = ["cluster_id", "node_id"]
    window = timedelta(minutes=window_minutes)
    interrupting = incidents["interrupting"].fill_null(False).all()
    frame = incidents if interrupting else incidents.filter(pl.col("interrupting"))
    order = [*keys, "timestamp_utc", "category"]
    if not _sorted_by(frame, order):  # read_failures hands them sorted by DuckDB: no copy
        frame = frame.sort(*order, maintain_order=True)
    ends = [c for c in ("resolved_at_utc",) if c in frame.columns]
    starts = _interruption_starts(frame, keys, window)
    # one row per interruption: its first incident's row; only interruptions of several
    # incidents are grouped (a group-by over a million one-row groups was most of the cost) and
    # their aggregates joined onto their first rows (in place: no concatenation and re-sort,
    # which held three copies of the rows at once)
    alone = starts & np.append(starts[1:], True)
    sequence = pl.Series("_seq", starts.cumsum(), dtype=pl.UInt32)
    firsts = frame.with_columns(sequence).filter(pl.Series(starts))
    grouped = (
        frame.with_columns(sequence)
        .filter(pl.Series(~alone))
        .group_by("_seq", maintain_order=True)
        .agg(
            *[pl.col(c).max().alias(f"_{c}") for c in ends],
            _categories=pl.col("category"),
            _faults=pl.len(),
            _last_fault_utc=pl.col("timestamp_utc").max(),
        )
    )
    return (
        firsts.join(grouped, on="_seq", how="left", maintain_order="left")
        .with_columns(
            *[pl.coalesce(f"_{c}", c).alias(c) for c in ends],
            categories=pl.coalesce("_categories", pl.concat_list("category")),
            faults=pl.coalesce("_faults", pl.lit(1, pl.UInt32)),
            last_fault_utc=pl.coalesce("_last_fault_utc", "timestamp_utc"),
        )
        .select(*frame.columns, "categories", "faults", "last_fault_utc")
    )


def _sorted_by(frame: pl.DataFrame, columns: list[str]) -> bool:
    """True when ``frame`` is sorted by ``columns`` (ascending, nulls first as Polars sorts them):
    one pass of comparisons with the row before, no sorted copy."""
    if frame.height < 2:
        return True
    later = pl.lit(False)
    for column in reversed(columns):
        c, before = pl.col(column), pl.col(column).shift(1)
        greater = (c > before).fill_null(False) | (before.is_null() & c.is_not_null())
        later = greater | (c.eq_missing(before) & later)
    equal = pl.all_horizontal(pl.col(c).eq_missing(pl.col(c).shift(1)) for c in columns)
    return bool(frame.select((later | equal).slice(1).all()).item())


def _interruption_starts(frame: pl.DataFrame, keys: list[str], window: timedelta) -> np.ndarray:
    """True at each interruption's first incident of ``frame`` (sorted by ``keys`` and time): a
    node's first incident and every one more than ``window`` after the one before start a run of
    close incidents, and :func:`chained_starts` splits the runs longer than the window."""
    time = pl.col("timestamp_utc")
    same_node = pl.all_horizontal(pl.col(k).eq_missing(pl.col(k).shift(1)).fill_null(False) for k in keys)
    gap = pl.when(same_node).then(time.diff())
    starts = frame.select(gap.is_null() | (gap > window)).to_series().to_numpy(writable=True)
    unit = "ns" if frame.schema["timestamp_utc"].time_unit == "ns" else "us"  # exact in both
    t = frame["timestamp_utc"].dt.cast_time_unit(unit).to_physical().to_numpy()
    return chained_starts(t, starts, window // timedelta(microseconds=1) * (1000 if unit == "ns" else 1))


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
    if level == "node":
        windows = exposure.select("cluster_id", "node_id", "instances", "start_utc", "end_utc")
        keys = ["cluster_id", "node_id"]
    else:
        windows = exposure.group_by("cluster_id").agg(
            pl.col("instances").first(), pl.col("start_utc").min(), pl.col("end_utc").max()
        )
        keys = ["cluster_id"]
    windows = windows.with_row_index("window")
    join_on = [*keys, "start_utc"] if level == "node" else keys
    if in_service is None:
        in_service = failures_in_service(incidents, exposure, with_interval=True)
    failures = (
        in_service.filter(pl.col("interrupting"))
        .lazy()
        .join(windows.lazy().select("window", *join_on), on=join_on, how="inner")
        .select("window", time_utc=pl.col("timestamp_utc"), observed=pl.lit(True))
    )
    ends = windows.lazy().select("window", time_utc=pl.col("end_utc"), observed=pl.lit(False))
    durations = (
        pl.concat([failures, ends])
        .join(windows.lazy(), on="window")
        .sort("window", "time_utc", "observed", descending=[False, False, True])
        .with_columns(previous_utc=pl.col("time_utc").shift(1).over("window"))
        .with_columns(
            first_gap=pl.col("previous_utc").is_null(),
            duration_hours=(
                pl.col("time_utc") - pl.col("previous_utc").fill_null(pl.col("start_utc"))
            ).dt.total_seconds(fractional=True)
            / 3600,
        )
        .filter(pl.col("observed") | (pl.col("duration_hours") > 0))
    )
    if first_gap == "drop":
        durations = durations.filter(~pl.col("first_gap"))
    return durations.select(*keys, "instances", "duration_hours", "observed", "first_gap").collect()


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
    failures = in_service.filter(pl.col("interrupting")).with_columns(
        t=pl.col("timestamp_utc").dt.epoch("us") / 3.6e9
    )
    windows = exposure.with_columns(
        a=pl.col("start_utc").dt.epoch("us") / 3.6e9, b=pl.col("end_utc").dt.epoch("us") / 3.6e9
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
