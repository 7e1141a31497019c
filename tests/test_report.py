"""The HTML report: escaping, offline page, aggregated chart data, colours, projection sections, files."""

from __future__ import annotations

import html
import json
import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from html.parser import HTMLParser

import polars as pl
import pytest
from click.testing import CliRunner

from pipeline import analysis, report, warehouse
from pipeline.cli import main
from pipeline.report import charts, page

PAYLOADS = [
    "</script><img src=x onerror=alert(1)>",
    "</SCRIPT ><svg onload=alert(1)>",
    '"><iframe src=javascript:alert(1)>',
    "<!--<script>alert(1)</script>-->",
    "&lt;b&gt; already-escaped & raw",
    "{{constructor.constructor('alert(1)')()}}",
]


class Tags(HTMLParser):
    """Every start tag with its attributes, and the text of each <script> element."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[tuple[dict, str]] = []
        self._in_script: dict | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in_script = dict(attrs)
            self.scripts.append((self._in_script, ""))

    def handle_data(self, data):
        if self._in_script is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = None


def parse(html_text: str) -> Tags:
    tags = Tags()
    tags.feed(html_text)
    return tags


@pytest.fixture(scope="module")
def hostile_analysis(hostile_warehouse) -> analysis.FleetAnalysis:
    con = warehouse.connect(hostile_warehouse, read_only=True)
    try:
        return analysis.analyze(con)
    finally:
        con.close()


@dataclass(frozen=True)
class Page:
    html: str
    tags: Tags
    specs: dict[str, dict]  # chart slug -> Vega-Lite spec, as the browser will read it


@pytest.fixture(scope="module")
def pages(hostile_analysis) -> dict[bool, Page]:
    """The hostile fleet's page without (False) and with (True) a projection, rendered once."""
    out = {}
    for with_projection in (False, True):
        text = report.render_html(hostile_analysis, outlook_frames() if with_projection else None)
        tags = parse(text)
        specs = {
            attrs["id"].removeprefix("spec-"): json.loads(body)
            for attrs, body in tags.scripts
            if attrs.get("type") == "application/json"
        }
        out[with_projection] = Page(text, tags, specs)
    return out


def outlook_frames(modes=("manual", "automatic"), job_instances=256) -> report.JobOutlook:
    """A JobOutlook built by hand with the documented columns (no projection code involved)."""
    sizes = [64, 128, 256, 512]
    return report.JobOutlook(
        job="test-job: 256 × 8 H100",
        instances=job_instances,
        modes=pl.DataFrame(
            {
                "mode": list(modes),
                "expected_days": [150.0 - 10 * i for i in range(len(modes))],
                "cost_usd": [3.2e7 - 1e6 * i for i in range(len(modes))],
                "goodput": [0.8 + 0.05 * i for i in range(len(modes))],
                "expected_interruptions": [700.0] * len(modes),
                "p10_days": [140.0] * len(modes),
                "p50_days": [149.0] * len(modes),
                "p90_days": [158.0] * len(modes),
                "checkpoint_interval_hours": [1.0] * len(modes),
                "optimal_interval_hours": [1.5] * len(modes),
                "optimal_expected_days": [148.0] * len(modes),
            }
        ),
        savings=pl.DataFrame(
            {"baseline": [modes[0]], "mode": [modes[-1]], "days": [10.0], "percent": [6.7], "usd": [1e6]}
        ),
        size_sweep=pl.DataFrame(
            {
                "instances": sizes * len(modes),
                "mode": [m for m in modes for _ in sizes],
                "expected_days": [600.0, 300.0, 150.0, math.inf] * len(modes),
                "cost_usd": [3e7, 3.1e7, 3.2e7, math.inf] * len(modes),
                "goodput": [0.9, 0.85, 0.8, 0.0] * len(modes),
            }
        ),
        days_histogram=pl.DataFrame(
            {
                "mode": [m for m in modes for _ in range(3)],
                "bin_low_days": [140.0, 145.0, 150.0] * len(modes),
                "bin_high_days": [145.0, 150.0, 155.0] * len(modes),
                "runs": [10, 50, 20] * len(modes),
            }
        ),
        checkpoint_curve=pl.DataFrame(
            {
                "mode": [m for m in modes for _ in range(3)],
                "checkpoint_interval_hours": [0.5, 1.5, 4.0] * len(modes),
                "expected_days": [152.0, 148.0, 155.0] * len(modes),
            }
        ),
        assumptions=pl.DataFrame({"assumption": ["price"], "value": ["$4.50 per GPU-hour"]}),
        explanation="T = M e^{R/M} (e^{(tau+delta)/M} - 1) W / tau  <not a tag>",
    )


