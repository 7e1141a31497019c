"""The HTML report: escaping, offline page, aggregated chart data, colours, sections (trends, root causes
per cluster, top nodes, both size laws, Slurm jobs, public baselines, estimated-exposure banner),
projection sections, files."""

from __future__ import annotations

import dataclasses
import html
import json
import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from pipeline import analysis, datasets, ingest, models, projection, report, transform, warehouse
from pipeline.cli import main
from pipeline.report import charts, comparisons, drivers, page
from pipeline.report.cards import TREND_CARD_CLUSTERS
from pipeline.report.format import duration_text, format_value
from tests._fleets import analysis_rows, simulated_jobs
from tests.conftest import SAMPLE_SPEC

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


def with_jobs(fleet: analysis.FleetAnalysis, db: Path) -> analysis.FleetAnalysis:
    """``fleet`` (the analysis of the warehouse ``db``) with Slurm job interruptions of a few jobs
    on every cluster (1 to 16 nodes), and a backtest of 300 jobs drawn from the sample fleet's true
    model."""
    con = warehouse.connect(db, read_only=True)
    try:
        rows = analysis_rows(con, fleet.options)
    finally:
        con.close()
    clusters = fleet.rates.by_cluster["cluster_id"].to_list()
    jobs = pl.DataFrame(
        {
            "cluster_id": [c for c in clusters for _ in range(5)],
            "nnodes": [1, 2, 4, 8, 16] * len(clusters),
            "elapsed_hours": [100.0, 80.0, 60.0, 40.0, 20.0] * len(clusters),
            "interrupted": [False, True, False, True, True] * len(clusters),
        }
    )
    predictions = transform.job_predictions(
        simulated_jobs(SAMPLE_SPEC, 300, seed=9), rows.interruptions, rows.exposure
    )
    scored = predictions.filter(pl.col("rate_source").is_in(transform.SCORED))
    backtest = models.JobBacktest().fit(
        scored["expected_interruptions"], scored["interrupted"], scored["hazard_per_hour"]
    )
    killed = rows.interruptions.head(12)  # jobs ended by the first failures, on the failed node
    ended = pl.DataFrame(
        {
            "cluster_id": killed["cluster_id"],
            "job_id": [f"j{i}" for i in range(killed.height)],
            "interrupted": [True] * killed.height,
            "end_utc": killed["timestamp_utc"].cast(pl.Datetime("us")),
            "elapsed_hours": [4.0 + i for i in range(killed.height)],
            "nodes": killed["node_id"].map_elements(lambda n: [n], return_dtype=pl.List(pl.String)),
            "nnodes": [1] * killed.height,
        }
    )
    restarts = fleet.jobs.recoveries.with_columns(nodes=pl.lit(None, pl.List(pl.String)))
    part = analysis.JobAnalysis(
        interruptions=transform.job_interruption_rates(jobs, fleet.rates.by_cluster),
        backtest=analysis.JobBacktestResult(predictions, backtest, transform.MIN_HISTORY_FAILURES),
        recoveries=fleet.jobs.recoveries,
        badput=transform.badput_by_class(ended, restarts, rows.interruptions),
    )
    return dataclasses.replace(fleet, jobs=part)


def charted(sections: list[report.Section]) -> list[report.Section]:
    return [s for s in sections if s.chart is not None]


@pytest.fixture(scope="module")
def rich_analysis(hostile_analysis, hostile_warehouse) -> analysis.FleetAnalysis:
    """The hostile fleet with Slurm jobs too, so every section has a chart."""
    return with_jobs(hostile_analysis, hostile_warehouse)


@dataclass(frozen=True)
class Page:
    html: str
    tags: Tags
    specs: dict[str, dict]  # chart slug -> Vega-Lite spec, as the browser will read it


