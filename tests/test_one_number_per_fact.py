"""One number per fact: a figure the report, the CLI and the notebooks show in two places is computed
once, reads the same in both, and names the method that made its interval.

Fixtures reproduce what issue 28 found on real data (its files are not in the repository):

* ``fault_table``: one cluster's fault table with start and end (an LLM-pretraining export): node
  rates vary (failures cluster on some nodes, so the intervals are quasi-Poisson), repairs take a
  day or two, and some faults start while their node is still down for an earlier one (a
  stress-test failure during a repair). Those are part of that outage: the rate table leaves them
  out ("node out of service"); the trend table counted them, 578 against 576. Timestamps carry
  milliseconds (the header printed "19:01:29.280000 UTC"), and one cluster made the public
  baselines show the fleet twice, with two different intervals.
* ``availability_trace``: up intervals that end at each failure (an availability trace), nodes
  failing every few hours in clusters of 4 to 16 nodes, so the scaling law's MTBF at 16,384
  instances is seconds (the card printed "16,384: 0.0 min").
"""

from __future__ import annotations

import html
import json
import re
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from pipeline import analysis, ingest, report, transform, warehouse
from pipeline.cli import main
from pipeline.report import charts, comparisons, drivers
from pipeline.report.format import (
    RATE_INTERVAL_SCOPE,
    duration_text,
    format_value,
    interval_name,
    timestamp_text,
)
from pipeline.transform.reliability import MAX_POINTS
from tests._fleets import AnalysisRows, analysis_rows

START = datetime(2025, 3, 1)


def _fault_table(root: Path) -> list[Path]:
    """One cluster of 48 nodes over 90 days, each node's rate drawn from a gamma (overdispersed
    counts), repairs lognormal (median 20 h), every 15th fault followed by a second one while its
    node is still down; times with milliseconds."""
    rng = np.random.default_rng(28)
    nodes = [f"gpu-{i:03d}" for i in range(48)]
    hours = 90 * 24
    rows = []
    for node, rate in zip(nodes, rng.gamma(0.8, 1 / 0.8, len(nodes)) * 2.5e-3, strict=True):
        for t in np.sort(rng.uniform(0, hours, rng.poisson(rate * hours))):
            rows.append((START + timedelta(hours=float(t)), node, float(rng.lognormal(np.log(20), 1.2))))
    during = [(start + timedelta(hours=repair / 3), node, 1.0) for start, node, repair in rows[::15]]
    rows = sorted(rows + during)
    stamp = "%Y-%m-%dT%H:%M:%S%.3fZ"
    faults = pl.DataFrame(
        {
            "timestamp": [r[0] for r in rows],
            "cluster_id": "pretrain",
            "node_id": [r[1] for r in rows],
            "category": rng.choice(["Faulty GPU", "Link Down", "NCCL timeout", "Stress test"], len(rows)),
            "resolved_at": [r[0] + timedelta(hours=r[2]) for r in rows],
        }
    ).with_columns(pl.col("timestamp", "resolved_at").dt.strftime(stamp))
    inventory = pl.DataFrame(
        {
            "cluster_id": "pretrain",
            "node_id": nodes,
            "instance_type": "p5.48xlarge",
            "gpus_per_node": 8,
            "in_service_from": "2025-03-01T00:00:00Z",
            "in_service_to": None,
        }
    )
    inventory.write_csv(root / "inventory.csv")
    faults.write_csv(root / "faults.csv")
    return [root / "inventory.csv", root / "faults.csv"]


def _availability_trace(root: Path) -> list[Path]:
    """Clusters of 4, 8 and 16 nodes over 20 days; each node up for Exponential(6 h) (a little
    less on the bigger clusters, so the law bends), down 1 h; each up interval ends at its failure."""
    rng = np.random.default_rng(5)
    end = START + timedelta(days=20)
    intervals, failures = [], []
    for size, mtbf in ((4, 6.0), (8, 5.0), (16, 4.0)):
        for i in range(size):
            node, t = f"n{size}-{i}", START
            while t < end:
                up = t + timedelta(hours=float(rng.exponential(mtbf)))
                if up >= end:
                    intervals.append((f"c{size}", node, t, None))
                    break
                intervals.append((f"c{size}", node, t, up))
                failures.append((up, f"c{size}", node))
                t = up + timedelta(hours=1)
    fmt = "%Y-%m-%dT%H:%M:%SZ"
    pl.DataFrame(
        {
            "cluster_id": [r[0] for r in intervals],
            "node_id": [r[1] for r in intervals],
            "instance_type": "host",
            "gpus_per_node": 8,
            "in_service_from": [r[2].strftime(fmt) for r in intervals],
            "in_service_to": [r[3].strftime(fmt) if r[3] else None for r in intervals],
        }
    ).write_csv(root / "inventory.csv")
    pl.DataFrame(
        {
            "timestamp": [f[0].strftime(fmt) for f in failures],
            "cluster_id": [f[1] for f in failures],
            "node_id": [f[2] for f in failures],
            "category": "unavailable",
        }
    ).write_csv(root / "trace.csv")
    return [root / "inventory.csv", root / "trace.csv"]


