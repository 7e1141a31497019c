"""Report sections: the reliability plots people expect — Weibull probability plot of node gaps,
mean cumulative function of failures per node over node age, Duane / Crow-AMSAA plot per
cluster. The points come from :mod:`pipeline.transform.reliability` (the MCF and Duane points
computed once in ``analyze``: :class:`pipeline.analysis.CountedFailures`); this module only draws."""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline import transform
from pipeline.analysis import FleetAnalysis, ReliabilityFits
from pipeline.report.charts import CLUSTER_TOOLTIP, WIDTH, ci_tooltips, cluster_color, clusters_by_size
from pipeline.report.section import Section
from pipeline.transform.reliability import MAX_POINTS

LINE = "#d1495b"
POINTS = "#4e79a7"


def weibull_chart(fits: ReliabilityFits) -> alt.LayerChart | None:
    km = fits.kaplan_meier
    points = transform.weibull_plot_points(km.timeline_hours_, km.survival_)
    if points.height < 2:
        return None
    fit = fits.node_fits["weibull"]
    line = transform.weibull_plot_line(
        fit.params_["lambda_"],
        fit.params_["rho_"],
        points["duration_hours"].min(),
        points["duration_hours"].max(),
    )
    x = alt.X("duration_hours:Q", scale=alt.Scale(type="log"), title="time between failures (hours, log)")
    y = alt.Y("weibull_y:Q", title="ln(−ln(1 − F)), F = share of gaps ended")
    return (
        alt.Chart(points.with_columns(pct=pl.col("failure_probability") * 100))
        .mark_point(filled=True, size=25, color=POINTS)
        .encode(
            x=x,
            y=y,
            tooltip=[
                alt.Tooltip("duration_hours:Q", format=",.1f", title="hours"),
                alt.Tooltip("pct:Q", format=".1f", title="share of gaps ended (%)"),
            ],
        )
        + alt.Chart(line).mark_line(color=LINE, strokeWidth=2).encode(x=x, y=y)
    ).properties(width=WIDTH, height=320)


def mcf_chart(mcf: pl.DataFrame) -> alt.LayerChart:
    data = mcf.with_columns(age_days=pl.col("age_hours") / 24)
    x = alt.X("age_days:Q", title="node age (days since first in service)")
    base = alt.Chart(data).encode(x=x)
    return (
        base.mark_area(opacity=0.2, color=POINTS).encode(y="ci_low:Q", y2="ci_high:Q")
        + base.mark_line(color=POINTS, point=alt.OverlayMarkDef(size=12, filled=True)).encode(
            y=alt.Y("mcf:Q", title="mean cumulative failures per node"),
            tooltip=[
                alt.Tooltip("age_days:Q", format=",.1f", title="age (days)"),
                alt.Tooltip("mcf:Q", format=".3f", title="failures per node"),
                *ci_tooltips("ci_low", "ci_high", ".3f"),
                alt.Tooltip("nodes_at_risk:Q", format=",.0f", title="nodes in service at this age"),
            ],
        )
    ).properties(width=WIDTH, height=320)


def duane_chart(points: pl.DataFrame, clusters: list[str]) -> alt.LayerChart:
    color = alt.Color("cluster_id:N", title="cluster", scale=cluster_color(clusters))
    x = alt.X("operating_node_hours:Q", scale=alt.Scale(type="log"), title="cumulative node-hours (log)")
    base = alt.Chart(points).encode(x=x, color=color)
    return (
        base.mark_point(filled=True, size=20).encode(
            y=alt.Y("cumulative_failures:Q", scale=alt.Scale(type="log"), title="cumulative failures (log)"),
            tooltip=[
                CLUSTER_TOOLTIP,
                alt.Tooltip("operating_node_hours:Q", format=",.0f", title="node-hours"),
                alt.Tooltip("cumulative_failures:Q", format=",.0f", title="failures"),
            ],
        )
        + base.mark_line(strokeDash=[4, 3]).encode(y="fitted_failures:Q")
    ).properties(width=WIDTH, height=320)


def reliability_sections(analysis: FleetAnalysis) -> list:
    """The three plots, each left out when its data are missing (too few gaps or failures). The
    MCF and the Duane plot draw the points ``analyze`` computed of the failures the rates count
    (``analysis.counted``: :class:`pipeline.analysis.CountedFailures`), so their totals are the
    rate and trend tables'."""
    out = []
    weibull = weibull_chart(analysis.fits)
    if weibull is not None:
        fit = analysis.fits.node_fits["weibull"]
        out.append(
            Section(
                "weibull-probability-plot",
                "Weibull probability plot of times between failures per node",
                weibull,
                note="Points: Kaplan–Meier plotting positions of the gaps (midpoints, censored gaps "
                f"counted), at most {MAX_POINTS} shown. Line: the fitted Weibull, "
                f"shape {fit.shape_:.3g} (its slope; the summary's figure). Points on the line mean the "
                "Weibull fits; a slope below 1 is infant mortality, above 1 wear-out.",
            )
        )
    mcf = analysis.counted.mcf
    if mcf.height:
        out.append(
            Section(
                "mean-cumulative-function",
                "Mean cumulative failures per node over node age",
                mcf_chart(mcf),
                note="Nelson's mean cumulative function with its robust 95% band (Lawless–Nadeau): "
                "failures per node by age, counting only nodes in service at each age. A straight line "
                "is a constant rate; bending up means nodes wear out, flattening means early failures "
                "burn in.",
            )
        )
    duane = analysis.counted.duane_points
    if duane.height:
        out.append(
            Section(
                "duane-crow-amsaa",
                "Duane / Crow-AMSAA plot: cumulative failures against operating node-hours",
                duane_chart(duane, clusters_by_size(analysis.rates)),
                note="Points: each cluster's failures on its operating clock (log-log). Dashed: the "
                "MIL-HDBK-189 power law N(t) = λt^β with the β of the trend tests; slope β = 1 is a "
                "constant rate, below 1 reliability growth, above 1 deterioration.",
            )
        )
    return out
