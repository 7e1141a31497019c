"""What drives the failures: trend tests, root-cause shares per cluster, the nodes that fail most.

Each chart has a table builder beside it (the numbers people copy); both read only aggregated
frames of a :class:`FleetAnalysis` (one row per cluster, per cluster and category, or per node of
the top ``TOP_NODES``), never incidents.
"""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.analysis import FleetAnalysis
from pipeline.report.charts import CLUSTER_TOOLTIP, WIDTH, ci_tooltips, cluster_color, clusters_by_size

TOP_NODES = 20
# Crow-AMSAA verdicts: beta > 1 rising (failures come faster), < 1 falling (burn-in), else flat.
VERDICT_SHAPES = alt.Scale(
    domain=["rising", "falling", "flat"], range=["triangle-up", "triangle-down", "circle"]
)


def trend_table(analysis: FleetAnalysis) -> pl.DataFrame:
    """Per cluster (by size): Laplace and Crow-AMSAA statistics, p-values and verdicts."""
    order = pl.DataFrame({"cluster_id": clusters_by_size(analysis.rates)}).with_row_index("order")
    return (
        analysis.rates.trend_tests.join(order, on="cluster_id", how="left")
        .sort("order", "cluster_id", nulls_last=True)
        .drop("order", "observed_node_hours")
    )


def trend_chart(analysis: FleetAnalysis) -> alt.LayerChart:
    """Crow-AMSAA beta with its 95% interval per cluster against the flat line beta = 1."""
    data = trend_table(analysis).filter(pl.col("crow_beta").is_not_null())
    y = alt.Y("cluster_id:N", sort=data["cluster_id"].to_list(), title="cluster")
    color = alt.Color("cluster_id:N", scale=cluster_color(clusters_by_size(analysis.rates)), legend=None)
    x_title = "Crow-AMSAA β (95% CI): < 1 failures slow down, > 1 they speed up"
    base = alt.Chart(data).encode(y=y, color=color)
    flat = (
        alt.Chart(pl.DataFrame({"beta": [1.0]})).mark_rule(strokeDash=[4, 3], color="#555").encode(x="beta:Q")
    )
    return (
        flat
        + base.mark_rule(strokeWidth=2).encode(
            x=alt.X("crow_beta_ci_low:Q", title=x_title, scale=alt.Scale(zero=False)),
            x2="crow_beta_ci_high:Q",
        )
        + base.mark_point(filled=True, size=90).encode(
            x="crow_beta:Q",
            shape=alt.Shape("crow_verdict:N", scale=VERDICT_SHAPES, title="Crow-AMSAA verdict"),
            tooltip=[
                CLUSTER_TOOLTIP,
                "failures:Q",
                alt.Tooltip("crow_beta:Q", format=".3f", title="β"),
                *ci_tooltips("crow_beta_ci_low", "crow_beta_ci_high", ".3f", title="β 95% CI"),
                alt.Tooltip("crow_p_value:Q", format=".3g", title="Crow-AMSAA p"),
                alt.Tooltip("crow_verdict:N", title="Crow-AMSAA verdict"),
                alt.Tooltip("laplace_statistic:Q", format=".2f", title="Laplace U"),
                alt.Tooltip("laplace_p_value:Q", format=".3g", title="Laplace p"),
                alt.Tooltip("laplace_verdict:N", title="Laplace verdict"),
            ],
        )
    ).properties(width=WIDTH, height=30 * max(data.height, 3))