def _warehouse(root: Path, files: list[Path]) -> Path:
    con = warehouse.connect(root / "failcast.duckdb")
    try:
        ingest.ingest_files(con, files)
    finally:
        con.close()
    return root / "failcast.duckdb"


def _analyze(db: Path) -> analysis.FleetAnalysis:
    con = warehouse.connect(db, read_only=True)
    try:
        return analysis.analyze(con)
    finally:
        con.close()


@pytest.fixture(scope="module")
def fault_db(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fault-table")
    return _warehouse(root, _fault_table(root))


@pytest.fixture(scope="module")
def faults(fault_db) -> analysis.FleetAnalysis:
    return _analyze(fault_db)


@pytest.fixture(scope="module")
def fault_rows(fault_db) -> AnalysisRows:
    con = warehouse.connect(fault_db, read_only=True)
    try:
        return analysis_rows(con)
    finally:
        con.close()


@pytest.fixture(scope="module")
def page(faults) -> str:
    return report.render_html(faults)


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> analysis.FleetAnalysis:
    root = tmp_path_factory.mktemp("availability-trace")
    return _analyze(_warehouse(root, _availability_trace(root)))


def _visible_text(page_html: str) -> str:
    """The page's text as a reader sees it: no scripts (the Vega bundle, chart specs), no tags."""
    text = re.sub(r"<script.*?</script>", " ", page_html, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", text))


def _specs(page_html: str) -> dict[str, dict]:
    return {
        slug: json.loads(body)
        for slug, body in re.findall(
            r'<script type="application/json" id="spec-([^"]+)">(.*?)</script>', page_html
        )
    }


def _titles(spec) -> list[str]:
    """Every axis or encoding title in a chart spec."""
    if isinstance(spec, dict):
        own = [spec["title"]] if isinstance(spec.get("title"), str) else []
        return own + [t for v in spec.values() for t in _titles(v)]
    if isinstance(spec, list):
        return [t for v in spec for t in _titles(v)]
    return []


# --- the fixtures reproduce the symptoms ----------------------------------------------------------
def test_the_fault_table_has_failures_during_repairs_and_clustered_counts(faults, fault_rows):
    in_repair = faults.failures_left_out.filter(reason=transform.LEFT_OUT_REASONS[2])["failures"][0]
    on_calendar = transform.failures_in_service(fault_rows.interruptions, fault_rows.exposure).height
    assert in_repair > 0 and on_calendar == faults.rates.overall["failures"][0] + in_repair
    assert faults.rates.interval_method == "overdispersed"
    assert faults.rates.by_cluster.height == 1 and faults.observed_until.microsecond > 0


# --- the same count wherever failures are counted --------------------------------------------------
def test_every_table_counts_the_rate_tables_failures(faults):
    counted = faults.rates.overall["failures"][0]
    cluster = faults.rates.by_cluster["failures"][0]
    duane = faults.counted.duane_points
    mcf = faults.counted.mcf  # every failure age kept (fewer than MAX_POINTS): its steps add up
    assert mcf.height < MAX_POINTS and mcf["age_hours"].is_unique().all()
    steps = mcf["mcf"].diff().fill_null(mcf["mcf"][0]) * mcf["nodes_at_risk"]  # d(u) = ΔMCF r(u)
    assert cluster == counted == round(steps.sum())
    assert drivers.trend_table(faults)["failures"][0] == counted  # was the calendar count
    assert faults.rates.cluster_mtbf["failures"][0] == counted
    assert charts.category_table(faults)["failures"].sum() == counted
    assert drivers.category_share_table(faults)["failures"].sum() == counted
    assert faults.nodes.rates["failures"].sum() == counted
    assert duane["cumulative_failures"].max() == counted


def test_the_page_shows_one_count_and_one_rate(faults, fault_rows, page):
    text = _visible_text(page)
    counted = faults.rates.overall.row(0, named=True)
    failures = f"{counted['failures']:,}"
    # the card, the rate table, the trend table, the MTBF table and the baselines all say it
    assert f"{failures} failures in" in text
    calendar = transform.failures_in_service(fault_rows.interruptions, fault_rows.exposure).height
    assert f" {calendar:,} " not in text
    # the repair note says why its interruptions outnumber its outages, in failcast repairs' words
    during = calendar - fault_rows.outages.height
    assert during > 0 and faults.repairs.total["interruptions_while_down"] == during
    line = f"{during:,} interruptions began while their node was already down: part of that outage"
    assert f"{line}." in text
    rate, low, high = (
        format_value(k, counted[k]) for k in ("rate_per_node_hour", "rate_ci_low", "rate_ci_high")
    )
    assert (
        f"{rate} per instance-hour" in text
        and f"95% CI {low}–{high}, {interval_name('overdispersed')}" in text
    )


def test_public_baselines_show_a_one_cluster_fleet_once_with_its_own_interval(faults, page):
    table = comparisons.baselines(faults.rates)
    mine = table.filter(source=comparisons.THIS_FLEET)
    assert mine.height == 1 and mine["fleet"][0] == "pretrain"
    row, rates = mine.row(0, named=True), faults.rates.by_cluster.row(0, named=True)
    for column in ("failures", "exposure_node_hours", "rate_per_node_hour", "rate_ci_low", "rate_ci_high"):
        assert row[column] == rates[column], column
    assert (
        row["interval"] == "overdispersed" and row["mtbf_hours"] == faults.rates.cluster_mtbf["mtbf_hours"][0]
    )
    assert set(table.filter(series=comparisons.PUBLISHED)["interval"]) == {"exact"}
    text = _visible_text(page)
    assert text.count("this fleet ·") == 0  # the page's table has source and fleet in two cells
    baseline_rows = re.findall(r"this fleet\s+pretrain", text)
    assert len(baseline_rows) == 1


def test_a_fleet_of_several_clusters_shows_each_clusters_rate_table_figures(sample_warehouse):
    fleet = _analyze(sample_warehouse)
    table = comparisons.baselines(fleet.rates)
    mine = table.filter(
        (pl.col("source") == comparisons.THIS_FLEET) & (pl.col("fleet") != comparisons.ALL_CLUSTERS)
    )
    joined = mine.join(fleet.rates.by_cluster, left_on="fleet", right_on="cluster_id", suffix="_rates")
    assert joined.height == fleet.rates.by_cluster.height > 1
    for column in ("rate_ci_low", "rate_ci_high", "failures"):
        assert joined[column].to_list() == joined[f"{column}_rates"].to_list()
    whole = table.filter(fleet=comparisons.ALL_CLUSTERS).row(0, named=True)
    assert (whole["rate_ci_low"], whole["rate_ci_high"]) == (
        fleet.rates.overall["rate_ci_low"][0],
        fleet.rates.overall["rate_ci_high"][0],
    )
    assert set(mine["interval"]) == {fleet.rates.interval_method}


# --- every rate interval names its method -----------------------------------------------------------
def test_chart_axes_name_the_interval_method(page):
    specs = _specs(page)
    quasi, exact = interval_name("overdispersed"), interval_name("exact")
    rate_axis = next(t for t in _titles(specs["failure-rate-by-cluster"]) if "CI" in t)
    assert quasi in rate_axis and "exact" not in rate_axis
    band = next(t for t in _titles(specs["failure-rate-over-time"]) if "band" in t)
    assert quasi in band
    baseline_axis = next(t for t in _titles(specs["public-baselines"]) if "CI" in t)
    assert f"{exact} for the published fleets" in baseline_axis and f"{quasi} for this fleet" in baseline_axis


def test_notes_name_the_interval_method_and_what_it_is_for(page):
    text = _visible_text(page)
    assert "exact 95% Poisson" not in text and "exact 95% intervals" not in text
    assert f"the band is its 95% interval, {interval_name('overdispersed')}" in text
    assert "observed cluster MTBF with the 95% interval of the cluster's rate (quasi-Poisson" in text
    assert RATE_INTERVAL_SCOPE in text


def test_an_exact_fleet_says_exact(sample_warehouse):
    fleet = _analyze(sample_warehouse)
    if fleet.rates.interval_method != "exact":
        fleet = analysis.analyze(
            warehouse.connect(sample_warehouse, read_only=True), analysis.AnalysisOptions(interval="exact")
        )
    specs = _specs(report.render_html(fleet))
    axis = next(t for t in _titles(specs["failure-rate-by-cluster"]) if "CI" in t)
    assert interval_name("exact") in axis and "quasi" not in axis


# --- times and durations for people -----------------------------------------------------------------
def test_no_timestamp_has_microseconds(faults, page):
    text = _visible_text(page)
    assert not re.search(r"\d\d:\d\d:\d\d\.\d", text)
    assert f"Observed until {timestamp_text(faults.observed_until)}" in text


@pytest.mark.parametrize(
    ("hours", "text"),
    [
        (1734.2, "1,734 h"),
        (7.523, "7.52 h"),
        (1.0, "1.00 h"),
        (0.75, "45.0 min"),
        (1 / 60, "1.00 min"),
        (0.0004, "1.44 s"),
        (0.0, "0 s"),
        (float("inf"), "∞ h"),
    ],
)
def test_durations_read_in_hours_minutes_or_seconds(hours, text):
    assert duration_text(hours) == text


def test_sub_minute_cluster_mtbf_reads_in_seconds(trace):
    cards = report.summary_cards(trace)
    title, value, note = next(c for c in cards if c[0].startswith("Projected cluster MTBF"))
    mtbf = trace.fits.scaling_projection.filter(instances=16384.0)["mtbf_hours"][0]
    assert mtbf * 3600 < 60  # the fixture's point: seconds at 16,384 instances
    assert f"16,384: {duration_text(mtbf)}" in note and duration_text(mtbf).endswith(" s")
    assert "0.0 min" not in note and "0.0 min" not in value


# --- the CLI counts what the report counts ----------------------------------------------------------
def test_cli_views_count_the_rate_tables_failures(fault_db, faults):
    def run(*args: str) -> list[dict]:
        result = CliRunner().invoke(main, ["rates", "--db", str(fault_db), "--json", *args])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    counted = faults.rates.overall["failures"][0]
    assert [r["failures"] for r in run()] == [counted]
    assert [r["failures"] for r in run("--view", "trend")] == [counted]
    assert sum(r["failures"] for r in run("--view", "shares")) == counted
    text = CliRunner().invoke(main, ["rates", "--db", str(fault_db)]).stdout
    assert f"95% CI {format_value('rate_ci_low', faults.rates.overall['rate_ci_low'][0])}" in text
    assert interval_name(faults.rates.interval_method) in text.splitlines()[0]


def test_cli_help_says_what_a_rate_interval_is_for():
    for command in ("rates", "report"):
        out = CliRunner().invoke(main, [command, "--help"]).stdout
        assert "freshly drawn fleet" in " ".join(out.split()), command


def test_the_categories_behind_a_class_add_up_to_its_row(faults):
    note = charts.recorded_categories_note(faults)
    per_class = dict(charts.category_table(faults).select("failure_class", "failures").iter_rows())
    named = re.findall(r"([^;:]+?) → (\w+) \(([\d,]+)\)", note)
    assert named and {k for _, k, _ in named} == set(per_class)
    for cls, failures in per_class.items():
        assert sum(int(n.replace(",", "")) for _, k, n in named if k == cls) == failures


def test_a_jobs_measured_rate_is_the_rate_tables(sample_warehouse):
    """The job card's rate and interval (the projection's failure model) are the size bucket's row
    of the rate table, by the same method, not an exact interval recomputed beside it."""
    fleet = _analyze(sample_warehouse)
    bucket = fleet.rates.by_size_bucket.filter(pl.col("failures") > 0).row(0, named=True)
    model = analysis.failure_model_for(fleet, int(bucket["size_bucket"]))
    assert (
        model.rate_per_instance_hour,
        model.rate_ci_low_per_instance_hour,
        model.rate_ci_high_per_instance_hour,
    ) == (
        bucket["rate_per_node_hour"],
        bucket["rate_ci_low"],
        bucket["rate_ci_high"],
    )
    assert f"({fleet.rates.interval_method} 95% interval)" in model.source
