"""Report: one self-contained HTML file (Altair charts, Vega libraries inlined, no network).

Safety: everything from the logs (hostnames, cluster ids, categories, messages, file paths) is
attacker-controlled text. Table cells go through :func:`html.escape`; chart specs are embedded as
JSON inside ``<script type="application/json">`` with ``<``, ``>`` and ``&`` written as unicode
escapes, so no value can close the script element; Vega draws strings as SVG text, never markup.

Charts are drawn from aggregated frames only (one row per mark), so the file stays small however
many incidents the fleet has.
"""

from __future__ import annotations

import html
import json
import math
import platform
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import altair as alt
import numpy as np
import polars as pl
import vl_convert

import pipeline
from pipeline.analysis import FleetAnalysis

MAX_CURVE_POINTS = 300


@dataclass(frozen=True)
class Section:
    title: str
    chart: alt.TopLevelMixin | None
    table: pl.DataFrame | None = None
    note: str = ""


def _downsample(frame: pl.DataFrame, n: int = MAX_CURVE_POINTS) -> pl.DataFrame:
    if frame.height <= n:
        return frame
    idx = np.unique(np.linspace(0, frame.height - 1, n).round().astype(int))
    return frame[idx]


def rate_by_cluster_chart(analysis: FleetAnalysis) -> alt.Chart:
    data = (
        analysis.cluster_mtbf.select("cluster_id", "instances")
        .join(analysis.rates_by_cluster, on="cluster_id")
        .with_columns(
            pct_per_instance_hour=pl.col("rate_per_node_hour") * 100,
            ci_low_pct=pl.col("rate_ci_low") * 100,
            ci_high_pct=pl.col("rate_ci_high") * 100,
        )
    )
    base = alt.Chart(data).encode(y=alt.Y("cluster_id:N", sort=alt.SortField("instances"), title="cluster"))
    return (
        base.mark_rule().encode(
            x=alt.X(
                "ci_low_pct:Q", title="failures per 100 instance-hours (% per instance-hour), 95% exact CI"
            ),
            x2="ci_high_pct:Q",
        )
        + base.mark_point(filled=True, size=60).encode(
            x="pct_per_instance_hour:Q",
            tooltip=[
                "cluster_id:N",
                "instances:Q",
                "failures:Q",
                alt.Tooltip("exposure_node_hours:Q", format=",.0f"),
                alt.Tooltip("pct_per_instance_hour:Q", format=".4f"),
                alt.Tooltip("ci_low_pct:Q", format=".4f"),
                alt.Tooltip("ci_high_pct:Q", format=".4f"),
            ],
        )
    ).properties(width=560, height=30 * max(data.height, 3))


def rate_over_time_chart(analysis: FleetAnalysis) -> alt.Chart:
    data = analysis.rates_by_month.with_columns(
        pct=pl.col("rate_per_node_hour") * 100,
        low=pl.col("rate_ci_low") * 100,
        high=pl.col("rate_ci_high") * 100,
    )
    base = alt.Chart(data).encode(
        x=alt.X("period:T", title="month"), color=alt.Color("cluster_id:N", title="cluster")
    )
    return (
        base.mark_area(opacity=0.15).encode(y="low:Q", y2="high:Q")
        + base.mark_line(point=True).encode(
            y=alt.Y("pct:Q", title="% per instance-hour"),
            tooltip=["cluster_id:N", "period:T", "failures:Q", alt.Tooltip("pct:Q", format=".4f")],
        )
    ).properties(width=560, height=260)


def category_chart(analysis: FleetAnalysis) -> alt.Chart:
    data = analysis.rates_by_category.with_columns(share=pl.col("failures") / pl.col("failures").sum())
    return (
        alt.Chart(data)
        .mark_bar()
        .encode(
            x=alt.X("share:Q", axis=alt.Axis(format="%"), title="share of interruptions"),
            y=alt.Y("category:N", sort="-x", title="root cause"),
            tooltip=["category:N", "failures:Q", alt.Tooltip("share:Q", format=".1%")],
        )
        .properties(width=560, height=24 * max(data.height, 3))
    )


def survival_chart(analysis: FleetAnalysis) -> alt.Chart:
    km = analysis.kaplan_meier
    curve = _downsample(
        pl.DataFrame(
            {
                "hours": km.timeline_hours_,
                "survival": km.survival_,
                "low": km.confidence_interval_[0],
                "high": km.confidence_interval_[1],
            }
        )
    )
    grid = np.linspace(0, float(km.timeline_hours_.max()), 120)
    fitted = []
    for family in sorted({"exponential", analysis.best_family}):
        fit = analysis.node_fits[family]
        fitted.append(
            pl.DataFrame({"hours": grid, "survival": _survival(fit, grid), "model": f"{family} fit"})
        )
    fits = pl.concat(fitted)
    band = alt.Chart(curve).mark_area(opacity=0.2).encode(x="hours:Q", y="low:Q", y2="high:Q")
    steps = (
        alt.Chart(curve)
        .mark_line(interpolate="step-after", color="black")
        .encode(
            x=alt.X("hours:Q", title="hours since the node's previous failure"),
            y=alt.Y("survival:Q", title="P(no failure yet)"),
            tooltip=[alt.Tooltip("hours:Q", format=".0f"), alt.Tooltip("survival:Q", format=".3f")],
        )
    )
    lines = (
        alt.Chart(fits)
        .mark_line(strokeDash=[6, 3])
        .encode(x="hours:Q", y="survival:Q", color=alt.Color("model:N", title="fitted"))
    )
    return (band + steps + lines).properties(width=560, height=260)


