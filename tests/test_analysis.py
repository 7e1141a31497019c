"""analyze() on a real DuckDB warehouse filled by the real ingest, and the rates/fit CLI on it.

One fleet checks the chain end to end; interval coverage over many seeds is in test_models.
"""

from __future__ import annotations

import json
import math
from datetime import timedelta

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from pipeline import analysis, ingest, models, sample, transform, warehouse
from pipeline.cli import main
from tests._fleets import warehouse_frames
from tests._interruptions import node_interruptions

SPEC = sample.FleetSpec(cluster_sizes=(32, 128, 512), days=90, weibull_shape=0.8, seed=32)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    out = tmp_path_factory.mktemp("fleet")
    paths = sample.simulate_fleet(SPEC).write(out)
    db_path = out / "warehouse.duckdb"
    con = warehouse.connect(db_path)
    ingest.ingest_files(con, list(paths))
    con.close()
    return db_path


@pytest.fixture(scope="module")
def result(db) -> analysis.FleetAnalysis:
    con = warehouse.connect(db, read_only=True)
    try:
        return analysis.analyze(con)
    finally:
        con.close()


def test_analysis_recovers_the_simulated_fleet(result):
    rate = result.fleet_rate
    assert rate.confidence_interval_[0] <= SPEC.rate_per_node_hour <= rate.confidence_interval_[1]
    weibull = result.fits.node_fits["weibull"]
    assert (
        weibull.confidence_interval_["rho_"][0]
        <= SPEC.weibull_shape
        <= weibull.confidence_interval_["rho_"][1]
    )
    low, high = weibull.mtbf_confidence_interval_
    assert low <= 1 / SPEC.rate_per_node_hour <= high
    assert result.fits.best_family == "weibull" and weibull.infant_mortality_
    for view in (result.fits.scaling, result.fits.size_regression):
        assert view.alpha_confidence_interval_[0] <= 1 <= view.alpha_confidence_interval_[1]


def test_analysis_new_fields_have_their_shape(result):
    clusters = sorted(f"c{n:04d}" for n in SPEC.cluster_sizes)
    assert result.fits.first_gap == "drop"
    assert sorted(result.rates.trend_tests["cluster_id"]) == clusters
    assert set(result.rates.trend_tests["crow_verdict"]) <= {"flat", "rising", "falling"}
    assert sorted(result.rates.by_size_bucket["size_bucket"]) == [32, 128, 512]
    sums = result.rates.category_shares.group_by("cluster_id").agg(pl.col("share").sum())
    assert sums["share"].to_list() == pytest.approx([1.0] * 3)
    assert isinstance(result.fits.nelson_aalen, models.NelsonAalen)
    assert result.fits.nelson_aalen.cumulative_hazard_[-1] > 0
    assert not result.fits.node_durations["observed"].is_null().any()
    projected = result.fits.size_regression_projection
    assert {256, 512, 2048, 16384} <= set(projected["instances"].cast(int))
    assert (projected["mtbf_ci_low_hours"] < projected["mtbf_hours"]).all()
    assert result.jobs.interruptions is None and result.exposure_estimated is False
    assert sorted(result.fits.cluster_kaplan_meier) == clusters
    medians = [result.fits.cluster_kaplan_meier[c].median_hours_ for c in clusters]
    assert medians == sorted(medians, reverse=True)  # bigger clusters fail sooner
    # Weibull shape 0.8 nodes: failures cluster, counts are over-dispersed
    assert result.fits.count_dispersion > 1


def test_keeping_first_gaps_changes_only_the_gap_fits(db, result):
    con = warehouse.connect(db, read_only=True)
    kept = analysis.analyze(con, analysis.AnalysisOptions(first_gap="keep"))
    con.close()
    assert kept.fits.node_durations["count"].sum() > result.fits.node_durations["count"].sum()
    # sums over the uptime pieces are summed in parallel: equal up to float rounding
    assert_frame_equal(kept.rates.by_cluster, result.rates.by_cluster, check_exact=False, rel_tol=1e-12)


