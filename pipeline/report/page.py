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

from pipeline.analysis import FleetAnalysis, before_window_note, left_out_note
from pipeline.report.cards import summary_cards
from pipeline.report.format import (
    column_label,
    format_value,
    interval_name,
    timestamp_text,
)
from pipeline.report.outlook import JobOutlook
from pipeline.report.section import Section
from pipeline.report.sections import sections

REPORT_FILENAME = "failcast-report.html"
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
    mtbf = analysis.rates.cluster_mtbf.select(
        pl.col("instances").round(1),
        "cluster_id",
        "failures",
        "mtbf_hours",
        "mtbf_ci_low_hours",
        "mtbf_ci_high_hours",
    )
    parts = [f"<div class='cards'>{cards}</div>"]
    for note in (
        left_out_note(analysis.failures_left_out),
        before_window_note(analysis.options.since, analysis.before_window),
    ):
        if note:
            parts.append(f"<p class='note'>{html.escape(note)}.</p>")
    parts.append(f"<h3>MTBF per cluster size</h3>{table_html(mtbf)}")
    if analysis.has_failures:
        parts.append(
            "<p class='note'>Cluster MTBF = cluster-hours / failures, with the 95% interval of the "
            f"cluster's rate ({html.escape(interval_name(analysis.rates.interval_method))}: the rate table's "
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
        f"<p class='note'>Generated {html.escape(generated_utc)} · observed {_window(analysis)} · "
        f"{html.escape(versions())}</p>",
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


def _window(analysis: FleetAnalysis) -> str:
    """ "until <end>", or "from <start> until <end>" with a window start (``--since``), escaped."""
    until = f"until {timestamp_text(analysis.observed_until)}"
    since = analysis.options.since
    return html.escape(until if since is None else f"from {timestamp_text(since)} {until}")


def _page(analysis: FleetAnalysis, projection: JobOutlook | None, parts: list[Section], title: str) -> str:
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
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
<p class="sub">Observed {_window(analysis)} · generated {generated}</p>
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
