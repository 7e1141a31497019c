"""Prometheus metrics: the text parses with prometheus_client's parser, names and values match the
analysis and the runs table, hostile label values round-trip, the file is written atomically, the
scrape endpoint answers, and the Grafana dashboard queries only metrics failcast exports or reserves."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import threading
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from pipeline import analysis, config, projection, report, warehouse
from pipeline.cli import main
from pipeline.cli.metrics import CachedMetrics, make_server
from pipeline.report import metrics

REPO = Path(__file__).parents[1]
DASHBOARD = REPO / "deploy/grafana/failcast-dashboard.json"
HOSTILE_LABEL = 'c"1\\n\n}{x="y'  # quote, backslash, a literal backslash-n, a newline, braces


@pytest.fixture(scope="module")
def fleet(sample_warehouse) -> analysis.FleetAnalysis:
    with warehouse.connect(sample_warehouse, read_only=True) as con:
        return analysis.analyze(con)


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """{(sample name, labels): value} as prometheus_client parses them; raises on malformed text."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_names_follow_the_conventions():
    names = [m.name for m in metrics.METRICS]
    assert len(names) == len(set(names))
    for m in metrics.METRICS:
        assert re.fullmatch(r"failcast_[a-z0-9_]+", m.name), m.name
        assert m.kind in ("gauge", "counter")
        assert m.name.endswith("_total") == (m.kind == "counter"), m.name
    assert set(metrics.RESERVED) == set()  # every planned metric is exported


def test_values_match_the_analysis(fleet):
    last = metrics.LastRun("r1", datetime(2026, 3, 1, 2, 0), datetime(2026, 3, 1, 2, 0, 42), 1234, 5)
    text = metrics.render_metrics(metrics.MetricInputs(fleet, last_run=last))
    parsed = samples(text)
    exported = {name for name, _ in parsed}
    assert exported <= set(metrics.EXPORTED)
    assert not exported & set(metrics.RESERVED)
    overall = fleet.rates.overall.row(0, named=True)
    assert (
        parsed[("failcast_fleet_interruption_rate_per_node_hour", frozenset())]
        == overall["rate_per_node_hour"]
    )
    assert (
        parsed[("failcast_fleet_interruption_rate_ci_high_per_node_hour", frozenset())]
        == overall["rate_ci_high"]
    )
    for row in fleet.rates.by_cluster.iter_rows(named=True):
        labels = frozenset({("cluster", row["cluster_id"])})
        assert (
            parsed[("failcast_cluster_interruption_rate_ci_low_per_node_hour", labels)] == row["rate_ci_low"]
        )
        assert parsed[("failcast_exposure_node_hours_total", labels)] == row["exposure_node_hours"]
        by_category = [
            v
            for (name, lab), v in parsed.items()
            if name == "failcast_interruptions_total" and ("cluster", row["cluster_id"]) in lab
        ]
        assert sum(by_category) == row["failures"]  # the counters add up to the rate's failures
    for row in fleet.rates.cluster_mtbf.iter_rows(named=True):
        labels = frozenset({("cluster", row["cluster_id"])})
        assert parsed[("failcast_cluster_mtbf_hours", labels)] == pytest.approx(row["mtbf_hours"])
    best = fleet.fits.node_fits[fleet.fits.best_family]
    assert (
        parsed[("failcast_node_mtbf_hours", frozenset({("family", fleet.fits.best_family)}))]
        == best.mtbf_hours_
    )
    assert parsed[("failcast_last_success_duration_seconds", frozenset())] == 42.0
    assert parsed[("failcast_last_success_rows_rejected", frozenset())] == 5
    assert (
        parsed[("failcast_last_success_timestamp_seconds", frozenset())]
        == datetime(2026, 3, 1, 2, 0, 42, tzinfo=UTC).timestamp()
    )
    assert parsed[("failcast_rejected_rows_total", frozenset())] == fleet.rejects.height
    repairs = fleet.repairs.by_cluster  # the report's table
    for row in repairs.iter_rows(named=True):
        labels = frozenset({("cluster", row["cluster_id"])})
        assert parsed[("failcast_cluster_availability_ratio", labels)] == row["availability"] < 1
        assert parsed[("failcast_cluster_mttr_hours", labels)] == row["mttr_hours"] > 0
        assert parsed[("failcast_outages_open", labels)] == row["unresolved"]
    lemons = dict(fleet.nodes.lemons.lemons_.group_by("cluster_id").len().iter_rows())
    for cluster in fleet.rates.by_cluster["cluster_id"]:
        labels = frozenset({("cluster", cluster)})
        assert parsed[("failcast_lemon_nodes", labels)] == lemons.get(cluster, 0)
    # no configured job: the job's metrics are left out, not written as zeros
    assert not any(name.startswith("failcast_job_") for name, _ in parsed)


