"""Node and fleet statistics: exposure, failure rates, interruptions, times between failures.

Exposure is computed from service *intervals*, never from hourly rows: a node in service from
``a`` to ``b`` contributes ``b - a`` node-hours and ``(b - a) * gpus_per_node`` GPU-hours.

Rates with exact (Garwood 1936) Poisson intervals: for k failures in exposure T at confidence
1 - alpha,

    low  = chi2.ppf(alpha/2,     2k)     / (2T)      (0 when k = 0)
    high = chi2.ppf(1 - alpha/2, 2k + 2) / (2T)

Only failures while their node was in service and observed count. When node failures cluster
(renewal with Weibull shape < 1) counts are over-dispersed and the exact interval is too narrow;
the quasi-Poisson interval (McCullagh & Nelder 1989) takes the Garwood interval of k / phi
failures in T / phi hours, phi the Pearson dispersion of per-node counts.

Category shares carry the exact Clopper–Pearson binomial interval. Trend tests run on each
cluster's operating clock (node-hours accrued), so a cluster that grows is not read as a rising
rate.

Published per-instance-hour rates (Llama 3.1, OPT-175B, MPT-7B) are the same quantity as
``rate_per_node_hour`` here: one instance is one node.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import numpy as np
import polars as pl
from scipy.stats import beta as beta_dist
from scipy.stats import chi2

EXPOSURE_KEYS = ("cluster_id", "node_id", "instance_type", "size_bucket")
PERIODS = {"day": "1d", "week": "1w", "month": "1mo"}


def observation_end(
    incidents: pl.DataFrame | pl.LazyFrame, inventory: pl.DataFrame | pl.LazyFrame
) -> datetime:
    """The end of the observed window when none is given: the latest time any input mentions.

    Takes lazy frames too (:func:`pipeline.warehouse.scan_incidents`): only the time columns are
    read, so a 10 M-row incidents table is not loaded for one maximum."""
    (last_incident,) = incidents.lazy().select(pl.col("timestamp_utc").max()).collect().row(0)
    service = inventory.lazy().select(pl.col("in_service_from_utc").max(), pl.col("in_service_to_utc").max())
    known = [t for t in (last_incident, *service.collect().row(0)) if t is not None]
    if not known:
        raise ValueError("the warehouse has no incidents and no inventory; ingest some files first")
    return max(known)


def size_bucket(instances: pl.Expr) -> pl.Expr:
    """The power of two nearest a cluster's instance count (32, 64, ... 1024)."""
    return (2 ** instances.clip(lower_bound=1).log(2).round()).cast(pl.Int64)


def exposure_estimated(inventory: pl.DataFrame) -> bool:
    """True when any service interval was inferred from the logs rather than read from a real
    inventory (the warehouse's ``estimated`` rows): every rate then carries that caveat."""
    return "estimated" in inventory.columns and bool(inventory["estimated"].fill_null(False).any())


def exposure_intervals(inventory: pl.DataFrame, observed_until: datetime) -> pl.DataFrame:
    """Service intervals clipped to the observed window, with node-hours, GPU-hours and the
    cluster's time-averaged instance count and size bucket."""
    clipped = (
        inventory.lazy()
        .with_columns(
            start_utc=pl.col("in_service_from_utc"),
            end_utc=pl.min_horizontal(
                pl.col("in_service_to_utc").fill_null(observed_until), pl.lit(observed_until)
            ),
        )
        .filter(pl.col("end_utc") > pl.col("start_utc"))
        .with_columns(
            node_hours=(pl.col("end_utc") - pl.col("start_utc")).dt.total_seconds(fractional=True) / 3600
        )
        .with_columns(gpu_hours=pl.col("node_hours") * pl.col("gpus_per_node"))
    )
    span_hours = (pl.col("end_utc").max() - pl.col("start_utc").min()).dt.total_seconds(
        fractional=True
    ) / 3600
    return (
        clipped.with_columns(instances=(pl.col("node_hours").sum() / span_hours).over("cluster_id"))
        .with_columns(size_bucket=size_bucket(pl.col("instances")))
        .select(
            "cluster_id",
            "node_id",
            "instance_type",
            "gpus_per_node",
            "start_utc",
            "end_utc",
            "node_hours",
            "gpu_hours",
            "instances",
            "size_bucket",
        )
        .collect()
    )


