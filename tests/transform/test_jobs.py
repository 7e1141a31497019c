"""Job interruption rates against the node model, on hand-made and simulated jobs."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from pipeline import transform

JOBS = pl.DataFrame(
    {
        "job_id": ["1", "2", "3", "4", "5"],
        "nnodes": [1, 1, 8, 8, 9],
        "elapsed_hours": [10.0, 30.0, 5.0, 15.0, 0.0],
        "interrupted": [False, True, True, True, True],
    }
)


@pytest.mark.parametrize(
    ("bucket", "jobs", "interruptions", "job_hours", "mean_nnodes"),
    [(1, 2, 1, 40.0, 1.0), (8, 2, 2, 20.0, 8.0)],
)
def test_job_interruption_rates_against_node_model(bucket, jobs, interruptions, job_hours, mean_nnodes):
    rates = transform.job_interruption_rates(JOBS, node_rate_per_node_hour=0.01)
    row = rates.filter(nnodes_bucket=bucket).row(0, named=True)
    assert (row["jobs"], row["interruptions"]) == (jobs, interruptions)
    assert row["job_hours"] == pytest.approx(job_hours)
    assert row["mean_nnodes"] == pytest.approx(mean_nnodes)
    assert row["rate_per_job_hour"] == pytest.approx(interruptions / job_hours)
    assert row["expected_rate_per_job_hour"] == pytest.approx(0.01 * mean_nnodes)
    assert row["ratio_to_node_model"] == pytest.approx(interruptions / job_hours / (0.01 * mean_nnodes))
    assert row["ratio_ci_low"] < row["ratio_to_node_model"] < row["ratio_ci_high"]


def test_job_interruption_rates_recover_node_model_on_simulated_jobs():
    """Jobs on n independent nodes, each failing at r: the ratio to the node model is ~1."""
    rng = np.random.default_rng(7)
    nnodes = rng.choice([1, 4, 16, 64], size=4000)
    time_to_failure = rng.exponential(1 / (0.002 * nnodes))
    planned = rng.uniform(1, 48, size=nnodes.size)
    jobs = pl.DataFrame(
        {
            "nnodes": nnodes,
            "elapsed_hours": np.minimum(time_to_failure, planned),
            "interrupted": time_to_failure < planned,
        }
    )
    rates = transform.job_interruption_rates(jobs, 0.002)
    assert rates["nnodes_bucket"].to_list() == [1, 4, 16, 64]
    assert ((rates["ratio_ci_low"] < 1) & (rates["ratio_ci_high"] > 1)).all()


def test_job_interruption_rates_use_each_jobs_cluster_rate():
    jobs = JOBS.with_columns(cluster_id=pl.Series(["a", "b", "a", "b", "a"]))
    by_cluster = pl.DataFrame({"cluster_id": ["a", "b"], "rate_per_node_hour": [0.01, 0.03]})
    rates = transform.job_interruption_rates(jobs, by_cluster)
    # bucket 1: 10 h on a at 0.01 + 30 h on b at 0.03 over 40 job-hours
    one = rates.filter(nnodes_bucket=1).row(0, named=True)
    assert one["expected_rate_per_job_hour"] == pytest.approx((10 * 0.01 + 30 * 0.03) / 40)
    eight = rates.filter(nnodes_bucket=8).row(0, named=True)
    assert eight["expected_rate_per_job_hour"] == pytest.approx(8 * (5 * 0.01 + 15 * 0.03) / 20)
    with pytest.raises(ValueError, match="cluster"):
        transform.job_interruption_rates(jobs, by_cluster.filter(cluster_id="a"))


def test_job_interruption_rates_name_missing_columns():
    with pytest.raises(ValueError, match="interrupted"):
        transform.job_interruption_rates(JOBS.drop("interrupted"), 0.01)
