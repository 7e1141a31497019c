"""Views that set one estimate beside another: Slurm jobs against node rate x nodes, and this
fleet against public baselines (OPT-175B, MPT-7B, Llama 3.1, and any other analysed fleet passed
in, e.g. LANL's systems).
"""

from __future__ import annotations

from collections.abc import Mapping

import altair as alt
import polars as pl

from pipeline import datasets, models
from pipeline.analysis import RateAnalysis
from pipeline.report.charts import (
    PALETTE,
    WIDTH,
    ci_tooltips,
    cluster_color,
    clusters_by_size,
    percent_rate,
    percent_rate_tooltips,
    rate_on_interval,
)
from pipeline.report.format import interval_name

THIS_FLEET = "this fleet"
ALL_CLUSTERS = "all clusters"
PUBLISHED = "published GPU fleets"


def job_interruption_chart(job_interruptions: pl.DataFrame) -> alt.LayerChart:
    """Observed interruptions per job-hour by node-count bucket (with exact intervals) against
    node rate x nodes, the rate independent node failures predict (``JobAnalysis.interruptions``)."""
    data = job_interruptions.select(
        "nnodes_bucket",
        "jobs",
        "interruptions",
        "job_hours",
        "rate_per_job_hour",
        "rate_ci_low",
        "rate_ci_high",
        "expected_rate_per_job_hour",
        "ratio_to_node_model",
    )
    x = alt.X("nnodes_bucket:Q", scale=alt.Scale(type="log"), title="nodes per job (bucket)")
    y_title = f"interruptions per job-hour (95% CI, {interval_name('exact')}); line: node rate × nodes"
    base = alt.Chart(data).encode(x=x)
    return (
        base.mark_line(strokeDash=[6, 3], color="#555", point=alt.OverlayMarkDef(color="#555")).encode(
            y=alt.Y("expected_rate_per_job_hour:Q", title=y_title)
        )
        + base.mark_rule(color=PALETTE[0]).encode(y="rate_ci_low:Q", y2="rate_ci_high:Q")
        + base.mark_point(filled=True, size=70, color=PALETTE[0]).encode(
            y="rate_per_job_hour:Q",
            tooltip=[
                alt.Tooltip("nnodes_bucket:Q", title="nodes (bucket)"),
                "jobs:Q",
                "interruptions:Q",
                alt.Tooltip("job_hours:Q", format=",.0f", title="job-hours"),
                alt.Tooltip("rate_per_job_hour:Q", format=".3g", title="per job-hour"),
                *ci_tooltips("rate_ci_low", "rate_ci_high", ".3g"),
                alt.Tooltip("expected_rate_per_job_hour:Q", format=".3g", title="node rate × nodes"),
                alt.Tooltip("ratio_to_node_model:Q", format=".2f", title="observed / expected"),
            ],
        )
    ).properties(width=WIDTH, height=260)


