"""Analysis: read the warehouse once, run the transforms and fit the models, return one result.

This is the single entry point that the CLI, the report and the notebooks share, so none of them
re-implements the chain warehouse -> transform -> models.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import duckdb
import numpy as np
import polars as pl

from pipeline import models, projection, transform, warehouse

PROJECTED_SIZES = (256, 512, 2048, 16384)


@dataclass
class FleetAnalysis:
    """Everything the report shows, as Polars frames and fitted models.

    Times between failures (``node_durations``, ``node_fits``, ``kaplan_meier``, ``nelson_aalen``,
    ``cluster_durations``, ``size_regression``) follow ``first_gap`` (see
    :func:`pipeline.transform.times_between_failures`): by default the span from a window's start
    to its first failure is left out because it is a forward-recurrence time, not a full gap;
    when fewer than two gaps start at a failure that leaves too little to fit, and ``first_gap``
    says "keep".
    ``cluster_kaplan_meier`` holds, per cluster with a failure, the survival of the time to the
    cluster's next interrupting failure (what a job on the whole cluster sees).
    ``count_dispersion`` is the Pearson dispersion of node failure counts (1 for Poisson; > 1
    means the Garwood intervals are too narrow); the scaling law's interval uses it.
    ``exposure_estimated`` is True when the inventory was inferred from the logs (every rate and
    MTBF then rests on guessed service intervals). Rates, fits, shares and trend tests count
    ``interruptions`` (:func:`pipeline.transform.node_interruptions`: a node's faults within
    ``interruption_window_minutes`` are one failure, by its root cause; the columns of
    ``FAILURE_COLUMNS`` only); with a window of None the interrupting incidents are counted as
    they are. ``incidents`` is the warehouse's whole table, one row per fault, as a lazy frame
    (:func:`pipeline.warehouse.scan_incidents`: collect what you need while the connection is
    open); nothing in the analysis loads it.
    ``failures_left_out`` counts the failures no statistic counts, by reason
    (:func:`pipeline.transform.failures_left_out`: after the window end, node without a service
    interval, node out of service); :func:`left_out_note` says it in one line.
    A fleet with no failures in service yet (``has_failures`` False) has exposure, rates (0
    failures, with the one-sided ``rate_upper_bound``) and trend rows but nothing to fit:
    ``node_fits`` is empty and ``best_family``, ``kaplan_meier``, ``nelson_aalen`` are None.
    ``job_interruptions`` is None without Slurm jobs; jobs on clusters without inventory are left
    out of it. ``rates_by_node`` has one row per node (the report shows only the nodes with the
    most failures), with exact intervals; ``lemons`` tests each against the rest of its cluster
    (:class:`pipeline.models.LemonTest`). The other rate tables carry ``interval_method``
    intervals: "overdispersed" (quasi-Poisson with ``dispersion_test.phi``) or "exact" (Garwood);
    by default "overdispersed" exactly when the Pearson test of the non-lemon nodes' counts
    rejects Poisson at 5% (:func:`node_evidence`).
    ``job_backtest`` (None without jobs) holds each job's interruptions predicted
    from the data before it started, against what happened.
    ``exposure`` holds the calendar service intervals; rates divide by ``rate_exposure``, which is
    the uptime exposure (downtime of ``outages`` removed, :func:`pipeline.transform.uptime_intervals`)
    when ``exposure_basis`` is "uptime", else the calendar one. Gaps and trend tests run on the
    calendar intervals. ``repair_times`` is None when no outage has an end.
    ``job_recoveries`` has one row per training-job interruption found in training logs, with the
    measured detection and restart hours (:func:`pipeline.transform.job_recoveries`; empty without
    training logs). ``badput`` is the job hours failures cost per failure class, from interrupted
    Slurm jobs and training restarts (:func:`pipeline.transform.badput_by_class`; empty without
    either).
    """

    observed_until: datetime
    exposure: pl.DataFrame
    incidents: pl.LazyFrame
    rates_overall: pl.DataFrame
    rates_by_cluster: pl.DataFrame
    rates_by_category: pl.DataFrame
    rates_by_month: pl.DataFrame
    rates_by_node: pl.DataFrame
    node_fits: dict[str, models.ParametricTBF]
    best_family: str | None
    kaplan_meier: models.KaplanMeier | None
    cluster_mtbf: pl.DataFrame
    scaling: models.MTBFScaling | None
    scaling_projection: pl.DataFrame
    files: pl.DataFrame
    rejects: pl.DataFrame
    rates_by_size_bucket: pl.DataFrame
    category_shares: pl.DataFrame
    trend_tests: pl.DataFrame
    first_gap: str
    node_durations: pl.DataFrame
    nelson_aalen: models.NelsonAalen | None
    cluster_durations: pl.DataFrame
    size_regression: models.WeibullSizeRegression | None
    size_regression_projection: pl.DataFrame
    job_interruptions: pl.DataFrame | None
    count_dispersion: float
    exposure_estimated: bool
    cluster_kaplan_meier: dict[str, models.KaplanMeier]
    interruptions: pl.DataFrame
    interruption_window_minutes: float | None
    lemons: models.LemonTest
    dispersion_test: transform.DispersionTest
    interval_method: str
    failures_left_out: pl.DataFrame
    outages: pl.DataFrame
    rate_exposure: pl.DataFrame
    exposure_basis: str
    repair_times: models.RepairTimes | None
    job_recoveries: pl.DataFrame
    badput: pl.DataFrame
    job_backtest: JobBacktestResult | None = None

    @property
    def fleet_rate(self) -> models.PoissonRate:
        row = self.rates_overall.row(0, named=True)
        return models.PoissonRate().fit(row["failures"], row["exposure_node_hours"])

    @property
    def has_failures(self) -> bool:
        """True when at least one failure counts (in service, in the window): else nothing to fit."""
        return bool(self.rates_overall["failures"].sum())


def left_out_note(left_out: pl.DataFrame) -> str | None:
    """One line saying how many failures the statistics leave out and why, or None when none
    are (``left_out`` from :func:`pipeline.transform.failures_left_out`)."""
    parts = [f"{n:,} {reason}" for reason, n in left_out.select("reason", "failures").iter_rows() if n]
    if not parts:
        return None
    total = int(left_out["failures"].sum())
    return (
        f"{total:,} failure{'s' if total != 1 else ''} left out of rates and fits (no exposure behind "
        f"them): {'; '.join(parts)}"
    )


def cluster_mtbf(rates_by_cluster: pl.DataFrame, exposure: pl.DataFrame) -> pl.DataFrame:
    """Per cluster: instances, failures, cluster-hours observed and cluster MTBF with interval.

    Cluster MTBF = cluster-hours / failures, where cluster-hours = node-hours / instances, so the
    interval is the inverse of the rate interval scaled by instance count.
    """
    sizes = exposure.group_by("cluster_id").agg(pl.col("instances").first(), pl.col("size_bucket").first())
    return (
        rates_by_cluster.join(sizes, on="cluster_id")
        .with_columns(exposure_cluster_hours=pl.col("exposure_node_hours") / pl.col("instances"))
        .with_columns(
            mtbf_hours=pl.col("exposure_cluster_hours") / pl.col("failures"),
            mtbf_ci_low_hours=1 / (pl.col("rate_ci_high") * pl.col("instances")),
            mtbf_ci_high_hours=1 / (pl.col("rate_ci_low") * pl.col("instances")),
        )
        .select(
            "cluster_id",
            "instances",
            "size_bucket",
            "failures",
            "exposure_cluster_hours",
            "mtbf_hours",
            "mtbf_ci_low_hours",
            "mtbf_ci_high_hours",
        )
        .sort("instances")
    )


TREND_SCHEMA = {
    "cluster_id": pl.String,
    "failures": pl.Int64,
    "observed_node_hours": pl.Float64,
    "laplace_statistic": pl.Float64,
    "laplace_p_value": pl.Float64,
    "laplace_verdict": pl.String,
    "crow_beta": pl.Float64,
    "crow_beta_ci_low": pl.Float64,
    "crow_beta_ci_high": pl.Float64,
    "crow_statistic": pl.Float64,
    "crow_p_value": pl.Float64,
    "crow_verdict": pl.String,
}


def trend_tests(operating_times: pl.DataFrame, exposure: pl.DataFrame) -> pl.DataFrame:
    """One row per cluster: Laplace and MIL-HDBK-189 tests on its failures' operating times
    (:func:`pipeline.transform.failure_operating_times`); nulls where it had fewer than 2."""
    totals = exposure.group_by("cluster_id").agg(observed_node_hours=pl.col("node_hours").sum())
    rows = []
    for cluster, total in totals.sort("cluster_id").iter_rows():
        # a failure at the window end sits at the total, not past it by a float rounding
        times = operating_times.filter(pl.col("cluster_id") == cluster)["operating_node_hours"].clip(
            upper_bound=total
        )
        row = dict.fromkeys(TREND_SCHEMA) | {
            "cluster_id": cluster,
            "failures": times.len(),
            "observed_node_hours": total,
        }
        if times.len() >= 2:
            t = models.TrendTest().fit(times.to_numpy(), total)
            row |= {
                "laplace_statistic": t.laplace_statistic_,
                "laplace_p_value": t.laplace_p_value_,
                "laplace_verdict": t.laplace_verdict_,
                "crow_beta": t.crow_beta_,
                "crow_beta_ci_low": t.crow_beta_confidence_interval_[0],
                "crow_beta_ci_high": t.crow_beta_confidence_interval_[1],
                "crow_statistic": t.crow_statistic_,
                "crow_p_value": t.crow_p_value_,
                "crow_verdict": t.crow_verdict_,
            }
        rows.append(row)
    return pl.DataFrame(rows, schema=TREND_SCHEMA, orient="row")


def _projection(predict, sizes: np.ndarray) -> pl.DataFrame:
    mtbf, low, high = predict(sizes)
    return pl.DataFrame(
        {"instances": sizes, "mtbf_hours": mtbf, "mtbf_ci_low_hours": low, "mtbf_ci_high_hours": high}
    )


def read_jobs(con) -> pl.DataFrame | None:
    """The warehouse's Slurm jobs, or None for a warehouse file from before the jobs table."""
    try:
        return warehouse.table(con, "jobs")
    except duckdb.CatalogException:  # opened read-only, so the schema could not be upgraded
        return None


