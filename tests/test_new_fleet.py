"""A new fleet through the CLI as its operator meets failcast: no failures yet, CPU and storage nodes
beside GPU nodes, a directory or FIFO passed as an input, a CSV passed as --db, failures that fall
outside service (each statistic says how many it left out and why)."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline import analysis, transform, warehouse
from pipeline.cli import main

REPO = Path(__file__).resolve().parents[1]
INVENTORY_HEADER = "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n"
# 2 GPU nodes and one CPU login node; 31 + 59 + 59 days in service up to 2026-03-01
INVENTORY = INVENTORY_HEADER + (
    "c1,n1,p5.48xlarge,8,2026-01-01T00:00:00Z,2026-02-01T00:00:00Z\n"
    "c1,n2,p5.48xlarge,8,2026-01-01T00:00:00Z,\n"
    "login,l1,m7i.large,0,2026-01-01T00:00:00Z,2026-03-01T00:00:00Z\n"
)
NODE_HOURS = {"c1": (31 + 59) * 24.0, "login": 59 * 24.0}


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def new_fleet(tmp_path) -> Path:
    """A warehouse with an inventory and no incident at all."""
    (tmp_path / "inventory.csv").write_text(INVENTORY)
    db = tmp_path / "w.duckdb"
    result = invoke("ingest", str(tmp_path / "inventory.csv"), "--db", str(db))
    assert result.exit_code == 0, result.output
    assert "ingested 3, duplicate 0, rejected 0" in result.output  # gpus_per_node 0 is a valid row
    return db


def test_rates_of_a_fleet_without_failures_give_the_one_sided_upper_bound(new_fleet):
    result = invoke("rates", "--db", str(new_fleet), "--json")
    assert result.exit_code == 0, result.output
    rows = {r["cluster_id"]: r for r in json.loads(result.stdout)}
    for cluster, hours in NODE_HOURS.items():
        row = rows[cluster]
        assert (row["failures"], row["exposure_node_hours"]) == (0, pytest.approx(hours))
        assert row["rate_per_node_hour"] == 0 and row["rate_ci_low"] == 0
        assert row["rate_upper_bound"] == pytest.approx(-math.log(0.05) / hours)  # ~3 / T
    # the CPU node counts node-hours, no GPU-hours, and has no per-GPU-hour rate (not inf or NaN)
    assert rows["login"]["exposure_gpu_hours"] == 0
    assert rows["login"]["rate_per_gpu_hour"] is None and rows["login"]["rate_per_gpu_hour_ci_high"] is None
    assert rows["c1"]["exposure_gpu_hours"] == pytest.approx(8 * NODE_HOURS["c1"])
    total = sum(NODE_HOURS.values())
    assert f"no failures yet in {total:,.0f} node-hours" in result.stderr
    assert f"{-math.log(0.05) / total:.3g} per node-hour" in result.stderr


def test_fit_says_there_is_nothing_to_fit(new_fleet):
    text = invoke("fit", "--db", str(new_fleet))
    assert text.exit_code == 0 and text.stdout.startswith("nothing to fit: no failures yet"), text.output
    as_json = invoke("fit", "--db", str(new_fleet), "--json")
    payload = json.loads(as_json.stdout)
    assert payload["failures"] == 0 and payload["best_family"] is None
    assert payload["node_time_between_failures"] == {} and payload["scaling"] is None


def _text(html: str) -> str:
    html = re.sub(r"<(script|style).*?</\1>", " ", html, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_report_of_a_fleet_without_failures_shows_exposure_bound_and_projection_at_it(new_fleet, tmp_path):
    job = REPO / "data" / "jobs" / "fleet-llama3-70b.toml"
    out = tmp_path / "report"
    result = invoke("report", "--db", str(new_fleet), "--out", str(out), "--job", str(job), "--no-images")
    assert result.exit_code == 0, result.output
    text = _text((out / "failcast-report.html").read_text())
    bound = -math.log(0.05) / sum(NODE_HOURS.values())
    assert f"no failures yet upper bound {bound * 100:.4f}% per instance-hour (95% one-sided" in text
    assert "Projected job at the upper-bound rate, automatic recovery" in text
    assert "(at the upper-bound failure rate: a worst case)" in text
    assert "UPPER BOUND (95% one-sided" in text  # the projection's failure model names its source
    assert "Time between failures per node" not in text  # nothing fitted is drawn


def test_run_succeeds_end_to_end_on_an_inventory_only_fleet(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs/inventory.csv").write_text(INVENTORY)
    (tmp_path / "job.toml").write_bytes((REPO / "data/jobs/fleet-llama3-70b.toml").read_bytes())
    config = tmp_path / "failcast.toml"
    config.write_text(
        'warehouse = "w.duckdb"\nreport_dir = "reports"\njobs = ["job.toml"]\n'
        '[inputs]\ninventory = ["logs/inventory.csv"]\ncsv = ["logs/incidents-*.csv"]\n'
    )
    result = invoke("run", "--config", str(config))
    assert result.exit_code == 0, result.output
    assert "upper-bound rate" in (tmp_path / "reports/latest.html").read_text()


@pytest.mark.parametrize("failures", [1, 2])
def test_a_new_fleets_first_failures_are_counted_but_not_fitted(new_fleet, tmp_path, failures):
    """One node, its first failure (the window ends at it: one time between failures), or two
    failures 1 h apart at the same gap twice... one gap is too few for a two-parameter fit, which
    lifelines refuses or makes degenerate (shape -> infinity). Rates, fit, report and run say so
    and succeed: the crash this replaces took `failcast run` down at a fleet's first failure."""
    times = ["2026-02-20T00:00:00Z", "2026-02-20T01:00:00Z"][:failures]
    rows = "".join(f"{t},c1,n2,nvlink\n" for t in times)
    (tmp_path / "incidents.csv").write_text("timestamp,cluster_id,node_id,category\n" + rows)
    assert invoke("ingest", str(tmp_path / "incidents.csv"), "--db", str(new_fleet)).exit_code == 0
    fit = invoke("fit", "--db", str(new_fleet))
    payload = json.loads(invoke("fit", "--db", str(new_fleet), "--json").stdout)
    if failures == 1:
        assert fit.exit_code == 0 and fit.stdout.startswith("nothing to fit: too few times between failures")
        assert payload["failures"] == 1 and payload["best_family"] is None
        assert payload["not_fitted"].startswith("too few times between failures to fit (1 observed gap")
    else:  # two different gaps (the first from service start, then 1 h): fitted as before
        assert payload["best_family"] is not None and payload["not_fitted"] is None
        for family in payload["node_time_between_failures"].values():  # positive stays positive
            lows = [low for name, (low, _) in family["confidence_interval"].items() if name != "mu_"]
            assert min(lows) > 0 and family["mtbf_ci_hours"][0] > 0, family
    rates = json.loads(invoke("rates", "--db", str(new_fleet), "--json").stdout)
    assert sum(r["failures"] for r in rates) == failures
    out = tmp_path / "report"
    result = invoke("report", "--db", str(new_fleet), "--out", str(out), "--no-images")
    assert result.exit_code == 0, result.output
    text = _text((out / "failcast-report.html").read_text())
    assert ("Time between failures not fitted too few times between failures" in text) is (failures == 1)


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_an_input_that_is_not_a_file_says_what_it_is(tmp_path, kind):
    path = tmp_path / "logs"
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
    result = invoke("ingest", str(path), "--db", str(tmp_path / "w.duckdb"))
    assert result.exit_code == 2
    expected = "is a directory: pass files or a glob" if kind == "directory" else "not a regular file"
    assert result.stderr.startswith(f"failcast: {path}: {expected}") and result.stderr.count("\n") == 1