@pytest.fixture(scope="module")
def pages(rich_analysis) -> dict[bool, Page]:
    """The hostile fleet's page (with jobs) without (False) and with (True) a projection, rendered once."""
    out = {}
    for with_projection in (False, True):
        text = report.render_html(rich_analysis, outlook_frames() if with_projection else None)
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
                "status": ["finishes"] * 3 * len(modes) + ["cannot finish: goodput < 1%"] * len(modes),
                "checkpoint_interval_hours": [1.0] * len(sizes) * len(modes),
                "expected_days": [600.0, 300.0, 150.0, None] * len(modes),
                "cost_usd": [3e7, 3.1e7, 3.2e7, None] * len(modes),
                "goodput": [0.9, 0.85, 0.8, 0.0] * len(modes),
                "optimal_interval_hours": [2.0, 1.4, 1.0, 0.7] * len(modes),
                "optimal_status": ["finishes"] * len(sizes) * len(modes),
                "optimal_expected_days": [590.0, 295.0, 150.0, 400.0] * len(modes),
                "optimal_cost_usd": [2.9e7, 3.0e7, 3.2e7, 8e7] * len(modes),
                "optimal_goodput": [0.92, 0.86, 0.8, 0.02] * len(modes),
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


def test_hostile_logs_reach_the_page_only_as_text(pages, rich_analysis, hostile_strings):
    html_text, tags = pages[False].html, pages[False].tags
    names = [t for t, _ in tags.tags]
    assert "img" not in names and "svg" not in names and "iframe" not in names
    # our scripts only: the Vega bundle, one JSON spec per chart, the embed call
    specs = [a for a, _ in tags.scripts if a.get("type") == "application/json"]
    assert len(tags.scripts) == len(specs) + 2 == len(charted(report.sections(rich_analysis))) + 2
    # the hostile values are still there, as data and as escaped text
    values = set(_strings(pages[False].specs))
    assert hostile_strings[0] in values
    assert any(v.startswith(hostile_strings[1]) for v in values)  # a node id, in the top-nodes chart
    assert html.escape(hostile_strings[0]) in html_text  # table cell
    assert html.escape(hostile_strings[1]) in html_text  # top-nodes table
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


def test_charts_embed_only_aggregated_rows(pages, rich_analysis):
    assert len(pages[True].html.encode()) < 5_000_000
    a = rich_analysis
    bound = max(
        charts.MAX_CURVE_POINTS,
        a.rates.by_month.height,
        a.rates.by_category.height,
        a.rates.category_shares.height,
    )
    for slug, spec in pages[True].specs.items():
        for name, rows in spec.get("datasets", {}).items():
            per_node = slug == "top-nodes"  # the only chart with a row per node: the top few
            assert len(rows) <= (drivers.TOP_NODES if per_node else bound), (slug, name)
            banned = {"message", "timestamp_utc"} | (set() if per_node else {"node_id"})
            assert not banned & set(rows[0] if rows else {}), slug


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
    row = hostile_analysis.rates.overall.row(0, named=True)  # the rate table's figures, as printed there
    assert cards[0][1] == f"{format_value('rate_per_node_hour', row['rate_per_node_hour'])} per instance-hour"
    low, high = (format_value("rate_ci_low", row[k]) for k in ("rate_ci_low", "rate_ci_high"))
    assert f"{low}–{high}" in cards[0][2]
    for m in outlook.modes.iter_rows(named=True):
        assert any(f"{m['expected_days']:,.1f} days" in v and m["mode"] in k for k, v, _ in cards)
    assert any("saves" in k and "10.0 days" in v for k, v, _ in cards)


@pytest.mark.parametrize("with_projection", [False, True])
def test_sections_and_provenance(pages, rich_analysis, with_projection):
    html_text = pages[with_projection].html
    slugs = set(pages[with_projection].specs)
    projected = {"projection-vs-cluster-size", "monte-carlo-days", "checkpoint-interval"}
    assert (projected <= slugs) is with_projection
    assert {
        "failure-rate-over-time", "root-causes", "time-between-failures", "mtbf-vs-cluster-size",
        "rate-trends", "root-causes-by-cluster", "top-nodes", "job-interruptions", "public-baselines",
    } <= slugs  # fmt: skip
    for sha in rich_analysis.files["sha256"]:
        assert sha in html_text
    assert "duckdb" in html_text and "Rejected input lines (1)" in html_text
    assert ("Projection assumptions" in html_text) is with_projection
    assert ("&lt;not a tag&gt;" in html_text) is with_projection


