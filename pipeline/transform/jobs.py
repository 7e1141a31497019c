"""Slurm job interruptions per job-hour against what independent node failures predict."""

from __future__ import annotations

import polars as pl

from pipeline.transform.fleet import poisson_interval, size_bucket


def job_interruption_rates(
    jobs: pl.DataFrame, node_rate_per_node_hour: float | pl.DataFrame, *, confidence: float = 0.95
) -> pl.DataFrame:
    """Interruptions per job-hour by node-count bucket (nearest power of two of ``nnodes``), with
    the exact interval, against what independent node failures predict.

    A job on n nodes is interrupted when any of its nodes fails, so under independence its rate
    per job-hour is n x the node rate r; over a bucket the expectation is
    ``sum(r * nnodes * elapsed) / sum(elapsed)``. ``ratio_to_node_model`` above 1 means jobs die
    more often than node failures explain (software, NCCL, storage), below 1 that some node
    failures do not kill jobs. A job ends at its first interruption, so interruptions / job-hours
    is the exponential MLE with censoring and the Garwood interval applies.

    ``node_rate_per_node_hour`` is one fleet rate, or a frame with ``cluster_id`` and
    ``rate_per_node_hour`` (e.g. ``failure_rates(...)`` by cluster) to use each job's cluster.
    ``jobs`` has the warehouse ``jobs`` columns; ``nnodes``, ``elapsed_hours``, ``interrupted``
    (and ``cluster_id`` with a per-cluster rate) are used. Jobs that never ran (no or zero
    elapsed time) are left out.
    """
    per_cluster = isinstance(node_rate_per_node_hour, pl.DataFrame)
    needed = {"nnodes", "elapsed_hours", "interrupted"} | ({"cluster_id"} if per_cluster else set())
    missing = needed - set(jobs.columns)
    if missing:
        raise ValueError(f"jobs frame lacks column(s) {', '.join(sorted(missing))}")
    ran = jobs.filter((pl.col("elapsed_hours") > 0) & (pl.col("nnodes") >= 1))
    if per_cluster:
        ran = ran.join(
            node_rate_per_node_hour.select("cluster_id", node_rate="rate_per_node_hour"),
            on="cluster_id",
            how="left",
        )
        unknown = ran.filter(pl.col("node_rate").is_null())["cluster_id"].unique().sort().to_list()
        if unknown:
            raise ValueError(f"no node failure rate for cluster(s) {', '.join(map(str, unknown))}")
    else:
        if not node_rate_per_node_hour > 0:
            raise ValueError("node_rate_per_node_hour must be positive")
        ran = ran.with_columns(node_rate=pl.lit(float(node_rate_per_node_hour)))
    rates = (
        ran.group_by(nnodes_bucket=size_bucket(pl.col("nnodes")))
        .agg(
            jobs=pl.len(),
            interruptions=pl.col("interrupted").fill_null(False).sum().cast(pl.Int64),
            job_hours=pl.col("elapsed_hours").sum(),
            node_hours=(pl.col("elapsed_hours") * pl.col("nnodes")).sum(),
            expected_interruptions=(pl.col("elapsed_hours") * pl.col("nnodes") * pl.col("node_rate")).sum(),
        )
        .sort("nnodes_bucket")
        .with_columns(mean_nnodes=pl.col("node_hours") / pl.col("job_hours"))
    )
    low, high = poisson_interval(rates["interruptions"].to_numpy(), rates["job_hours"].to_numpy(), confidence)
    return (
        rates.with_columns(
            rate_per_job_hour=pl.col("interruptions") / pl.col("job_hours"),
            rate_ci_low=pl.Series(low),
            rate_ci_high=pl.Series(high),
            expected_rate_per_job_hour=pl.col("expected_interruptions") / pl.col("job_hours"),
        )
        .with_columns(
            ratio_to_node_model=pl.col("rate_per_job_hour") / pl.col("expected_rate_per_job_hour"),
            ratio_ci_low=pl.col("rate_ci_low") / pl.col("expected_rate_per_job_hour"),
            ratio_ci_high=pl.col("rate_ci_high") / pl.col("expected_rate_per_job_hour"),
        )
        .drop("expected_interruptions")
    )
