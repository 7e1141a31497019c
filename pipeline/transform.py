"""Transform: warehouse tables -> exposure, failure rates and times between failures (Polars).

Exposure is computed from service *intervals*, never from hourly rows: a node in service from
``a`` to ``b`` contributes ``b - a`` node-hours and ``(b - a) * gpus_per_node`` GPU-hours.

Rates with exact (Garwood 1936) Poisson intervals: for k failures in exposure T at confidence
1 - alpha,

    low  = chi2.ppf(alpha/2,     2k)     / (2T)      (0 when k = 0)
    high = chi2.ppf(1 - alpha/2, 2k + 2) / (2T)

Published per-instance-hour rates (Llama 3.1, OPT-175B, MPT-7B) are the same quantity as
``rate_per_node_hour`` here: one instance is one node.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import numpy as np
import polars as pl
from scipy.stats import chi2

EXPOSURE_KEYS = ("cluster_id", "node_id", "instance_type", "size_bucket")
PERIODS = {"day": "1d", "week": "1w", "month": "1mo"}


def observation_end(incidents: pl.DataFrame, inventory: pl.DataFrame) -> datetime:
    """The end of the observed window when none is given: the latest time any input mentions."""
    candidates = [
        incidents["timestamp_utc"].max() if incidents.height else None,
        inventory["in_service_from_utc"].max() if inventory.height else None,
        inventory["in_service_to_utc"].max() if inventory.height else None,
    ]
    known = [c for c in candidates if c is not None]
    if not known:
        raise ValueError("the warehouse has no incidents and no inventory; ingest some files first")
    return max(known)


def size_bucket(instances: pl.Expr) -> pl.Expr:
    """The power of two nearest a cluster's instance count (32, 64, ... 1024)."""
    return (2 ** instances.clip(lower_bound=1).log(2).round()).cast(pl.Int64)


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
        .with_columns(node_hours=(pl.col("end_utc") - pl.col("start_utc")).dt.total_seconds() / 3600)
        .with_columns(gpu_hours=pl.col("node_hours") * pl.col("gpus_per_node"))
    )
    span_hours = (pl.col("end_utc").max() - pl.col("start_utc").min()).dt.total_seconds() / 3600
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
    failures: np.ndarray, exposure: np.ndarray, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """Exact Garwood interval for a Poisson rate (see module docstring)."""
    k = np.asarray(failures, dtype=float)
    t = np.asarray(exposure, dtype=float)
    alpha = 1.0 - confidence
    low = np.where(k > 0, chi2.ppf(alpha / 2, 2 * k) / (2 * t), 0.0)
    high = chi2.ppf(1 - alpha / 2, 2 * k + 2) / (2 * t)
    return low, high