def test_unfinishable_sweep_points_are_not_drawn_but_listed(pages):
    html_text = pages[True].html
    spec = pages[True].specs["projection-vs-cluster-size"]
    drawn = [r for rows in spec["datasets"].values() for r in rows if "expected_days" in r]
    configured = [r for r in drawn if r["interval"].startswith("configured")]
    optimal = [r for r in drawn if r["interval"] == "re-optimised per size"]
    # at the configured interval 512 instances cannot finish: no point; re-optimised it can
    assert configured and all(r["instances"] != 512 for r in configured)
    assert {r["instances"] for r in optimal} == {64, 128, 256, 512}
    assert "<td>cannot finish: goodput &lt; 1%</td>" in html_text
    assert "Optimal: expected (days)" in html_text and "∞" not in html_text


def test_write_report_writes_html_png_and_svg(tmp_path, hostile_analysis, hostile_strings):
    outlook = outlook_frames()
    path = report.write_report(hostile_analysis, tmp_path, projection=outlook)
    assert path == tmp_path / report.REPORT_FILENAME and path.stat().st_size > 0
    slugs = [s.slug for s in charted(report.sections(hostile_analysis, outlook))]
    assert "job-interruptions" not in slugs  # no Slurm jobs: a note, no chart
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
    # the size chart draws both the configured and the re-optimised interval, per mode, and no
    # point where the job cannot finish
    drawn = pl.DataFrame(report.size_sweep_chart(outlook.size_sweep, spec.instances).vconcat[0].layer[0].data)
    assert {i.split(" (")[0] for i in drawn["interval"]} == {"configured", "re-optimised per size"}
    optimal = drawn.filter(pl.col("interval") == "re-optimised per size").sort("mode", "instances")
    finishing = outlook.size_sweep.filter(pl.col("optimal_expected_days").is_not_null()).sort(
        "mode", "instances"
    )
    assert optimal["expected_days"].to_list() == pytest.approx(finishing["optimal_expected_days"].to_list())
    assert (optimal["interval_hours"] > 0).all()
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
    assert len(specs) == len(charted(report.sections(hostile_analysis, outlook))) and "saves" not in text


def test_cli_report_with_job_uses_the_fleets_model_for_the_job_size(tmp_path, sample_warehouse):
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
    assert "measured rate of clusters of ~32 instances" in html_text and "checkpoint-interval" in html_text


def test_one_cluster_fleet_renders_without_a_scaling_law(tmp_path):
    from pipeline import sample

    fleet = sample.simulate_fleet(sample.FleetSpec(cluster_sizes=(8,), days=30.0, rate_per_node_hour=0.004))
    incidents, inventory = fleet.write(tmp_path)
    con = warehouse.connect(tmp_path / "w.duckdb")
    ingest.ingest_files(con, [inventory, incidents])
    one = analysis.analyze(con)
    assert one.fits.scaling is None
    text = report.render_html(one)
    specs = {a["id"]: json.loads(b) for a, b in parse(text).scripts if a.get("type") == "application/json"}
    assert len(specs) == len(charted(report.sections(one))) and "spec-mtbf-vs-cluster-size" in specs
    assert "MTBF scaling exponent" not in text


def test_fleet_whose_sizes_are_all_projected_sizes_renders(tmp_path):
    # every cluster size is one of analysis.PROJECTED_SIZES: the size grid must stay float
    from pipeline import sample

    spec = sample.FleetSpec(
        cluster_sizes=(256, 512),
        days=5.0,
        rate_per_node_hour=0.002,
        replaced_fraction=0,
        maintenance_fraction=0,
    )
    incidents, inventory = sample.simulate_fleet(spec).write(tmp_path)
    con = warehouse.connect(tmp_path / "w.duckdb")
    ingest.ingest_files(con, [inventory, incidents])
    fleet = analysis.analyze(con)
    assert fleet.fits.scaling is not None and fleet.fits.scaling_projection["instances"].dtype == pl.Float64
    assert "mtbf-vs-cluster-size" in report.render_html(fleet)


@pytest.fixture(scope="module")
def sample_analysis(sample_warehouse) -> analysis.FleetAnalysis:
    con = warehouse.connect(sample_warehouse, read_only=True)
    try:
        return analysis.analyze(con)
    finally:
        con.close()


