"""Scheduled runs end to end on a small simulated fleet: incremental ingest, the warehouse lock,
SIGKILL in the middle of a file's transaction, failed runs, report retention and the run log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from pipeline import config, runs, sample, warehouse
from pipeline.cli import main
from pipeline.config import load_config
from pipeline.runs.log import log

REPO = Path(__file__).parents[1]
SPEC = sample.FleetSpec(cluster_sizes=(8, 16), days=30, rate_per_node_hour=0.004, seed=11)
ISO = "%Y-%m-%dT%H:%M:%SZ"


@pytest.fixture(scope="module")
def fleet() -> sample.Fleet:
    return sample.simulate_fleet(SPEC)


def csv_text(frame: pl.DataFrame, header: bool = True) -> str:
    return frame.with_columns(pl.col(pl.Datetime).dt.strftime(ISO)).write_csv(include_header=header)


def write_config(folder: Path) -> Path:
    """A config reading ``folder/logs``; the warehouse and reports live beside it."""
    lines = [
        'warehouse = "failcast.duckdb"',
        'report_dir = "reports"',
        "lock_timeout_seconds = 0",
        "[inputs]",
        'inventory = ["logs/inventory.csv"]',
        'csv = ["logs/incidents-*.csv"]',
        'jsonl = ["logs/*.jsonl"]',
    ]
    path = folder / "failcast.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def write_fleet(folder: Path, fleet: sample.Fleet) -> Path:
    """The simulated fleet as ``folder/logs/{inventory,incidents-1}.csv``; returns the config."""
    incidents, _ = fleet.write(folder / "logs")
    incidents.rename(folder / "logs/incidents-1.csv")
    return write_config(folder)


def run(config: Path, *args: str):
    return CliRunner().invoke(main, ["run", "--config", str(config), *args])


def contents(db: Path) -> dict[str, pl.DataFrame]:
    """Warehouse tables without the columns that legitimately differ between runs."""
    with warehouse.connect(db, read_only=True) as con:
        events = warehouse.table(con, "events").drop("file_id")
        return {
            "events": events.sort("event_key"),
            "incidents": warehouse.table(con, "incidents").sort(pl.all()),  # a table has no row order
            "inventory": warehouse.table(con, "inventory")
            .drop("file_id")
            .sort("cluster_id", "node_id", "line"),
            # A grown file is a new file version: its old bad lines are rejected again, under the new
            # file_id, so compare the distinct rejected lines.
            "rejects": warehouse.table(con, "rejects")
            .select(pl.col("path").str.split("/").list.last(), "line", "raw", "reason")
            .unique()
            .sort("path", "line"),
        }


def manifest(db: Path) -> list[dict]:
    with warehouse.connect(db, read_only=True) as con:
        return runs.list_runs(con)


def test_two_incremental_runs_equal_one_run_over_the_final_folder(tmp_path, fleet):
    incidents = fleet.incidents.sort("timestamp")
    first, appended, later = incidents[:40], incidents[40:60], incidents[60:]
    bad_row = "2026-03-02T00:00:00Z,c0008,c0008-n0001,,,,,\n"  # empty category
    final_csv = csv_text(first) + bad_row + csv_text(appended, header=False)

    # Final folder, ingested in one run.
    once = tmp_path / "once"
    (once / "logs").mkdir(parents=True)
    (once / "logs/inventory.csv").write_text(csv_text(fleet.inventory))
    (once / "logs/incidents-a.csv").write_text(final_csv)
    later.with_columns(pl.col(pl.Datetime).dt.strftime(ISO)).write_ndjson(once / "logs/incidents-b.jsonl")
    # With the progress bar of a terminal (the grown folder below runs without it).
    assert runs.run_batch(load_config(write_config(once)), progress=True).stages["ingest"]["new"] == 3

    # The same folder as it grew: first part, then appended lines and a new file.
    grown = tmp_path / "grown"
    (grown / "logs").mkdir(parents=True)
    config = write_config(grown)
    (grown / "logs/inventory.csv").write_text(csv_text(fleet.inventory))
    (grown / "logs/incidents-a.csv").write_text(csv_text(first) + bad_row)
    assert run(config).exit_code == 0
    with (grown / "logs/incidents-a.csv").open("a") as f:
        f.write(csv_text(appended, header=False))
    (grown / "logs/incidents-b.jsonl").write_bytes((once / "logs/incidents-b.jsonl").read_bytes())
    second = run(config)
    assert second.exit_code == 0, second.output

    expected, actual = contents(once / "failcast.duckdb"), contents(grown / "failcast.duckdb")
    assert expected["events"].height == incidents.height
    for name, frame in expected.items():
        assert actual[name].equals(frame), name
    latest = manifest(grown / "failcast.duckdb")[0]
    assert latest["status"] == "succeeded"
    assert {k: latest["stages"]["ingest"][k] for k in ("new", "grown", "unchanged")} == {
        "new": 1,
        "grown": 1,
        "unchanged": 1,
    }
    assert latest["stages"]["ingest"]["rows_ingested"] == appended.height + later.height


def test_a_second_run_is_refused_while_the_lock_is_held(tmp_path, fleet):
    config = write_fleet(tmp_path, fleet)
    with runs.warehouse_lock(tmp_path / "failcast.duckdb", run_id="holder"):
        started = time.monotonic()
        blocked = subprocess.run(
            [sys.executable, "-m", "pipeline", "run", "--config", str(config), "--lock-timeout", "1"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        waited = time.monotonic() - started
    assert blocked.returncode == runs.EXIT_LOCKED
    lines = blocked.stderr.strip().splitlines()
    assert len(lines) == 1 and f"locked by pid {os.getpid()} (run holder" in lines[0]
    assert waited >= 1.0
    assert not (tmp_path / "failcast.duckdb").exists()  # refused before opening the warehouse
    assert run(config).exit_code == 0  # released: the next run goes ahead


def test_a_run_is_refused_while_another_process_has_the_warehouse_open(tmp_path, fleet):
    config, db = write_fleet(tmp_path, fleet), tmp_path / "failcast.duckdb"
    warehouse.connect(db).close()
    reader = subprocess.Popen(  # an analyst's DuckDB session left open
        [
            sys.executable,
            "-c",
            f"import duckdb, time; con = duckdb.connect({str(db)!r}, read_only=True); "
            "print('open', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout.readline() == "open\n"
        refused = run(config)
    finally:
        reader.kill()
        reader.wait()
        reader.stdout.close()
    assert refused.exit_code == runs.EXIT_LOCKED, refused.stderr
    assert "open in another process" in refused.stderr and str(reader.pid) in refused.stderr


def test_the_lock_waits_for_a_holder_that_finishes_in_time(tmp_path):
    db = tmp_path / "w.duckdb"
    held, released_at = threading.Event(), []

    def hold() -> None:
        with runs.warehouse_lock(db, run_id="first"):
            held.set()
            time.sleep(0.3)
            released_at.append(time.monotonic())

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait(5)
    with runs.warehouse_lock(db, timeout_seconds=10, run_id="second") as previous:
        assert time.monotonic() > released_at[0]  # got it only once the first holder let go
        assert previous is None  # the first holder released cleanly
        assert json.loads(runs.lock_path(db).read_text())["run_id"] == "second"
    thread.join()
    refused = pytest.raises(runs.LockedError, match=f"locked by pid {os.getpid()} \\(run third")
    with runs.warehouse_lock(db, run_id="third"), refused, runs.warehouse_lock(db, timeout_seconds=0.2):
        pass


# Runs the CLI in a child process whose ingest sleeps inside the transaction of the first file
# that writes events (after its rows are inserted, before COMMIT), so the test can SIGKILL it there.
_SLOW_INGEST = """
import contextlib, os, sys, time
from pipeline import warehouse
original = warehouse.transaction