@pytest.mark.parametrize("command", [["rates"], ["fit"], ["ingest", "{inventory}"]])
def test_a_db_that_is_not_duckdb_is_one_line_naming_it(tmp_path, command):
    inventory = tmp_path / "inventory.csv"
    inventory.write_text(INVENTORY)
    args = [a.format(inventory=inventory) for a in command]
    result = invoke(*args, "--db", str(inventory))
    assert result.exit_code == 2
    assert (
        result.stderr
        == f"failcast: {inventory}: not a DuckDB warehouse file"
        + result.stderr.split("not a DuckDB warehouse file")[1]
    )
    assert result.stderr.count("\n") == 1 and inventory.read_text() == INVENTORY  # left untouched


def test_rates_and_fit_say_how_many_failures_they_left_out(tmp_path):
    """n1 fails as it leaves service (counted), then logs a fault while out (left out); a node not in
    the inventory fails (left out); the last failure in the data, at the default window end, counts."""
    (tmp_path / "inventory.csv").write_text("".join(INVENTORY.splitlines(keepends=True)[:3]))  # GPU nodes
    (tmp_path / "incidents.csv").write_text(
        "timestamp,cluster_id,node_id,category\n"
        "2026-01-10T00:00:00Z,c1,n2,gpu_memory\n"
        "2026-02-01T00:00:00Z,c1,n1,gpu_fell_off_bus\n"
        "2026-02-10T00:00:00Z,c1,n1,host\n"
        "2026-02-11T00:00:00Z,c1,ghost,host\n"
        "2026-03-02T00:00:00Z,c1,n2,network\n"
    )
    db = tmp_path / "w.duckdb"
    assert invoke("ingest", str(tmp_path / "inventory.csv"), str(tmp_path / "incidents.csv"), "--db", str(db))
    rates = invoke("rates", "--db", str(db), "--json")
    counted = {r["cluster_id"]: r["failures"] for r in json.loads(rates.stdout)}
    assert counted == {"c1": 3}
    note = (
        "note: 2 failures left out of rates and fits (no exposure behind them): "
        f"1 {transform.LEFT_OUT_REASONS[1]}; 1 {transform.LEFT_OUT_REASONS[2]}\n"
    )
    assert rates.stderr == note
    fit = invoke("fit", "--db", str(db), "--json")
    assert fit.stderr == note and json.loads(fit.stdout)["failures"] == 3
    # an earlier --until leaves the last failure out, and says so
    until = invoke("rates", "--db", str(db), "--until", "2026-03-01")
    assert f"1 {transform.LEFT_OUT_REASONS[0]}" in until.stderr


