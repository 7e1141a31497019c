"""Fleet charts: Altair charts drawn from the aggregated frames of a :class:`FleetAnalysis`.

Every chart takes frames with one row per mark (curves are thinned to ``MAX_CURVE_POINTS``), so
a chart's embedded data never grows with the number of incidents. Colours are fixed per cluster
(ordered by size) and per recovery mode, so the same cluster or mode has the same colour in every
chart of a report.
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import numpy as np
import polars as pl

from pipeline.analysis import PROJECTED_SIZES, FleetAnalysis, RateAnalysis, ReliabilityFits
from pipeline.models import ParametricTBF
from pipeline.report.format import interval_name
from pipeline.transform import MAX_CURVE_POINTS as MAX_CURVE_POINTS  # the charts' budget
from pipeline.transform import downsample

WIDTH = 560

# Tableau 10: distinguishable, colour-blind friendlier than the Vega default for <= 10 clusters.
PALETTE = (
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
)  # fmt: skip
COUNT_LAW = "count model: MTBF₁ / N^α (Poisson)"
AFT_LAW = "Weibull AFT on log N"
# Manual recovery is the costly baseline (warm red), automatic the improvement (teal).
MODE_COLORS = {"manual": "#d1495b", "automatic": "#00798c"}
LAW_COLORS = {COUNT_LAW: "#555555", AFT_LAW: PALETTE[6]}


CLUSTER_TOOLTIP = alt.Tooltip("cluster_id:N", title="cluster")


def rate_on_interval(base: alt.Chart, title: str, tooltip: list, scale=alt.Undefined) -> alt.LayerChart:
    """A rate as a dot on the rule of its 95% interval, along x (``pct``, ``low``, ``high`` of
    :func:`percent_rate`): the rate charts of clusters and of the public baselines."""
    return base.mark_rule(strokeWidth=2).encode(
        x=alt.X("low:Q", scale=scale, title=title), x2="high:Q"
    ) + base.mark_point(filled=True, size=70).encode(x="pct:Q", tooltip=tooltip)


def ci_tooltips(low: str, high: str, fmt: str, title: str = "95% CI") -> list[alt.Tooltip]:
    """The two ends of a 95% interval as a chart's tooltips, in the words every chart uses."""
    return [
        alt.Tooltip(f"{low}:Q", format=fmt, title=f"{title} low"),
        alt.Tooltip(f"{high}:Q", format=fmt, title=f"{title} high"),
    ]


def percent_rate() -> dict[str, pl.Expr]:
    """A rate table's rate and 95% interval in % per instance-hour (the published figures' unit),
    as the rate charts plot them: ``pct``, ``low``, ``high`` (:func:`percent_rate_tooltips`)."""
    return {
        "pct": pl.col("rate_per_node_hour") * 100,
        "low": pl.col("rate_ci_low") * 100,
        "high": pl.col("rate_ci_high") * 100,
    }


def percent_rate_tooltips(hours: bool = True) -> list[alt.Tooltip]:
    """The tooltips of a :func:`percent_rate`: the failures, the instance-hours (``hours``) and the
    rate with its interval."""
    exposure = [alt.Tooltip("exposure_node_hours:Q", format=",.0f", title="instance-hours")] if hours else []
    rate = alt.Tooltip("pct:Q", format=".3g", title="% per instance-hour")
    return ["failures:Q", *exposure, rate, *ci_tooltips("low", "high", ".3g")]


def cluster_color(cluster_ids: Sequence[str]) -> alt.Scale:
    """One colour per cluster, in the given order (callers pass clusters sorted by size)."""
    ids = list(dict.fromkeys(cluster_ids))
    return alt.Scale(domain=ids, range=[PALETTE[i % len(PALETTE)] for i in range(len(ids))])


def mode_color(modes: Sequence[str]) -> alt.Scale:
    """The same colour for a recovery mode in every chart; unknown modes take palette colours."""
    spare = iter(c for c in PALETTE if c not in MODE_COLORS.values())
    names = list(dict.fromkeys(modes))
    return alt.Scale(domain=names, range=[MODE_COLORS.get(m) or next(spare) for m in names])