EXISTING_RATE_KEYS = {
    "cluster_id",
    "failures",
    "exposure_node_hours",
    "rate_per_node_hour",
    "rate_ci_low",
    "rate_ci_high",
}


@pytest.mark.parametrize(
    ("args", "keys"),
    [
        ([], EXISTING_RATE_KEYS | {"rate_per_gpu_hour", "exposure_gpu_hours"}),
        (["--by", "size_bucket", "--period", "week"], {"size_bucket", "period", "failures"}),
        (["--overdispersed"], EXISTING_RATE_KEYS | {"dispersion"}),
        (["--interruption-window", "0"], EXISTING_RATE_KEYS),
        (["--view", "shares"], {"cluster_id", "failure_class", "share", "share_ci_low", "share_ci_high"}),
        (["--view", "trend"], {"cluster_id", "laplace_p_value", "crow_beta", "crow_verdict"}),
    ],
)
def test_rates_json(db, args, keys):
    out = CliRunner().invoke(main, ["rates", "--db", str(db), "--json", *args])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)
    assert rows and all(keys | {"exposure_estimated"} <= set(row) for row in rows)
    assert not any(row["exposure_estimated"] for row in rows)


def test_rates_jobs_view_without_jobs_is_an_input_error(db):
    out = CliRunner().invoke(main, ["rates", "--db", str(db), "--view", "jobs"])
    assert out.exit_code == 2 and "jobs" in out.output


def test_fit_json_exposes_every_view(db, result):
    out = CliRunner().invoke(main, ["fit", "--db", str(db), "--json"])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    assert payload["best_family"] == result.fits.best_family
    assert "infant mortality" in payload["hazard_message"]
    weibull = payload["node_time_between_failures"]["weibull"]
    assert weibull["mtbf_hours"] == pytest.approx(result.fits.node_fits["weibull"].mtbf_hours_)
    assert weibull["infant_mortality"] is True
    for view in ("scaling", "size_regression"):
        assert {"alpha", "alpha_ci", "projected"} <= set(payload[view])
    assert len(payload["trend_tests"]) == len(SPEC.cluster_sizes)
    assert payload["first_gap"] == "drop" and payload["category_shares"]
    assert payload["interruption_window_minutes"] == 30
    every = json.loads(
        CliRunner().invoke(main, ["fit", "--db", str(db), "--json", "--interruption-window", "0"]).stdout
    )
    assert every["interruption_window_minutes"] is None


@pytest.mark.skipif(
    "jobs" not in warehouse.TABLES, reason="the warehouse has no jobs table yet (ingest issue)"
)
def test_job_interruptions_from_the_warehouse_jobs_table(db, tmp_path, result):
    """Jobs on known clusters are compared with their own cluster's node rate; jobs on unknown
    clusters (or none) are left out."""
    import shutil

    copy = tmp_path / "with_jobs.duckdb"
    shutil.copy(db, copy)
    con = warehouse.connect(copy)
    rows = [
        ("1", "c0032", "COMPLETED", 10.0, 4, False),
        ("2", "c0032", "NODE_FAIL", 5.0, 4, True),
        ("3", "c0512", "COMPLETED", 20.0, 64, False),
        ("4", None, "NODE_FAIL", 3.0, 4, True),
        ("5", "elsewhere", "NODE_FAIL", 3.0, 4, True),
    ]
    for job_id, cluster, state, hours, nnodes, interrupted in rows:
        con.execute(
            "INSERT INTO jobs (job_id, cluster_id, state, elapsed_hours, nnodes, nodes, interrupted,"
            " file_id, line) VALUES (?, ?, ?, ?, ?, [], ?, 0, 0)",
            [job_id, cluster, state, hours, nnodes, interrupted],
        )
    jobs = analysis.job_interruptions(con, result.rates.by_cluster)
    con.close()
    rate = dict(result.rates.by_cluster.select("cluster_id", "rate_per_node_hour").iter_rows())
    four = jobs.filter(nnodes_bucket=4).row(0, named=True)
    assert (four["jobs"], four["interruptions"]) == (2, 1)
    assert four["expected_rate_per_job_hour"] == pytest.approx(4 * rate["c0032"])
    assert jobs.filter(nnodes_bucket=64)["expected_rate_per_job_hour"][0] == pytest.approx(64 * rate["c0512"])