def test_trend_section_shows_every_clusters_verdicts(pages, rich_analysis):
    table = drivers.trend_table(rich_analysis)
    assert table["cluster_id"].to_list() == charts.clusters_by_size(rich_analysis.rates)
    expected = rich_analysis.rates.trend_tests.select(
        "cluster_id", "laplace_verdict", "crow_verdict", "crow_beta"
    )
    assert table.select(expected.columns).sort("cluster_id").equals(expected.sort("cluster_id"))
    rows = [r for rows in pages[False].specs["rate-trends"]["datasets"].values() for r in rows]
    drawn = {r["cluster_id"]: r for r in rows if "crow_beta" in r}
    tested = expected.filter(pl.col("crow_beta").is_not_null())
    assert set(drawn) == set(tested["cluster_id"])
    assert {"beta": 1.0} in rows  # the flat line
    flat = (tested["crow_verdict"] == "flat").sum()
    card = next(c for c in report.summary_cards(rich_analysis) if "trend" in c[0])
    assert card[1] == f"flat in {flat} of {tested.height} clusters"


def test_root_causes_per_cluster_table_quotes_the_shares(rich_analysis):
    table = drivers.category_share_table(rich_analysis)
    shares = rich_analysis.rates.category_shares
    assert table["failures"].sum() == shares["failures"].sum() == rich_analysis.rates.overall["failures"][0]
    for row in shares.filter(pl.col("failures") > 0).iter_rows(named=True):
        cell = table.filter(failure_class=row["failure_class"])[row["cluster_id"]][0]
        assert cell.startswith(f"{round(row['share'] * 100, 1)}% [{round(row['share_ci_low'] * 100, 1)}–")
    order = charts.clusters_by_size(rich_analysis.rates)
    assert table.columns[2:] == [c for c in order if c in table.columns]


@pytest.mark.parametrize("n", [1, 5, drivers.TOP_NODES])
def test_top_nodes_are_the_nodes_with_most_failures(rich_analysis, n):
    by_node = rich_analysis.nodes.rates
    assert by_node["failures"].sum() == rich_analysis.rates.overall["failures"][0]
    top = drivers.top_nodes(rich_analysis, n)
    assert top.height == n and top["failures"].is_sorted(descending=True)
    assert top["failures"][0] == by_node["failures"].max()
    assert top["failures"].min() >= by_node["failures"].sort(descending=True)[n - 1]
    rate = dict(rich_analysis.rates.by_cluster.select("cluster_id", "rate_per_node_hour").iter_rows())
    for row in top.iter_rows(named=True):
        assert row["expected_failures"] == pytest.approx(rate[row["cluster_id"]] * row["exposure_node_hours"])


def test_both_size_laws_are_drawn_and_tabled(pages, rich_analysis):
    table = charts.size_law_table(rich_analysis)
    assert table["instances"].to_list() == list(analysis.PROJECTED_SIZES)
    for prefix, frame in (
        ("count", rich_analysis.fits.scaling_projection),
        ("aft", rich_analysis.fits.size_regression_projection),
    ):
        at = frame.filter(pl.col("instances").is_in([float(n) for n in analysis.PROJECTED_SIZES]))
        assert table[f"{prefix}_mtbf_hours"].to_list() == at["mtbf_hours"].to_list()
    laws = {
        r["law"]
        for rows in pages[False].specs["mtbf-vs-cluster-size"]["datasets"].values()
        for r in rows
        if "law" in r
    }
    assert laws == {charts.COUNT_LAW, charts.AFT_LAW}
    alpha = next(c for c in report.summary_cards(rich_analysis) if "exponent" in c[0])
    assert (
        f"Weibull AFT view {rich_analysis.fits.size_regression.alpha_:.3f}" in alpha[2]
    )  # the note's digits


def test_job_section_is_a_chart_with_jobs_and_a_note_without(pages, rich_analysis, hostile_analysis):
    with_jobs_section = next(s for s in report.sections(rich_analysis) if s.slug == "job-interruptions")
    assert with_jobs_section.table.equals(rich_analysis.jobs.interruptions)
    drawn = [r for rows in pages[False].specs["job-interruptions"]["datasets"].values() for r in rows]
    assert sorted(r["nnodes_bucket"] for r in drawn) == sorted(
        rich_analysis.jobs.interruptions["nnodes_bucket"]
    )
    assert hostile_analysis.jobs.interruptions is None
    text = report.render_html(hostile_analysis)
    assert "spec-job-interruptions" not in text and "failcast ingest --format sacct" in text