def _periodic_exposure(exposure: pl.DataFrame, every: str) -> pl.DataFrame:
    """Split each interval at period boundaries: one row per (interval, period) it overlaps."""
    start, end = exposure["start_utc"].min(), exposure["end_utc"].max()
    periods = pl.DataFrame(
        {
            "period": pl.datetime_range(start, end, every, eager=True, time_unit="us")
            .dt.truncate(every)
            .unique()
            .sort()
        }
    ).with_columns(period_end=pl.col("period").dt.offset_by(every))
    return (
        exposure.lazy()
        .join(periods.lazy(), how="cross")
        .with_columns(
            start_utc=pl.max_horizontal("start_utc", "period"),
            end_utc=pl.min_horizontal("end_utc", "period_end"),
        )
        .filter(pl.col("end_utc") > pl.col("start_utc"))
        .with_columns(node_hours=(pl.col("end_utc") - pl.col("start_utc")).dt.total_seconds() / 3600)
        .with_columns(gpu_hours=pl.col("node_hours") * pl.col("gpus_per_node"))
        .drop("period_end")
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
) -> pl.DataFrame:
    """Failures, exposure and rate per node-hour and per GPU-hour, with exact intervals.

    ``by`` may name exposure keys (cluster_id, node_id, instance_type, size_bucket) and
    ``category``; ``period`` ("day", "week", "month") adds a calendar ``period`` column.
    Category is not a property of exposure: each category's rate uses the whole exposure of
    its group, so category rates add up to the total rate.
    """
    unknown = [k for k in by if k not in (*EXPOSURE_KEYS, "category")]
    if unknown:
        raise ValueError(
            f"cannot group rates by {unknown}; use any of {', '.join((*EXPOSURE_KEYS, 'category'))}"
        )
    if period is not None and period not in PERIODS:
        raise ValueError(f"unknown period {period!r}; use one of {', '.join(PERIODS)}")
    exposure_keys = [k for k in by if k != "category"]
    if period:
        exposure = _periodic_exposure(exposure, PERIODS[period])
        exposure_keys.append("period")
    keys = [*exposure_keys, *(["category"] if "category" in by else [])]

    events = incidents.filter(pl.col("interrupting")) if interrupting_only else incidents
    attributes = exposure.select("cluster_id", "node_id", "instance_type", "size_bucket").unique(
        subset=["cluster_id", "node_id"]
    )
    events = events.join(attributes, on=["cluster_id", "node_id"], how="inner")
    if period:
        events = events.with_columns(period=pl.col("timestamp_utc").dt.truncate(PERIODS[period]))

    exposure_sums = exposure.group_by(exposure_keys or pl.lit(0).alias("_all")).agg(
        exposure_node_hours=pl.col("node_hours").sum(),
        exposure_gpu_hours=pl.col("gpu_hours").sum(),
    )
    counts = events.group_by(keys or pl.lit(0).alias("_all")).agg(failures=pl.len())
    if "category" in by:
        # every category appears in every group, with zero failures where it had none
        cats = events.select("category").unique()
        exposure_sums = exposure_sums.join(cats, how="cross")
    join_on = keys or ["_all"]
    rates = (
        exposure_sums.join(counts, on=join_on, how="left")
        .with_columns(pl.col("failures").fill_null(0).cast(pl.Int64))
        .drop("_all", strict=False)
        .sort(keys or "failures")
    )
    low, high = poisson_interval(
        rates["failures"].to_numpy(), rates["exposure_node_hours"].to_numpy(), confidence
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


def times_between_failures(
    incidents: pl.DataFrame, exposure: pl.DataFrame, *, level: str = "node"
) -> pl.DataFrame:
    """Durations (hours) between successive interrupting failures, right-censored at the end of
    each service interval (node level) or of the cluster's observed window (cluster level).

    Returns ``cluster_id`` (and ``node_id`` at node level), ``instances``, ``duration_hours``
    and ``observed`` (True for a failure, False for a censored tail).
    """
    if level not in ("node", "cluster"):
        raise ValueError(f"level must be 'node' or 'cluster', not {level!r}")
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
        incidents.lazy()
        .filter(pl.col("interrupting"))
        .select(*keys, "timestamp_utc")
        .join(windows.lazy(), on=keys, how="inner")
        .filter(pl.col("timestamp_utc").is_between("start_utc", "end_utc", closed="left"))
        .select("window", time_utc=pl.col("timestamp_utc"), observed=pl.lit(True))
    )
    ends = windows.lazy().select("window", time_utc=pl.col("end_utc"), observed=pl.lit(False))
    return (
        pl.concat([failures, ends])
        .join(windows.lazy(), on="window")
        .sort("window", "time_utc", "observed", descending=[False, False, True])
        .with_columns(previous_utc=pl.col("time_utc").shift(1).over("window").fill_null(pl.col("start_utc")))
        .with_columns(duration_hours=(pl.col("time_utc") - pl.col("previous_utc")).dt.total_seconds() / 3600)
        .filter(pl.col("observed") | (pl.col("duration_hours") > 0))
        .select(*keys, "instances", "duration_hours", "observed")
        .collect()
    )


def aggregate_durations(durations: pl.DataFrame, by: Sequence[str] = ()) -> pl.DataFrame:
    """Unique (duration, observed) pairs with their counts: what the fitters take as weights."""
    return (
        durations.group_by([*by, "duration_hours", "observed"])
        .agg(count=pl.len())
        .sort([*by, "duration_hours"])
    )