def clusters_by_size(rates: RateAnalysis) -> list[str]:
    """The clusters smallest first: the order of every chart's cluster colours."""
    return rates.cluster_mtbf.sort("instances", "cluster_id")["cluster_id"].to_list()


def rate_ci_words(rates: RateAnalysis) -> str:
    """ "95% CI, <method>" of the fleet's rate tables (``interval_method``: every rate of the
    analysis but the per-node ones), for axis titles and notes."""
    return f"95% CI, {interval_name(rates.interval_method)}"


def rate_by_cluster_chart(rates: RateAnalysis) -> alt.Chart:
    data = (
        rates.cluster_mtbf.select("cluster_id", "instances")
        .join(rates.by_cluster, on="cluster_id")
        .select("cluster_id", "instances", "failures", "exposure_node_hours", **percent_rate())
    )
    color = alt.Color("cluster_id:N", scale=cluster_color(clusters_by_size(rates)), legend=None)
    base = alt.Chart(data).encode(
        y=alt.Y("cluster_id:N", sort=alt.SortField("instances"), title="cluster"), color=color
    )
    return rate_on_interval(
        base,
        f"failures per 100 instance-hours (% per instance-hour), {rate_ci_words(rates)}",
        [CLUSTER_TOOLTIP, "instances:Q", *percent_rate_tooltips()],
    ).properties(width=WIDTH, height=30 * max(data.height, 3))


def rate_over_time_chart(analysis: FleetAnalysis) -> alt.Chart:
    data = analysis.rates.by_month.select("cluster_id", "period", "failures", **percent_rate())
    base = alt.Chart(data).encode(
        x=alt.X("period:T", title="month", axis=alt.Axis(format="%b %Y", tickCount="month")),
        color=alt.Color(
            "cluster_id:N", title="cluster", scale=cluster_color(clusters_by_size(analysis.rates))
        ),
    )
    return (
        base.mark_area(opacity=0.12).encode(y="low:Q", y2="high:Q")
        + base.mark_line(point=True).encode(
            y=alt.Y("pct:Q", title=f"% per instance-hour (band: {rate_ci_words(analysis.rates)})"),
            tooltip=[
                CLUSTER_TOOLTIP,
                alt.Tooltip("period:T", title="month", format="%Y-%m"),
                *percent_rate_tooltips(hours=False),
            ],
        )
    ).properties(width=WIDTH, height=260)


def category_table(analysis: FleetAnalysis) -> pl.DataFrame:
    """Root causes like Llama 3's table: count, share of interruptions, rate with interval."""
    return (
        analysis.rates.by_category.with_columns(share=pl.col("failures") / pl.col("failures").sum())
        .select("failure_class", "failures", "share", "rate_per_node_hour", "rate_ci_low", "rate_ci_high")
        .sort("failures", descending=True)
    )


def recorded_categories_note(analysis: FleetAnalysis, limit: int = 12) -> str:
    """Root causes are grouped by failure class (a short list, comparable across fleets and with
    published tables); this names the fleet's own categories behind each class, most frequent
    first, with their interruptions, so a mapping can be checked (and fixed with [categories]).
    It counts the failures the table beside it counts (``counted.renamed_categories``, computed
    in ``analyze``), so a class's categories add up to its row."""
    renamed = analysis.counted.renamed_categories
    if renamed.is_empty():
        return "Grouped by failure class; every category was recorded under its class name."
    listed = "; ".join(f"{c} → {k} ({n:,})" for c, k, n in renamed.head(limit).iter_rows())
    more = f"; {renamed.height - limit} more" if renamed.height > limit else ""
    return f"Grouped by failure class. The fleet's own categories behind the classes: {listed}{more}."


def category_chart(analysis: FleetAnalysis) -> alt.Chart:
    data = category_table(analysis).select("failure_class", "failures", "share")
    return (
        alt.Chart(data)
        .mark_bar(color=PALETTE[0])
        .encode(
            x=alt.X("share:Q", axis=alt.Axis(format="%"), title="share of interruptions"),
            y=alt.Y("failure_class:N", sort="-x", title="root cause"),
            tooltip=[
                alt.Tooltip("failure_class:N", title="root cause"),
                "failures:Q",
                alt.Tooltip("share:Q", format=".1%"),
            ],
        )
        .properties(width=WIDTH, height=24 * max(data.height, 3))
    )