@contextlib.contextmanager
def slow(con):
    with original(con):
        yield
        if con.sql("SELECT count(*) FROM events").fetchall()[0][0]:
            open(os.environ["FAILCAST_TEST_MARKER"], "w").close()
            time.sleep(120)

warehouse.transaction = slow
from pipeline.cli import main
from pipeline.config import load_config
from pipeline.runs.log import log
main(sys.argv[1:])
"""


@pytest.mark.parametrize(
    ("signum", "returncode", "left_as"),
    [
        (signal.SIGKILL, -signal.SIGKILL, ("running", None)),  # no chance to clean up
        (signal.SIGTERM, 128 + signal.SIGTERM, ("failed", "terminated (exit code 143)")),  # systemd stop
        (signal.SIGINT, 130, ("failed", "interrupted (SIGINT)")),  # Ctrl-C
    ],
    ids=["SIGKILL", "SIGTERM", "SIGINT"],
)
def test_a_run_killed_mid_ingest_is_followed_by_a_clean_run(tmp_path, fleet, signum, returncode, left_as):
    config, db, marker = (
        write_fleet(tmp_path, fleet),
        tmp_path / "failcast.duckdb",
        tmp_path / "in-transaction",
    )
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_SLOW_INGEST), "run", "--config", str(config)],
        cwd=REPO,
        env={**os.environ, "FAILCAST_TEST_MARKER": str(marker)},
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), child.stderr.read().decode()
    busy = CliRunner().invoke(main, ["runs", "--db", str(db)])
    assert (
        busy.exit_code == runs.EXIT_LOCKED and "the warehouse file is open in another process" in busy.stderr
    )
    child.send_signal(signum)
    assert child.wait(10) == returncode
    child.stderr.close()

    with warehouse.connect(db, read_only=True) as con:  # the killed file left nothing behind
        assert con.sql("SELECT count(*) FROM events").fetchall()[0][0] == 0
        assert con.sql("SELECT kind FROM ingested_files").fetchall() == [("inventory",)]
        assert con.sql("SELECT status, error FROM runs").fetchall() == [left_as]

    clean = run(config, "--log-format", "json")
    assert clean.exit_code == 0, clean.output
    logged = [json.loads(line) for line in clean.stderr.splitlines()]
    lock_warnings = [r for r in logged if r["stage"] == "lock" and r["level"] == "warning"]
    assert bool(lock_warnings) == (signum == signal.SIGKILL)  # only a killed run leaves the lock file full
    killed, ok = manifest(db)[1], manifest(db)[0]
    assert killed["status"] == "failed"
    if signum == signal.SIGKILL:  # marked by the clean run, which found it still "running"
        assert killed["error"].startswith("abandoned")
        assert ok["stages"]["lock"]["abandoned_runs"] == [killed["run_id"]]
    else:  # recorded by the interrupted run itself
        assert killed["error"] == left_as[1]
    assert ok["status"] == "succeeded"
    assert ok["stages"]["transform"]["events"] == fleet.incidents.height
    assert ok["stages"]["transform"]["inventory"] == fleet.inventory.height
    assert ok["stages"]["ingest"] | {"new": 1, "unchanged": 1, "rows_duplicate": 0} == ok["stages"]["ingest"]


def test_a_failed_stage_marks_the_run_failed_and_keeps_the_previous_report(tmp_path, fleet):
    config = write_fleet(tmp_path, fleet)
    assert run(config).exit_code == 0
    latest = tmp_path / "reports/latest.html"
    before = (latest.read_bytes(), sorted(p.name for p in (tmp_path / "reports").iterdir()))

    (tmp_path / "logs/incidents-2.csv").write_text("when,where\n1,2\n")  # not an incidents file
    time.sleep(1)  # a new dated report name, were one written
    failed = run(config)
    assert failed.exit_code == 2
    assert "incidents-2.csv: not an incidents file" in failed.stderr.strip().splitlines()[-1]
    assert (latest.read_bytes(), sorted(p.name for p in (tmp_path / "reports").iterdir())) == before
    record = manifest(tmp_path / "failcast.duckdb")[0]
    assert record["status"] == "failed" and "not an incidents file" in record["error"]
    assert record["ended_at_utc"] is not None and "ingest" in record["stages"]


def test_without_a_config_run_writes_the_readme_report_from_the_sample(tmp_path, monkeypatch, fleet):
    fleet.write(tmp_path / "data/sample")
    job = Path(__file__).resolve().parents[1] / config.SAMPLE_JOB
    (tmp_path / config.SAMPLE_JOB).parent.mkdir(parents=True)
    (tmp_path / config.SAMPLE_JOB).write_bytes(job.read_bytes())
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["run"])
    assert result.exit_code == 0, result.output
    dated = list((tmp_path / "reports").glob("failcast-report-*.html"))
    assert len(dated) == 1
    for alias in runs.REPORT_ALIASES:
        assert (tmp_path / "reports" / alias).read_bytes() == dated[0].read_bytes()
    listed = CliRunner().invoke(main, ["runs"])
    assert listed.exit_code == 0 and " succeeded " in listed.stdout and dated[0].name in listed.stdout
    as_json = json.loads(CliRunner().invoke(main, ["runs", "--json"]).stdout)
    assert as_json[0]["versions"]["duckdb"] and as_json[0]["input_files"][0]["status"] == "new"


def test_ingest_options_from_the_config_reach_kernel_log_ingest(tmp_path, fleet):
    """Year-less syslog XID lines of one cluster, no inventory: [ingest] gives the year, cluster,
    GPU bus order and an estimated exposure, so the run succeeds and every XID lands right."""
    logs = sample.write_kernel_logs(fleet, tmp_path / "logs", form="syslog")
    config_path = tmp_path / "failcast.toml"
    config_path.write_text(
        textwrap.dedent(f"""\
        warehouse = "failcast.duckdb"
        report_dir = "reports"
        [inputs]
        kernel-log = ["logs/kern-c0008.log"]
        [ingest]
        year = 2026
        cluster = "c0008"
        gpu_bus_order = "{",".join(sample.PCI_BUS_ORDER)}"
        estimate_exposure = 8
        """)
    )
    assert [p.name for p in logs] == ["kern-c0008.log", "kern-c0016.log"]
    result = run(config_path)
    assert result.exit_code == 0, result.output
    xid = fleet.incidents.filter(
        pl.col("message").str.starts_with("NVRM: Xid") & (pl.col("cluster_id") == "c0008")
    )
    with warehouse.connect(tmp_path / "failcast.duckdb", read_only=True) as con:
        incidents = warehouse.table(con, "incidents").sort("timestamp_utc", "node_id")
        inventory = warehouse.table(con, "inventory")
    expected = xid.sort("timestamp", "node_id")
    assert (
        incidents["timestamp_utc"].to_list()
        == expected["timestamp"].dt.replace_time_zone(None).dt.truncate("1s").to_list()
    )
    assert incidents["gpu_index"].to_list() == expected["gpu_index"].to_list()
    assert set(incidents["cluster_id"]) == {"c0008"}
    assert inventory["estimated"].all() and set(inventory["gpus_per_node"]) == {8}


def test_a_configured_column_map_serves_the_tickets_and_leaves_the_inventory_alone(tmp_path, fleet):
    """[inputs] column_map names the ticket export's columns; the inventory beside it has the
    canonical names. Before, every scheduled run with both stopped on the inventory."""
    (tmp_path / "logs").mkdir()
    tickets = fleet.incidents.rename({"timestamp": "opened", "node_id": "host", "category": "problem"})
    (tmp_path / "logs/inventory.csv").write_text(csv_text(fleet.inventory))
    (tmp_path / "logs/tickets.csv").write_text(csv_text(tickets))
    config_path = tmp_path / "failcast.toml"
    config_path.write_text(
        textwrap.dedent("""\
        warehouse = "failcast.duckdb"
        report_dir = "reports"
        [inputs]
        inventory = ["logs/inventory.csv"]
        csv = ["logs/tickets.csv"]
        [inputs.column_map]
        timestamp = "opened"
        node_id = "host"
        category = "problem"
        """)
    )
    result = run(config_path)
    assert result.exit_code == 0, result.output
    with warehouse.connect(tmp_path / "failcast.duckdb", read_only=True) as con:
        assert warehouse.table(con, "inventory").height == fleet.inventory.height
        assert warehouse.table(con, "events").height == fleet.incidents.height


@pytest.mark.parametrize("hostname", ["gpu-{h}", "GPU-{h}.eu1.example.net"])
def test_a_run_warns_of_records_that_start_long_after_the_service(tmp_path, hostname):
    """Day-first tickets of March beside a JSON inventory from February under two column names
    (the tickets' Host, the inventory's hostname): read, and the quiet February named. When the
    inventory spells the hosts another way, the run's log names that too."""
    exports = tmp_path / "exports"
    exports.mkdir()
    (exports / "tickets.csv").write_text(
        "Created;Host;Problem;Site\n"
        + "".join(f"0{d}.03.2026 0{h}:00;gpu-{h};Xid 79;eu1\n" for d in (1, 2, 3) for h in (1, 2))
    )
    inventory = [
        {"hostname": hostname.format(h=h), "Site": "eu1", "type": "p5", "gpus": 8}
        | {"since": "01.02.2026 00:00"}
        for h in (1, 2)
    ]
    (exports / "inventory.json").write_text(json.dumps(inventory))
    config_path = tmp_path / "failcast.toml"
    config_path.write_text(
        textwrap.dedent("""\
        warehouse = "w.duckdb"
        report_dir = "reports"
        [inputs]
        auto = ["exports/*"]
        [inputs.column_map]
        timestamp = "Created"
        node_id = ["Host", "hostname"]
        category = "Problem"
        cluster_id = "Site"
        instance_type = "type"
        gpus_per_node = "gpus"
        in_service_from = "since"
        [ingest]
        time_format = "%d.%m.%Y %H:%M"
        """)
    )
    result = run(config_path)
    assert result.exit_code == 0, result.output
    assert "WARNING ingest     eu1: no failure recorded in its first 28 days of service" in result.output
    respelled = "2 nodes of the data are in the inventory under another spelling ('gpu-1' is 'GPU-1.eu1"
    assert (respelled in result.output) is (hostname != "gpu-{h}")
    with warehouse.connect(tmp_path / "w.duckdb", read_only=True) as con:
        assert (warehouse.table(con, "events").height, warehouse.table(con, "inventory").height) == (6, 2)


