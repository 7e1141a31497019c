"""The report page: headline, chart sections with tables, provenance; plus PNG/SVG of each chart.

Safety: everything from the logs (hostnames, cluster ids, categories, messages, file paths) is
attacker-controlled text. Table cells and every other text go through :func:`html.escape`; chart
specs are embedded as JSON inside ``<script type="application/json">`` with ``<``, ``>`` and ``&``
written as unicode escapes, so no value can close the script element; Vega draws strings as SVG
text, never markup, and vega-tooltip escapes tooltip values.
"""

from __future__ import annotations

import html
import json
import math
import platform
from collections.abc import Mapping
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import altair as alt
import polars as pl
import vl_convert

from pipeline.analysis import PROJECTED_SIZES, FleetAnalysis, left_out_note
from pipeline.report.format import (
    column_label,
    duration_text,
    format_value,
    interval_name,
    timestamp_text,
)
from pipeline.report.outlook import JobOutlook, mode_card, saving_card
from pipeline.report.planning import spares_card
from pipeline.report.sections import Section, sections

REPORT_FILENAME = "failcast-report.html"
MAX_TIED_CAUSES = 3  # tied biggest causes named in the card's value; more are counted there
CHARTS_DIR = "charts"
VERSIONED_PACKAGES = ("failcast", "polars", "duckdb", "lifelines", "altair", "vl-convert-python")


_NUMERIC = " class='num'"


def table_html(frame: pl.DataFrame, limit: int = 50) -> str:
    """An escaped HTML table of at most ``limit`` rows (every cell is treated as hostile text), headers
    and numbers for people (:mod:`pipeline.report.format`)."""
    head = "".join(f"<th>{html.escape(column_label(c))}</th>" for c in frame.columns)
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td{_NUMERIC if isinstance(v, int | float) else ''}>{html.escape(format_value(c, v))}</td>"
            for c, v in zip(frame.columns, row, strict=True)
        )
        + "</tr>"
        for row in frame.head(limit).iter_rows()
    )
    more = f"<p class='more'>{frame.height - limit} more rows not shown.</p>" if frame.height > limit else ""
    return (
        f"<div class='table'><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>{more}"
    )