def test_hostile_cluster_label_round_trips(fleet):
    first = fleet.rates.by_cluster["cluster_id"][0]
    rename = pl.col("cluster_id").replace(first, HOSTILE_LABEL)
    rates = dataclasses.replace(
        fleet.rates,
        by_cluster=fleet.rates.by_cluster.with_columns(rename),
        cluster_mtbf=fleet.rates.cluster_mtbf.with_columns(rename),
    )
    hostile = dataclasses.replace(fleet, rates=rates)
    text = metrics.render_metrics(metrics.MetricInputs(hostile))
    assert "\n}{" not in text  # the newline was escaped: no sample line starts inside the label
    clusters = {
        dict(lab)["cluster"]
        for name, lab in samples(text)
        if name == "failcast_cluster_interruption_rate_per_node_hour"
    }
    assert HOSTILE_LABEL in clusters and first not in clusters


def test_unbounded_mtbf_is_inf(fleet):
    unbounded = fleet.rates.cluster_mtbf.with_columns(mtbf_hours=pl.lit(float("inf")))
    no_failures = dataclasses.replace(fleet, rates=dataclasses.replace(fleet.rates, cluster_mtbf=unbounded))
    parsed = samples(metrics.render_metrics(metrics.MetricInputs(no_failures)))
    values = [v for (name, _), v in parsed.items() if name == "failcast_cluster_mtbf_hours"]
    assert values and all(v == float("inf") for v in values)


def test_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "textfile" / "failcast.prom"
    metrics.write_metrics("# old\n", path)
    monkeypatch.setattr(metrics.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError, match="disk full"):
        metrics.write_metrics("# new\n", path)
    assert path.read_text() == "# old\n"  # the collector still reads the whole old file
    assert [p.name for p in path.parent.iterdir()] == ["failcast.prom"]  # no temp file left


def test_cli_writes_the_file_with_the_configured_job(sample_warehouse, tmp_path):
    out = tmp_path / "failcast.prom"
    result = CliRunner().invoke(main, ["metrics", "--db", str(sample_warehouse), "--out", str(out)])
    assert result.exit_code == 0, result.output
    parsed = samples(out.read_text())
    # without --config: the bundled sample job, projected on this fleet, manual and automatic
    days = {
        dict(lab)["recovery"]: v for (name, lab), v in parsed.items() if name == "failcast_job_projected_days"
    }
    assert set(days) == {"manual", "automatic"} and days["automatic"] < days["manual"]
    saved = [v for (name, _), v in parsed.items() if name == "failcast_job_projected_savings_days"]
    assert saved == [pytest.approx(days["manual"] - days["automatic"])]


def test_cli_names_a_missing_db(tmp_path):
    result = CliRunner().invoke(main, ["metrics", "--db", str(tmp_path / "none.duckdb")])
    assert result.exit_code == 2 and "none.duckdb" in result.output and "Traceback" not in result.output


