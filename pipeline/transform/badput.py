"""Badput by cause: hours of job time that failures cost, per failure class ("what stops our jobs").

Two records of a loss, each read where it exists:

* **sacct jobs** ended by the infrastructure (``interrupted``: NODE_FAIL or BOOT_FAIL): the run
  from its start to the failure, ``lost_job_hours`` = ``elapsed_hours``, ``lost_node_hours`` =
  ``elapsed_hours`` x ``nnodes``. sacct has no checkpoint times, so this is an **upper bound**: the
  work before the job's last checkpoint was kept.
* **training restarts** (:func:`pipeline.transform.job_recoveries`): the job stood still from the
  failure to its restart, ``lost_job_hours`` = ``detect_hours`` + ``restart_hours`` (a part not
  measured counts 0: no watchdog line, the loss starts at detection; no restart, it ends there),
  ``lost_node_hours`` = that x the job's node count when a sacct record of the job gives it. A
  **lower bound**: the steps recomputed since the last checkpoint are not in the log.

A job in both (a training log whose job id is a sacct job's) counts from its training log only, which
measures the loss; its sacct record would count the same failure again.

Cause: the node failure (a row of ``failures``: node interruptions, one per failure whatever
records saw it) on one of the job's nodes (in the job's cluster, when the job names one) nearest
in time to the loss's moment, within ``window_minutes`` either side (sacct: the job's end;
restart: when the collective hung, else the detection); its ``failure_class``. Job nodes:
sacct's NodeList; for a training log the sacct job of the same id, else the node given at ingest
(``--node``). Without such a failure the class is the job's own evidence: ``nccl_timeout`` for a
restart whose watchdog fired, else ``undetermined`` (Slurm or the agent saw the job fail, no node
record says why); ``attributed`` says which.

Badput here is time a job held its nodes without progress because of a failure; the rest of a
job's wall time is its effective training time (ETTR's numerator in Kokolis et al., "Revisiting
Reliability in Large-Scale Machine Learning Research Clusters", HPCA 2025, arXiv 2410.21680, which
also attributes job failures to causes from scheduler records and node health checks).
"""

from __future__ import annotations

from datetime import timedelta

import polars as pl

from pipeline.transform.fleet import finest_time_unit

SOURCES = ("sacct job", "training restart")
BADPUT_SCHEMA = {
    "failure_class": pl.String,
    "measured_from": pl.String,
    "losses": pl.UInt32,
    "attributed": pl.UInt32,
    "lost_job_hours": pl.Float64,
    "lost_node_hours": pl.Float64,
    "losses_without_node_count": pl.UInt32,
}
_LOSS = {
    "loss": pl.UInt32,
    "measured_from": pl.String,
    "cluster_id": pl.String,
    "moment_utc": pl.Datetime("us"),
    "nodes": pl.List(pl.String),
    "nnodes": pl.Int64,
    "lost_job_hours": pl.Float64,
    "own_class": pl.String,
}
_LOSS_COLUMNS = {k: v for k, v in _LOSS.items() if k != "loss"}


def _sacct_losses(jobs: pl.DataFrame, logged_jobs: pl.Series) -> pl.DataFrame:
    ended = jobs.filter(pl.col("interrupted") & ~pl.col("job_id").is_in(logged_jobs.implode()))
    return ended.select(
        measured_from=pl.lit(SOURCES[0]),
        cluster_id="cluster_id",
        moment_utc=pl.col("end_utc"),
        nodes="nodes",
        nnodes="nnodes",
        lost_job_hours=pl.col("elapsed_hours").fill_null(0.0),
        own_class=pl.lit("undetermined"),
    )


def _restart_losses(recoveries: pl.DataFrame, jobs: pl.DataFrame) -> pl.DataFrame:
    sacct_nodes = jobs.group_by("job_id").agg(
        pl.col("cluster_id").first(), pl.col("nodes").first().alias("sacct_nodes"), pl.col("nnodes").first()
    )
    return recoveries.join(sacct_nodes, on="job_id", how="left").select(
        measured_from=pl.lit(SOURCES[1]),
        cluster_id="cluster_id",
        moment_utc=pl.coalesce("failed_utc", "detected_utc"),
        nodes=pl.coalesce("sacct_nodes", "nodes"),
        nnodes="nnodes",
        lost_job_hours=pl.col("detect_hours").fill_null(0.0) + pl.col("restart_hours").fill_null(0.0),
        own_class=pl.when(pl.col("failed_utc").is_not_null())
        .then(pl.lit("nccl_timeout"))
        .otherwise(pl.lit("undetermined")),
    )


