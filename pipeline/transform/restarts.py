"""Training-job interruptions and restarts -> measured detection and restart times (hours).

Input: the ``training-log`` events (:mod:`pipeline.readers.training_log`): columns ``job_id``,
``timestamp_utc``, ``category`` and ``message``. Per job, in time order:

* an **interruption** starts with a failure line (``nccl_timeout``, ``worker_group_failed`` or
  ``worker_group_unhealthy``) after the job's last restart; every further failure line before the
  next restart (the other ranks' watchdogs, the agent's worker-group failure) belongs to it;
* its **restart** is the first ``rendezvous_complete`` after it (one per agent; the first counts).

For an interruption:

* ``detected_utc`` = its first failure line;
* ``failed_utc`` = the earliest (watchdog line time - "ran for" ms) over its watchdog lines: the
  collective started hanging then (ProcessGroupNCCL's ``checkTimeout`` measures "ran for" from the
  work's start); NULL when no watchdog line says (a crash seen only by the agent);
* ``detect_hours`` = detected - failed (about the NCCL timeout, 10 min by default);
* ``restart_hours`` = restarted - detected; NULL when the log ends before a restart (the job gave
  up or the log was cut): such interruptions are counted, not measured.

The log's own times make these exact (no rounding); nothing here reads the warehouse.
"""

from __future__ import annotations

import polars as pl

FAILURE_KINDS = ("nccl_timeout", "worker_group_failed", "worker_group_unhealthy")
RESTART_KIND = "rendezvous_complete"
_RAN_FOR = r" ran for (\d+) milliseconds before timing out"
_HOUR_US = 3_600_000_000

RECOVERY_SCHEMA = {
    "job_id": pl.String,
    "failed_utc": pl.Datetime("us"),
    "detected_utc": pl.Datetime("us"),
    "restarted_utc": pl.Datetime("us"),
    "failure_lines": pl.UInt32,
    "first_kind": pl.String,
    "detect_hours": pl.Float64,
    "restart_hours": pl.Float64,
}


def job_recoveries(events: pl.DataFrame) -> pl.DataFrame:
    """One row per job interruption (see the module docstring), ordered by job and time."""
    rows = (
        events.lazy()
        .filter(pl.col("category").is_in([*FAILURE_KINDS, RESTART_KIND]))
        .select(
            "job_id",
            pl.col("timestamp_utc").cast(pl.Datetime("us")),
            "category",
            ran_for_ms=pl.col("message").str.extract(_RAN_FOR, 1).cast(pl.Int64, strict=False),
        )
        .with_columns(restart=pl.col("category") == RESTART_KIND)
        .sort("job_id", "timestamp_utc", "restart")  # a failure and a restart at one instant: failure first
        .with_columns(epoch=pl.col("restart").cast(pl.UInt32).cum_sum().over("job_id"))
    )
    restarts = (
        rows.filter("restart")
        .group_by("job_id", "epoch")
        .agg(restarted_utc=pl.col("timestamp_utc").min())
        .with_columns(pl.col("epoch") - 1)  # the restart that ends the previous epoch's interruption
    )
    failures = rows.filter(~pl.col("restart"))
    hanging_since = pl.col("timestamp_utc") - pl.duration(milliseconds=pl.col("ran_for_ms"))
    out = (
        failures.group_by("job_id", "epoch")
        .agg(
            failed_utc=hanging_since.min(),
            detected_utc=pl.col("timestamp_utc").min(),
            failure_lines=pl.len(),
            first_kind=pl.col("category").first(),
        )
        .join(restarts, on=["job_id", "epoch"], how="left")
        .with_columns(
            detect_hours=(pl.col("detected_utc") - pl.col("failed_utc")).dt.total_microseconds() / _HOUR_US,
            restart_hours=(pl.col("restarted_utc") - pl.col("detected_utc")).dt.total_microseconds()
            / _HOUR_US,
        )
        .sort("job_id", "detected_utc")
        .select(list(RECOVERY_SCHEMA))
        .collect()
    )
    return out.cast(RECOVERY_SCHEMA)


def recovery_hours(recoveries: pl.DataFrame) -> pl.DataFrame:
    """Per measure (``detect``, ``restart``): interruptions measured, mean and median hours, and
    interruptions without the measure. The projection uses the mean: expected wall time is linear
    in each failure's downtime, so its expectation needs the mean (a median would understate a
    right-skewed restart time); the median is shown beside it."""
    parts = []
    for measure in ("detect", "restart"):
        col = pl.col(f"{measure}_hours")
        parts.append(
            recoveries.select(
                measure=pl.lit(measure),
                interruptions=pl.len(),
                measured=col.count(),
                mean_hours=col.mean(),
                median_hours=col.median(),
            )
        )
    return pl.concat(parts).cast({"interruptions": pl.Int64, "measured": pl.Int64})