@dataclass(frozen=True)
class JobBacktestResult:
    """Every job with its prediction from earlier data or the reason it has none
    (:func:`pipeline.transform.job_predictions`), and the backtest of the scored ones (None when
    no job could be scored)."""

    predictions: pl.DataFrame
    backtest: models.JobBacktest | None
    min_history_failures: int


def job_backtest(
    con,
    failures: pl.DataFrame,
    exposure: pl.DataFrame,
    *,
    min_history_failures: int = transform.MIN_HISTORY_FAILURES,
) -> JobBacktestResult | None:
    """Each Slurm job's interruptions predicted from the failures and exposure before it started,
    against what happened (:class:`pipeline.models.JobBacktest`); None without jobs."""
    jobs = read_jobs(con)
    if jobs is None or jobs.height == 0:
        return None
    predictions = transform.job_predictions(
        jobs, failures, exposure, min_history_failures=min_history_failures
    )
    scored = predictions.filter(pl.col("rate_source").is_in(transform.SCORED))
    fitted = None
    if scored["expected_interruptions"].sum() > 0:
        fitted = models.JobBacktest().fit(
            scored["expected_interruptions"], scored["interrupted"], scored["hazard_per_hour"]
        )
    return JobBacktestResult(predictions, fitted, min_history_failures)