def test_badput_section_is_a_chart_with_losses_and_a_note_without(pages, rich_analysis, hostile_analysis):
    section = next(s for s in report.sections(rich_analysis) if s.slug == "what-stops-our-jobs")
    badput = rich_analysis.jobs.badput
    assert section.table.equals(badput) and badput["losses"].sum() == 12
    drawn = [r for rows in pages[False].specs["what-stops-our-jobs"]["datasets"].values() for r in rows]
    assert sorted(r["lost_job_hours"] for r in drawn) == sorted(badput["lost_job_hours"])
    top = badput.group_by("failure_class").agg(pl.col("lost_job_hours").sum()).sort("lost_job_hours")[-1]
    assert section.note.startswith(f"{top['failure_class'][0]} cost the most job time")
    assert "Job time lost (h)" in pages[False].html
    # no Slurm job and no training log: listed with what to ingest, not drawn
    assert hostile_analysis.jobs.badput.height == 0
    text = report.render_html(hostile_analysis)
    assert "spec-what-stops-our-jobs" not in text and "No job losses to show" in text


@pytest.mark.parametrize("estimated", [False, True])
def test_estimated_exposure_banner_comes_first(hostile_analysis, estimated):
    text = report.render_html(dataclasses.replace(hostile_analysis, exposure_estimated=estimated))
    banner = html.escape(page.ESTIMATED_EXPOSURE)
    assert (banner in text) is estimated
    if estimated:
        assert text.index(banner) < text.index("class='cards'") and "role='alert'" in text


def test_headline_says_what_the_weibull_shape_means(rich_analysis):
    cards = report.summary_cards(rich_analysis)
    assert any(n == rich_analysis.fits.node_fits["weibull"].hazard_message_ for _, _, n in cards)
    # no job: the law's MTBF at the smallest planned size, the larger ones in the note
    projected = next(c for c in cards if c[0].startswith("Projected cluster MTBF at 256 instances"))
    mtbf = rich_analysis.fits.scaling_projection.filter(instances=256.0)["mtbf_hours"][0]
    assert projected[1] == duration_text(mtbf)
    # the size-law table's cell, in the same digits
    table = charts.size_law_table(rich_analysis).filter(instances=256)
    assert projected[1] == f"{format_value('count_mtbf_hours', table['count_mtbf_hours'][0])} h"
    assert "16,384: " in projected[2]


@pytest.mark.parametrize("method", ["exact", "overdispersed"])
def test_headline_rate_interval_is_the_default_one_and_named(rich_analysis, method):
    """The card quotes the same interval as `failcast rates` (the default method's), not always
    the exact one, and names its method."""
    phi = 1.7 if method == "overdispersed" else 1.0
    row = rich_analysis.rates.overall.row(0, named=True)
    low, high = transform.poisson_interval([row["failures"]], [row["exposure_node_hours"]], dispersion=phi)
    rates = dataclasses.replace(
        rich_analysis.rates,
        interval_method=method,
        overall=rich_analysis.rates.overall.with_columns(rate_ci_low=low[0], rate_ci_high=high[0]),
    )
    fleet = dataclasses.replace(rich_analysis, rates=rates)
    title, _, note = report.summary_cards(fleet)[0]
    assert title == "Fleet interruption rate"
    name = "quasi-Poisson (overdispersed)" if method == "overdispersed" else "exact Poisson (Garwood)"
    cells = (format_value("rate_ci_low", v) for v in (low[0], high[0]))
    assert note.startswith(f"95% CI {'–'.join(cells)}, {name};")