def _nearest_failures(losses: pl.DataFrame, failures: pl.DataFrame, window: timedelta) -> pl.DataFrame:
    """Per loss with one (``loss``, ``node_class``): the class of the failure on one of its nodes
    (in its cluster, when it names one) nearest its moment within ``window`` either side, the
    earlier of two as near, then the first node by name.

    The nearest failure of a node is the latest at or before the moment or the earliest at or
    after it: two as-of joins per (loss, node), whose size is the losses' nodes (never every
    failure of a node for every loss on it, which grows as jobs x failures per node)."""
    unit = finest_time_unit(losses.schema["moment_utc"], failures.schema["timestamp_utc"])
    at = (
        losses.select("loss", "cluster_id", pl.col("moment_utc").dt.cast_time_unit(unit), node_id="nodes")
        .explode("node_id")
        .drop_nulls(["node_id", "moment_utc"])
        .sort("moment_utc")
    )
    events = failures.select(
        "node_id",
        "failure_class",
        pl.col("timestamp_utc").dt.cast_time_unit(unit),
        failure_cluster="cluster_id",
    ).sort("timestamp_utc")
    nearest = [
        part.join_asof(
            events,
            left_on="moment_utc",
            right_on="timestamp_utc",
            by_left=by,
            by_right=["failure_cluster" if key == "cluster_id" else key for key in by],
            strategy=strategy,
            check_sortedness=False,  # both sorted above; Polars cannot check it with by=
        ).select("loss", "moment_utc", "node_id", "timestamp_utc", "failure_class")
        for part, by in (
            (at.filter(pl.col("cluster_id").is_null()), ["node_id"]),  # a job naming no cluster: any
            (at.filter(pl.col("cluster_id").is_not_null()), ["cluster_id", "node_id"]),
        )
        for strategy in ("backward", "forward")
    ]
    return (
        pl.concat(nearest)
        .with_columns(gap=(pl.col("timestamp_utc") - pl.col("moment_utc")).abs())
        .filter(pl.col("gap") <= window)
        .sort("loss", "gap", "timestamp_utc", "node_id")
        .group_by("loss", maintain_order=True)
        .agg(pl.col("failure_class").first().alias("node_class"))
    )


def badput_by_class(
    jobs: pl.DataFrame,
    recoveries: pl.DataFrame,
    failures: pl.DataFrame,
    *,
    window_minutes: float = 30.0,
) -> pl.DataFrame:
    """Per failure class and ``measured_from`` (one of :data:`SOURCES`): ``losses``, how many
    were ``attributed`` to a node failure, ``lost_job_hours``, ``lost_node_hours`` (of the losses
    whose node count is known; null when none is) and ``losses_without_node_count``; largest loss
    first. See the module docstring.

    ``jobs``: the warehouse ``jobs`` columns ``cluster_id`` (null: any), ``job_id``,
    ``interrupted``, ``end_utc``, ``elapsed_hours``, ``nodes``, ``nnodes``. ``recoveries``:
    :func:`job_recoveries` rows plus ``nodes`` (the node given at ingest as a one-element list,
    null when none). ``failures``: node interruptions (``cluster_id``, ``node_id``,
    ``timestamp_utc``, ``failure_class``). Empty inputs give an empty frame (no data, nothing to
    draw)."""
    if window_minutes < 0:
        raise ValueError("window_minutes must not be negative")
    losses = (
        pl.concat(
            [
                _sacct_losses(jobs, recoveries["job_id"]).cast(_LOSS_COLUMNS),
                _restart_losses(recoveries, jobs).cast(_LOSS_COLUMNS),
            ]
        )
        .with_row_index("loss")
        .cast(_LOSS)
    )
    candidates = _nearest_failures(losses, failures, timedelta(minutes=window_minutes))
    return (
        losses.join(candidates, on="loss", how="left")
        .with_columns(failure_class=pl.coalesce("node_class", "own_class"))
        .group_by("failure_class", "measured_from")
        .agg(
            losses=pl.len(),
            attributed=pl.col("node_class").is_not_null().sum(),
            lost_job_hours=pl.col("lost_job_hours").sum(),
            lost_node_hours=(pl.col("lost_job_hours") * pl.col("nnodes")).sum(),
            losses_without_node_count=pl.col("nnodes").is_null().sum(),
        )
        .with_columns(  # no loss with a node count: unknown, not 0
            lost_node_hours=pl.when(pl.col("losses_without_node_count") < pl.col("losses")).then(
                "lost_node_hours"
            ),
            _total=pl.col("lost_job_hours").sum().over("failure_class"),
        )
        .sort("_total", "failure_class", "measured_from", descending=[True, False, False])
        .drop("_total")
        .cast(BADPUT_SCHEMA)
        .select(list(BADPUT_SCHEMA))
    )
