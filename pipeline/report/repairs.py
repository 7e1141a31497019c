"""Report parts on outages and repair: repair-time survival by category, availability per
cluster, top downtime causes (tables with headers in words and units)."""

from __future__ import annotations

import math

import altair as alt
import numpy as np
import polars as pl

from pipeline import models
from pipeline.analysis import RepairAnalysis, repair_count_notes
from pipeline.report.charts import MAX_CURVE_POINTS, WIDTH, downsample
from pipeline.report.format import duration_text

TOP_CAUSES = 10


def has_repairs(repairs: RepairAnalysis) -> bool:
    """True when some outage has a completed repair (else the report says so in one line)."""
    return repairs.times is not None


def _hours(value: float) -> str:
    """A repair time with the table's digits and its unit (``25.1 h``, ``12.0 min``); an interval's
    end the data cannot bound is "unbounded"."""
    return "unbounded" if value == math.inf else duration_text(value)


def repair_curve_chart(repairs: RepairAnalysis) -> alt.Chart:
    """Kaplan–Meier share of outages still unrepaired after t hours, all and per category."""
    frames = []
    # the three columns the curves read, not every outage column in each category's group
    known = repairs.outages.select("category", "repair_hours", "resolved").drop_nulls("repair_hours")
    # categories in name order: the page's data does not change from run to run with Polars' hashing
    by_category = known.sort("category").group_by("category", maintain_order=True)
    groups = [("all outages", known), *((c, g) for (c,), g in by_category)]
    for label, group in groups:
        if not group["resolved"].any():
            continue
        fit = models.RepairTimes().fit(group["repair_hours"], group["resolved"])
        curve = pl.DataFrame(
            {"hours": np.maximum(fit.timeline_hours_, 0.1), "unrepaired": fit.survival_, "group": label}
        )
        frames.append(curve)
    # one budget of points for all curves, so the embedded data stays bounded
    per_curve = max(MAX_CURVE_POINTS // len(frames), 2)
    frames = [downsample(curve, per_curve) for curve in frames]
    data = pl.concat(frames).to_pandas()
    return (
        alt.Chart(data)
        .mark_line(interpolate="step-after")
        .encode(
            x=alt.X("hours:Q", scale=alt.Scale(type="log"), title="repair time (hours, log scale)"),
            y=alt.Y("unrepaired:Q", axis=alt.Axis(format="%"), title="outages not yet repaired"),
            color=alt.Color("group:N", title="category"),
            strokeWidth=alt.condition(alt.datum.group == "all outages", alt.value(3), alt.value(1.2)),
            tooltip=[
                "group:N",
                alt.Tooltip("hours:Q", format=",.1f"),
                alt.Tooltip("unrepaired:Q", format=".1%"),
            ],
        )
        .properties(width=WIDTH, height=300)
    )


def availability_table(repairs: RepairAnalysis) -> pl.DataFrame:
    """Per cluster: outages, downtime, availability, MTTR and median repair."""
    summary = repairs.summary(["cluster_id"])
    return summary.select(
        "cluster_id",
        "outages",
        "unresolved",
        "downtime_hours",
        "availability",
        "mttr_hours",
        "repair_hours_p50",
        "repair_hours_p90",
    )


def downtime_causes(repairs: RepairAnalysis) -> pl.DataFrame:
    """The categories that cost the most node-hours of downtime, largest first."""
    summary = repairs.summary(["category"])
    total = summary["downtime_hours"].sum() or 1.0
    return (
        summary.sort("downtime_hours", descending=True)
        .head(TOP_CAUSES)
        .select(
            pl.col("category").alias("root_cause"),
            "outages",
            "downtime_hours",
            (pl.col("downtime_hours") / total).alias("downtime_share"),
            "mttr_hours",
            "repair_hours_p50",
        )
    )


def repair_note(repairs: RepairAnalysis) -> str:
    """The verdict above the repair table, from the same summary as the table
    (:func:`pipeline.analysis.repair_summary`), so its counts are the table's: "not repaired by the
    window end" is the table's unresolved (open or still running, censored there); outages without
    a recorded end whose node failed again are left out of both and named on their own."""
    total = repairs.summary().row(0, named=True)
    low, high = total["repair_hours_p50_ci_low"], total["repair_hours_p50_ci_high"]
    note = (
        f"{total['outages']:,} outages; "
        f"{total['unresolved']:,} not repaired by the window end are right-censored there. Median repair "
        f"{_hours(total['repair_hours_p50'])} (95% CI {_hours(low)} to {_hours(high)}), MTTR "
        f"{_hours(total['mttr_hours'])}"
        + (" (restricted to the longest repair seen: a lower bound)" if total["mttr_restricted"] else "")
        + f". Rates use {repairs.exposure_basis} exposure"
        + (" (repair downtime is not time at risk)." if repairs.exposure_basis == "uptime" else ".")
    )
    if total["unknown_end"]:
        note += (
            f" {total['unknown_end']:,} outages without a recorded end whose node failed again are left out."
        )
    return " ".join([note, *(f"{line}." for line in repair_count_notes(total))])