def test_serve_answers_a_scrape(sample_warehouse):
    cfg = dataclasses.replace(config.load_config(None), jobs=())
    server = make_server(CachedMetrics(sample_warehouse, cfg), 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
            assert response.headers["Content-Type"] == metrics.CONTENT_TYPE
            parsed = samples(response.read().decode())
        assert ("failcast_fleet_interruption_rate_per_node_hour", frozenset()) in parsed
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{url}/other", timeout=30)
        assert missing.value.code == 404
    finally:
        server.shutdown()
        server.server_close()


# --- the Grafana dashboard ---------------------------------------------------------------------
PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset",
}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not functions, keywords, label
    names (inside {...} or by/without (...)), durations or Grafana variables."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range durations
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set()
    for match in re.finditer(r"(?<![\w$])([a-zA-Z_:][\w:]*)\s*(\()?", expr):
        if not match.group(2) and match.group(1) not in PROMQL_WORDS:
            names.add(match.group(1))
    return names


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    panels = [p for p in board["panels"] if p["type"] != "row"]
    queries = [t["expr"] for p in panels for t in p["targets"]]
    queries += [v["definition"] for v in board["templating"]["list"]]
    return queries


def test_metric_name_parser():
    assert metric_names('sum by (category) (increase(failcast_interruptions_total{cluster=~"$c"}[1d]))') == {
        "failcast_interruptions_total"
    }
    assert metric_names("time() - failcast_last_success_timestamp_seconds") == {
        "failcast_last_success_timestamp_seconds"
    }
    assert metric_names("label_values(up, job)") == {"up", "job"}  # a bare label name counts: strict


def test_dashboard_queries_only_failcast_metrics():
    board = json.loads(DASHBOARD.read_text())
    assert board["title"] and board["panels"]
    used = set()
    for expr in dashboard_queries():
        names = metric_names(re.sub(r"label_values\(([^,]+),\s*\w+\)", r"\1", expr))
        assert names, expr
        assert names <= set(metrics.EXPORTED) | set(metrics.RESERVED), (expr, names)
        used |= names
    assert set(metrics.RESERVED) <= used  # the planned panels are there, waiting for their metrics
    titles = " ".join(p["title"].lower() for p in board["panels"])
    for topic in ("rate", "mtbf", "availability", "mttr", "lemon", "savings", "run"):
        assert topic in titles, topic


def test_every_configured_job_is_exported_and_a_job_without_a_price_has_no_cost(fleet):
    """Two jobs, the second without a price and too big for manual recovery: a job label each;
    no cost or dollar-savings sample for the unpriced one (not NaN); +Inf days where it cannot
    finish; the first job's numbers are its projection's."""
    rate = projection.FailureModel.exponential(0.0005)
    priced = projection.JobSpec(256, 4.5, rate, gpu_hours=6.5e6, name="priced")
    unpriced = projection.JobSpec(4096, None, rate, gpu_hours=6.5e6, name="unpriced")
    outlook = report.job_outlook(priced, monte_carlo_runs=0, others=[unpriced])
    text = metrics.render_metrics(metrics.MetricInputs(fleet, outlook))
    assert "NaN" not in text
    parsed = samples(text)

    def of(name: str) -> dict[tuple[str, str], float]:
        return {(dict(lab)["job"], dict(lab)["recovery"]): v for (n, lab), v in parsed.items() if n == name}

    days, cost = of("failcast_job_projected_days"), of("failcast_job_projected_cost_dollars")
    assert set(days) == {(j, m) for j in ("priced", "unpriced") for m in ("manual", "automatic")}
    assert set(cost) == {("priced", "manual"), ("priced", "automatic")}
    first = {r["mode"]: r for r in outlook.modes.iter_rows(named=True)}
    assert days[("priced", "automatic")] == first["automatic"]["expected_days"]
    assert cost[("priced", "manual")] == first["manual"]["cost_usd"]
    assert days[("unpriced", "manual")] == math.inf  # 4 096 instances, 3.5 h per failure: never
    assert set(of("failcast_job_projected_savings_days")) == {("priced", "automatic")}
    assert set(of("failcast_job_projected_savings_dollars")) == {("priced", "automatic")}