def test_metrics_of_a_fleet_without_failures_parse_and_say_zero(new_fleet, tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    out = tmp_path / "failcast.prom"
    result = invoke("metrics", "--db", str(new_fleet), "--out", str(out))
    assert result.exit_code == 0, result.output
    parsed = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(out.read_text())
        for s in family.samples
    }
    assert parsed[("failcast_fleet_interruption_rate_per_node_hour", frozenset())] == 0
    assert not any(name == "failcast_node_mtbf_hours" for name, _ in parsed)  # nothing was fitted


def test_a_fleet_without_failures_has_rates_per_instance_type_and_no_repairs(new_fleet):
    """What the analysis keeps instead of rows (issue 27) on a fleet with nothing to count yet:
    each type's rate table with 0 failures, its job rate the type's own upper bound, no repairs."""
    con = warehouse.connect(new_fleet, read_only=True)
    try:
        result = analysis.analyze(con)
    finally:
        con.close()
    assert sorted(result.instance_type_rates) == ["m7i.large", "p5.48xlarge"]
    gpu = result.instance_type_rates["p5.48xlarge"].overall.row(0, named=True)
    assert gpu["failures"] == 0 and gpu["exposure_node_hours"] == pytest.approx(NODE_HOURS["c1"])
    model = analysis.failure_model_for(result, 64, instance_type="p5.48xlarge")
    assert "UPPER BOUND" in model.source and model.rate_per_instance_hour == gpu["rate_upper_bound"]
    repairs = result.repairs
    assert repairs.outages == 0 and repairs.times is None and repairs.curves.is_empty()
    assert repairs.by_cluster.is_empty() and repairs.total["downtime_hours"] == 0