def test_headline_mtbf_is_the_planned_jobs_from_the_model_its_projection_uses(rich_analysis):
    from pipeline.projection import FailureModel

    model = FailureModel.exponential(2e-4, 1e-4, 4e-4, source="fleet: measured rate of clusters of ~512")
    outlook = dataclasses.replace(outlook_frames(job_instances=500), failure=model)
    cards = report.summary_cards(rich_analysis, outlook)
    title, value, note = next(c for c in cards if "MTBF at" in c[0])
    assert title == "Cluster MTBF at 500 instances (the job)"
    assert value == "10.0 h"  # 1 / (500 × 2e-4 per instance-hour)
    assert note.startswith("95% CI 5.00 h–20.0 h; source: fleet: measured rate of clusters of ~512")
    assert "16,384: " in note and not any(c[0].startswith("Projected cluster MTBF") for c in cards)


def test_public_baselines_put_this_fleet_beside_published_fleets(rich_analysis, sample_analysis):
    table = comparisons.baselines(rich_analysis.rates, {"LANL": sample_analysis.rates})
    published = table.filter(series=comparisons.PUBLISHED)
    assert published["fleet"].to_list() == [f.fleet for f in datasets.PUBLISHED_GPU_FLEETS]
    for f, rate in zip(datasets.PUBLISHED_GPU_FLEETS, published["rate_per_node_hour"], strict=True):
        assert rate == pytest.approx(f.failures / (f.instances * f.hours))
    whole = table.filter(series=comparisons.THIS_FLEET).row(0, named=True)
    fleet = rich_analysis.fleet_rate
    assert whole["rate_per_node_hour"] == pytest.approx(fleet.rate_)
    assert (whole["rate_ci_low"], whole["rate_ci_high"]) == pytest.approx(fleet.confidence_interval_)
    mine = table.filter(
        (pl.col("source") == comparisons.THIS_FLEET) & (pl.col("fleet") != comparisons.ALL_CLUSTERS)
    )
    assert mine["series"].to_list() == mine["fleet"].to_list()
    assert set(mine["fleet"]) == set(rich_analysis.rates.by_cluster["cluster_id"])
    lanl = table.filter(source="LANL")
    assert lanl.height == sample_analysis.rates.by_cluster.height and set(lanl["series"]) == {"LANL"}
    assert table["label"].n_unique() == table.height
    # published fleets always, other fleets only when passed in
    alone = comparisons.baselines(rich_analysis.rates)
    assert set(alone["source"]) == set(table["source"]) - {"LANL"}