def poisson_interval(
    failures: np.ndarray, exposure: np.ndarray, confidence: float = 0.95, dispersion: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """Exact Garwood interval for a Poisson rate (see module docstring).

    With ``dispersion`` phi > 1 (see :func:`count_dispersion`) it is the quasi-Poisson version:
    the Garwood interval of k / phi effective failures in T / phi hours, same point estimate,
    wider interval. phi = 1 is the exact interval.
    """
    if dispersion <= 0:
        raise ValueError("dispersion must be positive")
    k = np.asarray(failures, dtype=float) / dispersion
    t = np.asarray(exposure, dtype=float) / dispersion
    alpha = 1.0 - confidence
    low = np.where(k > 0, chi2.ppf(alpha / 2, 2 * k), 0.0) / (2 * t)
    high = chi2.ppf(1 - alpha / 2, 2 * k + 2) / (2 * t)
    return low, high


def _periodic_exposure(exposure: pl.DataFrame, every: str) -> pl.DataFrame:
    """Split each interval at period boundaries: one row per (interval, period) it overlaps.

    Periods start at the calendar boundary at or before the first interval (Monday for weeks,
    the 1st for months) so exposure in a partial last period is kept.
    """
    first = exposure.select(pl.col("start_utc").min().dt.truncate(every)).item()
    periods = pl.DataFrame(
        {"period": pl.datetime_range(first, exposure["end_utc"].max(), every, eager=True, time_unit="us")}
    ).with_columns(period_end=pl.col("period").dt.offset_by(every))
    return (
        exposure.lazy()
        .join(periods.lazy(), how="cross")
        .with_columns(
            start_utc=pl.max_horizontal("start_utc", "period"),
            end_utc=pl.min_horizontal("end_utc", "period_end"),
        )
        .filter(pl.col("end_utc") > pl.col("start_utc"))
        .with_columns(
            node_hours=(pl.col("end_utc") - pl.col("start_utc")).dt.total_seconds(fractional=True) / 3600
        )
        .with_columns(gpu_hours=pl.col("node_hours") * pl.col("gpus_per_node"))
        .drop("period_end")
        .collect()
    )


def failures_in_service(incidents: pl.DataFrame, exposure: pl.DataFrame) -> pl.DataFrame:
    """Incidents that happened while their node was in service and observed, with the node's
    exposure attributes; failures outside every interval (out for repair, after ``--until``) have
    no exposure behind them and would bias rates upwards."""
    return (
        incidents.lazy()
        .join(
            exposure.lazy().select(*EXPOSURE_KEYS, "start_utc", "end_utc"),
            on=["cluster_id", "node_id"],
            how="inner",
        )
        .filter(pl.col("timestamp_utc").is_between("start_utc", "end_utc", closed="left"))
        .drop("start_utc", "end_utc")
        .collect()
    )


def failure_rates(
    incidents: pl.DataFrame,
    exposure: pl.DataFrame,
    by: Sequence[str] = ("cluster_id",),
    *,
    period: str | None = None,
    interrupting_only: bool = True,
    confidence: float = 0.95,
    dispersion: float = 1.0,
    service: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Failures, exposure and rate per node-hour and per GPU-hour, with exact intervals
    (quasi-Poisson ones with ``dispersion`` > 1, see :func:`poisson_interval`).

    ``service`` (default: ``exposure``) are the intervals that decide which failures count; with
    the uptime exposure (:func:`pipeline.transform.uptime_intervals`) pass the calendar intervals
    here, so a failure at the start of its outage counts while the hours divide by uptime.

    ``by`` may name exposure keys (cluster_id, node_id, instance_type, size_bucket) and
    ``category``; ``period`` ("day", "week", "month") adds a calendar ``period`` column.
    Category is not a property of exposure: each category's rate uses the whole exposure of
    its group, so category rates add up to the total rate; every category seen in the input
    gets a row in every group, with 0 failures where the group had none. Only failures while
    the node was in service and observed count (:func:`failures_in_service`).
    """
    unknown = [k for k in by if k not in (*EXPOSURE_KEYS, "category")]
    if unknown:
        raise ValueError(
            f"cannot group rates by {unknown}; use any of {', '.join((*EXPOSURE_KEYS, 'category'))}"
        )
    if period is not None and period not in PERIODS:
        raise ValueError(f"unknown period {period!r}; use one of {', '.join(PERIODS)}")
    exposure_keys = [k for k in by if k != "category"]
    base_exposure = exposure if service is None else service
    if period:
        exposure = _periodic_exposure(exposure, PERIODS[period])
        exposure_keys.append("period")
    keys = [*exposure_keys, *(["category"] if "category" in by else [])]

    counted = incidents.filter(pl.col("interrupting")) if interrupting_only else incidents
    events = failures_in_service(counted, base_exposure)
    if period:
        events = events.with_columns(period=pl.col("timestamp_utc").dt.truncate(PERIODS[period]))

    exposure_sums = exposure.group_by(exposure_keys or pl.lit(0).alias("_all")).agg(
        exposure_node_hours=pl.col("node_hours").sum(),
        exposure_gpu_hours=pl.col("gpu_hours").sum(),
    )
    counts = events.group_by(keys or pl.lit(0).alias("_all")).agg(failures=pl.len())
    if "category" in by:
        # every category seen in the input appears in every group (and period), with zero
        # failures where that group had none
        cats = counted.select("category").unique().sort("category")
        exposure_sums = exposure_sums.join(cats, how="cross")
    join_on = keys or ["_all"]
    rates = (
        exposure_sums.join(counts, on=join_on, how="left")
        .with_columns(pl.col("failures").fill_null(0).cast(pl.Int64))
        .drop("_all", strict=False)
        .sort(keys or "failures")
    )
    low, high = poisson_interval(
        rates["failures"].to_numpy(), rates["exposure_node_hours"].to_numpy(), confidence, dispersion
    )
    gpus = rates["exposure_gpu_hours"] / rates["exposure_node_hours"]
    return rates.select(*keys, "failures", "exposure_node_hours", "exposure_gpu_hours").with_columns(
        rate_per_node_hour=pl.col("failures") / pl.col("exposure_node_hours"),
        rate_ci_low=pl.Series(low),
        rate_ci_high=pl.Series(high),
        rate_per_gpu_hour=pl.col("failures") / pl.col("exposure_gpu_hours"),
        rate_per_gpu_hour_ci_low=pl.Series(low) / gpus,
        rate_per_gpu_hour_ci_high=pl.Series(high) / gpus,
    )


INTERRUPTION_WINDOW_MINUTES = 30.0


def node_interruptions(
    incidents: pl.DataFrame, *, window_minutes: float = INTERRUPTION_WINDOW_MINUTES
) -> pl.DataFrame:
    """Interrupting incidents of one node within ``window_minutes`` of an interruption's first
    incident, collapsed into that interruption: the first incident's row (its ``category`` is the
    root cause) plus ``categories`` (all, in time order), ``faults`` (how many) and
    ``last_fault_utc``. Non-interrupting incidents are dropped. Incidents of one node at the same
    time and category keep their input order.

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
    frame = incidents.filter(pl.col("interrupting")).sort(
        *keys, "timestamp_utc", "category", maintain_order=True
    )
    return (
        frame.with_columns(_seq=pl.Series(_interruption_starts(frame, keys, window)).cum_sum())
        .group_by("_seq", maintain_order=True)
        .agg(
            pl.all().first(),
            categories=pl.col("category"),
            faults=pl.len(),
            last_fault_utc=pl.col("timestamp_utc").max(),
        )
        .drop("_seq")
    )


def _interruption_starts(frame: pl.DataFrame, keys: list[str], window: timedelta) -> np.ndarray:
    """True at each interruption's first incident of ``frame`` (sorted by ``keys`` and time).

    A gap longer than the window always starts one; within a *run* of closer incidents whose span
    exceeds the window, the starts are the chain i -> next(i), next(i) being the first incident
    later than time(i) + window. Both steps are vectorised so a node logging a fault every few
    minutes for weeks costs log(run length) array passes, not one pass per interruption: next()
    by bisection of all rows at once, the chain by pointer doubling (mark next^(2^k) of the marked
    rows, then square next, until nothing new is marked).
    """
    time = pl.col("timestamp_utc")
    gap = time.diff().over(keys)
    runs = (
        frame.select(time, _start=gap.is_null() | (gap > window))
        .with_columns(_run=pl.col("_start").cum_sum())
        .with_columns(_long=((time.max() - time.min()).over("_run") > window).fill_null(False))
        .with_row_index("_row")
    )
    starts = runs["_start"].to_numpy(writable=True)
    long = runs.filter("_long")
    if long.is_empty():
        return starts
    unit = "ns" if frame.schema["timestamp_utc"].time_unit == "ns" else "us"  # exact in both
    t = long["timestamp_utc"].dt.cast_time_unit(unit).to_physical().to_numpy()
    late_after = t + window // timedelta(microseconds=1) * (1000 if unit == "ns" else 1)
    is_first = long["_start"].to_numpy()
    rows = np.arange(t.size)
    run_end = (
        np.maximum.accumulate(np.where(is_first, rows, 0))
        + long.select(pl.len().over("_run")).to_series().to_numpy()
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
    starts[long["_row"].to_numpy()] = marked[:-1]
    return starts


FIRST_GAP_CHOICES = ("drop", "keep")


def times_between_failures(
    incidents: pl.DataFrame, exposure: pl.DataFrame, *, level: str = "node", first_gap: str = "drop"
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

    Only failures while the node was in service count (:func:`failures_in_service`).

    Returns ``cluster_id`` (and ``node_id`` at node level), ``instances``, ``duration_hours``,
    ``observed`` (True for a failure, False for a censored tail) and ``first_gap``.
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
    failures = (
        failures_in_service(incidents.filter(pl.col("interrupting")), exposure)
        .lazy()
        .select(*keys, "timestamp_utc")
        .join(windows.lazy(), on=keys, how="inner")
        .filter(pl.col("timestamp_utc").is_between("start_utc", "end_utc", closed="left"))
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


def category_shares(
    incidents: pl.DataFrame, exposure: pl.DataFrame, by: Sequence[str] = ("cluster_id",), *, confidence=0.95
) -> pl.DataFrame:
    """Share of interrupting failures by root cause within each group, with the exact
    Clopper–Pearson interval (Clopper & Pearson 1934): for k of n,
    low = Beta.ppf(a/2; k, n - k + 1), high = Beta.ppf(1 - a/2; k + 1, n - k)."""
    rates = failure_rates(incidents, exposure, by=[*by, "category"], confidence=confidence)
    shares = rates.select(*by, "category", "failures").with_columns(
        group_failures=pl.col("failures").sum().over(list(by)) if by else pl.col("failures").sum()
    )
    k = shares["failures"].to_numpy().astype(float)
    n = shares["group_failures"].to_numpy().astype(float)
    a = 1 - confidence
    with np.errstate(invalid="ignore", divide="ignore"):
        low = np.where(k > 0, beta_dist.ppf(a / 2, k, n - k + 1), 0.0)
        high = np.where(k < n, beta_dist.ppf(1 - a / 2, k + 1, n - k), 1.0)
        share = np.where(n > 0, k / n, np.nan)
    return shares.with_columns(
        share=pl.Series(share),
        share_ci_low=pl.Series(np.where(n > 0, low, np.nan)),
        share_ci_high=pl.Series(np.where(n > 0, high, np.nan)),
    ).fill_nan(None)


def count_dispersion(incidents: pl.DataFrame, exposure: pl.DataFrame) -> float:
    """Pearson dispersion of per-node failure counts around each cluster's rate (McCullagh &
    Nelder 1989, 4.5): phi = sum (k - mu)^2 / mu / (nodes - clusters), mu = cluster rate x the
    node's hours. 1 for Poisson counts; a node renewal process with Weibull shape < 1 gives
    phi > 1 (clustered failures), shape > 1 phi < 1. Quasi-Poisson intervals scale by sqrt(phi).
    """
    nodes = failure_rates(incidents, exposure, by=["cluster_id", "node_id"]).with_columns(
        mu=pl.col("exposure_node_hours")
        * (pl.col("failures").sum() / pl.col("exposure_node_hours").sum()).over("cluster_id")
    )
    dof = nodes.height - nodes["cluster_id"].n_unique()
    nodes = nodes.filter(pl.col("mu") > 0)
    if dof <= 0 or nodes.height == 0:
        return 1.0
    return float(((nodes["failures"] - nodes["mu"]) ** 2 / nodes["mu"]).sum() / dof)


def _cumulative_exposure(starts: np.ndarray, ends: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Node-hours accrued by ``at`` over intervals [starts, ends): a piecewise-linear clock whose
    slope is the number of nodes in service."""
    edges = np.concatenate([starts, ends])
    order = np.argsort(edges, kind="stable")
    edges = edges[order]
    active = np.cumsum(np.concatenate([np.ones_like(starts), -np.ones_like(ends)])[order])
    accrued = np.concatenate([[0.0], np.cumsum(active[:-1] * np.diff(edges))])
    return np.interp(at, edges, accrued)


def failure_operating_times(incidents: pl.DataFrame, exposure: pl.DataFrame) -> pl.DataFrame:
    """Each cluster's interrupting failures on its *operating* clock, the node-hours accrued
    since the cluster's first service start, with the cluster's total ``observed_node_hours``.

    Trend tests run on this clock so that nodes joining or leaving (a growing cluster) are not
    mistaken for a rising or falling failure rate.
    """
    schema = {"cluster_id": pl.String, "operating_node_hours": pl.Float64, "observed_node_hours": pl.Float64}
    failures = failures_in_service(incidents.filter(pl.col("interrupting")), exposure).with_columns(
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
