"""One generated fleet seen by four sources (kernel Xid lines, Slurm node events, sacct jobs and a
training job's log), ingested with ``failcast ingest``: one set of failures, outages and measured
recovery times that match the generated truth.

How a failure seen by several sources is counted (docs/ingest.md, "One failure, several sources"):
the node's own records (kernel line, Slurm node event) are one node interruption (30 min window,
root cause = the first record); the outage takes its end from whichever record has one; a training
job's log and a NODE_FAIL job are what the failure cost, never a second failure.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import pytest
from click.testing import CliRunner

from pipeline import analysis, warehouse
from pipeline.cli import main
from pipeline.projection import SparePool

START = datetime(2024, 5, 1)
UNTIL = datetime(2024, 5, 31)
NODES = [f"gpu-{i:03d}" for i in range(1, 17)]
TRAINING_NODES = NODES[:8]  # the training job runs on these the whole month
XIDS = {
    79: ("gpu_fell_off_bus", "GPU has fallen off the bus."),
    48: ("gpu_memory", "DBE (double bit error)."),
}
TIMEOUT_MS = 600_000


@dataclass(frozen=True)
class Failure:
    node: str
    at: datetime
    xid: int | None  # None: only Slurm saw it (node not responding)
    repair_hours: float
    restart_seconds: float  # training job: detection to the next rendezvous


def generate(seed: int = 7, failures: int = 10) -> list[Failure]:
    """Failures at minute resolution on distinct days (a node's repair ends before its next)."""
    rng = np.random.default_rng(seed)
    days = sorted(rng.choice(np.arange(1, 28), failures, replace=False))
    out = []
    for i, day in enumerate(days):
        node = TRAINING_NODES[i % 8] if i % 2 == 0 else NODES[8 + i % 8]
        at = START + timedelta(days=int(day), minutes=int(rng.integers(0, 600)))
        xid = None if i == 3 else [79, 48][int(rng.integers(0, 2))]
        out.append(
            Failure(node, at, xid, round(float(rng.uniform(1, 20)), 2), float(round(rng.uniform(300, 1800))))
        )
    return out


def ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S")


def kernel_log(truth: list[Failure]) -> str:
    """An Xid storm per failure: three lines within two seconds of the failure, noise around."""
    lines = []
    for f in (f for f in truth if f.xid is not None):
        msg = XIDS[f.xid][1]
        for k, dt in enumerate((0.0, 0.5, 2.0)):
            t = f.at + timedelta(seconds=dt)
            lines.append(
                f"{t.isoformat(timespec='microseconds')}+00:00 {f.node} kernel: NVRM: Xid "
                f"(PCI:0000:18:00): {f.xid}, pid={1000 + k}, name=python3, {msg}"
            )
        lines.append(f"{ts(f.at + timedelta(seconds=3))}.000000+00:00 {f.node} kernel: EXT4-fs: mounted")
    return "\n".join(sorted(lines)) + "\n"


def node_events(truth: list[Failure]) -> str:
    """sacctmgr -P show event: drained by a health check 90 s after the failure (reason naming
    the Xid), not-responding nodes set DOWN by slurmctld; each back at the repair's end."""
    rows = ["Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User", "tiger||2024-05-01T00:00:00|Unknown|||"]
    for f in truth:
        end = ts(f.at + timedelta(hours=f.repair_hours))
        if f.xid is None:
            rows.append(f"tiger|{f.node}|{ts(f.at)}|{end}|DOWN*|Not responding|slurm(64030)")
        else:
            reason = f"Xid {f.xid}, {XIDS[f.xid][1].rstrip('.')}"
            rows.append(f"tiger|{f.node}|{ts(f.at + timedelta(seconds=90))}|{end}|DRAIN|{reason}|root(0)")
    return "\n".join(rows) + "\n"


def sacct(truth: list[Failure]) -> str:
    """One job per failure off the training nodes, ended by it (NODE_FAIL), and completed jobs."""
    rows = ["JobID|JobName|State|Start|End|ElapsedRaw|NNodes|NodeList"]
    for i, f in enumerate(f for f in truth if f.node not in TRAINING_NODES):
        start = f.at - timedelta(hours=5 + i)
        rows.append(f"{500 + i}|finetune-{i}|NODE_FAIL|{ts(start)}|{ts(f.at)}|{(5 + i) * 3600}|1|{f.node}")
        rows.append(f"{500 + i}.batch|batch|CANCELLED|{ts(start)}|{ts(f.at)}|{(5 + i) * 3600}|1|{f.node}")
    # the training job's own allocation (ingested with --job 4242): elastic restarts kept it alive
    rows.append(f"4242|pretrain-42|COMPLETED|{ts(START)}|{ts(UNTIL)}|{30 * 86400}|8|gpu-[001-008]")
    rows.append(
        f"900|eval|COMPLETED|{ts(START + timedelta(days=1))}|{ts(START + timedelta(days=2))}|86400|2|"
        "gpu-[015-016]"
    )
    return "\n".join(rows) + "\n"


def training_log(truth: list[Failure]) -> str:
    """The torchrun job on the training nodes: every rank's watchdog fires TIMEOUT_MS after the
    collective hung (the failure), the agent restarts the worker group, the rendezvous completes."""

    def glog(level: str, t: datetime, text: str) -> str:
        agent = "torch/distributed/elastic/agent/server/api.py:700"
        return f"{level}{t:%m%d %H:%M:%S}.{t.microsecond:06d} 140 {agent}] {text}"

    lines = [glog("I", START, "[default] Rendezvous complete for workers. Result:"), "  restart_count=0"]
    for f in (f for f in truth if f.node in TRAINING_NODES):
        for rank, late_ms in ((0, 50), (5, 400)):
            seen = f.at + timedelta(milliseconds=TIMEOUT_MS + late_ms)
            lines.append(
                f"{seen.isoformat(timespec='microseconds')}Z "
                f"[rank{rank}]:[E{seen:%m%d %H:%M:%S}.{seen.microsecond:06d}"
                f" ProcessGroupNCCL.cpp:683] [Rank {rank}] Watchdog caught collective operation timeout: "
                f"WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)={TIMEOUT_MS}) ran "
                f"for {TIMEOUT_MS + late_ms} milliseconds before timing out."
            )
        detected = f.at + timedelta(milliseconds=TIMEOUT_MS + 50)
        lines.append(
            glog(
                "I",
                detected + timedelta(seconds=20),
                "[default] Worker group FAILED. 3/3 attempts left; will restart worker group",
            )
        )
        restart = detected + timedelta(seconds=f.restart_seconds)
        lines += [
            glog("I", restart, "[default] Rendezvous complete for workers. Result:"),
            "  restart_count=1",
        ]
        lines.append(f"step {f.at:%d%H} | loss 2.1")
    return "\n".join(lines) + "\n"


# the last node is retired at the window end, so the observed window ends there
INVENTORY = "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n" + "".join(
    f"tiger,{n},h100,8,2024-05-01T00:00:00Z,{ts(UNTIL) + 'Z' if n == NODES[-1] else ''}\n" for n in NODES
)


@pytest.fixture
def fleet(tmp_path):
    truth = generate()
    files = {
        "inventory.csv": INVENTORY,
        "kern.log": kernel_log(truth),
        "events.txt": node_events(truth),
        "sacct.txt": sacct(truth),
        "pretrain-42.log": training_log(truth),
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    db = tmp_path / "w.duckdb"
    runner = CliRunner()
    result = runner.invoke(
        main,
        [
            "ingest",
            *(str(tmp_path / n) for n in files),
            "--db",
            str(db),
            "--year",
            "2024",
            "--job",
            "4242",
            "--json",
            "-q",
        ],
    )
    assert result.exit_code == 0, result.output
    return truth, db, {f["format"]: f for f in json.loads(result.stdout)}


def invoke(*args: str) -> dict | list:
    result = CliRunner().invoke(main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_every_line_of_every_source_is_accounted_for(fleet):
    truth, _, files = fleet
    assert set(files) == {"csv", "kernel-log", "slurm-events", "sacct", "training-log"}
    for f in files.values():
        assert f["rows_read"] == sum(
            f[k] for k in ("rows_ingested", "rows_duplicate", "rows_rejected", "rows_ignored")
        )
        assert f["rows_rejected"] == 0
    kernel = [f for f in truth if f.xid is not None]
    assert files["kernel-log"]["rows_ingested"] == 3 * len(kernel)  # the storm's lines, kept as events
    assert files["slurm-events"]["rows_ingested"] == len(truth)
    assert files["slurm-events"]["rows_ignored"] == 2  # header and the cluster event


def test_one_failure_per_generated_failure_whatever_saw_it(fleet):
    truth, db, _ = fleet
    rates = invoke("rates", "--db", str(db), "--by", "class", "--until", ts(UNTIL))
    by_class = {r["failure_class"]: r["failures"] for r in rates}
    expected: dict[str, int] = {}
    for f in truth:
        cls = "undetermined" if f.xid is None else XIDS[f.xid][0]
        expected[cls] = expected.get(cls, 0) + 1
    # kernel storm + Slurm drain of one failure = one failure; the job's log and NODE_FAIL jobs add none
    assert by_class == expected
    assert sum(by_class.values()) == len(truth)


def test_outages_take_their_end_from_the_node_events(fleet):
    truth, db, _ = fleet
    repairs = invoke("repairs", "--db", str(db), "--until", ts(UNTIL))["total"]
    assert (repairs["outages"], repairs["unresolved"], repairs["unknown_end"]) == (len(truth), 0, 0)
    # the outage starts at the first record (the kernel line, 90 s before the drain) and ends at
    # the event's TimeEnd: exactly the generated repair time
    assert repairs["downtime_hours"] == pytest.approx(sum(f.repair_hours for f in truth), abs=1e-6)
    assert repairs["mttr_hours"] == pytest.approx(np.mean([f.repair_hours for f in truth]), abs=1e-6)


def test_measured_recovery_from_training_log_and_outages(fleet):
    truth, db, _ = fleet
    seen = [f for f in truth if f.node in TRAINING_NODES]
    project = invoke(
        "project",
        "--db",
        str(db),
        "--recovery",
        "measured",
        "--instances",
        "8",
        "--gpu-hours",
        "1e5",
        "--monte-carlo-runs",
        "0",
        "--price-per-gpu-hour",
        "2",
    )
    hours = project["recovery_measured"]["hours"]
    # failure -> detection: the first watchdog line minus the time its collective had run
    assert hours["detect_hours"] == pytest.approx((TIMEOUT_MS + 50) / 3.6e6, abs=1e-9)
    assert hours["restart_hours"] == pytest.approx(
        np.mean([f.restart_seconds for f in seen]) / 3600, abs=1e-9
    )
    assert hours["repair_hours"] == pytest.approx(np.mean([f.repair_hours for f in truth]), abs=1e-6)
    measured = {(r["mode"], r["time"]): r["measured"] for r in project["recovery_measured"]["by_mode"]}
    assert measured[("manual", "replace")] and measured[("automatic", "replace")]
    assert project["spec"]["recovery"]["manual"]["replace_hours"] == pytest.approx(hours["repair_hours"])
    # with spares the job waits for the swap, or for the earliest repair when none is free: the
    # spare pool's replace time at the 99% row, on the measured MTTR
    spares = project["spares"]["spares"]
    pool = SparePool(8, project["spec"]["failure"]["rate_per_instance_hour"], hours["repair_hours"], 10 / 60)
    auto = project["spec"]["recovery"]["automatic"]["replace_hours"]
    assert auto == pytest.approx(pool.replace_hours(spares)) and auto < hours["repair_hours"]
    con = warehouse.connect(db, read_only=True)
    try:
        recoveries = analysis.read_job_recoveries(con)
    finally:
        con.close()
    # one interruption per failure the job saw (two ranks' watchdogs and the agent's line are one)
    assert recoveries["failed_utc"].to_list() == [f.at for f in seen]
    assert recoveries["restart_hours"].to_list() == pytest.approx([f.restart_seconds / 3600 for f in seen])


def test_badput_by_cause_from_the_jobs_and_the_restarts(fleet):
    truth, db, _ = fleet
    con = warehouse.connect(db, read_only=True)
    try:
        fleet_analysis = analysis.analyze(con, analysis.AnalysisOptions(until=UNTIL))
    finally:
        con.close()
    got = {
        (r["failure_class"], r["measured_from"]): r for r in fleet_analysis.jobs.badput.iter_rows(named=True)
    }
    expected: dict[tuple[str, str], list[float]] = {}
    off_training = [f for f in truth if f.node not in TRAINING_NODES]
    for i, f in enumerate(off_training):  # sacct job i ran 5 + i hours on one node until the failure
        cls = "undetermined" if f.xid is None else XIDS[f.xid][0]
        expected.setdefault((cls, "sacct job"), []).append(5.0 + i)
    for f in truth:
        if f.node in TRAINING_NODES:  # hung at the failure, restarted restart_seconds after detection
            lost = (TIMEOUT_MS + 50) / 3.6e6 + f.restart_seconds / 3600
            expected.setdefault((XIDS[f.xid][0], "training restart"), []).append(lost)
    assert got.keys() == expected.keys()
    for key, losses in expected.items():
        row = got[key]
        assert (row["losses"], row["attributed"]) == (len(losses), len(losses)), key
        assert row["lost_job_hours"] == pytest.approx(sum(losses)), key
        nodes = 8 if key[1] == "training restart" else 1  # the training job's 8 nodes from its sacct record
        assert row["lost_node_hours"] == pytest.approx(nodes * sum(losses)), key


def test_report_and_run_use_the_measured_recovery_times_when_asked(fleet, tmp_path):
    """`failcast report --recovery measured` and a run's `recovery_source = "measured"` project with
    the fleet's MTTR and training-log times, and the assumptions table marks them measured."""
    from pipeline import config, report
    from pipeline.runs import batch

    truth, db, _ = fleet
    job = tmp_path / "job.toml"
    job.write_text(
        'name = "j"\n[work]\ngpu_hours = 1e5\ngpu = "H100"\n'
        "[cluster]\ninstances = 8\nprice_per_gpu_hour_usd = 2\n"
    )
    mttr = np.mean([f.repair_hours for f in truth])
    out = tmp_path / "report"
    result = CliRunner().invoke(
        main,
        ["report", "--db", str(db), "--job", str(job), "--recovery", "measured", "--monte-carlo-runs", "0"]
        + ["--no-images", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    page = (out / "failcast-report.html").read_text()
    assert f"replace {mttr:.3g} h (measured)" in page and "detect 10 min (measured)" in page

    con = warehouse.connect(db, read_only=True)
    try:
        fleet_analysis = analysis.analyze(con)
    finally:
        con.close()
    assumed = config.RunConfig(jobs=(str(job),))
    for cfg, marked in ((assumed, False), (dataclasses.replace(assumed, recovery_source="measured"), True)):
        outlook = batch._job_outlook(cfg, fleet_analysis)
        manual = outlook.assumptions.filter(assumption="recovery: manual")["value"][0]
        assert ("(measured)" in manual) is marked
        assert (f"replace {mttr:.3g} h" in manual) is marked
    assert isinstance(outlook, report.JobOutlook)
