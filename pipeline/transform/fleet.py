"""Node and fleet statistics: exposure, the interval rule, failure rates, category shares.

Exposure is computed from service *intervals*, never from hourly rows: a node in service from
``a`` to ``b`` contributes ``b - a`` node-hours and ``(b - a) * gpus_per_node`` GPU-hours.

Rates with exact (Garwood 1936) Poisson intervals: for k failures in exposure T at confidence
1 - alpha,

    low  = chi2.ppf(alpha/2,     2k)     / (2T)      (0 when k = 0)
    high = chi2.ppf(1 - alpha/2, 2k + 2) / (2T)

Interval semantics (one rule, :func:`in_service`, used by rates, gaps, shares, dispersion and
trend tests at node and cluster level): a node's service interval is *closed*, ``[start, end]``,
after clipping to the observed window. A failure at ``t`` counts when ``start <= t <= end`` for
one of its node's intervals, so a failure stamped at the moment its node leaves service
(availability traces write ``in_service_to`` = failure time; a node removed for repair at its
failure) counts, and so does a failure at the window end (``--until``, by default the latest time
in the data). A failure that matches two adjacent intervals (``[a, b]`` and ``[b, c]``, ``t = b``)
counts once, in the interval it ends (the earlier one), and one held by overlapping intervals of
its node (a dirty inventory) counts once, in the one that starts first; in calendar periods, a
failure at a period boundary that ends its interval counts in the period it ends. Failures while
the node was out of service (between intervals, before its first, after its last), of nodes
with no interval in the window, before the window start or after its end are kept as incidents
but are not failures: they have no exposure behind them and would bias rates upwards.
:func:`failures_left_out` counts them by reason so every output can say how many were left out
and why. Matching is an as-of join in DuckDB (:mod:`.matching`, the one implementation of the
rule), linear in rows however long a node's history.

The quasi-Poisson interval of over-dispersed counts is in :mod:`.dispersion`; node
interruptions, times between failures and operating times in :mod:`.interruptions`.

Category shares carry the exact Clopper–Pearson binomial interval.

Published per-instance-hour rates (Llama 3.1, OPT-175B, MPT-7B) are the same quantity as
``rate_per_node_hour`` here: one instance is one node.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import numpy as np
import polars as pl
from scipy.stats import beta as beta_dist
from scipy.stats import chi2

from pipeline.transform import exposure as exposure_rules
from pipeline.transform.matching import Match

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


def exposure_intervals(
    inventory: pl.DataFrame, observed_until: datetime, observed_since: datetime | None = None
) -> pl.DataFrame:
    """Service intervals clipped to the observed window (``observed_since`` None: no start), with
    node-hours, GPU-hours and the cluster's time-averaged instance count and size bucket, in the
    inventory's order. The rule is :func:`pipeline.transform.exposure.intervals_query` (one
    implementation, in DuckDB: ``failcast rates`` runs it on the warehouse, this on the frame)."""
    return exposure_rules.frame_intervals(inventory, observed_until, observed_since)


def poisson_interval(
    failures: np.ndarray, exposure: np.ndarray, confidence: float = 0.95, dispersion: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """Exact Garwood interval for a Poisson rate (see module docstring).

    With ``dispersion`` phi > 1 (see :func:`count_dispersion`) it is the quasi-Poisson version:
    the Garwood interval of k / phi effective failures in T / phi hours, same point estimate,
    wider interval. phi = 1 is the exact interval. No hours at risk (a node down all window)
    bound nothing: (0, inf), without numpy's divide warnings on the user's terminal.
    """
    if dispersion <= 0:
        raise ValueError("dispersion must be positive")
    k = np.asarray(failures, dtype=float) / dispersion
    t = np.asarray(exposure, dtype=float) / dispersion
    alpha = 1.0 - confidence
    with np.errstate(divide="ignore", invalid="ignore"):
        low = np.where((k > 0) & (t > 0), chi2.ppf(alpha / 2, 2 * k) / (2 * t), 0.0)
        high = chi2.ppf(1 - alpha / 2, 2 * k + 2) / (2 * t)
    return low, high


def poisson_upper_bound(
    failures: np.ndarray, exposure: np.ndarray, confidence: float = 0.95, dispersion: float = 1.0
) -> np.ndarray:
    """Exact one-sided upper confidence bound of a Poisson rate: chi2.ppf(c, 2k + 2) / (2T).

    The figure to quote when no failure has been seen yet: for k = 0 it is -ln(1 - c) / T, at
    95% ``-ln 0.05 / T`` = 2.996 / T (the "rule of three"), tighter than the two-sided interval's
    upper end (-ln 0.025 / T = 3.689 / T) because with k = 0 only an upper bound is in question.
    ``dispersion`` as in :func:`poisson_interval`.
    """
    if dispersion <= 0:
        raise ValueError("dispersion must be positive")
    k = np.asarray(failures, dtype=float) / dispersion
    t = np.asarray(exposure, dtype=float) / dispersion
    with np.errstate(divide="ignore"):  # no hours at risk: no bound (inf)
        return chi2.ppf(confidence, 2 * k + 2) / (2 * t)


def _periodic_exposure(exposure: pl.DataFrame, every: str) -> pl.DataFrame:
    """Split each interval at period boundaries: one row per (interval, period) it overlaps, in
    interval order, with the piece's ``start_utc`` and ``end_utc`` (its hours are
    :func:`exposure_sums`' to compute: the interval's ``node_hours`` and ``gpu_hours`` are dropped).

    Periods are calendar ones (Monday for weeks, the 1st for months), so exposure in a partial
    last period is kept. Each interval lists only its own periods, from the one holding its start
    (never every interval crossed with every period of the window, which grows as intervals x
    periods: 300 M rows for 600 k intervals by day over 18 months).
    """
    periods = pl.datetime_ranges(
        pl.col("start_utc").dt.truncate(every), pl.col("end_utc"), every, time_unit="us"
    )
    return (
        exposure.lazy()
        .drop("node_hours", "gpu_hours", strict=False)
        .with_columns(period=periods)
        .explode("period")
        .with_columns(
            start_utc=pl.max_horizontal("start_utc", "period"),
            end_utc=pl.min_horizontal("end_utc", pl.col("period").dt.offset_by(every)),
        )
        .filter(pl.col("end_utc") > pl.col("start_utc"))
        .collect()
    )


def in_service(time: pl.Expr, start: pl.Expr, end: pl.Expr) -> pl.Expr:
    """True where ``time`` lies in the closed service interval ``[start, end]``: the one interval
    rule (module docstring). Ties between adjacent intervals are resolved by
    :func:`failures_in_service`, which keeps the earliest match."""
    return time.is_between(start, end, closed="both")


def finest_time_unit(*dtypes: pl.DataType) -> str:
    """The finest time unit of these Datetime types: times compared in it compare exactly."""
    return min((d.time_unit for d in dtypes), key=("ns", "us", "ms").index)


def failures_in_service(
    incidents: pl.DataFrame, exposure: pl.DataFrame, *, with_interval: bool = False
) -> pl.DataFrame:
    """Incidents that happened while their node was in service and observed (:func:`in_service`),
    each once, in their order, with the node's exposure attributes; ``with_interval`` keeps the
    matched interval's ``start_utc`` and ``end_utc``. An incident matching two intervals of its
    node (``t`` at the end of one and the start of the next) belongs to the one it ends; of
    overlapping intervals (a dirty inventory), to the one that starts first (the first in
    ``exposure`` among equal starts). Failures outside every interval (out for repair, after
    ``--until``) have no exposure behind them and would bias rates upwards;
    :func:`failures_left_out` counts them. The match is the one rule of
    :mod:`pipeline.transform.matching` (an as-of join in DuckDB)."""
    with Match(exposure, failures=incidents) as match:
        return in_service_rows(incidents, exposure, match.matched(), with_interval=with_interval)


def in_service_rows(
    incidents: pl.DataFrame, exposure: pl.DataFrame, matched: pl.DataFrame, *, with_interval: bool = False
) -> pl.DataFrame:
    """:func:`failures_in_service` from the match (``_n``: a row of ``incidents``, ``_interval``: a
    row of ``exposure``, in the incidents' order; :meth:`pipeline.transform.matching.Match.matched`);
    ``with_interval`` adds the interval's ``start_utc``, ``end_utc``, its row in ``exposure``
    (``_interval``: gaps take their window by number, :func:`times_between_failures`) and the
    match's ``period_at`` (the instant whose calendar period the failure counts in)."""
    attributes = exposure.select(
        *EXPOSURE_KEYS[2:],
        *(c for c in ("gpus_per_node",) if c in exposure.columns),
        *(("start_utc", "end_utc") if with_interval else ()),
    )
    rows = incidents.select(incidents.columns).gather(matched["_n"])
    period_at = matched.select("_interval", "period_at") if with_interval else pl.DataFrame()
    return pl.concat([rows, attributes.gather(matched["_interval"]), period_at], how="horizontal")


def failures_left_out(
    incidents: pl.DataFrame,
    exposure: pl.DataFrame,
    observed_until: datetime,
    *,
    observed_since: datetime | None = None,
) -> pl.DataFrame:
    """How many of ``incidents`` rates leave out, by reason (:func:`left_out_reasons`, in that
    order of precedence): before ``observed_since``; after ``observed_until``; on a node with no
    service interval in the window (not in the inventory, or only in service outside the window);
    at a time its node was out of service (a repair gap, before its first interval). One row per
    reason, ``failures`` 0 included; the counted ones are :func:`failures_in_service`. The rules
    of :mod:`pipeline.transform.matching` (:class:`Match` gives both from one match)."""
    with Match(exposure, failures=incidents) as match:
        return match.left_out(observed_until, observed_since)


def failure_rates(
    incidents: pl.DataFrame,
    exposure: pl.DataFrame,
    by: Sequence[str] = ("cluster_id",),
    *,
    period: str | None = None,
    interrupting_only: bool = True,
    confidence: float = 0.95,
    dispersion: float = 1.0,
    in_service: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Failures, exposure and rate per node-hour and per GPU-hour, with exact intervals
    (quasi-Poisson ones with ``dispersion`` > 1, see :func:`poisson_interval`) and the one-sided
    upper bound ``rate_upper_bound`` (:func:`poisson_upper_bound`; the figure for 0 failures).
    A group with no GPU-hours (CPU, storage or login nodes) has null per-GPU-hour rates.

    ``by`` may name exposure keys (cluster_id, node_id, instance_type, size_bucket) and columns of
    the incidents (``category``, ``failure_class``, an attribute read into a column); ``period``
    ("day", "week", "month") adds a calendar ``period`` column. An incident key is not a property
    of exposure: each of its values' rate uses the whole exposure of its group, so they add up to
    the total rate; every value seen in the input gets a row in every group, with 0 failures where
    the group had none. Only failures while the node was in service and observed count
    (:func:`failures_in_service`). ``in_service``: ``failures_in_service(incidents, exposure,
    with_interval=True)`` when the caller has it (several rates of the same failures and exposure:
    matching failures to intervals was most of each call's cost).
    """
    incident_keys = [k for k in by if k not in EXPOSURE_KEYS]
    unknown = [k for k in incident_keys if k not in incidents.columns]
    if unknown:
        known = ", ".join(
            (*EXPOSURE_KEYS, *(c for c in ("category", "failure_class") if c in incidents.columns))
        )
        raise ValueError(f"cannot group rates by {unknown}; use any of {known}")
    if period is not None and period not in PERIODS:
        raise ValueError(f"unknown period {period!r}; use one of {', '.join(PERIODS)}")
    exposure_keys = [k for k in by if k in EXPOSURE_KEYS]
    sums = exposure_sums(exposure, exposure_keys, period=period)
    if period:
        exposure_keys.append("period")
    keys = [*exposure_keys, *incident_keys]

    counted = incidents.filter(pl.col("interrupting")) if interrupting_only else incidents
    if in_service is None:
        events = failures_in_service(counted, exposure, with_interval=bool(period))
    else:
        events = in_service.filter(pl.col("interrupting")) if interrupting_only else in_service
        events = events if period else events.drop("start_utc", "end_utc", "period_at")
    if period:  # the match's rule of which period a failure counts in (pipeline.transform.matching)
        events = events.with_columns(period=pl.col("period_at").dt.truncate(PERIODS[period]))

    on_gpus = (pl.col("gpus_per_node") > 0).sum() if "gpus_per_node" in events.columns else pl.len()
    counts = events.group_by(keys or pl.lit(0).alias("_all")).agg(
        failures=pl.len(), gpu_node_failures=on_gpus
    )
    values = counted.select(incident_keys).unique() if incident_keys else None
    return rates_from_counts(
        sums,
        counts.drop("_all", strict=False),
        exposure_keys,
        values,
        confidence=confidence,
        dispersion=dispersion,
    )


def exposure_sums(exposure: pl.DataFrame, keys: Sequence[str], *, period: str | None = None) -> pl.DataFrame:
    """``exposure_node_hours`` and ``exposure_gpu_hours`` of ``exposure`` per group of ``keys``
    (exposure keys; ``period`` adds a calendar ``period`` column, each interval split at period
    boundaries): what :func:`failure_rates` divides by. Summed exactly, in whole microseconds
    (Int128), and turned into hours once per group (:mod:`pipeline.transform.exposure`): the same
    hours in any row order, and the same to the last bit as the SQL twin
    (:func:`pipeline.transform.exposure.sums_query`) by which ``failcast rates`` sums in DuckDB (the
    lemon test turns a last-bit difference in a node's hours into 1e-7 in its p-values)."""
    keys = list(keys)
    if period:
        exposure = _periodic_exposure(exposure, PERIODS[period])
        keys.append("period")
    duration = exposure_rules.micros(pl.col("end_utc"), pl.col("start_utc"))
    sums = exposure.group_by(keys or pl.lit(0).alias("_all")).agg(
        _node_us=duration.sum(), _gpu_us=(duration * pl.col("gpus_per_node")).sum()
    )
    return sums.with_columns(
        exposure_node_hours=exposure_rules.hours(sums, "_node_us"),
        exposure_gpu_hours=exposure_rules.hours(sums, "_gpu_us"),
    ).select(*keys, "exposure_node_hours", "exposure_gpu_hours")


def rates_from_counts(
    exposure_sums: pl.DataFrame,
    counts: pl.DataFrame,
    exposure_keys: Sequence[str],
    incident_values: pl.DataFrame | None = None,
    *,
    confidence: float = 0.95,
    dispersion: float = 1.0,
) -> pl.DataFrame:
    """The rate table of :func:`failure_rates` from what it counted: ``exposure_sums`` (one row
    per group of ``exposure_keys`` with ``exposure_node_hours`` and ``exposure_gpu_hours``),
    ``counts`` (``failures`` per group of the exposure keys and the columns of ``incident_values``,
    and ``gpu_node_failures``, those of nodes with GPUs: the per-GPU-hour rate counts only them)
    and ``incident_values`` (every value of the incident keys seen in the input, None without
    incident keys). Groups without a count have 0 failures. Why apart: the failures and exposure
    may be counted in DuckDB (:mod:`pipeline.analysis.counts`) instead of from rows in Polars."""
    incident_keys = [] if incident_values is None else incident_values.columns
    keys = [*exposure_keys, *incident_keys]
    if not exposure_keys:
        exposure_sums = exposure_sums.with_columns(_all=pl.lit(0))
        counts = counts.with_columns(_all=pl.lit(0))
    if incident_keys:
        # every value seen in the input appears in every group (and period), with zero failures
        # where that group had none
        values = incident_values.unique().sort(incident_keys, nulls_last=True)
        exposure_sums = exposure_sums.join(values, how="cross")
    join_on = [*exposure_keys, *incident_keys] if exposure_keys else ["_all", *incident_keys]
    rates = (
        exposure_sums.join(counts, on=join_on, how="left")
        .with_columns(pl.col("failures", "gpu_node_failures").fill_null(0).cast(pl.Int64))
        .drop("_all", strict=False)
        .sort(keys or "failures")
    )
    low, high = poisson_interval(
        rates["failures"].to_numpy(), rates["exposure_node_hours"].to_numpy(), confidence, dispersion
    )
    upper = poisson_upper_bound(
        rates["failures"].to_numpy(), rates["exposure_node_hours"].to_numpy(), confidence, dispersion
    )
    # per GPU-hour: the failures of nodes with GPUs over their GPU-hours (a CPU node's failure
    # has no GPU-hours behind it); null for a group of GPU-less nodes (CPU, storage, login)
    gpu_hours = rates["exposure_gpu_hours"].to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        gpu_low, gpu_high = poisson_interval(
            rates["gpu_node_failures"].to_numpy(), gpu_hours, confidence, dispersion
        )
    has_gpus = pl.col("exposure_gpu_hours") > 0
    return rates.select(*keys, "failures", "exposure_node_hours", "exposure_gpu_hours").with_columns(
        rate_per_node_hour=pl.col("failures") / pl.col("exposure_node_hours"),
        rate_ci_low=pl.Series(low),
        rate_ci_high=pl.Series(high),
        rate_upper_bound=pl.Series(upper),
        rate_per_gpu_hour=pl.when(has_gpus).then(
            pl.lit(rates["gpu_node_failures"]) / pl.col("exposure_gpu_hours")
        ),
        rate_per_gpu_hour_ci_low=pl.when(has_gpus).then(pl.Series(gpu_low)),
        rate_per_gpu_hour_ci_high=pl.when(has_gpus).then(pl.Series(gpu_high)),
    )


def category_shares(
    incidents: pl.DataFrame,
    exposure: pl.DataFrame,
    by: Sequence[str] = ("cluster_id",),
    *,
    key: str = "failure_class",
    confidence=0.95,
    in_service: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Share of interrupting failures by root cause (``key``: the failure class by default, a
    bounded list comparable across fleets; ``category`` for the fleet's own names) within each
    group, with the exact Clopper–Pearson interval (Clopper & Pearson 1934): for k of n,
    low = Beta.ppf(a/2; k, n - k + 1), high = Beta.ppf(1 - a/2; k + 1, n - k). ``in_service`` as
    in :func:`failure_rates`."""
    rates = failure_rates(incidents, exposure, by=[*by, key], confidence=confidence, in_service=in_service)
    shares = rates.select(*by, key, "failures").with_columns(
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
