"""Measured recovery from training-job logs: exact hours back from a constructed log."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from pipeline import analysis, projection, report, transform, warehouse
from pipeline.cli import main
from pipeline.ingest import ingest_files

T0 = datetime(2025, 8, 10, 0, 0, 0)
WATCHDOG = (
    "[rank{r}]:[E ProcessGroupNCCL.cpp:683] [Rank {r}] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for {ms} "
    "milliseconds before timing out."
)
FAILED = "[default] Worker group FAILED. 2/3 attempts left; will restart worker group"
RDZV = "[default] Rendezvous complete for workers. Result:"


def at(minutes: float, text: str) -> str:
    return f"{(T0 + timedelta(minutes=minutes)).isoformat()}Z {text}"


# Interruption 1: hang from 60 min, watchdogs at 70 min (rank 0, ran 600 s) and 70.5 min (rank 1,
# ran 630 s: also hanging since 60 min), agent failure at 71, restart at 85 (two agents: 85, 86).
# Interruption 2: agent failure only at 200 (no watchdog: detection unknown), restart at 203.
# Interruption 3: watchdog at 300 (ran 900 s: since 285), the log ends without a restart.
LINES = [
    at(0, RDZV),
    at(70, WATCHDOG.format(r=0, ms=600_000)),
    at(70.5, WATCHDOG.format(r=1, ms=630_000)),
    at(71, FAILED),
    at(85, RDZV),
    at(86, RDZV),
    at(200, FAILED),
    at(203, RDZV),
    at(300, WATCHDOG.format(r=0, ms=900_000)),
]


@pytest.fixture
def recoveries(tmp_path):
    path = tmp_path / "job-1.log"
    path.write_text("\n".join(LINES) + "\n")
    con = warehouse.connect(tmp_path / "w.duckdb")
    ingest_files(con, [path])
    events = con.sql("SELECT * FROM events").pl()
    con.close()
    return transform.job_recoveries(events)


def test_exact_hours(recoveries):
    rows = recoveries.select("detected_utc", "failure_lines", "first_kind", "detect_hours", "restart_hours")
    assert rows.select(pl.exclude("detect_hours", "restart_hours")).rows() == [
        (T0 + timedelta(minutes=70), 3, "nccl_timeout"),
        (T0 + timedelta(minutes=200), 1, "worker_group_failed"),
        (T0 + timedelta(minutes=300), 1, "nccl_timeout"),
    ]
    exact = pytest.approx  # to the last bits of a float: the times in the log are exact
    assert rows["detect_hours"].to_list() == [exact(10 / 60, rel=1e-12), None, exact(15 / 60, rel=1e-12)]
    assert rows["restart_hours"].to_list() == [exact(15 / 60, rel=1e-12), exact(3 / 60, rel=1e-12), None]
    hanging = [T0 + timedelta(minutes=60), None, T0 + timedelta(minutes=285)]
    assert recoveries["failed_utc"].to_list() == hanging


def test_summary_mean_median_and_counts(recoveries):
    table = transform.recovery_hours(recoveries)
    detect = table.row(by_predicate=pl.col("measure") == "detect", named=True)
    restart = table.row(by_predicate=pl.col("measure") == "restart", named=True)
    assert (detect["interruptions"], detect["measured"]) == (3, 2)
    assert detect["mean_hours"] == pytest.approx((10 + 15) / 2 / 60)
    assert restart["measured"] == 2
    assert restart["mean_hours"] == pytest.approx((15 + 3) / 2 / 60)
    assert restart["median_hours"] == pytest.approx(9 / 60)


def test_jobs_are_separate_and_empty_input():
    frame = pl.DataFrame(
        {
            "job_id": ["a", "b", "a"],
            "timestamp_utc": [T0, T0 + timedelta(hours=1), T0 + timedelta(hours=2)],
            "category": ["worker_group_failed", "rendezvous_complete", "rendezvous_complete"],
            "message": ["x", "y", "z"],
        }
    )
    out = transform.job_recoveries(frame)
    assert out.select("job_id", "restart_hours").rows() == [("a", 2.0)]  # b's restart is not a's
    empty = transform.job_recoveries(frame.clear())
    assert empty.height == 0
    assert transform.recovery_hours(empty)["measured"].to_list() == [0, 0]


def test_failure_and_restart_at_the_same_instant():
    frame = pl.DataFrame(
        {
            "job_id": ["a", "a"],
            "timestamp_utc": [T0, T0],
            "category": ["rendezvous_complete", "worker_group_failed"],
            "message": ["", ""],
        }
    )
    assert transform.job_recoveries(frame)["restart_hours"].to_list() == [0.0]


def test_measured_recovery_replaces_only_what_was_measured():
    assumed = projection.DEFAULT_RECOVERY
    used = projection.measured_recovery(assumed, detect_hours=0.2, restart_hours=0.3)
    for mode in assumed:
        assert (used[mode].detect_hours, used[mode].restart_hours) == (0.2, 0.3)
        assert used[mode].replace_hours == assumed[mode].replace_hours  # no repair data: assumed
    rows = projection.recovery_sources(assumed, repair_hours=5.0, detect_hours=assumed["manual"].detect_hours)
    flags = {(r["mode"], r["time"]): r["measured"] for r in rows}
    assert flags[("manual", "detect")]  # measured even where it equals the assumption
    assert flags[("manual", "replace")] and not flags[("automatic", "replace")]
    assert not flags[("manual", "restart")]


def _fleet(tmp_path, with_log: bool) -> Path:
    inventory = tmp_path / "inventory.csv"
    inventory.write_text(
        "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n"
        + "".join(f"c1,n{i},p5.48xlarge,8,2025-01-01T00:00:00Z,\n" for i in range(4))
    )
    incidents = tmp_path / "incidents.csv"
    incidents.write_text(
        "timestamp,cluster_id,node_id,category,gpu_index,job_id,message,resolved_at\n"
        "2025-03-01T00:00:00Z,c1,n0,gpu_fell_off_bus,1,,x,2025-03-01T06:00:00Z\n"
        "2025-05-01T00:00:00Z,c1,n1,gpu_memory,2,,y,2025-05-01T10:00:00Z\n"
        "2025-07-01T00:00:00Z,c1,n2,nvlink,0,,z,2025-07-01T08:00:00Z\n"
    )
    db = tmp_path / "w.duckdb"
    paths = [str(inventory), str(incidents)]
    if with_log:
        log = tmp_path / "job-1.log"
        log.write_text("\n".join(LINES) + "\n")
        paths.append(str(log))
    result = CliRunner().invoke(main, ["ingest", *paths, "--db", str(db)])
    assert result.exit_code == 0, result.output
    return db


@pytest.mark.parametrize("with_log", [True, False])
def test_project_recovery_measured_uses_the_logs(tmp_path, with_log):
    db = _fleet(tmp_path, with_log)
    args = ["project", "--db", str(db), "--instances", "64", "--gpu-hours", "1e5", "--failure-rate", "0.05"]
    args += ["--price-per-gpu-hour", "2", "--monte-carlo-runs", "0", "--recovery", "measured", "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    recovery = payload["spec"]["recovery"]
    hours = payload["recovery_measured"]["hours"]
    assert hours["repair_hours"] == pytest.approx(8.0)  # (6 + 10 + 8) / 3 outages
    assert recovery["manual"]["replace_hours"] == pytest.approx(8.0)
    assumed = projection.DEFAULT_RECOVERY
    if with_log:
        detect, restart = (10 + 15) / 2 / 60, (15 + 3) / 2 / 60  # means of the constructed log
        assert (hours["detect_hours"], hours["restart_hours"]) == (
            pytest.approx(detect),
            pytest.approx(restart),
        )
        for mode in ("manual", "automatic"):
            assert recovery[mode]["detect_hours"] == pytest.approx(detect)
            assert recovery[mode]["restart_hours"] == pytest.approx(restart)
    else:
        assert set(hours) == {"repair_hours"}
        assert recovery["automatic"]["detect_hours"] == assumed["automatic"].detect_hours
    text = CliRunner().invoke(main, args[:-1]).output
    assert "recovery times (h), assumed -> used; * measured:" in text
    assert ("detect 1.00 -> 0.21*" in text) == with_log


@pytest.mark.parametrize("with_log", [True, False])
def test_report_shows_measured_against_assumed_only_with_logs(tmp_path, with_log):
    con = warehouse.connect(_fleet(tmp_path, with_log), read_only=True)
    fleet = analysis.analyze(con)
    by_slug = {s.slug: s for s in report.sections(fleet)}
    assert (by_slug["recovery-times"].table is not None) == with_log  # else listed with a note
    if with_log:
        table = by_slug["recovery-times"].table
        detect, restart, repair = table.rows(named=True)
        assert detect["measured mean (h)"] == pytest.approx(round(25 / 2 / 60, 2))
        assert detect["measured in"] == "2 of 3 job interruptions"
        assert restart["measured median (h)"] == pytest.approx(round(9 / 60, 2))
        assert detect["assumed, manual (h)"] == projection.DEFAULT_RECOVERY["manual"].detect_hours
        assert repair["measured mean (h)"] == pytest.approx(8.0)
        assert "3 interruptions of 1 training job(s)" in by_slug["recovery-times"].note
    else:
        assert "--format training-log" in by_slug["recovery-times"].note
    con.close()