def _survival(fit, hours: np.ndarray) -> np.ndarray:
    p = fit.params_
    if fit.family == "exponential":
        return np.exp(-hours / p["lambda_"])
    if fit.family == "weibull":
        return np.exp(-((hours / p["lambda_"]) ** p["rho_"]))
    if fit.family == "lognormal":
        from scipy.stats import norm

        return norm.sf((np.log(np.maximum(hours, 1e-12)) - p["mu_"]) / p["sigma_"])
    return 1 / (1 + (hours / p["alpha_"]) ** p["beta_"])


def scaling_chart(analysis: FleetAnalysis) -> alt.Chart:
    observed = analysis.cluster_mtbf
    axis_x = alt.X("instances:Q", scale=alt.Scale(type="log"), title="instances in the cluster")
    axis_y = alt.Y("mtbf_hours:Q", scale=alt.Scale(type="log"), title="cluster MTBF (hours)")
    points = (
        alt.Chart(observed)
        .mark_point(filled=True, size=70)
        .encode(
            x=axis_x,
            y=axis_y,
            tooltip=[
                "cluster_id:N",
                alt.Tooltip("instances:Q", format=".0f"),
                "failures:Q",
                alt.Tooltip("mtbf_hours:Q", format=".2f"),
                alt.Tooltip("mtbf_ci_low_hours:Q", format=".2f"),
                alt.Tooltip("mtbf_ci_high_hours:Q", format=".2f"),
            ],
        )
    )
    bars = (
        alt.Chart(observed)
        .mark_rule()
        .encode(x="instances:Q", y="mtbf_ci_low_hours:Q", y2="mtbf_ci_high_hours:Q")
    )
    chart = bars + points
    if analysis.scaling is not None:
        fit = analysis.scaling_projection
        chart = (
            alt.Chart(fit)
            .mark_area(opacity=0.15)
            .encode(x=axis_x, y="mtbf_ci_low_hours:Q", y2="mtbf_ci_high_hours:Q")
            + alt.Chart(fit)
            .mark_line(strokeDash=[6, 3])
            .encode(
                x=axis_x,
                y=axis_y,
                tooltip=[alt.Tooltip("instances:Q", format=".0f"), alt.Tooltip("mtbf_hours:Q", format=".2f")],
            )
            + chart
        )
    return chart.properties(width=560, height=300)