def test_read_failures_loads_the_interrupting_rows_the_rates_need(db, result):
    """The lean reader gives the same failures as collapsing the whole table, with five columns,
    in the table's order (what the lazy scan gives for that selection); the whole table stays
    available, lazily."""
    con = warehouse.connect(db, read_only=True)
    try:
        scan = warehouse.scan_incidents(con)
        whole = warehouse.table(con, "incidents")
        lean = analysis.read_failures(con, window_minutes=None)
        assert lean.columns == list(analysis.FAILURE_COLUMNS)
        assert lean.height == whole["interrupting"].sum() < whole.height
        assert lean.equals(scan.select(analysis.FAILURE_COLUMNS).filter("interrupting").collect())
        every = analysis.read_failures(con, interrupting_only=False, window_minutes=None)
        assert every.height == whole.height
        inventory = warehouse.table(con, "inventory")
        assert transform.observation_end(warehouse.latest_incident(con), inventory) == result.observed_until
        assert transform.observation_end(scan, inventory) == result.observed_until
        # what analyze counts: the default window's interruptions, collapsed in DuckDB
        counted = analysis.read_failures(con, window_minutes=result.interruption_window_minutes, detail=False)
        full = node_interruptions(whole)
        assert counted.equals(full.select(counted.columns))
    finally:
        con.close()


def test_first_gaps_are_kept_when_no_node_failed_twice(tmp_path):
    (tmp_path / "inventory.csv").write_text(
        "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n"
        "a,a1,p5,8,2026-03-01T00:00:00Z,\n"
        "a,a2,p5,8,2026-03-01T00:00:00Z,\n"
    )
    (tmp_path / "incidents.csv").write_text(
        "timestamp,cluster_id,node_id,category,gpu_index,job_id,message,resolved_at\n"
        "2026-03-02T00:00:00Z,a,a1,host,,,reboot,\n"
        "2026-03-05T00:00:00Z,a,a2,host,,,reboot,\n"
        "2026-03-09T00:00:00Z,a,a2,application,,,xid 13,\n"
    )
    con = warehouse.connect(tmp_path / "w.duckdb")
    ingest.ingest_files(con, [tmp_path / "inventory.csv", tmp_path / "incidents.csv"])
    small = analysis.analyze(con)
    assert small.fits.first_gap == "keep"
    assert small.fits.node_durations.filter("observed")["count"].sum() == 2
    assert small.fits.scaling is None and small.fits.size_regression is None