@pytest.mark.parametrize("payload", PAYLOADS)
def test_table_cells_are_text(payload):
    out = report.table_html(pl.DataFrame({"node_id": [payload], payload: [1]}))
    tags = parse(out)
    assert {t for t, _ in tags.tags} == {"div", "table", "thead", "tr", "th", "tbody", "td"}
    assert "<" + payload[1:] not in out  # nothing of the payload's markup survives unescaped


@pytest.mark.parametrize("payload", PAYLOADS)
def test_script_json_cannot_end_the_script_element(payload):
    text = page.script_json({"data": [{"cluster_id": payload}]})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"data": [{"cluster_id": payload}]}


@pytest.mark.parametrize(
    ("value", "expected"), [(math.inf, None), (-math.inf, None), (math.nan, None), (1.5, 1.5), ("x", "x")]
)
def test_script_json_turns_non_finite_into_null(value, expected):
    assert json.loads(page.script_json({"v": [{"x": value}]})) == {"v": [{"x": expected}]}


def test_hostile_logs_reach_the_page_only_as_text(pages, hostile_analysis, hostile_strings):
    html_text, tags = pages[False].html, pages[False].tags
    names = [t for t, _ in tags.tags]
    assert "img" not in names and "svg" not in names and "iframe" not in names
    # our scripts only: the Vega bundle, one JSON spec per chart, the embed call
    specs = [a for a, _ in tags.scripts if a.get("type") == "application/json"]
    assert len(tags.scripts) == len(specs) + 2 == len(report.sections(hostile_analysis)) + 2
    # the hostile values are still there, as data and as escaped text
    values = set(_strings(pages[False].specs))
    assert hostile_strings[0] in values
    assert html.escape(hostile_strings[0]) in html_text  # table cell
    assert html.escape(hostile_strings[2]) in html_text  # the rejected line's raw text


@pytest.mark.parametrize("with_projection", [False, True])
def test_page_loads_nothing_from_the_network(pages, with_projection):
    for tag, attrs in pages[with_projection].tags.tags:
        for name in ("src", "href"):
            assert not (attrs.get(name) or "").startswith(("http:", "https:", "//")), (tag, attrs)


@pytest.mark.parametrize("rows", [0, 1, 299, 300, 301, 10_000])
def test_downsample_keeps_ends_and_bounds_rows(rows):
    frame = pl.DataFrame({"i": range(rows)})
    out = charts.downsample(frame)
    assert out.height == min(rows, charts.MAX_CURVE_POINTS)
    if rows:
        assert out["i"][0] == 0 and out["i"][-1] == rows - 1


def test_charts_embed_only_aggregated_rows(pages, hostile_analysis):
    a = hostile_analysis
    bound = max(charts.MAX_CURVE_POINTS, a.rates_by_month.height, a.rates_by_category.height)
    for slug, spec in pages[True].specs.items():
        for name, rows in spec.get("datasets", {}).items():
            assert len(rows) <= bound, (slug, name)
            assert not {"node_id", "message", "timestamp_utc"} & set(rows[0] if rows else {}), slug


def _layers(node, data=None):
    """(dataset name, encoding) of every unit chart in a layered/concatenated spec."""
    data = node.get("data", {}).get("name", data)
    if "mark" in node:
        yield data, node.get("encoding", {})
    for key in ("layer", "vconcat", "hconcat", "concat"):
        for child in node.get(key, []):
            yield from _layers(child, data)


@pytest.mark.parametrize("with_projection", [False, True])
def test_every_encoded_field_is_in_the_charts_data(pages, with_projection):
    for slug, spec in pages[with_projection].specs.items():
        for data, encoding in _layers(spec):
            columns = set(spec["datasets"][data][0]) if spec["datasets"][data] else set()
            for channel, enc in encoding.items():
                for e in enc if isinstance(enc, list) else [enc]:
                    assert e.get("field", next(iter(columns), None)) in columns, (slug, channel, e)


def _strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict | list):
        for value in node.values() if isinstance(node, dict) else node:
            yield from _strings(value)