def baselines(rates: RateAnalysis, others: Mapping[str, RateAnalysis] | None = None) -> pl.DataFrame:
    """:func:`pipeline.datasets.public_baselines` for this fleet's rates (each cluster, plus all
    clusters as one row) and ``others``'s, with ``series`` (the colour) and ``label`` (the row) added.

    This fleet's rows are its own figures: each cluster's from its rate table, the whole fleet's
    from ``rates_overall`` (the summary card's), all with the analysis' interval. A fleet of one
    cluster is one row, the whole fleet named by its cluster: two rows of the same failures and
    hours would be one fact shown twice."""
    table = datasets.public_baselines({THIS_FLEET: rates, **(others or {})})
    whole = rates.overall.row(0, named=True)
    instances = float(rates.cluster_mtbf["instances"].sum())
    clusters = rates.by_cluster["cluster_id"]
    if clusters.len() == 1:
        table = table.filter(~((pl.col("source") == THIS_FLEET) & (pl.col("fleet") == clusters[0])))
    fleet = pl.DataFrame(
        {
            "source": THIS_FLEET,
            "fleet": clusters[0] if clusters.len() == 1 else ALL_CLUSTERS,
            "instances": instances,
            "failures": whole["failures"],
            "exposure_node_hours": whole["exposure_node_hours"],
            "rate_per_node_hour": whole["rate_per_node_hour"],
            "rate_ci_low": whole["rate_ci_low"],
            "rate_ci_high": whole["rate_ci_high"],
            "interval": rates.interval_method,
            "mtbf_hours": models.cluster_mtbf_hours(whole["rate_per_node_hour"], instances),
            "mtbf_ci_low_hours": models.cluster_mtbf_hours(whole["rate_ci_high"], instances),
            "mtbf_ci_high_hours": models.cluster_mtbf_hours(whole["rate_ci_low"], instances),
        },
        schema=table.schema,
    )
    published = pl.col("source").is_in([f.source for f in datasets.PUBLISHED_GPU_FLEETS])
    mine = pl.col("source") == THIS_FLEET
    whole_fleet = mine & (pl.col("fleet") == fleet["fleet"][0])
    group = pl.when(published).then(0).when(whole_fleet).then(1).when(mine).then(2).otherwise(3)
    return (
        pl.concat([table, fleet])
        .sort(group, maintain_order=True)
        .with_columns(
            series=pl.when(published)
            .then(pl.lit(PUBLISHED))
            .when(whole_fleet)
            .then(pl.lit(THIS_FLEET))
            .when(mine)
            .then("fleet")
            .otherwise("source"),
            label=pl.when(published)
            .then(pl.format("{} (published)", "fleet"))
            .otherwise(pl.format("{} · {}", "source", "fleet")),
        )
    )


def baseline_ci_words(table: pl.DataFrame) -> str:
    """The words for the intervals of ``table`` (:func:`baselines`): "95% CI, <method>" when every
    row has one method, else each method with the fleets it was used for."""
    whose = pl.when(pl.col("series") == PUBLISHED).then(pl.lit("the published fleets")).otherwise("source")
    methods = (
        table.select("interval", whose=whose)
        .unique(maintain_order=True)
        .group_by("interval", maintain_order=True)
        .agg("whose")
    )
    if methods.height == 1:
        return f"95% CI, {interval_name(methods['interval'][0])}"
    return "95% CI: " + "; ".join(
        f"{interval_name(method)} for {', '.join(names)}" for method, names in methods.iter_rows()
    )


def baseline_chart(rates: RateAnalysis, table: pl.DataFrame) -> alt.LayerChart:
    """Rates per instance-hour (%) with their intervals (:func:`baseline_ci_words`), log axis:
    published fleets, this fleet (all clusters, then each cluster in its colour), then other
    fleets, one colour per source."""
    clusters = clusters_by_size(rates)
    base_scale = cluster_color(clusters)
    extra = [
        PUBLISHED,
        THIS_FLEET,
        *table.filter(~pl.col("series").is_in([PUBLISHED, THIS_FLEET, *clusters]))["series"].unique(
            maintain_order=True
        ),
    ]
    spare = [PALETTE[(len(clusters) + i) % len(PALETTE)] for i in range(len(extra) - 2)]
    scale = alt.Scale(
        domain=[*base_scale.domain, *extra], range=[*base_scale.range, "#888888", "#1d2330", *spare]
    )
    data = table.select(
        "label",
        "series",
        "source",
        "instances",
        "failures",
        "exposure_node_hours",
        "mtbf_hours",
        **percent_rate(),
    )
    y = alt.Y("label:N", sort=data["label"].to_list(), title=None, axis=alt.Axis(labelLimit=260))
    base = alt.Chart(data).encode(y=y, color=alt.Color("series:N", scale=scale, legend=None))
    return rate_on_interval(
        base,
        f"failures per 100 instance-hours (% per instance-hour), {baseline_ci_words(table)}",
        [
            alt.Tooltip("label:N", title="fleet"),
            alt.Tooltip("source:N"),
            alt.Tooltip("instances:Q", format=",.0f"),
            *percent_rate_tooltips(),
            alt.Tooltip("mtbf_hours:Q", format=".3g", title="fleet MTBF (h)"),
        ],
        scale=alt.Scale(type="log"),
    ).properties(width=WIDTH, height=alt.Step(20))
