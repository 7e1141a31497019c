"""Backtest of the failure model on the fleet's own Slurm jobs: what each job was predicted to
suffer, from the data *before* it started only, beside what happened.

As-of rates. For a job starting at s on cluster c, the node interruption rate known at s is
``failures before s / node-hours accrued before s``: failures (node interruptions while the node
was in service) with timestamp strictly before s, and node-hours from the service intervals
clipped at s. Both are read from sorted cumulative arrays per cluster (``np.searchsorted`` on the
failure times, the piecewise-linear operating clock of the intervals), one pass per cluster and
no refit per job; the fleet's as-of rate is the same over all clusters.

Which rate (the rule): the job's cluster's as-of rate when that cluster had at least
``min_history_failures`` failures before the job started (default 10: the rate is then known to
about ±60% at 95%, the exact interval of 10 events spanning 0.48–1.84 times the estimate); else
the fleet's, under the same minimum; else the job has no prediction (``rate_source`` "no
history") and is counted, not scored. Jobs on clusters missing from the inventory use the fleet
rate. Jobs that never ran (no start, no or zero elapsed time, no nodes: "did not run") are counted,
not scored.

Prediction. Node failures independent at rate r: a job on n nodes is interrupted at rate
h = r n per job-hour (``hazard_per_hour``), and over the ``elapsed_hours`` it ran its expected
interruptions are Λ = h x elapsed (``expected_interruptions``). A job stops at its first
NODE_FAIL, so it has 0 or 1 interruptions and an interrupted job ran shorter than planned; the
martingale property of a counting process stopped at its first event gives
E[interrupted] = E[Λ] exactly, which is why the calibration compares observed interruptions
with the sum of Λ (:class:`pipeline.models.JobBacktest`), not with 1 − exp(−Λ) (that
probability needs the planned duration, which sacct's elapsed time no longer shows for an
interrupted job). ``p_interrupted`` = 1 − exp(−Λ) is kept per job for the Brier score.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from pipeline.transform.fleet import failures_in_service
from pipeline.transform.interruptions import _cumulative_exposure

MIN_HISTORY_FAILURES = 10
RATE_SOURCES = ("cluster", "fleet", "no history", "did not run")
SCORED = ("cluster", "fleet")


def _hours(column: str) -> pl.Expr:
    return pl.col(column).dt.epoch("us") / 3.6e9


def _as_of(failure_hours: np.ndarray, starts: np.ndarray, ends: np.ndarray, at: np.ndarray):
    """(failures strictly before ``at``, node-hours accrued by ``at``) for one group of nodes."""
    failures = np.searchsorted(np.sort(failure_hours), at, side="left")
    return failures, _cumulative_exposure(starts, ends, at) if starts.size else np.zeros_like(at)


def rates_as_of(
    failures: pl.DataFrame, exposure: pl.DataFrame, at: pl.DataFrame, *, column: str = "start_utc"
) -> pl.DataFrame:
    """``at`` with the failures and node-hours observed before its ``column`` time, in the row's
    ``cluster_id`` (``cluster_failures_before``, ``cluster_node_hours_before``: 0 for a cluster
    without inventory) and in the whole fleet (``fleet_failures_before``,
    ``fleet_node_hours_before``). ``failures`` are node interruptions (cluster_id, node_id,
    timestamp_utc); only those while the node was in service count, as in the rates."""
    served = failures_in_service(failures, exposure).select("cluster_id", t=_hours("timestamp_utc"))
    windows = exposure.select("cluster_id", a=_hours("start_utc"), b=_hours("end_utc"))
    frame = at.with_row_index("_row").with_columns(_t=_hours(column))
    t = frame["_t"].to_numpy()
    fleet = _as_of(served["t"].to_numpy(), windows["a"].to_numpy(), windows["b"].to_numpy(), t)
    cluster_failures, cluster_hours = np.zeros(t.size, np.int64), np.zeros(t.size)
    rows = frame["cluster_id"].to_numpy()
    for (cluster,), nodes in windows.group_by("cluster_id"):
        mask = rows == cluster
        if mask.any():
            times = served.filter(pl.col("cluster_id") == cluster)["t"].to_numpy()
            k, hours = _as_of(times, nodes["a"].to_numpy(), nodes["b"].to_numpy(), t[mask])
            cluster_failures[mask], cluster_hours[mask] = k, hours
    return frame.drop("_row", "_t").with_columns(
        cluster_failures_before=pl.Series(cluster_failures),
        cluster_node_hours_before=pl.Series(cluster_hours),
        fleet_failures_before=pl.Series(fleet[0].astype(np.int64)),
        fleet_node_hours_before=pl.Series(fleet[1]),
    )


def job_predictions(
    jobs: pl.DataFrame,
    failures: pl.DataFrame,
    exposure: pl.DataFrame,
    *,
    min_history_failures: int = MIN_HISTORY_FAILURES,
) -> pl.DataFrame:
    """One row per job: the as-of rate chosen by the rule of the module docstring
    (``rate_source``, one of ``RATE_SOURCES``; ``rate_per_node_hour``), ``hazard_per_hour``,
    ``expected_interruptions``, ``p_interrupted`` and what happened (``interrupted``). Only rows
    whose ``rate_source`` is in ``SCORED`` have predictions; the others say why not."""
    if min_history_failures < 1:
        raise ValueError("min_history_failures must be at least 1")
    ran = pl.col("start_utc").is_not_null() & (pl.col("elapsed_hours") > 0) & (pl.col("nnodes") >= 1)
    known = rates_as_of(
        failures,
        exposure,
        jobs.select(
            "cluster_id",
            "job_id",
            "start_utc",
            "elapsed_hours",
            "nnodes",
            pl.col("interrupted").fill_null(False),
        ),
    )
    source = (
        pl.when(~ran.fill_null(False))
        .then(pl.lit("did not run"))
        .when(pl.col("cluster_failures_before") >= min_history_failures)
        .then(pl.lit("cluster"))
        .when(pl.col("fleet_failures_before") >= min_history_failures)
        .then(pl.lit("fleet"))
        .otherwise(pl.lit("no history"))
    )
    rate = (
        pl.when(pl.col("rate_source") == "cluster")
        .then(pl.col("cluster_failures_before") / pl.col("cluster_node_hours_before"))
        .when(pl.col("rate_source") == "fleet")
        .then(pl.col("fleet_failures_before") / pl.col("fleet_node_hours_before"))
    )
    return (
        known.with_columns(rate_source=source)
        .with_columns(rate_per_node_hour=rate)
        .with_columns(hazard_per_hour=pl.col("rate_per_node_hour") * pl.col("nnodes"))
        .with_columns(expected_interruptions=pl.col("hazard_per_hour") * pl.col("elapsed_hours"))
        .with_columns(p_interrupted=1 - (-pl.col("expected_interruptions")).exp())
        .sort("start_utc", "cluster_id", "job_id")
    )


def rate_source_counts(predictions: pl.DataFrame) -> dict[str, int]:
    """Jobs per ``rate_source`` (every source, 0 when none): scored by the cluster's or the
    fleet's rate, or left out and why, so that the counts add up to the jobs ingested."""
    counts = dict(predictions.group_by("rate_source").len().iter_rows())
    return {source: int(counts.get(source, 0)) for source in RATE_SOURCES}
