"""Report parts on outages and repair: repair-time survival by category, availability per
cluster, top downtime causes (tables with headers in words and units)."""

from __future__ import annotations

import math

import altair as alt
import polars as pl

from pipeline.analysis import RepairAnalysis, repair_count_notes
from pipeline.report.charts import WIDTH
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
    """Kaplan–Meier share of outages still unrepaired after t hours, all and per category (the
    curves of the analysis, :attr:`RepairAnalysis.curves`, thinned there to the charts' budget)."""
    # a repair of 0 h at 0.1 h on the log scale
    data = repairs.curves.with_columns(hours=pl.col("hours").clip(lower_bound=0.1)).to_pandas()
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
    return repairs.by_cluster.select(
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
    summary = repairs.by_category
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
    """The verdict above the repair table, from the summary of the whole fleet made with the table's
    (:attr:`RepairAnalysis.total`, :func:`pipeline.analysis.repair_summary`), so its counts are the
    table's: "not repaired by the window end" is the table's unresolved (open or still running,
    censored there); outages without a recorded end whose node failed again are left out of both
    and named on their own."""
    total = repairs.total
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
