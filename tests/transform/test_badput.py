"""Badput by cause: hours lost per failure class from sacct jobs and training restarts."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import polars as pl
import pytest

from pipeline import transform

T0 = datetime(2024, 5, 1)


def h(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def jobs_frame(rows, cluster: str | None = "c1") -> pl.DataFrame:
    """rows: (job_id, interrupted, end hour, elapsed hours, nodes)."""
    return pl.DataFrame(
        [(cluster, j, i, h(e), el, nodes, len(nodes)) for j, i, e, el, nodes in rows],
        schema={
            "cluster_id": pl.String,
            "job_id": pl.String,
            "interrupted": pl.Boolean,
            "end_utc": pl.Datetime("us"),
            "elapsed_hours": pl.Float64,
            "nodes": pl.List(pl.String),
            "nnodes": pl.Int64,
        },
        orient="row",
    )


def recoveries_frame(rows) -> pl.DataFrame:
    """rows: (job_id, failed hour or None, detected hour, detect hours, restart hours, nodes)."""
    return pl.DataFrame(
        [(j, None if f is None else h(f), h(d), dh, rh, n) for j, f, d, dh, rh, n in rows],
        schema={
            "job_id": pl.String,
            "failed_utc": pl.Datetime("us"),
            "detected_utc": pl.Datetime("us"),
            "detect_hours": pl.Float64,
            "restart_hours": pl.Float64,
            "nodes": pl.List(pl.String),
        },
        orient="row",
    )


def failures_frame(rows, cluster: str = "c1") -> pl.DataFrame:
    """rows: (node, hour, class)."""
    return pl.DataFrame(
        [(cluster, n, h(t), c) for n, t, c in rows],
        schema={
            "cluster_id": pl.String,
            "node_id": pl.String,
            "timestamp_utc": pl.Datetime("us"),
            "failure_class": pl.String,
        },
        orient="row",
    )


NO_JOBS = jobs_frame([])
NO_RESTARTS = recoveries_frame([])


def by_key(frame: pl.DataFrame) -> dict[tuple[str, str], dict]:
    return {(r["failure_class"], r["measured_from"]): r for r in frame.iter_rows(named=True)}


def test_each_loss_is_attributed_to_the_nearest_failure_on_its_nodes():
    jobs = jobs_frame(
        [
            ("1", True, 10.0, 6.0, ["a", "b"]),  # a fails at 9.9 h (6 min before the end): gpu_memory
            ("2", True, 20.0, 3.0, ["c"]),  # c fails 2 h before: outside 30 min -> undetermined
            ("3", False, 30.0, 9.0, ["a"]),  # completed: no loss
            ("4", True, 40.0, 1.5, ["b"]),  # b: nvlink at 40.2, host at 39.9: nearest (host) wins
        ]
    )
    failures = failures_frame(
        [("a", 9.9, "gpu_memory"), ("c", 18.0, "host"), ("b", 40.2, "nvlink"), ("b", 39.9, "host")]
    )
    rows = by_key(transform.badput_by_class(jobs, NO_RESTARTS, failures))
    assert set(rows) == {("gpu_memory", "sacct job"), ("undetermined", "sacct job"), ("host", "sacct job")}
    memory = rows[("gpu_memory", "sacct job")]
    assert (memory["losses"], memory["attributed"], memory["lost_job_hours"], memory["lost_node_hours"]) == (
        1,
        1,
        6.0,
        12.0,
    )
    assert rows[("undetermined", "sacct job")]["attributed"] == 0
    assert rows[("host", "sacct job")]["lost_job_hours"] == 1.5


def test_restarts_lose_detection_plus_restart_and_a_logged_job_counts_once():
    jobs = jobs_frame([("42", True, 5.2, 5.0, ["a", "b", "c", "d"])])  # the job also ended NODE_FAIL
    restarts = recoveries_frame(
        [
            ("42", 5.0, 5.1667, 0.1667, 0.25, None),  # hung at 5.0 h when node a failed
            ("42", None, 8.0, None, 0.5, None),  # agent only: from detection to restart
            ("77", 12.0, 12.5, 0.5, None, ["z"]),  # no restart: up to detection; node z from --node
            ("88", 20.0, 20.1, 0.1, 0.2, None),  # nodes unknown: its own evidence (watchdog)
        ]
    )
    failures = failures_frame([("a", 5.0, "gpu_fell_off_bus"), ("z", 12.1, "network")])
    rows = by_key(transform.badput_by_class(jobs, restarts, failures))
    # job 42's sacct record is the same failure as its first restart: counted from the log only
    assert not any(source == "sacct job" for _, source in rows)
    bus = rows[("gpu_fell_off_bus", "training restart")]
    assert bus["lost_job_hours"] == pytest.approx(0.1667 + 0.25)
    assert bus["lost_node_hours"] == pytest.approx(4 * (0.1667 + 0.25))  # 4 nodes from sacct
    assert rows[("undetermined", "training restart")]["lost_job_hours"] == pytest.approx(0.5)
    assert rows[("network", "training restart")]["lost_job_hours"] == pytest.approx(0.5)
    assert rows[("network", "training restart")]["losses_without_node_count"] == 1
    assert rows[("nccl_timeout", "training restart")]["attributed"] == 0
    assert rows[("nccl_timeout", "training restart")]["lost_node_hours"] is None  # no node count known
    # largest loss first, ties by class name
    order = transform.badput_by_class(jobs, restarts, failures)["failure_class"].to_list()
    assert order == ["network", "undetermined", "gpu_fell_off_bus", "nccl_timeout"]


def test_boundaries_no_data_exact_window_and_negative_window():
    empty = transform.badput_by_class(NO_JOBS, NO_RESTARTS, failures_frame([]))
    assert empty.height == 0 and empty.columns == list(transform.BADPUT_SCHEMA)
    jobs = jobs_frame([("1", True, 10.0, 2.0, ["a"])])
    at_edge = failures_frame([("a", 10.5, "host")])  # exactly 30 min after the end: inside
    assert transform.badput_by_class(jobs, NO_RESTARTS, at_edge)["failure_class"].to_list() == ["host"]
    narrow = transform.badput_by_class(jobs, NO_RESTARTS, at_edge, window_minutes=29.9)
    assert narrow["failure_class"].to_list() == ["undetermined"]
    with pytest.raises(ValueError, match="negative"):
        transform.badput_by_class(jobs, NO_RESTARTS, at_edge, window_minutes=-1)


@pytest.mark.parametrize(
    ("job_cluster", "expected"), [("c1", "host"), ("c2", "undetermined"), (None, "host")]
)
def test_a_node_name_in_another_cluster_is_another_node(job_cluster, expected):
    jobs = jobs_frame([("1", True, 10.0, 2.0, ["a"])], cluster=job_cluster)
    failures = failures_frame([("a", 10.0, "host")], cluster="c1")  # a job without a cluster: any
    assert transform.badput_by_class(jobs, NO_RESTARTS, failures)["failure_class"].to_list() == [expected]


def test_simulated_jobs_recover_the_generated_loss_per_class():
    """Ground truth: 300 jobs, a third killed by a failure of a known class on one of their nodes
    (some 1-20 min away from the job's end), noise failures on other nodes; the sums per class must
    equal the generated ones exactly."""
    rng = np.random.default_rng(3)
    classes = ["gpu_memory", "nvlink", "host", "network"]
    jobs, failures, truth = [], [], {}
    for j in range(300):
        nodes = [f"n{k}" for k in rng.choice(500, int(rng.integers(1, 9)), replace=False)]
        end, elapsed = float(rng.uniform(0, 5000)), float(rng.uniform(0.5, 48))
        killed = j % 3 == 0
        jobs.append((str(j), killed, end, elapsed, nodes))
        if killed:
            cls = classes[int(rng.integers(0, 4))]
            failures.append((nodes[0], end - float(rng.uniform(1, 20)) / 60, cls))
            truth[cls] = truth.get(cls, 0.0) + elapsed * len(nodes)
    failures += [(f"n{k}", float(rng.uniform(0, 5000)), "storage") for k in range(500, 600)]  # other nodes
    result = transform.badput_by_class(jobs_frame(jobs), NO_RESTARTS, failures_frame(failures))
    got = dict(result.select("failure_class", "lost_node_hours").iter_rows())
    assert got.keys() == truth.keys()
    for cls, node_hours in truth.items():
        assert got[cls] == pytest.approx(node_hours)
    assert result["losses"].sum() == 100 and result["attributed"].sum() == 100