def test_rates_count_interruptions_by_root_cause(tmp_path):
    """Each XID 79 also logs an NCCL timeout 7 minutes later: by default the pair is one failure
    whose root cause is the XID, as in the fleet without the echoes; window None counts both."""
    fleet = sample.simulate_fleet(sample.FleetSpec(cluster_sizes=(32, 64), days=60, seed=5))
    xid79 = fleet.incidents.filter(pl.col("category") == "gpu_fell_off_bus")
    echoes = xid79.with_columns(
        pl.col("timestamp") + timedelta(minutes=7),
        category=pl.lit("nccl_timeout"),
        gpu_index=pl.lit(None, pl.Int32),
        message=pl.lit("NCCL watchdog: collective operation timed out"),
    )
    noisy = sample.Fleet(pl.concat([fleet.incidents, echoes]).sort("timestamp"), fleet.inventory, fleet.spec)
    con = warehouse.connect(tmp_path / "w.duckdb")
    ingest.ingest_files(con, list(noisy.write(tmp_path)))
    # calendar hours: echoes fall inside their XID's repair, which uptime exposure (rightly) does not
    # count; this test is about root causes, so it counts every echo on the calendar intervals
    default = analysis.analyze(con, analysis.AnalysisOptions(exposure_basis="calendar"))
    raw = analysis.analyze(
        con, analysis.AnalysisOptions(interruption_window_minutes=None, exposure_basis="calendar")
    )
    counts = [result.incidents.select(pl.len()).collect().item() for result in (default, raw)]
    interruptions = analysis.read_failures(con)  # with their categories and faults
    con.close()

    incidents, inventory, _ = warehouse_frames(fleet)  # the truth: no echoes
    exposure = transform.exposure_intervals(inventory, default.observed_until)
    truth = transform.failure_rates(incidents, exposure, by=["failure_class"]).select(
        "failure_class", "failures"
    )
    assert default.rates.by_category.select("failure_class", "failures").equals(truth)
    assert default.rates.overall["failures"][0] == truth["failures"].sum()
    # an echo after its node left service has no exposure behind it: at most one per XID 79
    assert (
        truth["failures"].sum() < raw.rates.overall["failures"][0] <= truth["failures"].sum() + xid79.height
    )
    assert default.interruption_window_minutes == 30 and raw.interruption_window_minutes is None
    assert counts == [fleet.incidents.height + echoes.height] * 2  # the whole table, lazily
    assert (
        interruptions.filter(pl.col("faults") == 2)["categories"].to_list()
        == [["gpu_fell_off_bus", "nccl_timeout"]] * xid79.height
    )


@pytest.mark.parametrize(
    ("instances", "how"),
    [
        (128, "measured rate of clusters of ~128"),
        (100, "~128"),
        (16384, "scaling law"),
        (2048, "scaling law"),
    ],
)
def test_failure_model_for_a_job_size_recovers_the_true_rate(result, instances, how):
    model = analysis.failure_model_for(result, instances)
    assert how in model.source
    low, high = model.rate_ci_low_per_instance_hour, model.rate_ci_high_per_instance_hour
    assert low <= SPEC.rate_per_node_hour <= high  # independent nodes: the same rate at any size
    if "measured" in how:
        row = result.rates.by_size_bucket.filter(pl.col("size_bucket") == 128).row(0, named=True)
        assert model.rate_per_instance_hour == pytest.approx(row["rate_per_node_hour"])


def test_failure_model_interval_widens_away_from_the_observed_sizes(result):
    widths = [
        math.log(m.rate_ci_high_per_instance_hour / m.rate_ci_low_per_instance_hour)
        for m in (analysis.failure_model_for(result, n) for n in (2048, 16384))
    ]
    assert widths[0] < widths[1]


def test_failure_model_by_instance_type(result):
    same = analysis.failure_model_for(result, 16384, instance_type=SPEC.instance_type)
    assert same.rate_per_instance_hour == pytest.approx(
        analysis.failure_model_for(result, 16384).rate_per_instance_hour
    )
    assert SPEC.instance_type in same.source
    with pytest.raises(ValueError, match=f"no nodes of instance type 'a100'.*{SPEC.instance_type}"):
        analysis.failure_model_for(result, 64, instance_type="a100")


def test_failure_model_with_one_cluster_size_uses_the_fleet_rate(tmp_path):
    spec = sample.FleetSpec(cluster_sizes=(64,), days=60, seed=8)
    con = warehouse.connect(tmp_path / "w.duckdb")
    ingest.ingest_files(con, list(sample.simulate_fleet(spec).write(tmp_path)))
    fleet = analysis.analyze(con)
    con.close()
    model = analysis.failure_model_for(fleet, 1024)
    assert model.source == f"fleet: rate ({fleet.rates.interval_method} 95% interval)"
    assert model.rate_per_instance_hour == pytest.approx(fleet.fleet_rate.rate_)
    overall = fleet.rates.overall.row(0, named=True)  # the rate table's interval, not another one
    assert (model.rate_ci_low_per_instance_hour, model.rate_ci_high_per_instance_hour) == (
        overall["rate_ci_low"],
        overall["rate_ci_high"],
    )
