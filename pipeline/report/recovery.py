"""Report part on recovery times: measured (training-job logs, repair data) against the assumed
profiles that ``failcast project`` uses without ``--recovery measured``."""

from __future__ import annotations

import polars as pl

from pipeline import projection, transform
from pipeline.analysis import JobAnalysis, RepairAnalysis


def has_job_recoveries(jobs: JobAnalysis) -> bool:
    """True when training logs showed at least one job interruption (else nothing is added)."""
    return jobs.recoveries.height > 0


def recovery_table(jobs: JobAnalysis, repairs: RepairAnalysis) -> pl.DataFrame:
    """Per recovery time: the assumed hours per mode and the measured mean and median, with how
    many interruptions measured it. Detection and restart come from training-job logs; the manual
    mode's wait for a repair from the outages (MTTR)."""
    assumed = projection.DEFAULT_RECOVERY
    measured = transform.recovery_hours(jobs.recoveries)
    rows = []
    for measure, label in (("detect", "failure to detection"), ("restart", "detection to restart")):
        m = measured.row(by_predicate=pl.col("measure") == measure, named=True)
        rows.append(
            {
                "recovery time": label,
                "assumed, manual (h)": getattr(assumed["manual"], f"{measure}_hours"),
                "assumed, automatic (h)": getattr(assumed["automatic"], f"{measure}_hours"),
                "measured mean (h)": m["mean_hours"],
                "measured median (h)": m["median_hours"],
                "measured in": f"{m['measured']:,} of {m['interruptions']:,} job interruptions",
            }
        )
    fit = repairs.times
    rows.append(
        {
            "recovery time": "wait for repair (manual, no spare)",
            "assumed, manual (h)": assumed["manual"].replace_hours,
            "assumed, automatic (h)": None,
            "measured mean (h)": None if fit is None else fit.mean_hours_,
            "measured median (h)": None if fit is None else fit.median_hours_,
            "measured in": "no outage with an end" if fit is None else f"{repairs.outages:,} outages",
        }
    )
    return pl.DataFrame(rows).with_columns(pl.col(pl.Float64).round(2))


def recovery_note(jobs: JobAnalysis) -> str:
    count = jobs.recoveries["job_id"].n_unique()
    return (
        f"{jobs.recoveries.height:,} interruptions of {count:,} training job(s) from their logs: "
        "detection = NCCL watchdog line minus the time the collective had run (the hang's start); restart "
        "= the next rendezvous completion. Interruptions without a watchdog line or without a restart "
        "count but are not measured. failcast project --recovery measured uses the means (expected wall "
        "time takes the mean cost per failure) and the MTTR; everything else stays assumed."
    )
