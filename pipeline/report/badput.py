"""Report section "What stops our jobs": job hours lost per failure class, from interrupted Slurm
jobs and training restarts (:func:`pipeline.transform.badput_by_class`). Listed with a note, not
drawn, when the warehouse has neither."""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.analysis import JobAnalysis
from pipeline.report.charts import PALETTE, WIDTH
from pipeline.report.format import duration_text
from pipeline.report.section import Section

SLUG = "what-stops-our-jobs"
TITLE = "What stops our jobs: job time lost by cause"


def badput_chart(badput: pl.DataFrame) -> alt.Chart:
    """One bar per failure class (largest loss on top), split by where the loss was measured."""
    order = (
        badput.group_by("failure_class")
        .agg(pl.col("lost_job_hours").sum())
        .sort("lost_job_hours", "failure_class", descending=[True, False])
    )
    return (
        alt.Chart(badput.select("failure_class", "measured_from", "losses", "lost_job_hours"))
        .mark_bar()
        .encode(
            x=alt.X("lost_job_hours:Q", title="job time lost (h)", stack="zero"),
            y=alt.Y("failure_class:N", sort=order["failure_class"].to_list(), title="cause"),
            color=alt.Color(
                "measured_from:N",
                title="measured from",
                scale=alt.Scale(domain=["sacct job", "training restart"], range=list(PALETTE[:2])),
            ),
            tooltip=[
                alt.Tooltip("failure_class:N", title="cause"),
                alt.Tooltip("measured_from:N", title="measured from"),
                alt.Tooltip("losses:Q", title="jobs stopped"),
                alt.Tooltip("lost_job_hours:Q", title="job time lost (h)", format=",.1f"),
            ],
        )
        .properties(width=WIDTH, height=24 * max(order.height, 3))
    )


def _note(badput: pl.DataFrame) -> str:
    total = float(badput["lost_job_hours"].sum())
    top = (
        badput.group_by("failure_class")
        .agg(pl.col("lost_job_hours").sum())
        .sort("lost_job_hours", "failure_class", descending=[True, False])
    )
    cls, hours = top.row(0)
    share = f" ({hours / total:.0%})" if total > 0 else ""
    by_source = dict(badput.group_by("measured_from").agg(pl.col("losses").sum()).iter_rows())
    unattributed = int(badput["losses"].sum() - badput["attributed"].sum())
    return (
        f"{cls} cost the most job time: {duration_text(hours)} of {duration_text(total)}{share}. "
        f"{by_source.get('sacct job', 0):,} Slurm jobs ended by a node failure (NODE_FAIL/BOOT_FAIL) count "
        "their whole run (an upper bound: sacct has no checkpoint times); "
        f"{by_source.get('training restart', 0):,} training restarts count failure to detection to "
        "restart (a lower bound: recomputed steps are not in the log); a job with a training log counts "
        "from its log only. Cause: the node failure on one of the job's nodes within 30 min of the "
        f"loss; {unattributed:,} losses had none and keep the job's own evidence (nccl_timeout when "
        "the watchdog fired, else undetermined). Node-hours need the job's node count (from sacct)."
    )


def badput_section(jobs: JobAnalysis):
    """The section: a chart and table where jobs or restarts exist, else a note naming the inputs."""
    if jobs.badput.height == 0:
        return Section(
            SLUG,
            TITLE,
            None,
            note="No job losses to show: no Slurm job ended by a node failure and no training-job "
            "restart. Ingest sacct output (failcast ingest --format sacct) or PyTorch training logs "
            "(--format training-log) to see which failures cost job time.",
        )
    return Section(SLUG, TITLE, badput_chart(jobs.badput), jobs.badput, note=_note(jobs.badput))