def test_cli_report_adds_baseline_warehouses(tmp_path, hostile_warehouse, sample_warehouse):
    result = CliRunner().invoke(
        main,
        ["report", "--db", str(hostile_warehouse), "--out", str(tmp_path), "--no-images",
         "--baseline-db", str(sample_warehouse)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    tags = parse((tmp_path / report.REPORT_FILENAME).read_text())
    spec = next(json.loads(b) for a, b in tags.scripts if a.get("id") == "spec-public-baselines")
    labels = {r["label"] for rows in spec["datasets"].values() for r in rows if "label" in r}
    con = warehouse.connect(sample_warehouse, read_only=True)
    clusters = warehouse.table(con, "inventory")["cluster_id"].unique()
    con.close()
    assert {f"{sample_warehouse.stem} · {c}" for c in clusters} <= labels
    assert "llama-3.1 (published)" in labels


def test_cli_report_names_a_baseline_warehouse_without_inventory(tmp_path, sample_warehouse):
    empty = tmp_path / "empty.duckdb"
    warehouse.connect(empty).close()
    result = CliRunner().invoke(
        main, ["report", "--db", str(sample_warehouse), "--out", str(tmp_path), "--baseline-db", str(empty)]
    )
    assert (
        result.exit_code == 2 and f"--baseline-db {empty}" in result.output and "inventory" in result.output
    )


@pytest.mark.parametrize("moving", [0, 1, 3, 5])
def test_trend_card_names_the_strongest_trends_only(rich_analysis, moving):
    tests = rich_analysis.rates.trend_tests.filter(pl.col("crow_verdict").is_not_null()).head(1)
    tests = pl.concat([tests] * 6).with_columns(
        cluster_id=pl.Series([f"c{i}" for i in range(6)]),
        crow_verdict=pl.Series(["rising"] * moving + ["flat"] * (6 - moving)),
        crow_p_value=pl.Series([0.01 * (i + 1) for i in range(6)]),
    )
    cards = report.summary_cards(
        dataclasses.replace(rich_analysis, rates=dataclasses.replace(rich_analysis.rates, trend_tests=tests))
    )
    _, value, note = next(c for c in cards if "trend" in c[0])
    assert value == f"flat in {6 - moving} of 6 clusters"
    named = [f"c{i} rising" for i in range(moving)]
    assert all((name in note) is (i < TREND_CARD_CLUSTERS) for i, name in enumerate(named))
    assert ("more" in note) is (moving > TREND_CARD_CLUSTERS)


def test_contents_link_every_shown_section_and_list_the_empty_ones(hostile_analysis, rich_analysis):
    text = report.render_html(hostile_analysis)
    nav = text[text.index("<nav class='toc'>") : text.index("</nav>")]
    shown = [s for s in report.sections(hostile_analysis) if s.chart is not None or s.table is not None]
    for s in shown:
        assert f"href='#{s.slug}'" in nav and f"<section id='{s.slug}'>" in text
    # no Slurm jobs: the job section is not a section of the page, only a line saying what fills it
    assert "<section id='job-interruptions'>" not in text
    assert "href='#job-interruptions'" not in nav and "Not shown, no data" in nav
    assert "failcast ingest --format sacct" in nav
    rich = report.render_html(rich_analysis)
    rich_nav = rich[rich.index("<nav class='toc'>") : rich.index("</nav>")]
    assert "<section id='job-interruptions'>" in rich and "failcast ingest --format sacct" not in rich_nav


def test_biggest_cause_card_names_the_top_category_and_its_share(rich_analysis):
    card = next(c for c in report.summary_cards(rich_analysis) if c[0] == "Biggest cause of interruptions")
    top = rich_analysis.rates.by_category.sort("failures", descending=True).row(0, named=True)
    total = rich_analysis.rates.by_category["failures"].sum()
    assert card[1] == top["failure_class"]
    assert f"{top['failures']:,} of {total:,} interruptions" in card[2]


@pytest.mark.parametrize(
    ("failures", "value", "note"),
    [
        ((5, 1, 0), "gpu_memory", "5 of 6 interruptions (83.3%)"),  # the root-cause table's share
        ((3, 3, 1), "gpu_memory, network", "a tie: gpu_memory, network, 3 of 7 interruptions (42.9%) each"),
        ((2, 2, 2), "gpu_memory, network, software", "a tie: gpu_memory, network, software, 2 of 6"),
        ((1, 1, 1, 1), "4 causes tie", "a tie: gpu_memory, host, network, software, 1 of 4 interruptions"),
    ],
)
def test_biggest_cause_card_names_every_cause_that_ties(rich_analysis, failures, value, note):
    classes = ["gpu_memory", "network", "software", "host"][: len(failures)]
    causes = pl.DataFrame({"failure_class": classes, "failures": list(failures)})
    fleet = dataclasses.replace(
        rich_analysis, rates=dataclasses.replace(rich_analysis.rates, by_category=causes)
    )
    card = next(c for c in report.summary_cards(fleet) if c[0] == "Biggest cause of interruptions")
    assert card[1] == value and note in card[2]


NEW_SECTIONS = ("weibull-probability-plot", "mean-cumulative-function", "duane-crow-amsaa", "job-backtest")


def test_reliability_and_backtest_sections_render_with_bounded_data(pages, rich_analysis, hostile_analysis):
    for slug in NEW_SECTIONS:
        spec = pages[False].specs[slug]
        rows = [len(v) for v in spec.get("datasets", {}).values()]
        assert rows and max(rows) <= 300, (slug, rows)
    table = next(s for s in report.sections(rich_analysis) if s.slug == "job-backtest").table
    assert table["jobs"].sum() == rich_analysis.jobs.backtest.backtest.jobs_
    assert "observed share (95% CI)" in table.columns
    slugs = [s.slug for s in report.sections(hostile_analysis)]
    assert "job-backtest" not in slugs  # no jobs: the section is omitted
    assert {"weibull-probability-plot", "mean-cumulative-function", "duane-crow-amsaa"} <= set(slugs)


def test_summary_names_the_lemons_and_the_spares_the_job_needs(rich_analysis):
    outlook = outlook_frames()
    cards = {k: (v, n) for k, v, n in report.summary_cards(rich_analysis, outlook)}
    lemons = rich_analysis.nodes.lemons.lemons_
    value, note = cards["Lemon nodes (fail more than their cluster)"]
    if lemons.height:
        assert value.startswith(f"{lemons.height:,} node") and all(
            n in note for n in lemons["node_id"].head(5)
        )
    else:
        assert value == "none" and f"none of {rich_analysis.nodes.lemons.table_.height:,} nodes" in note
    assert f"Hot spares for {outlook.instances:,} instances" not in cards  # no repair curve, no table


def test_the_hot_spares_card_is_the_spare_tables_99_row(rich_analysis):
    """One number per fact: the card is the table's row (the job's own rate at its size), not the
    fleet-wide rate's pool."""
    spec = projection.JobSpec(
        256, None, analysis.failure_model_for(rich_analysis, 256), gpu_hours=2e6, name="planned"
    )
    outlook = report.job_outlook(
        spec, monte_carlo_runs=0, repair=analysis.repair_curve(rich_analysis.repairs)
    )
    cards = {k: (v, n) for k, v, n in report.summary_cards(rich_analysis, outlook)}
    value, note = cards["Hot spares for 256 instances"]
    row = outlook.spares.filter(pl.col("note").str.contains("99% row")).row(0, named=True)
    assert value == f"{row['spares']:,}" and f"{row['free_spare_probability']:.1%} of the time" in note
    assert f"recommended for days and cost: {outlook.spares_summary['recommended'][0]}" in note


@pytest.mark.parametrize(
    ("out", "html", "charts"),
    [
        ("reports", "reports/failcast-report.html", "reports/charts"),
        ("weekly/fleet.html", "weekly/fleet.html", "weekly/charts"),  # a file name: charts beside it
        ("fleet.HTM", "fleet.HTM", "charts"),
    ],
)
def test_cli_report_out_is_a_folder_or_the_html_file(tmp_path, sample_warehouse, out, html, charts):
    result = CliRunner().invoke(main, ["report", "--db", str(sample_warehouse), "--out", str(tmp_path / out)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / html).is_file() and f"wrote {tmp_path / html}" in result.output
    assert any((tmp_path / charts).glob("*.png")) and (tmp_path / out).is_dir() == (out == "reports")


def test_cli_report_out_naming_a_file_that_is_not_html_is_one_line(tmp_path, sample_warehouse):
    (tmp_path / "notes.txt").write_text("x")
    result = CliRunner().invoke(
        main, ["report", "--db", str(sample_warehouse), "--out", str(tmp_path / "notes.txt"), "--no-images"]
    )
    assert result.exit_code == 2 and "is a file; name a folder or an .html file" in result.output
    assert (tmp_path / "notes.txt").read_text() == "x"


def test_records_that_start_after_the_service_are_a_warning_in_the_report(tmp_path):
    """A ticket export of the last days beside an inventory from two months back: the report says
    the quiet start counts as failure-free exposure (and escapes the cluster name)."""
    inventory = tmp_path / "inv.csv"
    inventory.write_text(
        "cluster_id,node_id,instance_type,gpus_per_node,in_service_from\n"
        + "".join(f"<b>c1,n{i},p5,8,2026-01-01T00:00:00Z\n" for i in range(4))
    )
    tickets = tmp_path / "t.csv"
    tickets.write_text(
        "timestamp,cluster_id,node_id,category\n"
        + "".join(f"2026-03-0{d}T0{h}:00:00Z,<b>c1,n{h},Xid 79\n" for d in (1, 2, 3) for h in range(4))
    )
    con = warehouse.connect(tmp_path / "w.duckdb")
    ingest.ingest_files(con, [inventory, tickets])
    fleet = analysis.analyze(con)
    con.close()
    [late] = fleet.late_records
    assert late.cluster_id == "<b>c1" and late.expected_failures > 100
    text = report.render_html(fleet)
    warning = text.index("role='alert'>Warning: &lt;b&gt;c1: no failure recorded in its first 59 days")
    assert warning < text.index("<div class='card'>")  # before the numbers it changes
    assert "<b>c1" not in text