def stamp(day: int) -> str:
    return f"failcast-report-202603{day:02d}T000000Z.html"


@pytest.mark.parametrize(
    ("days", "keep", "keep_days", "survivors"),
    [
        ([1, 2, 3, 4], 2, None, [3, 4]),
        ([1, 2, 3, 4], 10, 1.5, [3, 4]),  # now = day 4: day 3 is 1 day old, day 2 is 2 days old
        ([1, 2, 3, 4], 3, 2.5, [2, 3, 4]),
        ([1, 2, 3, 4], 1, None, [4]),
        ([1], 1, 0.001, [1]),  # the newest report is never deleted, however old
    ],
)
def test_prune_reports_keeps_the_newest_by_count_and_age(tmp_path, days, keep, keep_days, survivors):
    for day in days:
        (tmp_path / stamp(day)).write_text("x")
    (tmp_path / "latest.html").write_text("x")
    (tmp_path / "notes.html").write_text("x")
    runs.prune_reports(tmp_path, keep=keep, keep_days=keep_days, now=datetime(2026, 3, 4))
    expected = {stamp(d) for d in survivors} | {"latest.html", "notes.html"}
    assert {p.name for p in tmp_path.iterdir()} == expected


def test_publish_moves_the_aliases_and_they_survive_pruning(tmp_path):
    old, new = tmp_path / stamp(1), tmp_path / stamp(2)
    old.write_text("old")
    runs.publish(old)
    new.write_text("new")
    runs.publish(new)
    runs.prune_reports(tmp_path, keep=1, keep_days=None, now=datetime(2026, 3, 2))
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {
        stamp(2): "new",
        "latest.html": "new",
        "failcast-report.html": "new",
    }