def survival_function(fit: ParametricTBF, hours: np.ndarray) -> np.ndarray:
    """S(t) of a fitted family in lifelines' parameterisation (for drawing only)."""
    p = fit.params_
    if fit.family == "exponential":
        return np.exp(-hours / p["lambda_"])
    if fit.family == "weibull":
        return np.exp(-((hours / p["lambda_"]) ** p["rho_"]))
    if fit.family == "lognormal":
        from scipy.stats import norm

        return norm.sf((np.log(np.maximum(hours, 1e-12)) - p["mu_"]) / p["sigma_"])
    return 1 / (1 + (hours / p["alpha_"]) ** p["beta_"])


def banded_curve(fit, **curve) -> pl.DataFrame:
    """A non-parametric fit's curve (Kaplan–Meier, Nelson–Aalen: one named column of values on its
    ``timeline_hours_``) with its 95% band (``low``, ``high``), downsampled for the page."""
    low, high = fit.confidence_interval_
    return downsample(pl.DataFrame({"hours": fit.timeline_hours_, **curve, "low": low, "high": high}))


def survival_chart(fits: ReliabilityFits) -> alt.Chart:
    km = fits.kaplan_meier
    curve = banded_curve(km, survival=km.survival_)
    grid = np.linspace(0, float(km.timeline_hours_.max()), 120)
    fits = pl.concat(
        pl.DataFrame(
            {
                "hours": grid,
                "survival": survival_function(fits.node_fits[f], grid),
                "model": f"{f} fit",
            }
        )
        for f in sorted({"exponential", fits.best_family})
    )
    x = alt.X("hours:Q", title="hours since the node's previous failure")
    band = alt.Chart(curve).mark_area(opacity=0.2, color="#888").encode(x=x, y="low:Q", y2="high:Q")
    steps = (
        alt.Chart(curve)
        .mark_line(interpolate="step-after", color="black")
        .encode(
            x=x,
            y=alt.Y("survival:Q", title="P(no failure yet)"),
            tooltip=[alt.Tooltip("hours:Q", format=".0f"), alt.Tooltip("survival:Q", format=".3f")],
        )
    )
    lines = (
        alt.Chart(fits)
        .mark_line(strokeDash=[6, 3])
        .encode(
            x=x,
            y="survival:Q",
            color=alt.Color("model:N", title="fitted", scale=alt.Scale(range=[PALETTE[2], PALETTE[0]])),
        )
    )
    return (band + steps + lines).properties(width=WIDTH, height=260)


def size_laws(fits: ReliabilityFits) -> pl.DataFrame:
    """Both fitted cluster-size laws in one long frame: law, instances, MTBF with 95% interval."""
    frames = [
        frame.with_columns(law=pl.lit(law))
        for law, model, frame in (
            (COUNT_LAW, fits.scaling, fits.scaling_projection),
            (AFT_LAW, fits.size_regression, fits.size_regression_projection),
        )
        if model is not None
    ]
    columns = ["law", "instances", "mtbf_hours", "mtbf_ci_low_hours", "mtbf_ci_high_hours"]
    return (
        pl.concat(frames).select(columns)
        if frames
        else pl.DataFrame(schema=dict.fromkeys(columns, pl.Float64))
    )


def size_law_table(analysis: FleetAnalysis) -> pl.DataFrame:
    """Projected cluster MTBF at ``PROJECTED_SIZES`` by each law, side by side."""
    laws = size_laws(analysis.fits).filter(pl.col("instances").is_in([float(n) for n in PROJECTED_SIZES]))
    out = pl.DataFrame({"instances": [float(n) for n in PROJECTED_SIZES]})
    for prefix, law in (("count", COUNT_LAW), ("aft", AFT_LAW)):
        part = laws.filter(law=law).drop("law")
        if part.height:
            out = out.join(
                part.rename(lambda c, p=prefix: c if c == "instances" else f"{p}_{c}"), on="instances"
            )
    return out.with_columns(pl.col("instances").cast(pl.Int64))