def category_share_chart(analysis: FleetAnalysis) -> alt.Chart:
    """Share of each cluster's interruptions by root cause with Clopper–Pearson intervals: one
    row per category, one dot per cluster (offset within the row, coloured per cluster)."""
    clusters = clusters_by_size(analysis.rates)
    data = analysis.rates.category_shares.filter(pl.col("share").is_not_null()).select(
        "cluster_id", "failure_class", "failures", "group_failures", "share", "share_ci_low", "share_ci_high"
    )
    categories = (
        data.group_by("failure_class")
        .agg(pl.col("failures").sum())
        .sort("failures", descending=True)["failure_class"]
    )
    color = alt.Color("cluster_id:N", title="cluster", scale=cluster_color(clusters))
    y = alt.Y("failure_class:N", sort=categories.to_list(), title="root cause")
    offset = alt.YOffset("cluster_id:N", sort=clusters)
    base = alt.Chart(data).encode(y=y, yOffset=offset, color=color)
    return (
        base.mark_rule().encode(
            x=alt.X(
                "share_ci_low:Q",
                axis=alt.Axis(format="%"),
                title="share of the cluster's interruptions (95% CI, exact Clopper–Pearson)",
            ),
            x2="share_ci_high:Q",
        )
        + base.mark_point(filled=True, size=30).encode(
            x="share:Q",
            tooltip=[
                CLUSTER_TOOLTIP,
                alt.Tooltip("failure_class:N", title="root cause"),
                "failures:Q",
                alt.Tooltip("group_failures:Q", title="cluster failures"),
                alt.Tooltip("share:Q", format=".1%"),
                *ci_tooltips("share_ci_low", "share_ci_high", ".1%"),
            ],
        )
    ).properties(width=WIDTH, height=alt.Step(7))


def category_share_table(analysis: FleetAnalysis) -> pl.DataFrame:
    """Llama 3's table per cluster: one row per root cause, its failures over all clusters, and
    per cluster (by size) ``share [low–high]`` as text."""
    cell = pl.format(
        "{}% [{}–{}%]",
        *((pl.col(c) * 100).round(1) for c in ("share", "share_ci_low", "share_ci_high")),
    )
    wide = (
        analysis.rates.category_shares.filter(pl.col("share").is_not_null())
        .with_columns(cell=cell)
        .pivot("cluster_id", index="failure_class", values="cell")
    )
    totals = analysis.rates.category_shares.group_by("failure_class").agg(pl.col("failures").sum())
    columns = [c for c in clusters_by_size(analysis.rates) if c in wide.columns]
    return (
        totals.join(wide, on="failure_class", how="left")
        .sort("failures", descending=True)
        .select("failure_class", "failures", *columns)
    )


def top_nodes(analysis: FleetAnalysis, n: int = TOP_NODES) -> pl.DataFrame:
    """The ``n`` nodes with the most failures, with what their cluster's rate predicts for their
    hours (``expected_failures``): a node far above it is a candidate for replacement."""
    clusters = analysis.rates.by_cluster.select("cluster_id", cluster_rate="rate_per_node_hour")
    return (
        analysis.nodes.rates.filter(pl.col("failures") > 0)
        .sort(
            ["failures", "rate_per_node_hour", "cluster_id", "node_id"], descending=[True, True, False, False]
        )
        .head(n)
        .join(clusters, on="cluster_id", how="left", maintain_order="left")
        .select(
            "cluster_id",
            "node_id",
            "failures",
            "exposure_node_hours",
            "rate_per_node_hour",
            "rate_ci_low",
            "rate_ci_high",
            expected_failures=pl.col("cluster_rate") * pl.col("exposure_node_hours"),
        )
    )


def top_nodes_chart(analysis: FleetAnalysis, n: int = TOP_NODES) -> alt.LayerChart:
    data = top_nodes(analysis, n).with_columns(node=pl.format("{} / {}", "cluster_id", "node_id"))
    y = alt.Y("node:N", sort=data["node"].to_list(), title="cluster / node")
    color = alt.Color("cluster_id:N", title="cluster", scale=cluster_color(clusters_by_size(analysis.rates)))
    base = alt.Chart(data).encode(y=y)
    bars = base.mark_bar().encode(
        x=alt.X("failures:Q", title="interrupting failures (tick: expected at the cluster's rate)"),
        color=color,
        tooltip=[
            CLUSTER_TOOLTIP,
            alt.Tooltip("node_id:N", title="node"),
            "failures:Q",
            alt.Tooltip("expected_failures:Q", format=".2f", title="expected at cluster rate"),
            alt.Tooltip("exposure_node_hours:Q", format=",.0f", title="node-hours"),
            alt.Tooltip("rate_per_node_hour:Q", format=".3g", title="rate per node-hour"),
            *ci_tooltips("rate_ci_low", "rate_ci_high", ".3g"),
        ],
    )
    expected = base.mark_tick(color="black", thickness=2).encode(x="expected_failures:Q")
    return (bars + expected).properties(width=WIDTH, height=alt.Step(18))