def test_runs_on_a_missing_warehouse_says_how_to_fix_it(tmp_path):
    result = CliRunner().invoke(main, ["runs", "--db", str(tmp_path / "none.duckdb")])
    assert result.exit_code == 2 and "no warehouse here" in result.stderr


@pytest.mark.parametrize(
    ("log_format", "check"),
    [
        ("json", lambda line: json.loads(line)["fields"]["path"] == "evil\x1b[2J.csv"),
        ("text", lambda line: "\x1b" not in line and "evil\\x1b[2J.csv" in line),
    ],
)
def test_log_lines_carry_stage_and_fields_and_no_terminal_escapes(capsys, log_format, check):
    runs.setup_logging(log_format)
    log("ingest", "file", path="evil\x1b[2J.csv", rows_ingested=3)
    (line,) = capsys.readouterr().err.splitlines()
    assert check(line)
    if log_format == "json":
        record = json.loads(line)
        assert (record["level"], record["stage"], record["message"]) == ("info", "ingest", "file")
        assert datetime.fromisoformat(record["ts"]).tzinfo is not None


def test_run_inputs_take_existing_names_literally_and_each_file_once(tmp_path):
    from pipeline.runs.batch import expand_inputs

    (tmp_path / "logs").mkdir()
    odd = tmp_path / "logs" / "x[1].csv"
    odd.write_text("a\n")
    (tmp_path / "logs" / "loop").symlink_to(tmp_path / "logs")  # ** sees x[1].csv under many names
    files, unmatched = expand_inputs(
        {"csv": (str(odd), str(tmp_path / "logs" / "**" / "*.csv")), "jsonl": (str(tmp_path / "none*"),)}
    )
    assert [(p.name, fmt) for p, fmt in files] == [("x[1].csv", "csv")]
    assert unmatched == [str(tmp_path / "none*")]
