"""Backtest of job interruption predictions: as-of rates against brute force, the rate rule,
ground truth (jobs drawn from the fleet's true model are calibrated; jobs at 3x the rate are
caught), Wilson against published numbers, and ``failcast backtest`` on a warehouse."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from pipeline import analysis, models, sample, transform, warehouse
from pipeline.cli import main
from pipeline.models.backtest import wilson_interval
from tests._fleets import fleet_exposure, simulated_jobs
from tests._interruptions import node_interruptions

SPEC = sample.FleetSpec(cluster_sizes=(32, 128, 512), days=90, weibull_shape=1.0, seed=5)
T0 = datetime(2026, 1, 1)


def _at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


@pytest.fixture(scope="module")
def fleet() -> tuple[pl.DataFrame, pl.DataFrame]:
    incidents, exposure = fleet_exposure(SPEC)
    failures = node_interruptions(incidents.filter("interrupting").select(analysis.FAILURE_COLUMNS))
    return failures, exposure


def _scored(jobs: pl.DataFrame, fleet) -> models.JobBacktest:
    predictions = transform.job_predictions(jobs, *fleet)
    scored = predictions.filter(pl.col("rate_source").is_in(transform.SCORED))
    return models.JobBacktest().fit(
        scored["expected_interruptions"], scored["interrupted"], scored["hazard_per_hour"]
    )


def test_rates_as_of_match_brute_force_and_exclude_a_failure_at_the_start(fleet):
    failures, exposure = fleet
    rng = np.random.default_rng(3)
    times = sorted(_at(0) + timedelta(hours=h) for h in rng.uniform(-10, 24 * 95, 40))
    times.append(failures.filter(cluster_id="c0128")["timestamp_utc"][5])  # exactly at a failure
    at = pl.DataFrame({"cluster_id": ["c0128"] * len(times), "start_utc": times})
    got = transform.rates_as_of(failures, exposure, at)
    served = transform.failures_in_service(failures, exposure)
    for row in got.iter_rows(named=True):
        t = row["start_utc"]
        for scope, frame, ex in (
            ("cluster", served.filter(cluster_id="c0128"), exposure.filter(cluster_id="c0128")),
            ("fleet", served, exposure),
        ):
            hours = (
                ex.select(
                    (pl.min_horizontal("end_utc", pl.lit(t)) - pl.col("start_utc"))
                    .dt.total_seconds(fractional=True)
                    .clip(lower_bound=0)
                    / 3600
                )
                .sum()
                .item()
            )
            assert row[f"{scope}_failures_before"] == (frame["timestamp_utc"] < t).sum()
            assert row[f"{scope}_node_hours_before"] == pytest.approx(hours, rel=1e-9, abs=1e-6)


def test_rate_rule_cluster_fleet_no_history_and_did_not_run():
    exposure = pl.DataFrame(
        {
            "cluster_id": ["a", "b"],
            "node_id": ["a1", "b1"],
            "start_utc": [_at(0), _at(0)],
            "end_utc": [_at(1000), _at(1000)],
            "instance_type": ["p5", "p5"],
            "size_bucket": [1, 1],
        }
    )
    failures = pl.DataFrame(
        {
            "cluster_id": ["a"] * 3 + ["b"],
            "node_id": ["a1"] * 3 + ["b1"],
            "timestamp_utc": [_at(h) for h in (10, 20, 30, 40)],
        }
    )
    jobs = pl.DataFrame(
        {
            "cluster_id": ["a", "a", "b", "b", "zz", "a", "a"],
            "job_id": list("1234567"),
            "start_utc": [_at(5), _at(30), _at(30), _at(50), _at(50), None, _at(60)],
            "elapsed_hours": [1.0, 2.0, 2.0, 2.0, 2.0, 1.0, 0.0],
            "nnodes": [1, 4, 4, 4, 4, 1, 1],
            "interrupted": [False, True, False, False, None, False, False],
        }
    )
    got = transform.job_predictions(jobs, failures, exposure, min_history_failures=2).sort("job_id")
    assert got["rate_source"].to_list() == [
        "no history", "cluster", "fleet", "fleet", "fleet", "did not run", "did not run"
    ]  # fmt: skip
    # job 2 starts at the third failure of "a": 2 failures (strictly before) in 30 node-hours
    assert got["rate_per_node_hour"][1] == pytest.approx(2 / 30)
    assert got["expected_interruptions"][1] == pytest.approx(2 / 30 * 4 * 2)
    assert got["rate_per_node_hour"][3] == pytest.approx(4 / 100)  # fleet at 50 h: 4 in 2 x 50 h
    assert got["p_interrupted"][1] == pytest.approx(1 - np.exp(-2 / 30 * 8))
    assert transform.rate_source_counts(got) == {"cluster": 1, "fleet": 3, "no history": 1, "did not run": 2}
    with pytest.raises(ValueError, match="min_history_failures"):
        transform.job_predictions(jobs, failures, exposure, min_history_failures=0)


def test_wilson_interval_matches_newcombe_1998():
    """Newcombe (1998), Statistics in Medicine 17:857, Table I, method 3 (Wilson score)."""
    low, high = wilson_interval(np.array([81, 15, 0]), np.array([263, 148, 20]))
    np.testing.assert_allclose(low, [0.2553, 0.0624, 0.0], atol=1e-4)
    np.testing.assert_allclose(high, [0.3662, 0.1605, 0.1611], atol=1e-4)


def test_jobs_drawn_from_the_true_model_are_calibrated(fleet):
    fitted = _scored(simulated_jobs(SPEC, 3000, seed=1), fleet)
    low, high = fitted.ratio_confidence_interval_
    assert fitted.verdict_ == "calibrated" and low <= 1 <= high
    table = fitted.calibration_
    assert table.height == 10 and table["jobs"].sum() == fitted.jobs_
    outside = table.filter(
        (pl.col("predicted_share") < pl.col("observed_ci_low"))
        | (pl.col("predicted_share") > pl.col("observed_ci_high"))
    )
    assert outside.height <= 2, table  # 95% intervals: ~0.5 of 10 expected outside
    coverage = fitted.coverage_
    assert 0.75 <= coverage["within_p10_p90"] <= 0.85
    assert 0.07 <= coverage["before_p10"] <= 0.13
    assert fitted.brier_score_ < fitted.brier_reference_  # the model knows big jobs fail more
    assert fitted.headline.startswith("predictions are calibrated")


def test_jobs_at_three_times_the_rate_are_too_optimistic(fleet):
    fitted = _scored(simulated_jobs(SPEC, 3000, rate_multiplier=3.0, seed=1), fleet)
    low, high = fitted.ratio_confidence_interval_
    assert fitted.verdict_ == "too optimistic" and low <= 3 <= high
    assert fitted.coverage_["before_p10"] > 0.2  # three times as many fail before the P10
    assert fitted.headline.startswith(f"predictions are too optimistic by {fitted.ratio_ - 1:.0%}")
    slow = _scored(simulated_jobs(SPEC, 3000, rate_multiplier=0.3, seed=2), fleet)
    assert slow.verdict_ == "too pessimistic"


@pytest.mark.slow
def test_observed_to_expected_is_unbiased_over_fleets():
    """Over 60 fleets and job sets the ratio averages 1. Its interval counts the jobs' randomness
    only, not the error of the rates estimated from the history (measured: ratio sd 0.09 against
    0.06 from the jobs alone), so it covers about 85%, not 95%."""
    ratios, covered = [], []
    for seed in range(60):
        spec = sample.FleetSpec(cluster_sizes=(32, 128, 512), days=90, weibull_shape=1.0, seed=100 + seed)
        incidents, exposure = fleet_exposure(spec)
        failures = node_interruptions(incidents.filter("interrupting").select(analysis.FAILURE_COLUMNS))
        fitted = _scored(simulated_jobs(spec, 1000, seed=seed), (failures, exposure))
        ratios.append(fitted.ratio_)
        covered.append(fitted.verdict_ == "calibrated")
    assert abs(np.mean(ratios) - 1) < 0.03
    assert 0.75 <= np.mean(covered) <= 0.97


def test_one_job_and_no_prediction():
    fitted = models.JobBacktest().fit([0.5], [True], [0.01])
    assert fitted.jobs_ == 1 and fitted.calibration_.height == 1 and fitted.observed_ == 1
    with pytest.raises(ValueError, match="no job"):
        models.JobBacktest().fit([], [], [])


@pytest.fixture(scope="module")
def db_with_jobs(sample_warehouse, tmp_path_factory):
    from tests.conftest import SAMPLE_SPEC

    path = tmp_path_factory.mktemp("backtest") / "jobs.duckdb"
    shutil.copy(sample_warehouse, path)
    jobs = simulated_jobs(SAMPLE_SPEC, 400, seed=4).with_columns(
        nodes=pl.lit([], dtype=pl.List(pl.String)), state=pl.lit("COMPLETED")
    )
    con = warehouse.connect(path)
    con.register("new_jobs", jobs.to_arrow())
    con.execute(
        "INSERT INTO jobs (job_id, cluster_id, state, start_utc, end_utc, elapsed_hours, nnodes, nodes, "
        "interrupted, file_id, line) SELECT job_id, cluster_id, state, start_utc, end_utc, elapsed_hours, "
        "nnodes, nodes, interrupted, 0, 0 FROM new_jobs"
    )
    con.close()
    return path


def test_backtest_cli_json_and_text(db_with_jobs, sample_warehouse):
    out = CliRunner().invoke(main, ["backtest", "--db", str(db_with_jobs), "--json"])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    assert payload["jobs"] == 400 and sum(payload["jobs_by_rate_source"].values()) == 400
    assert payload["verdict"] in models.backtest.VERDICTS
    assert sum(row["jobs"] for row in payload["calibration"]) == payload["jobs_scored"]
    text = CliRunner().invoke(main, ["backtest", "--db", str(db_with_jobs)])
    assert text.exit_code == 0 and text.output.startswith("predictions are ")
    assert "calibration" in text.output and "P10" in text.output
    none = CliRunner().invoke(main, ["backtest", "--db", str(sample_warehouse)])
    assert none.exit_code == 2 and "no Slurm jobs" in none.output


def test_analysis_carries_the_backtest(db_with_jobs, sample_warehouse):
    for path, has_jobs in ((db_with_jobs, True), (sample_warehouse, False)):
        con = warehouse.connect(path, read_only=True)
        try:
            result = analysis.analyze(con)
        finally:
            con.close()
        assert (result.jobs.backtest is not None) is has_jobs
    assert result.jobs.backtest is None