def size_law_layers(analysis: FleetAnalysis, axis_x: alt.X, axis_y: alt.Y) -> alt.LayerChart | None:
    """Each fitted law as a band and a dashed line, coloured per law (legend 'fitted law')."""
    laws = size_laws(analysis.fits)
    if laws.height == 0:
        return None
    names = laws["law"].unique(maintain_order=True).to_list()
    color = alt.Color(
        "law:N", title="fitted law", scale=alt.Scale(domain=names, range=[LAW_COLORS[n] for n in names])
    )
    base = alt.Chart(laws).encode(x=axis_x, color=color)
    return base.mark_area(opacity=0.12).encode(
        y="mtbf_ci_low_hours:Q", y2="mtbf_ci_high_hours:Q"
    ) + base.mark_line(strokeDash=[6, 3], point=True).encode(
        y=axis_y,
        tooltip=[
            alt.Tooltip("law:N", title="fitted law"),
            alt.Tooltip("instances:Q", format=",.0f"),
            alt.Tooltip("mtbf_hours:Q", format=".3g", title="fitted MTBF (h)"),
            *ci_tooltips("mtbf_ci_low_hours", "mtbf_ci_high_hours", ".3g"),
        ],
    )


def scaling_chart(analysis: FleetAnalysis) -> alt.LayerChart:
    """Observed cluster MTBF per cluster with both fitted size laws over it (log-log axes)."""
    observed = analysis.rates.cluster_mtbf.select(
        "cluster_id", "instances", "failures", "mtbf_hours", "mtbf_ci_low_hours", "mtbf_ci_high_hours"
    )
    axis_x = alt.X("instances:Q", scale=alt.Scale(type="log"), title="instances in the cluster")
    axis_y = alt.Y("mtbf_hours:Q", scale=alt.Scale(type="log"), title="cluster MTBF (hours)")
    color = alt.Color("cluster_id:N", title="cluster", scale=cluster_color(clusters_by_size(analysis.rates)))
    points = (
        alt.Chart(observed)
        .mark_point(filled=True, size=70)
        .encode(
            x=axis_x,
            y=axis_y,
            color=color,
            tooltip=[
                CLUSTER_TOOLTIP,
                alt.Tooltip("instances:Q", format=".0f"),
                "failures:Q",
                alt.Tooltip("mtbf_hours:Q", format=".2f", title="MTBF (h)"),
                *ci_tooltips("mtbf_ci_low_hours", "mtbf_ci_high_hours", ".2f"),
            ],
        )
    )
    bars = (
        alt.Chart(observed)
        .mark_rule()
        .encode(x=axis_x, y="mtbf_ci_low_hours:Q", y2="mtbf_ci_high_hours:Q", color=color)
    )
    laws = size_law_layers(analysis, axis_x, axis_y)
    chart = (
        bars + points if laws is None else alt.layer(laws, bars + points).resolve_scale(color="independent")
    )
    return chart.properties(width=WIDTH, height=300)


def cumulative_hazard_chart(fits: ReliabilityFits) -> alt.LayerChart:
    """Nelson–Aalen cumulative hazard with its band, and the exponential fit's straight line:
    a curve bending below the line is a hazard that falls with time (infant mortality)."""
    na = fits.nelson_aalen
    curve = banded_curve(na, cumulative_hazard=na.cumulative_hazard_)
    grid = np.linspace(0, float(na.timeline_hours_.max()), 60)
    line = pl.DataFrame(
        {"hours": grid, "cumulative_hazard": grid / fits.node_fits["exponential"].params_["lambda_"]}
    )
    x = alt.X("hours:Q", title="hours since the previous failure")
    return (
        alt.Chart(curve).mark_area(opacity=0.2, color="#888").encode(x=x, y="low:Q", y2="high:Q")
        + alt.Chart(curve)
        .mark_line(interpolate="step-after", color="black")
        .encode(
            x=x,
            y=alt.Y("cumulative_hazard:Q", title="cumulative hazard H(t)"),
            tooltip=[
                alt.Tooltip("hours:Q", format=".0f"),
                alt.Tooltip("cumulative_hazard:Q", format=".3f", title="H(t)"),
            ],
        )
        + alt.Chart(line).mark_line(strokeDash=[6, 3], color=PALETTE[2]).encode(x=x, y="cumulative_hazard:Q")
    ).properties(width=300, height=260)