def _finite(value):
    """JSON has no infinity or NaN (the page would not parse): such values become null, not drawn."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def script_json(spec: dict) -> str:
    """JSON that cannot end a <script> element, whatever strings it holds."""
    return (
        json.dumps(_finite(spec), allow_nan=False)
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
    )


def summary_cards(
    analysis: FleetAnalysis, projection: JobOutlook | None = None
) -> list[tuple[str, str, str]]:
    """(title, value, note) of the headline cards: the numbers people quote."""
    overall = analysis.rates_overall.row(0, named=True)  # the rate table's figures, its interval
    low, high = (format_value("rate_ci_low", overall[k]) for k in ("rate_ci_low", "rate_ci_high"))
    hours = format_value("exposure_node_hours", overall["exposure_node_hours"])
    if analysis.has_failures:
        cards = [
            (
                "Fleet interruption rate",
                f"{format_value('rate_per_node_hour', overall['rate_per_node_hour'])} per instance-hour",
                f"95% CI {low}–{high}, {interval_name(analysis.interval_method)}; "
                f"{overall['failures']:,} failures in {hours} instance-hours",
            ),
            (
                (
                    "Best time-between-failures model",
                    analysis.best_family,
                    analysis.node_fits["weibull"].hazard_message_ or "",
                )
                if analysis.has_fits
                else ("Time between failures", "not fitted", analysis.too_few_gaps)
            ),
        ]
    else:
        bound = format_value("rate_upper_bound", overall["rate_upper_bound"])
        cards = [
            (
                "Fleet interruption rate",
                "no failures yet",
                f"upper bound {bound} per instance-hour (95% one-sided, 3.0 / T) after "
                f"{hours} instance-hours; nothing to fit",
            )
        ]
    cards += _cause_card(analysis)
    cards += _fleet_action_cards(analysis, projection)
    at = "" if analysis.has_failures else " at the upper-bound rate"
    cards += _scaling_cards(analysis, projection)
    cards += _trend_card(analysis)
    if projection is not None:
        for m in projection.modes.iter_rows(named=True):
            cards.append((f"Projected job{at}, {m['mode']} recovery", *mode_card(m)))
        for s in projection.savings.iter_rows(named=True):
            cards.append(
                (
                    f"{s['mode'].capitalize()} recovery saves",
                    saving_card(s),
                    f"{s['percent']:.1f}% of the {s['baseline']} training time",
                )
            )
    return cards


LEMON_CARD_NODES = 5


def _fleet_action_cards(analysis: FleetAnalysis, projection: JobOutlook | None) -> list[tuple[str, str, str]]:
    """What to act on: the lemon nodes to pull, and the hot spares the projected job needs."""
    cards = []
    lemons = analysis.lemons.lemons_
    if analysis.has_failures:
        names = lemons["node_id"].head(LEMON_CARD_NODES).to_list()
        more = f" and {lemons.height - len(names)} more" if lemons.height > len(names) else ""
        cards.append(
            (
                "Lemon nodes (fail more than their cluster)",
                f"{lemons.height:,} node{'s' if lemons.height != 1 else ''}" if lemons.height else "none",
                f"{', '.join(names)}{more}; drain list: failcast lemons --format hostlist. The test "
                "assumes Poisson counts per node: failures clustered in time add false alarms"
                if lemons.height
                else f"none of {analysis.lemons.table_.height:,} nodes at a {analysis.lemons.fdr:.0%} "
                "false-discovery rate",
            )
        )
    return cards + (spares_card(projection) if projection is not None else [])


def _cause_card(analysis: FleetAnalysis) -> list[tuple[str, str, str]]:
    """The root cause with the most interruptions, and its share; causes that tie for the most
    are named together (one picked would be a verdict the data do not give)."""
    causes = analysis.rates_by_category
    total = int(causes["failures"].sum()) if causes.height else 0
    if total == 0:
        return []
    most = int(causes["failures"].max())
    top = sorted(str(c) for c in causes.filter(pl.col("failures") == most)["failure_class"])
    each = f"{most:,} of {total:,} interruptions ({format_value('share', most / total)})"
    if len(top) == 1:
        return [("Biggest cause of interruptions", top[0], each)]
    value = ", ".join(top) if len(top) <= MAX_TIED_CAUSES else f"{len(top)} causes tie"
    return [("Biggest cause of interruptions", value, f"a tie: {', '.join(top)}, {each} each")]


def _scaling_cards(analysis: FleetAnalysis, projection: JobOutlook | None) -> list[tuple[str, str, str]]:
    """α of the count law (the AFT's α in the note: the two views should agree), and the cluster
    MTBF at the planned size: the job's, from the failure model its projection uses, else the
    smallest of ``PROJECTED_SIZES``; the law's MTBF at the other sizes people plan for in the note."""
    s, aft = analysis.scaling, analysis.size_regression
    cards, law = [], {}
    if s is not None:
        # 3 decimals, as the scaling section's note and failcast fit print them
        note = f"95% CI {s.alpha_confidence_interval_[0]:.3f}–{s.alpha_confidence_interval_[1]:.3f}"
        if aft is not None:
            low, high = aft.alpha_confidence_interval_
            note += f"; Weibull AFT view {aft.alpha_:.3f} ({low:.3f}–{high:.3f})"
        cards.append(("MTBF scaling exponent α", f"{s.alpha_:.3f}", f"{note} (1 = independent failures)"))
        projected = analysis.scaling_projection.filter(
            pl.col("instances").is_in([float(n) for n in PROJECTED_SIZES])
        )
        law = {int(r["instances"]): r for r in projected.iter_rows(named=True)}
    failure = projection.failure if projection is not None else None
    if failure is not None:
        n = projection.instances
        low, high = failure.rate_ci_low_per_instance_hour, failure.rate_ci_high_per_instance_hour
        interval = (
            f"95% CI {duration_text(1 / (n * high))}–{duration_text(1 / (n * low))}; " if low and high else ""
        )
        others = " · ".join(f"{k:,}: {duration_text(r['mtbf_hours'])}" for k, r in law.items() if k != n)
        cards.append(
            (
                f"Cluster MTBF at {n:,} instances (the job)",
                duration_text(failure.cluster_mtbf_hours(n)),
                f"{interval}source: {failure.source}" + (f"; scaling law at {others}" if others else ""),
            )
        )
    elif law:
        n = min(law)
        others = " · ".join(f"{k:,}: {duration_text(r['mtbf_hours'])}" for k, r in law.items() if k != n)
        cards.append(
            (
                f"Projected cluster MTBF at {n:,} instances",
                duration_text(law[n]["mtbf_hours"]),
                f"95% CI {duration_text(law[n]['mtbf_ci_low_hours'])}–"
                f"{duration_text(law[n]['mtbf_ci_high_hours'])} ({law_interval_words(s)}); {others}",
            )
        )
    return cards


def law_interval_words(law) -> str:
    """How a size law's interval was made: the count law's Poisson GLM, widened by the dispersion
    of every node's counts when they vary more than Poisson (:class:`pipeline.models.MTBFScaling`)."""
    if law.dispersion_ > 1:
        return (
            f"count-model scaling law, quasi-Poisson: widened by φ = {law.dispersion_:.2f} of every "
            "node's counts"
        )
    return "count-model scaling law, Poisson"


TREND_CARD_CLUSTERS = 3  # the card names the clusters with the strongest trends; the section has all


def _trend_card(analysis: FleetAnalysis) -> list[tuple[str, str, str]]:
    tested = analysis.trend_tests.filter(pl.col("crow_verdict").is_not_null())
    if tested.height == 0:
        return []
    moving = tested.filter(pl.col("crow_verdict") != "flat").sort("crow_p_value")
    detail = ", ".join(
        f"{c} {v} (β {format_value('crow_beta', b)})"
        for c, v, b in moving.head(TREND_CARD_CLUSTERS)
        .select("cluster_id", "crow_verdict", "crow_beta")
        .iter_rows()
    )
    if moving.height > TREND_CARD_CLUSTERS:
        detail += f" and {moving.height - TREND_CARD_CLUSTERS} more (see the trend section)"
    flat = tested.height - moving.height
    return [
        (
            "Failure-rate trend (Crow-AMSAA)",
            f"flat in {flat} of {tested.height} clusters",
            detail or "no cluster's rate is rising or falling at the 5% level",
        )
    ]


def versions() -> str:
    found = []
    for name in VERSIONED_PACKAGES:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} (not installed)")
    return " · ".join([*found, f"Vega-Lite {alt.SCHEMA_VERSION}", f"Python {platform.python_version()}"])


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;
padding:0 1rem;color:#1d2330}
h1{margin-bottom:.2rem}.sub{color:#5b6475;margin-top:0}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(240px,1fr));gap:.8rem}
.card{border:1px solid #d8dde6;border-radius:8px;padding:.7rem 1rem}
.card .k{font-size:.85rem;color:#5b6475}.card .v{font-size:1.35rem;font-weight:600}
.card .n{font-size:.8rem;color:#5b6475}
section{margin-top:2rem}.table{overflow-x:auto}table{border-collapse:collapse;font-size:.82rem;margin-top:.6rem}
td,th{border:1px solid #d8dde6;padding:.2rem .45rem;text-align:left}
th{background:#f3f5f9}td.num{text-align:right;font-variant-numeric:tabular-nums}
.banner{border:2px solid #b8860b;background:#fff4d6;border-radius:8px;padding:.7rem 1rem;
margin:1rem 0;font-weight:500}
.more,.note{font-size:.8rem;color:#5b6475}.toc ol{columns:2;font-size:.9rem}
pre{white-space:pre-wrap;font-size:.8rem}
.vega-bindings{display:grid;grid-template-columns:repeat(auto-fit,minmax(440px,1fr));gap:.3rem 1.5rem;
font-size:.85rem;margin-top:.6rem}.vega-bind-name{display:inline-block;width:15rem}
.vega-bind input{vertical-align:middle;width:11rem;margin-right:.4rem}#planner .vega-embed{width:100%}
"""

_EMBED = (
    "document.querySelectorAll('div.chart').forEach(function(el){"
    "var spec=JSON.parse(document.getElementById('spec-'+el.dataset.slug).textContent);"
    "vegaEmbed(el,spec,{actions:false,renderer:'svg'}).catch(function(e){"
    "el.textContent='chart failed: '+e;console.error(e);});});"
)


def _section_html(section: Section) -> str:
    parts = [f"<section id='{section.slug}'><h2>{html.escape(section.title)}</h2>"]
    if section.chart is not None:
        parts.append(
            f'<div class="chart" id="chart-{section.slug}" data-slug="{section.slug}"></div>'
            f'<script type="application/json" id="spec-{section.slug}">'
            f"{script_json(section.chart.to_dict())}</script>"
        )
    if section.note:
        parts.append(f"<p class='note'>{html.escape(section.note)}</p>")
    if section.table is not None:
        parts.append(table_html(section.table))
    parts.append("</section>")
    return "".join(parts)


ESTIMATED_EXPOSURE = (
    "Exposure estimated: no node inventory was ingested, so every node seen in the logs (incidents "
    "or Slurm jobs) is assumed in service from the first record in the data to the end of "
    "observation. Every rate, MTBF and projection below rests on those guessed instance-hours; nodes "
    "that never appear in the logs are missing, which makes rates too high. Ingest an inventory file "
    "(cluster_id, node_id, instance_type, gpus_per_node, in_service_from, in_service_to) for exact numbers."
)


def _banner(analysis: FleetAnalysis) -> str:
    """What changes the meaning of every number below, before them: estimated exposure, most
    failures left out (:func:`pipeline.analysis.left_out_warning`) and records that start long
    after the service (:func:`pipeline.record_checks.late_records`: rates too low, fits skewed)."""
    warnings = [ESTIMATED_EXPOSURE] if analysis.exposure_estimated else []
    if analysis.left_out_warning:
        warnings.append(f"Most failures are not in these numbers: {analysis.left_out_warning}.")
    warnings += [f"Warning: {late.describe()}." for late in analysis.late_records]
    return "".join(f"<div class='banner' role='alert'>{html.escape(w)}</div>" for w in warnings)


def _headline(analysis: FleetAnalysis, projection: JobOutlook | None) -> str:
    cards = "".join(
        f"<div class='card'><div class='k'>{html.escape(k)}</div><div class='v'>{html.escape(v)}"
        f"</div><div class='n'>{html.escape(n)}</div></div>"
        for k, v, n in summary_cards(analysis, projection)
    )
    mtbf = analysis.cluster_mtbf.select(
        pl.col("instances").round(1),
        "cluster_id",
        "failures",
        "mtbf_hours",
        "mtbf_ci_low_hours",
        "mtbf_ci_high_hours",
    )
    parts = [f"<div class='cards'>{cards}</div>"]
    if note := left_out_note(analysis.failures_left_out):
        parts.append(f"<p class='note'>{html.escape(note)}.</p>")
    parts.append(f"<h3>MTBF per cluster size</h3>{table_html(mtbf)}")
    if analysis.has_failures:
        parts.append(
            "<p class='note'>Cluster MTBF = cluster-hours / failures, with the 95% interval of the "
            f"cluster's rate ({html.escape(interval_name(analysis.interval_method))}: the rate table's "
            "figures).</p>"
        )
    if projection is None:
        parts.append(
            "<p class='note'>No job projection: run <code>failcast report --job JOB.toml</code> "
            "(see <code>failcast project --help</code>) to add training days and cost per recovery mode.</p>"
        )
    else:
        parts.append(
            f"<h3>Projection: {html.escape(projection.job)}"
            f"{'' if analysis.has_failures else ' (at the upper-bound failure rate: a worst case)'}</h3>"
            + table_html(
                projection.modes.select(
                    "mode",
                    "expected_days",
                    "cost_usd",
                    "goodput",
                    "expected_interruptions",
                    "p10_days",
                    "p50_days",
                    "p90_days",
                )  # fmt: skip
            )
        )
    return "".join(parts)


def _provenance(analysis: FleetAnalysis, projection: JobOutlook | None, generated_utc: str) -> str:
    files = table_html(
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
        )  # fmt: skip
    )
    rejects = (
        table_html(analysis.rejects.select("path", "line", "reason", "raw"), limit=20)
        if analysis.rejects.height
        else "<p class='note'>None: every input line was stored, a duplicate or ignored by a documented "
        "rule.</p>"
    )
    parts = [
        "<section id='provenance'><h2>Provenance</h2>",
        f"<p class='note'>Generated {html.escape(generated_utc)} · observed until "
        f"{html.escape(timestamp_text(analysis.observed_until))} · {html.escape(versions())}</p>",
        f"<h3>Input files</h3>{files}",
        f"<h3>Rejected input lines ({analysis.rejects.height})</h3>{rejects}",
    ]
    if projection is not None:
        parts.append(f"<h3>Projection assumptions</h3>{table_html(projection.assumptions)}")
        if projection.explanation:
            parts.append(f"<details><summary>How it is computed</summary><pre>"
                         f"{html.escape(projection.explanation)}</pre></details>")  # fmt: skip
    parts.append("</section>")
    return "".join(parts)


def render_html(
    analysis: FleetAnalysis,
    projection: JobOutlook | None = None,
    *,
    baselines: Mapping[str, FleetAnalysis] | None = None,
    title: str = "failcast reliability report",
) -> str:
    """The whole report as one HTML string that needs no network (Vega libraries inlined);
    ``baselines`` adds other analysed fleets to the public-baselines section."""
    return _page(analysis, projection, sections(analysis, projection, baselines), title)


def _contents(shown: list[Section], omitted: list[Section]) -> str:
    """A table of contents of the sections with data, then one line per section left out for lack
    of data, with its note (which says what input would fill it)."""
    links = "".join(f"<li><a href='#{s.slug}'>{html.escape(s.title)}</a></li>" for s in shown)
    parts = [f"<nav class='toc'><h2>Contents</h2><ol>{links}<li><a href='#provenance'>Provenance"
             "</a></li></ol>"]  # fmt: skip
    if omitted:
        items = "".join(
            f"<li>{html.escape(s.title)}: {html.escape(s.note or 'no data')}</li>" for s in omitted
        )
        parts.append(f"<p class='note'>Not shown, no data:</p><ul class='note omitted'>{items}</ul>")
    parts.append("</nav>")
    return "".join(parts)


def _page(analysis: FleetAnalysis, projection: JobOutlook | None, parts: list[Section], title: str) -> str:
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    until = html.escape(timestamp_text(analysis.observed_until))
    shown = [s for s in parts if s.chart is not None or s.table is not None]
    omitted = [s for s in parts if s.chart is None and s.table is None]
    body = "".join(_section_html(s) for s in shown)
    bundle = vl_convert.javascript_bundle().replace("</script", "<\\/script")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title><style>{_CSS}</style>
<script>{bundle}</script></head><body>
<h1>{html.escape(title)}</h1>
<p class="sub">Observed until {until} · generated {generated}</p>
{_banner(analysis)}{_headline(analysis, projection)}
{_contents(shown, omitted)}
{body}
{_provenance(analysis, projection, generated)}
<script>{_EMBED}</script>
</body></html>
"""


def write_chart_images(chart_sections: list[Section], out_dir: Path | str) -> list[Path]:
    """``<slug>.png`` and ``<slug>.svg`` of every chart, rendered offline by vl-convert."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for section in chart_sections:
        if section.chart is None:
            continue
        spec = section.chart.to_dict()
        png, svg = out / f"{section.slug}.png", out / f"{section.slug}.svg"
        _atomic_write(png, vl_convert.vegalite_to_png(spec, scale=2, allowed_base_urls=[]))
        _atomic_write(svg, vl_convert.vegalite_to_svg(spec, allowed_base_urls=[]).encode("utf-8"))
        written += [png, svg]
    return written


def _atomic_write(target: Path, data: bytes) -> None:
    """Write to a temp name, then rename, so a reader never sees half a file."""
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(target)


def write_report(
    analysis: FleetAnalysis,
    out_dir: Path | str,
    filename: str = REPORT_FILENAME,
    *,
    projection: JobOutlook | None = None,
    images: bool = True,
    baselines: Mapping[str, FleetAnalysis] | None = None,
    title: str = "failcast reliability report",
) -> Path:
    """Write the HTML report (and, with ``images``, ``charts/<slug>.png|svg``); returns the HTML path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target = out / filename
    parts = sections(analysis, projection, baselines)
    _atomic_write(target, _page(analysis, projection, parts, title).encode("utf-8"))
    if images:
        write_chart_images(parts, out / CHARTS_DIR)
    return target