def _fmt(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isinf(value) or math.isnan(value):
            return str(value)
        return f"{value:,.6g}" if abs(value) < 1e-2 else f"{value:,.4g}"
    return str(value)


def table_html(frame: pl.DataFrame, limit: int = 50) -> str:
    """An escaped HTML table of at most ``limit`` rows (every cell is treated as hostile text)."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in frame.columns)
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row) + "</tr>"
        for row in frame.head(limit).iter_rows()
    )
    more = f"<p class='more'>{frame.height - limit} more rows not shown.</p>" if frame.height > limit else ""
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>{more}"


def _script_json(spec: dict) -> str:
    """JSON that cannot end a <script> element, whatever strings it holds."""
    return json.dumps(spec).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def summary_cards(analysis: FleetAnalysis) -> list[tuple[str, str, str]]:
    rate = analysis.fleet_rate
    low, high = rate.confidence_interval_
    cards = [
        (
            "Fleet interruption rate",
            f"{rate.rate_ * 100:.4f}% per instance-hour",
            f"95% CI {low * 100:.4f}–{high * 100:.4f}%, {rate.failures_:,} failures in "
            f"{rate.exposure_hours_:,.0f} instance-hours",
        ),
        ("Best time-between-failures model", analysis.best_family, _shape_note(analysis)),
    ]
    if analysis.scaling is not None:
        s = analysis.scaling
        cards.append(
            (
                "MTBF scaling exponent α",
                f"{s.alpha_:.2f}",
                f"95% CI {s.alpha_confidence_interval_[0]:.2f}–"
                f"{s.alpha_confidence_interval_[1]:.2f} (1 = independent failures)",
            )
        )
        row = analysis.scaling_projection.filter(pl.col("instances") == 512)
        if row.height:
            r = row.row(0, named=True)
            cards.append(
                (
                    "Projected MTBF at 512 instances",
                    f"{r['mtbf_hours']:.1f} h",
                    f"95% CI {r['mtbf_ci_low_hours']:.1f}–{r['mtbf_ci_high_hours']:.1f} h",
                )
            )
    return cards


def _shape_note(analysis: FleetAnalysis) -> str:
    weibull = analysis.node_fits["weibull"]
    low, high = weibull.confidence_interval_["rho_"]
    verdict = (
        "decreasing hazard (infant mortality)"
        if high < 1
        else "increasing hazard (wear-out)"
        if low > 1
        else "consistent with a constant rate"
    )
    return f"Weibull shape {weibull.shape_:.2f} (95% CI {low:.2f}–{high:.2f}): {verdict}"


def sections(analysis: FleetAnalysis) -> list[Section]:
    return [
        Section("Failure rate by cluster", rate_by_cluster_chart(analysis), analysis.rates_by_cluster),
        Section("Failure rate over time", rate_over_time_chart(analysis)),
        Section(
            "Root causes of interruptions",
            category_chart(analysis),
            analysis.rates_by_category.select(
                "category", "failures", "rate_per_node_hour", "rate_ci_low", "rate_ci_high"
            ),
        ),
        Section(
            "Time between failures per node: Kaplan–Meier and fitted models",
            survival_chart(analysis),
            pl.DataFrame(
                [
                    {
                        "family": f,
                        "mtbf_hours": m.mtbf_hours_,
                        "mtbf_ci_low_hours": m.mtbf_confidence_interval_[0],
                        "mtbf_ci_high_hours": m.mtbf_confidence_interval_[1],
                        "aic": m.aic_,
                    }
                    for f, m in analysis.node_fits.items()
                ]
            ),
        ),
        Section(
            "Cluster MTBF against cluster size",
            scaling_chart(analysis),
            analysis.cluster_mtbf,
            note="Dashed: MTBF(N) = MTBF₁ / N^α fitted by Poisson regression, with its 95% band.",
        ),
    ]


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;
padding:0 1rem;color:#1d2330}
h1{margin-bottom:.2rem}.sub{color:#5b6475;margin-top:0}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(240px,1fr));gap:.8rem}
.card{border:1px solid #d8dde6;border-radius:8px;padding:.7rem 1rem}
.card .k{font-size:.85rem;color:#5b6475}.card .v{font-size:1.35rem;font-weight:600}
.card .n{font-size:.8rem;color:#5b6475}
section{margin-top:2rem}table{border-collapse:collapse;font-size:.82rem;margin-top:.6rem}
td,th{border:1px solid #d8dde6;padding:.2rem .45rem;text-align:right}
th{background:#f3f5f9}td:first-child,th:first-child{text-align:left}
.more,.note{font-size:.8rem;color:#5b6475}
"""


def render_html(analysis: FleetAnalysis, *, title: str = "failcast reliability report") -> str:
    parts, specs = [], []
    for i, section in enumerate(sections(analysis)):
        parts.append(f"<section><h2>{html.escape(section.title)}</h2>")
        if section.chart is not None:
            specs.append(section.chart.to_dict())
            parts.append(
                f'<div class="chart" id="chart-{i}"></div>'
                f'<script type="application/json" id="spec-{i}">'
                f"{_script_json(specs[-1])}</script>"
            )
        if section.note:
            parts.append(f"<p class='note'>{html.escape(section.note)}</p>")
        if section.table is not None:
            parts.append(table_html(section.table))
        parts.append("</section>")
    cards = "".join(
        f"<div class='card'><div class='k'>{html.escape(k)}</div><div class='v'>{html.escape(v)}"
        f"</div><div class='n'>{html.escape(n)}</div></div>"
        for k, v, n in summary_cards(analysis)
    )
    provenance = table_html(
        analysis.files.select(
            "path",
            "sha256",
            "kind",
            "format",
            "rows_read",
            "rows_ingested",
            "rows_duplicate",
            "rows_rejected",
            "ingested_at_utc",
        )
    )
    rejects = table_html(analysis.rejects.select("path", "line", "reason", "raw"), limit=20)
    versions = (
        f"failcast {pipeline.__version__} · Python {platform.python_version()} · "
        f"polars {pl.__version__} · altair {alt.__version__}"
    )
    bundle = vl_convert.javascript_bundle().replace("</script", "<\\/script")
    embed = (
        "document.querySelectorAll('div.chart').forEach(function(el){"
        "var spec=JSON.parse(document.getElementById(el.id.replace('chart','spec')).textContent);"
        "vegaEmbed(el,spec,{actions:false,renderer:'svg'}).catch(function(e){"
        "el.textContent='chart failed: '+e;console.error(e);});});"
    )
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title><style>{_CSS}</style>
<script>{bundle}</script></head><body>
<h1>{html.escape(title)}</h1>
<p class="sub">Observed until {html.escape(str(analysis.observed_until))} UTC · generated {now}</p>
<div class="cards">{cards}</div>
{"".join(parts)}
<section><h2>Provenance</h2><p class="note">{html.escape(versions)}</p>{provenance}
<h3>Rejected input lines ({analysis.rejects.height})</h3>{rejects}</section>
<script>{embed}</script>
</body></html>
"""


def write_report(
    analysis: FleetAnalysis, out_dir: Path | str, filename: str = "failcast-report.html"
) -> Path:
    """Write the HTML report; returns its path. Writes to a temp name first, then renames, so a
    reader never sees half a report."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target = out / filename
    tmp = target.with_suffix(".html.tmp")
    tmp.write_text(render_html(analysis), encoding="utf-8")
    tmp.replace(target)
    return target