def _scales(spec, field):
    """Every colour scale that encodes ``field`` anywhere in a (layered/concatenated) spec."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            color = node.get("encoding", {}).get("color", {})
            if color.get("field") == field and "scale" in color:
                found.append(json.dumps(color["scale"], sort_keys=True))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(spec)
    return found


@pytest.mark.parametrize("field", ["cluster_id", "mode"])
def test_colours_are_the_same_in_every_chart(pages, field):
    scales = [s for spec in pages[True].specs.values() for s in _scales(spec, field)]
    assert len(scales) >= 3 and len(set(scales)) == 1


@pytest.mark.parametrize("order", [("manual", "automatic"), ("automatic", "manual"), ("automatic", "spot")])
def test_mode_colour_does_not_depend_on_order(order):
    scale = report.mode_color(order).to_dict()
    colours = dict(zip(scale["domain"], scale["range"], strict=True))
    for mode, colour in colours.items():
        assert colour == report.MODE_COLORS.get(mode, colour)
    assert len(set(colours.values())) == len(colours)


def test_headline_quotes_fleet_rate_and_projection(hostile_analysis):
    outlook = outlook_frames()
    cards = report.summary_cards(hostile_analysis, outlook)
    rate = hostile_analysis.fleet_rate
    low, high = rate.confidence_interval_
    assert f"{rate.rate_ * 100:.4f}%" in cards[0][1]
    assert f"{low * 100:.4f}–{high * 100:.4f}%" in cards[0][2]
    for m in outlook.modes.iter_rows(named=True):
        assert any(f"{m['expected_days']:,.1f} days" in v and m["mode"] in k for k, v, _ in cards)
    assert any("saves" in k and "10.0 days" in v for k, v, _ in cards)


@pytest.mark.parametrize("with_projection", [False, True])
def test_sections_and_provenance(pages, hostile_analysis, with_projection):
    html_text = pages[with_projection].html
    slugs = set(pages[with_projection].specs)
    projected = {"projection-vs-cluster-size", "monte-carlo-days", "checkpoint-interval"}
    assert (projected <= slugs) is with_projection
    assert {"failure-rate-over-time", "root-causes", "time-between-failures", "mtbf-vs-cluster-size"} <= slugs
    for sha in hostile_analysis.files["sha256"]:
        assert sha in html_text
    assert "duckdb" in html_text and "Rejected input lines (1)" in html_text
    assert ("Projection assumptions" in html_text) is with_projection
    assert ("&lt;not a tag&gt;" in html_text) is with_projection


def test_unfinishable_sweep_points_are_not_drawn_but_listed(pages):
    html_text = pages[True].html
    spec = pages[True].specs["projection-vs-cluster-size"]
    drawn = [r for rows in spec["datasets"].values() for r in rows if "expected_days" in r]
    assert drawn and all(r["instances"] != 512 for r in drawn)
    assert "<td class='num'>inf</td>" in html_text


def test_write_report_writes_html_png_and_svg(tmp_path, hostile_analysis, hostile_strings):
    outlook = outlook_frames()
    path = report.write_report(hostile_analysis, tmp_path, projection=outlook)
    assert path == tmp_path / report.REPORT_FILENAME and path.stat().st_size > 0
    slugs = [s.slug for s in report.sections(hostile_analysis, outlook)]
    for slug in slugs:
        png = (tmp_path / report.CHARTS_DIR / f"{slug}.png").read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n")
        svg = ET.parse(tmp_path / report.CHARTS_DIR / f"{slug}.svg").getroot()
        assert not [e for e in svg.iter() if e.tag.split("}")[-1] in {"script", "foreignObject", "image"}]
    rate_svg = (tmp_path / report.CHARTS_DIR / "failure-rate-by-cluster.svg").read_text()
    texts = "".join(ET.fromstring(rate_svg).itertext())
    assert hostile_strings[0][:20] in texts  # drawn as a label, as text
    assert not list(tmp_path.rglob("*.tmp"))


def test_cli_report_without_images(tmp_path, hostile_warehouse):
    result = CliRunner().invoke(
        main, ["report", "--db", str(hostile_warehouse), "--out", str(tmp_path), "--no-images"]
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / report.REPORT_FILENAME).exists()
    assert not (tmp_path / report.CHARTS_DIR).exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [("name = 'x'\n[cluster\n", "invalid TOML"), ("name = 'x'\n[work]\ngpu_hours = 1e5\n", "instances")],
)
def test_cli_report_rejects_a_bad_job_spec(tmp_path, sample_warehouse, content, message):
    pytest.importorskip("pipeline.projection", reason="projection (issue 5) has not landed")
    job = tmp_path / "job.toml"
    job.write_text(content)
    result = CliRunner().invoke(
        main, ["report", "--db", str(sample_warehouse), "--out", str(tmp_path), "--job", str(job)]
    )
    assert result.exit_code == 2 and message in result.output and str(job) in result.output


def test_job_outlook_matches_the_projection(sample_warehouse):
    proj = pytest.importorskip("pipeline.projection", reason="projection (issue 5) has not landed")
    spec = proj.JobSpec(
        instances=128, price_per_gpu_hour_usd=4.0, gpu_hours=1e6, failure=proj.FailureModel.exponential(5e-4)
    )
    outlook = report.job_outlook(spec, monte_carlo_runs=500, seed=1)
    expected = proj.project(spec, monte_carlo_runs=500, seed=1)
    for row in outlook.modes.iter_rows(named=True):
        m = expected.modes[row["mode"]]
        assert row["expected_days"] == pytest.approx(m.expected_days)
        assert row["p50_days"] == pytest.approx(m.monte_carlo.p50_days)
        curve = outlook.checkpoint_curve.filter(pl.col("mode") == row["mode"])
        # the projection's optimum is inside the drawn curve and no drawn point beats it
        lo, hi = curve["checkpoint_interval_hours"].min(), curve["checkpoint_interval_hours"].max()
        assert lo < row["optimal_interval_hours"] < hi
        assert curve["expected_days"].min() >= row["optimal_expected_days"] * (1 - 1e-9)
    assert set(outlook.size_sweep["mode"]) == set(spec.recovery)
    assert outlook.days_histogram.group_by("mode").agg(pl.col("runs").sum())["runs"].to_list() == [500, 500]
    assert outlook.savings["mode"].to_list() == ["automatic"]


def test_one_mode_without_monte_carlo_and_free_checkpoints(hostile_analysis):
    proj = pytest.importorskip("pipeline.projection", reason="projection (issue 5) has not landed")
    free = proj.RecoveryProfile(0.1, 0.1, 0.1, checkpoint_interval_hours=2.0, checkpoint_write_hours=0.0)
    spec = proj.JobSpec(
        instances=64, price_per_gpu_hour_usd=2.0, gpu_hours=1e5, failure=proj.FailureModel.exponential(1e-3),
        recovery={"automatic": free},
    )  # fmt: skip
    outlook = report.job_outlook(spec, monte_carlo_runs=0)
    curve = outlook.checkpoint_curve
    assert curve["expected_days"].is_finite().all() and curve["checkpoint_interval_hours"].min() < 2.0
    assert curve["expected_days"].is_sorted()  # shorter is always better when writing is free
    text = report.render_html(hostile_analysis, outlook)
    specs = [json.loads(b) for a, b in parse(text).scripts if a.get("type") == "application/json"]
    assert len(specs) == len(report.sections(hostile_analysis, outlook)) and "saves" not in text


def test_cli_report_with_job_uses_fleet_rate(tmp_path, sample_warehouse):
    pytest.importorskip("pipeline.projection", reason="projection (issue 5) has not landed")
    job = tmp_path / "job.toml"
    job.write_text(
        "name = 'j'\n[work]\ngpu_hours = 2e5\n[cluster]\ninstances = 32\nprice_per_gpu_hour_usd = 3.0\n"
    )
    result = CliRunner().invoke(
        main,
        ["report", "--db", str(sample_warehouse), "--out", str(tmp_path), "--job", str(job),
         "--monte-carlo-runs", "200", "--no-images"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    html_text = (tmp_path / report.REPORT_FILENAME).read_text()
    assert "fleet rate in" in html_text and "checkpoint-interval" in html_text


def test_one_cluster_fleet_renders_without_a_scaling_law(tmp_path):
    from pipeline import ingest, sample

    fleet = sample.simulate_fleet(sample.FleetSpec(cluster_sizes=(8,), days=30.0, rate_per_node_hour=0.004))
    incidents, inventory = fleet.write(tmp_path)
    con = warehouse.connect(tmp_path / "w.duckdb")
    ingest.ingest_files(con, [inventory, incidents])
    one = analysis.analyze(con)
    assert one.scaling is None
    text = report.render_html(one)
    specs = {a["id"]: json.loads(b) for a, b in parse(text).scripts if a.get("type") == "application/json"}
    assert len(specs) == len(report.sections(one)) and "spec-mtbf-vs-cluster-size" in specs
    assert "MTBF scaling exponent" not in text