def job_interruptions(con, rates_by_cluster: pl.DataFrame) -> pl.DataFrame | None:
    """Slurm job interruption rates against each job's cluster node rate
    (:func:`pipeline.transform.job_interruption_rates`), or None without jobs. Jobs on clusters
    with no inventory (or no cluster_id) have no node rate to compare with and are left out."""
    jobs = read_jobs(con)
    if jobs is None:
        return None
    jobs = jobs.filter(pl.col("cluster_id").is_in(rates_by_cluster["cluster_id"].implode()))
    return transform.job_interruption_rates(jobs, rates_by_cluster) if jobs.height else None


FAILURE_COLUMNS = (
    "cluster_id",
    "node_id",
    "timestamp_utc",
    "category",
    "failure_class",
    "interrupting",
    "resolved_at_utc",
)


def read_failures(
    incidents: pl.LazyFrame,
    *,
    interrupting_only: bool = True,
    window_minutes: float | None = transform.INTERRUPTION_WINDOW_MINUTES,
    attributes: Sequence[str] = (),
) -> pl.DataFrame:
    """The failures that rates, gaps, shares and trends count, read with only the columns they
    use (``FAILURE_COLUMNS``, plus one column per key of ``attributes``: the incidents' extra input
    columns, text, null where absent) and only interrupting incidents (all with ``interrupting_only``
    False), then collapsed into node interruptions (:func:`pipeline.transform.node_interruptions`)
    unless ``window_minutes`` is None.

    Why: the whole incidents table of a 10 M-incident fleet takes GBs in Polars (messages, ids);
    the transforms need five columns of about a third of the rows. With ``incidents`` from
    :func:`pipeline.warehouse.scan_incidents` the selection and filter run inside DuckDB.
    """
    frame = incidents.lazy().select(*FAILURE_COLUMNS, *(["attributes"] if attributes else []))
    if attributes:
        parsed = pl.col("attributes").str.json_decode(pl.Struct({k: pl.String for k in attributes}))
        frame = frame.with_columns(parsed.struct.field(*attributes)).drop("attributes")
    if interrupting_only:
        frame = frame.filter(pl.col("interrupting"))
    faults = frame.collect()
    if window_minutes is None:
        return faults
    return transform.node_interruptions(faults, window_minutes=window_minutes)


