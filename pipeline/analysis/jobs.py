"""Slurm jobs and training-job restarts from the warehouse: interruption rates, the backtest and badput."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import duckdb
import polars as pl

from pipeline import models, transform, warehouse
from pipeline.analysis.options import not_before


def read_jobs(con, *, since: datetime | None = None) -> pl.DataFrame | None:
    """The warehouse's Slurm jobs (those that started at or after ``since``, the window's start:
    :func:`pipeline.analysis.options.before_window` counts the others), or None for a warehouse
    file from before the jobs table."""
    try:
        return not_before(warehouse.table(con, "jobs"), since, "start_utc")
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


@dataclass(frozen=True)
class JobAnalysis:
    """The job part of an analysis (:class:`pipeline.analysis.FleetAnalysis` ``jobs``), what the
    job sections of the report take: Slurm job interruption rates against node rates
    (``interruptions``, None without jobs: :func:`job_interruptions`), the backtest of each job's
    predicted interruptions (``backtest``, None without jobs: :func:`job_backtest`), training-job
    interruptions with measured detection and restart hours (``recoveries``, empty without
    training logs: :func:`read_job_recoveries`) and the job hours lost per failure class
    (``badput``: :func:`job_badput`)."""

    interruptions: pl.DataFrame | None
    backtest: JobBacktestResult | None
    recoveries: pl.DataFrame
    badput: pl.DataFrame


def job_backtest(
    con,
    failures: pl.DataFrame,
    exposure: pl.DataFrame,
    *,
    min_history_failures: int = transform.MIN_HISTORY_FAILURES,
    since: datetime | None = None,
) -> JobBacktestResult | None:
    """Each Slurm job (started from ``since`` on) with its interruptions predicted from the
    failures and exposure before it started, against what happened
    (:class:`pipeline.models.JobBacktest`); None without jobs."""
    jobs = read_jobs(con, since=since)
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


def job_interruptions(
    con, rates_by_cluster: pl.DataFrame, *, since: datetime | None = None
) -> pl.DataFrame | None:
    """Slurm job interruption rates against each job's cluster node rate
    (:func:`pipeline.transform.job_interruption_rates`) of the jobs started from ``since`` on, or
    None without jobs. Jobs on clusters with no inventory (or no cluster_id) have no node rate to
    compare with and are left out."""
    jobs = read_jobs(con, since=since)
    if jobs is None:
        return None
    jobs = jobs.filter(pl.col("cluster_id").is_in(rates_by_cluster["cluster_id"].implode()))
    return transform.job_interruption_rates(jobs, rates_by_cluster) if jobs.height else None


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


def job_badput(
    con, failures: pl.DataFrame, recoveries: pl.DataFrame, *, since: datetime | None = None
) -> pl.DataFrame:
    """Job hours lost per failure class (:func:`pipeline.transform.badput_by_class`) from the Slurm
    jobs started from ``since`` on and the training restarts. A training log ingested with
    ``--node`` names its job's node (without it the reader stores ``job:<job_id>``, which names no
    node)."""
    jobs = read_jobs(con, since=since)
    jobs = pl.DataFrame(schema=_JOBS_FOR_BADPUT) if jobs is None else jobs.select(list(_JOBS_FOR_BADPUT))
    named = con.sql(
        "SELECT job_id, [min(node_id)] AS nodes FROM events"
        " WHERE source_format = ? AND node_id <> 'job:' || job_id GROUP BY job_id",
        params=[warehouse.JOB_SYMPTOMS_FORMAT],
    ).pl()
    recoveries = recoveries.join(named, on="job_id", how="left").with_columns(
        pl.col("nodes").cast(pl.List(pl.String))
    )
    # no job, no restart: no loss to attribute, and no failure rows to sort for it
    causes = failures.select("cluster_id", "node_id", "timestamp_utc", "failure_class")
    if jobs.is_empty() and recoveries.is_empty():
        causes = causes.clear()
    return transform.badput_by_class(jobs.cast(_JOBS_FOR_BADPUT), recoveries, causes)