def rate_exposure(
    failures: pl.DataFrame,
    inventory: pl.DataFrame,
    exposure: pl.DataFrame,
    observed_until: datetime,
    basis: str = "uptime",
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(exposure that rates divide by, outages): the calendar ``exposure`` with the outages'
    downtime removed for ``basis`` "uptime" (MTBF = uptime / failures), ``exposure`` itself for
    "calendar". Identical when no outage has a recorded end."""
    if basis not in transform.EXPOSURE_BASES:
        raise ValueError(
            f"unknown exposure basis {basis!r}; use one of {', '.join(transform.EXPOSURE_BASES)}"
        )
    outages = transform.outages(failures, inventory, observed_until)
    if basis == "calendar":
        return exposure, outages
    return transform.uptime_intervals(exposure, outages), outages


def read_job_recoveries(con) -> pl.DataFrame:
    """Training-job interruptions with measured detection and restart hours, from the events of
    training logs only (four columns read; :func:`pipeline.transform.job_recoveries`)."""
    events = con.sql(
        "SELECT job_id, timestamp_utc, category, message FROM events WHERE source_format = ?",
        params=[warehouse.JOB_SYMPTOMS_FORMAT],
    ).pl()
    return transform.job_recoveries(events)


_JOBS_FOR_BADPUT = {
    "cluster_id": pl.String,
    "job_id": pl.String,
    "interrupted": pl.Boolean,
    "end_utc": pl.Datetime("us"),
    "elapsed_hours": pl.Float64,
    "nodes": pl.List(pl.String),
    "nnodes": pl.Int64,
}


def job_badput(con, failures: pl.DataFrame, recoveries: pl.DataFrame) -> pl.DataFrame:
    """Job hours lost per failure class (:func:`pipeline.transform.badput_by_class`) from the Slurm
    jobs and the training restarts. A training log ingested with ``--node`` names its job's node
    (without it the reader stores ``job:<job_id>``, which names no node)."""
    jobs = read_jobs(con)
    jobs = pl.DataFrame(schema=_JOBS_FOR_BADPUT) if jobs is None else jobs.select(list(_JOBS_FOR_BADPUT))
    named = con.sql(
        "SELECT job_id, [min(node_id)] AS nodes FROM events"
        " WHERE source_format = ? AND node_id <> 'job:' || job_id GROUP BY job_id",
        params=[warehouse.JOB_SYMPTOMS_FORMAT],
    ).pl()
    recoveries = recoveries.join(named, on="job_id", how="left").with_columns(
        pl.col("nodes").cast(pl.List(pl.String))
    )
    return transform.badput_by_class(jobs.cast(_JOBS_FOR_BADPUT), recoveries, failures)


def measured_recovery_hours(fleet: FleetAnalysis) -> dict[str, float]:
    """What the warehouse measured, as ``projection.measured_recovery`` keywords: the mean repair
    time (MTTR) from outages, the mean detection and restart hours from training-job logs. Means,
    not medians: the wall-time model takes the mean cost per failure (expected wall time is linear
    in each failure's downtime), and a median would understate right-skewed restart times."""
    times = {} if fleet.repair_times is None else {"repair_hours": fleet.repair_times.mean_hours_}
    for row in transform.recovery_hours(fleet.job_recoveries).iter_rows(named=True):
        if row["measured"]:
            times[f"{row['measure']}_hours"] = row["mean_hours"]
    return times


def repair_times(outages: pl.DataFrame) -> models.RepairTimes | None:
    """Repair-time fit of the outages whose repair time is known or censored; None when no
    outage has a completed repair."""
    known = outages.filter(pl.col("repair_hours").is_not_null())
    if not known["resolved"].any():
        return None
    return models.RepairTimes().fit(known["repair_hours"], known["resolved"])


REPAIR_SCHEMA = {
    "interruptions": pl.Int64,
    "outages": pl.Int64,
    "unresolved": pl.Int64,
    "unknown_end": pl.Int64,
    "downtime_hours": pl.Float64,
    "availability": pl.Float64,
    "mttr_hours": pl.Float64,
    "mttr_ci_low_hours": pl.Float64,
    "mttr_ci_high_hours": pl.Float64,
    "mttr_restricted": pl.Boolean,
    "repair_hours_p50": pl.Float64,
    "repair_hours_p50_ci_low": pl.Float64,
    "repair_hours_p50_ci_high": pl.Float64,
    "repair_hours_p90": pl.Float64,
    "repair_hours_p90_ci_low": pl.Float64,
    "repair_hours_p90_ci_high": pl.Float64,
}


def repair_summary(
    outages: pl.DataFrame, exposure: pl.DataFrame, uptime: pl.DataFrame, by: Sequence[str] = ()
) -> pl.DataFrame:
    """One row per group of ``by`` (any outage column: cluster_id, node_id, category ...):
    outages, ``unresolved`` (no end by the window end: right-censored), ``unknown_end`` (no end
    recorded but the node failed again: left out of the repair statistics), downtime, the
    Kaplan–Meier median (``repair_hours_p50``) and p90 with intervals, the mean (MTTR, restricted
    when the longest repair is open: :class:`pipeline.models.RepairTimes`) and, when every key
    is a property of the node (cluster_id, node_id), ``availability`` = uptime / (uptime +
    downtime). Statistics of a group without a completed repair are null."""
    unknown = [k for k in by if k not in outages.columns]
    if unknown:
        raise ValueError(f"cannot group repairs by {unknown}; use any of {', '.join(outages.columns)}")
    keys = list(by)
    node_keys = all(k in ("cluster_id", "node_id") for k in keys)
    share = (
        transform.availability(exposure, uptime, outages, keys).select(*keys, "availability")
        if node_keys
        else None
    )
    rows = []
    groups = outages.group_by(keys, maintain_order=True) if keys else [((), outages)]
    for values, group in groups:
        row = dict(zip(keys, values, strict=True)) | dict.fromkeys(REPAIR_SCHEMA)
        known = group.filter(pl.col("repair_hours").is_not_null())
        row |= {
            "interruptions": int(group["interruptions"].sum()),
            "outages": group.height,
            "unresolved": int((~known["resolved"]).sum()),
            "unknown_end": group.height - known.height,
            "downtime_hours": float(group["downtime_hours"].sum()),
        }
        if known["resolved"].any():
            fit = models.RepairTimes().fit(known["repair_hours"], known["resolved"])
            (p50, p50_low, p50_high), (p90, p90_low, p90_high) = fit.quantiles_[0.5], fit.quantiles_[0.9]
            row |= {
                "mttr_hours": fit.mean_hours_,
                "mttr_ci_low_hours": fit.mean_confidence_interval_[0],
                "mttr_ci_high_hours": fit.mean_confidence_interval_[1],
                "mttr_restricted": fit.mean_restricted_,
                "repair_hours_p50": p50,
                "repair_hours_p50_ci_low": p50_low,
                "repair_hours_p50_ci_high": p50_high,
                "repair_hours_p90": p90,
                "repair_hours_p90_ci_low": p90_low,
                "repair_hours_p90_ci_high": p90_high,
            }
        rows.append(row)
    schema = {k: outages.schema[k] for k in keys} | REPAIR_SCHEMA
    frame = pl.DataFrame(rows, schema=schema, orient="row")
    if share is not None and keys:
        frame = frame.drop("availability").join(share, on=keys, how="left").select(list(schema))
    elif share is not None:
        frame = frame.with_columns(availability=pl.lit(share["availability"].item()))
    return frame.sort(keys) if keys else frame


FIT_RELATIVE_RESOLUTION = 1e-3
LEMON_FDR = 0.05


def node_evidence(
    failures: pl.DataFrame,
    exposure: pl.DataFrame,
    *,
    lemon_fdr: float = LEMON_FDR,
    interrupting_only: bool = True,
) -> tuple[pl.DataFrame, models.LemonTest, transform.DispersionTest]:
    """Rates by node (exact intervals), the lemon test on them, and the Pearson dispersion test
    of the nodes that are not lemons, which decides the rate intervals
    (:meth:`pipeline.transform.DispersionTest.method`).

    Why the lemons are left out of the dispersion test: the fleet rate is expected failures /
    exposure of *these* nodes, lemons included; a few nodes with their own rate make phi large
    without making the fleet's total count any less Poisson, so quasi-Poisson intervals from
    every node over-cover (measured on simulated fleets with 5% lemons at 5-10x: 100% coverage
    of the nominal 95%; 95.5-97.5% with the lemons left out, 98% at Weibull shape 0.7 where the
    lemon test finds fewer of them, tests/test_lemons.py). Failures
    that cluster in time (Weibull shape < 1) remain in the non-lemon nodes' phi and widen it.
    """
    nodes = transform.failure_rates(
        failures, exposure, by=["cluster_id", "node_id"], interrupting_only=interrupting_only
    )
    lemons = models.LemonTest(fdr=lemon_fdr).fit(nodes)
    return nodes, lemons, transform.dispersion_test(nodes, exclude=lemons.lemons_)


def analyze(
    con,
    *,
    observed_until: datetime | None = None,
    first_gap: str = "drop",
    relative_resolution: float | None = FIT_RELATIVE_RESOLUTION,
    interruption_window_minutes: float | None = transform.INTERRUPTION_WINDOW_MINUTES,
    interval: str = "auto",
    lemon_fdr: float = LEMON_FDR,
    exposure_basis: str = "uptime",
) -> FleetAnalysis:
    """Run every transform and fit on the warehouse behind ``con``.

    Failures are node interruptions: a node's interrupting incidents closer than
    ``interruption_window_minutes`` count once (None: every incident counts).

    Gaps are rounded to a relative grid (``relative_resolution`` 1e-3: each gap at most 0.05% off,
    a minute or a month, see :mod:`pipeline.transform.durations`) and aggregated before fitting,
    which bounds the rows lifelines sees whatever the fleet's size; ``None`` fits the exact
    durations. See bench/RESULTS.md "Fitting" for the speed-up and the shift in estimates.

    ``interval`` ("exact", "overdispersed", "auto") picks the rate intervals (see
    :func:`node_evidence`); ``lemon_fdr`` is the lemon test's false-discovery rate.
    Rates divide by uptime (``exposure_basis`` "uptime": the outages' downtime removed, see
    :func:`rate_exposure`) or by calendar service time ("calendar").
    """
    incidents = warehouse.scan_incidents(con)
    inventory = warehouse.table(con, "inventory")
    if inventory.height == 0:
        raise ValueError(
            "the warehouse has no inventory: ingest an inventory file (cluster_id, "
            "node_id, instance_type, gpus_per_node, in_service_from, in_service_to)"
        )
    end = observed_until or transform.observation_end(incidents, inventory)
    failures = read_failures(incidents, window_minutes=interruption_window_minutes)
    exposure = transform.exposure_intervals(inventory, end)
    at_risk, outages = rate_exposure(failures, inventory, exposure, end, exposure_basis)
    by_node, lemons, dispersion_check = node_evidence(failures, at_risk, lemon_fdr=lemon_fdr)
    phi = dispersion_check.dispersion(interval)

    def rates(by: list[str], **options) -> pl.DataFrame:
        return transform.failure_rates(failures, at_risk, by=by, dispersion=phi, **options)

    by_cluster = rates(["cluster_id"])
    overall = rates([])

    gaps = transform.times_between_failures(failures, exposure, first_gap=first_gap)
    if first_gap == "drop" and gaps["observed"].sum() < 2:
        # at most one node failed twice in one window: too few full gaps to fit two parameters,
        # the first gaps are all there is
        first_gap = "keep"
        gaps = transform.times_between_failures(failures, exposure, first_gap=first_gap)
    durations = transform.aggregate_durations(gaps, relative_resolution=relative_resolution)
    args = (durations["duration_hours"], durations["observed"], durations["count"])
    fitted = bool(overall["failures"].sum())  # no failure yet: exposure and bounds, nothing to fit
    fits = models.fit_families(*args) if fitted else {}

    per_cluster = cluster_mtbf(by_cluster, exposure)
    sizes = np.array(sorted({*PROJECTED_SIZES, *per_cluster["instances"].round().to_list()}), dtype=float)
    cluster_durations = transform.aggregate_durations(
        transform.times_between_failures(failures, exposure, level="cluster", first_gap=first_gap),
        by=["cluster_id", "instances"],
        relative_resolution=relative_resolution,
    )
    dispersion = transform.dispersion_test(by_node).phi  # every node: the scaling law's spread
    scaling, projection, regression, regression_projection = None, pl.DataFrame(), None, pl.DataFrame()
    if fitted and per_cluster["instances"].n_unique() >= 2:
        scaling = models.MTBFScaling().fit(
            per_cluster["instances"],
            per_cluster["failures"],
            per_cluster["exposure_cluster_hours"],
            dispersion=dispersion,
        )
        projection = _projection(scaling.predict_mtbf_hours, sizes)
    if cluster_durations.filter("observed")["instances"].n_unique() >= 2:
        regression = models.WeibullSizeRegression().fit(
            cluster_durations["instances"],
            cluster_durations["duration_hours"],
            cluster_durations["observed"],
            cluster_durations["count"],
            dispersion=dispersion,
        )
        regression_projection = _projection(regression.predict_mtbf_hours, sizes)

    jobs = job_interruptions(con, by_cluster)
    recoveries = read_job_recoveries(con)
    backtest = job_backtest(con, failures, exposure)

    return FleetAnalysis(
        observed_until=end,
        exposure=exposure,
        incidents=incidents,
        rates_overall=overall,
        rates_by_cluster=by_cluster,
        rates_by_category=rates(["failure_class"]),
        rates_by_month=rates(["cluster_id"], period="month"),
        rates_by_node=by_node,
        node_fits=fits,
        best_family=models.best_by_aic(fits) if fitted else None,
        kaplan_meier=models.KaplanMeier().fit(*args) if fitted else None,
        cluster_mtbf=per_cluster,
        scaling=scaling,
        scaling_projection=projection,
        files=warehouse.table(con, "ingested_files"),
        rejects=warehouse.table(con, "rejects"),
        rates_by_size_bucket=rates(["size_bucket"]),
        category_shares=transform.category_shares(failures, at_risk, by=["cluster_id"]),
        trend_tests=trend_tests(transform.failure_operating_times(failures, exposure), exposure),
        first_gap=first_gap,
        node_durations=durations,
        nelson_aalen=models.NelsonAalen().fit(*args) if fitted else None,
        cluster_durations=cluster_durations,
        size_regression=regression,
        size_regression_projection=regression_projection,
        job_interruptions=jobs,
        count_dispersion=dispersion,
        exposure_estimated=transform.exposure_estimated(inventory),
        cluster_kaplan_meier={
            cluster: models.KaplanMeier().fit(g["duration_hours"], g["observed"], g["count"])
            for (cluster,), g in cluster_durations.group_by("cluster_id")
            if g["observed"].any()
        },
        interruptions=failures,
        interruption_window_minutes=interruption_window_minutes,
        lemons=lemons,
        dispersion_test=dispersion_check,
        interval_method=dispersion_check.method(interval),
        failures_left_out=transform.failures_left_out(failures, at_risk, end),
        outages=outages,
        rate_exposure=at_risk,
        exposure_basis=exposure_basis,
        repair_times=repair_times(outages),
        job_backtest=backtest,
        job_recoveries=recoveries,
        badput=job_badput(con, failures, recoveries),
    )


def failure_model_for(
    analysis: FleetAnalysis, instances: int, instance_type: str | None = None
) -> projection.FailureModel:
    """The fleet's rate for a job of ``instances`` (:func:`rate_model_for`) with the node-level
    Weibull fit's shape and the covariance of (log scale, log shape): the projection shows the
    exponential (Poisson at that rate) and the fitted Weibull renewal model side by side."""
    rate = rate_model_for(analysis, instances, instance_type)
    fit = analysis.node_fits.get("weibull")
    if fit is None or fit.shape_ is None:
        return rate
    scale, shape = fit.params_["lambda_"], fit.params_["rho_"]
    jacobian = np.diag([1 / scale, 1 / shape])  # delta method: covariance of the logs
    cov = jacobian @ fit.variance_matrix_ @ jacobian
    log_cov = ((float(cov[0, 0]), float(cov[0, 1])), (float(cov[1, 0]), float(cov[1, 1])))
    return rate.with_weibull_shape(shape, log_cov)


def rate_model_for(
    analysis: FleetAnalysis, instances: int, instance_type: str | None = None
) -> projection.FailureModel:
    """The per-instance failure model of a job on ``instances`` instances of this fleet, for
    :func:`pipeline.projection.project`, from the most direct evidence there is:

    1. the measured rate of the clusters in the job's size bucket (the power of two nearest
       ``instances``, as in ``rates_by_size_bucket``) with its exact interval, if they failed;
    2. else the scaling law MTBF(N) = MTBF_1 / N^alpha at N = ``instances``: per-instance rate
       1 / (N MTBF(N)), its interval from the law's 95% interval (wider the further N is from the
       observed sizes), e.g. a 16 384-instance job on a fleet of 32-1 024-instance clusters;
    3. else (one cluster size only: no law) the rate of the whole fleet;
    4. with no failure yet, the fleet's exact one-sided 95% upper bound (-ln 0.05 / T = 3.0 / T for
       T instance-hours, :func:`pipeline.transform.poisson_upper_bound`): a worst case, labelled
       as such in ``source``.

    Failures are the analysis' interruptions. ``instance_type`` restricts all three to nodes of
    that type (the law is refitted on their clusters). The model's ``source`` says which was used.
    """
    if instances < 1:
        raise ValueError(f"instances must be at least 1, got {instances}")
    exposure, at_risk, label = analysis.exposure, analysis.rate_exposure, "fleet"
    if instance_type is not None:
        of_type = pl.col("instance_type") == instance_type
        exposure, at_risk, label = exposure.filter(of_type), at_risk.filter(of_type), f"{instance_type} nodes"
        if exposure.is_empty():
            known = ", ".join(sorted(analysis.exposure["instance_type"].unique()))
            raise ValueError(f"no nodes of instance type {instance_type!r} in the fleet; it has {known}")
    if analysis.exposure_estimated:
        label += " (exposure estimated)"
    failures = analysis.interruptions
    bucket = pl.select(transform.size_bucket(pl.lit(instances))).item()
    measured = transform.failure_rates(failures, at_risk, by=["size_bucket"]).filter(
        (pl.col("size_bucket") == bucket) & (pl.col("failures") > 0)
    )
    if measured.height:
        row = measured.row(0, named=True)
        source = f"{label}: measured rate of clusters of ~{bucket} instances"
        return projection.FailureModel.from_counts(row["failures"], row["exposure_node_hours"], source)
    per_cluster = cluster_mtbf(transform.failure_rates(failures, at_risk, by=["cluster_id"]), exposure)
    if per_cluster["instances"].n_unique() >= 2 and per_cluster["failures"].sum() > 0:
        law = models.MTBFScaling().fit(
            per_cluster["instances"],
            per_cluster["failures"],
            per_cluster["exposure_cluster_hours"],
            dispersion=analysis.count_dispersion,
        )
        (mtbf,), (low,), (high,) = law.predict_mtbf_hours([instances])
        source = (
            f"{label}: scaling law MTBF(N) = {law.mtbf_one_hours_:.0f} h / N^{law.alpha_:.2f} "
            f"at N = {instances}"
        )
        return projection.FailureModel.exponential(
            1 / (instances * mtbf), 1 / (instances * high), 1 / (instances * low), source
        )
    total = transform.failure_rates(failures, at_risk, by=[]).row(0, named=True)
    if not total["failures"]:
        return projection.FailureModel.exponential(
            total["rate_upper_bound"],
            source=f"{label}: no failures yet in {total['exposure_node_hours']:,.0f} instance-hours; "
            "UPPER BOUND (95% one-sided, -ln 0.05 / T), a worst case",
        )
    return projection.FailureModel.from_counts(
        total["failures"], total["exposure_node_hours"], f"{label}: rate"
    )


def size_laws_agreement(analysis: FleetAnalysis) -> str:
    """One paragraph on the two size laws: empty unless both are fitted; when their alpha
    intervals do not overlap, that they disagree, the heterogeneity test behind it, and which
    law the projection uses."""
    count, gaps = analysis.scaling, analysis.size_regression
    if count is None or gaps is None:
        return ""
    (a_lo, a_hi), (b_lo, b_hi) = count.alpha_confidence_interval_, gaps.alpha_confidence_interval_
    if a_lo <= b_hi and b_lo <= a_hi:
        return "The two size laws agree (their 95% intervals for alpha overlap)."
    clusters = analysis.cluster_mtbf
    test = models.ClusterHeterogeneity().fit(
        clusters["instances"], clusters["failures"], clusters["exposure_cluster_hours"], count
    )
    if test.df_ > 0:
        verdict = "rejects" if test.p_value_ < 0.05 else "does not reject"
        shown = (
            f"Pearson chi-square of the {clusters.height} clusters' failure counts around the count "
            f"law: {test.statistic_:.1f} on {test.df_} df (dispersion {test.dispersion_:.2f}, "
            f"p = {test.p_value_:.2g}) {verdict} 'clusters differ only by size'"
        )
    else:
        shown = "with only two clusters the heterogeneity test has no degrees of freedom"
    return (
        f"The two size laws disagree: alpha = {count.alpha_:.2f} (95% CI {a_lo:.2f}–{a_hi:.2f}) from "
        f"failure counts vs {gaps.alpha_:.2f} ({b_lo:.2f}–{b_hi:.2f}) from cluster-level gaps. "
        f"Why: clusters differ in more than size (heterogeneity), and the count fit weighs each "
        f"cluster by its exposure while the gap fit weighs it by its number of gaps; {shown}. "
        "The projection uses the count law (Poisson regression) for job sizes without a measured "
        "cluster of that size, and the measured rate where there is one."
    )


SPARE_PROBABILITY = 0.99


def spares_for_job(
    repair: models.RepairTimes,
    instances: int,
    rate_per_instance_hour: float,
    probability: float = SPARE_PROBABILITY,
) -> dict:
    """Hot spares for a job of ``instances`` such that a failure finds a free spare with at least
    ``probability``: nodes in repair ~ Poisson(N * rate * E[repair]) (M/G/inf, see
    :func:`pipeline.models.spares_needed`), E[repair] the fleet's measured MTTR (a lower bound when
    the longest repair is still open, ``mttr_restricted``)."""
    mean_in_repair = instances * rate_per_instance_hour * repair.mean_hours_
    return {
        "spares": models.spares_needed(mean_in_repair, probability),
        "probability": probability,
        "mean_in_repair": mean_in_repair,
        "mttr_hours": repair.mean_hours_,
        "mttr_restricted": repair.mean_restricted_,
        "instances": instances,
        "rate_per_instance_hour": rate_per_instance_hour,
    }
