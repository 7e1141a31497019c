"""The foundation's end-to-end path, through the public CLI as a user (or cron) calls it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest
from click.testing import CliRunner

from pipeline import sample as sample_mod
from pipeline import transform
from pipeline.cli import main
from pipeline.projection import SparePool
from pipeline.sample import FleetSpec

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample"


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("wh") / "w.duckdb"
    result = invoke(
        "ingest", str(SAMPLE / "inventory.csv"), str(SAMPLE / "incidents.csv"), "--db", str(db), "--json"
    )
    assert result.exit_code == 0, result.output
    return db


def test_bundled_sample_is_the_generators_output(tmp_path) -> None:
    assert invoke("sample", "--out", str(tmp_path)).exit_code == 0
    for name in ("incidents.csv", "inventory.csv"):
        assert (tmp_path / name).read_bytes() == (SAMPLE / name).read_bytes(), (
            f"data/sample/{name} is stale: regenerate with 'failcast sample'"
        )


def test_rates_per_cluster_contain_the_true_rate(sample_db) -> None:
    result = invoke("rates", "--db", str(sample_db), "--by", "cluster_id", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    truth = FleetSpec().rate_per_node_hour
    assert [r["cluster_id"] for r in rows] == ["c0032", "c0064", "c0128", "c0256", "c0512", "c1024"]
    for row in rows:
        assert set(row) >= {
            "cluster_id",
            "failures",
            "exposure_node_hours",
            "rate_per_node_hour",
            "rate_ci_low",
            "rate_ci_high",
        }
        assert row["rate_ci_low"] < truth < row["rate_ci_high"], row
        assert row["rate_per_node_hour"] == pytest.approx(row["failures"] / row["exposure_node_hours"])


def test_ingesting_twice_changes_nothing(sample_db) -> None:
    import duckdb

    def counts() -> dict[str, int]:
        with duckdb.connect(str(sample_db), read_only=True) as con:
            return {
                t: con.sql(f"SELECT count(*) FROM {t}").fetchall()[0][0]  # noqa: S608
                for t in ("events", "incidents", "inventory", "rejects", "ingested_files")
            }

    before = counts()
    result = invoke(
        "ingest",
        str(SAMPLE / "inventory.csv"),
        str(SAMPLE / "incidents.csv"),
        "--db",
        str(sample_db),
        "--json",
    )
    assert all(s["skipped"] for s in json.loads(result.stdout))
    assert counts() == before and before["events"] > 0


def test_copy_of_a_file_adds_only_duplicates(sample_db, tmp_path) -> None:
    copy = tmp_path / "copy.csv"
    lines = (SAMPLE / "incidents.csv").read_text().splitlines()
    copy.write_text("\n".join(lines[:50]) + "\n")  # different bytes, same rows
    [summary] = json.loads(invoke("ingest", str(copy), "--db", str(sample_db), "--json").stdout)
    assert (summary["rows_read"], summary["rows_ingested"], summary["rows_duplicate"]) == (49, 0, 49)


def test_fit_json_has_models_and_scaling(sample_db) -> None:
    payload = json.loads(invoke("fit", "--db", str(sample_db), "--json").stdout)
    assert payload["best_family"] in payload["node_time_between_failures"]
    low, high = payload["scaling"]["alpha_ci"]
    assert low < 1.0 < high  # the generator's nodes fail independently


def test_run_writes_the_report(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(REPO)
    result = invoke("run", "--db", str(tmp_path / "w.duckdb"), "--out", str(tmp_path / "r"))
    assert result.exit_code == 0, result.output
    html = (tmp_path / "r" / "failcast-report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "vegaEmbed" in html
    assert "https://cdn" not in html  # self-contained: nothing fetched from a CDN
    assert "llama3-70b-on-this-fleet" in html  # the bundled job is projected on the fleet's rate


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["rates", "--db", "{tmp}/missing.duckdb"], "no warehouse here"),
        (["ingest", "{tmp}/nothing.csv", "--db", "{tmp}/w.duckdb"], "no such file"),
        (["ingest", "{tmp}/bad.txt", "--db", "{tmp}/w.duckdb"], "cannot tell the format"),
        (["ingest", "{tmp}/x.csv", "--db", "{tmp}/w.duckdb", "--map", "nodeid"], "CANONICAL=SOURCE"),
        (["run", "--config", "{tmp}/missing.toml"], "config file not found"),
        (["ingest", "{tmp}/us.csv", "--db", "{tmp}/w.duckdb"], "12 of 12 records rejected (100%, more than"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message) -> None:
    (tmp_path / "bad.txt").write_text("hello\n")
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    us_dates = "".join(f"02/{d:02d}/2026 10:00,c1,n1,gpu\n" for d in range(1, 13))
    (tmp_path / "us.csv").write_text("timestamp,cluster_id,node_id,category\n" + us_dates)
    argv = [a.format(tmp=tmp_path) for a in args]
    proc = subprocess.run([sys.executable, "-m", "pipeline", *argv], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_every_command_has_help() -> None:
    for command in main.commands:
        result = invoke(command, "--help")
        assert result.exit_code == 0 and "Usage:" in result.output


def _real_out_of_memory() -> Exception:
    con = duckdb.connect()
    con.execute("SET memory_limit = '16MB'")
    try:
        con.sql(
            "SELECT x, string_agg(x::VARCHAR, ',') FROM range(3000000) t(x) GROUP BY x ORDER BY 2"
        ).fetchall()
    except duckdb.OutOfMemoryException as exc:
        return exc
    raise AssertionError("DuckDB did not run out of memory under a 16 MB limit")


@pytest.mark.parametrize(
    ("cap", "advice"),
    [
        ("128", "raise FAILCAST_DUCKDB_MEMORY_MB (now 128;"),
        ("", "raise FAILCAST_DUCKDB_MEMORY_MB (now 1024, the default;"),
        ("0", "more RAM"),
    ],
)
def test_out_of_memory_is_one_line_with_the_setting_to_change(tmp_path, monkeypatch, cap, advice) -> None:
    """DuckDB's message is many lines of SQL advice; failcast names its own knob instead."""
    error = _real_out_of_memory()

    def ingest_files(*args, **kwargs):
        raise error

    monkeypatch.setattr("pipeline.cli.ingest.ingest_mod.ingest_files", ingest_files)
    monkeypatch.setenv("FAILCAST_DUCKDB_MEMORY_MB", cap)
    (tmp_path / "x.log").write_text("Mar  2 04:26:29 node-017 kernel: NVRM: Xid (PCI:0000:18:00): 79\n")
    result = CliRunner().invoke(main, ["ingest", str(tmp_path / "x.log"), "--db", str(tmp_path / "w.duckdb")])
    assert result.exit_code == 1
    assert result.output.startswith("failcast: DuckDB ran out of memory (Out of Memory Error")
    assert advice in result.output and len(result.output.strip().splitlines()) == 1


def test_repairs_recover_the_samples_repair_median_and_project_shows_spares(sample_db) -> None:
    payload = json.loads(invoke("repairs", "--db", str(sample_db), "--by", "category", "--json").stdout)
    total = payload["total"]
    assert (
        total["repair_hours_p50_ci_low"]
        <= sample_mod.REPAIR_MEDIAN_HOURS
        <= total["repair_hours_p50_ci_high"]
    )
    assert sum(g["outages"] for g in payload["groups"]) == total["outages"]
    assert 0.9 < total["availability"] < 1
    text = invoke("repairs", "--db", str(sample_db)).output
    assert text.startswith(f"{total['outages']:,} outages")
    calendar = json.loads(invoke("rates", "--db", str(sample_db), "--exposure", "calendar", "--json").stdout)
    uptime_run = invoke("rates", "--db", str(sample_db), "--json")
    uptime = json.loads(uptime_run.stdout)
    # a failure while its node is down for a known repair is part of that outage, not a new one:
    # uptime counts fewer, and says how many it left out
    assert all(u["failures"] <= c["failures"] for u, c in zip(uptime, calendar, strict=True))
    in_repair = sum(c["failures"] for c in calendar) - sum(u["failures"] for u in uptime)
    assert in_repair > 0 and f"{in_repair} node out of service" in uptime_run.output
    assert all(
        u["exposure_node_hours"] < c["exposure_node_hours"] for u, c in zip(uptime, calendar, strict=True)
    )
    assert {r["exposure_basis"] for r in uptime} == {"uptime"}
    args = ["project", "--db", str(sample_db), "--instances", "64", "--gpu-hours", "1e5"]
    args += ["--price-per-gpu-hour", "2", "--monte-carlo-runs", "0", "--recovery", "measured", "--json"]
    project = json.loads(invoke(*args).stdout)
    assert project["spec"]["recovery"]["manual"]["replace_hours"] == pytest.approx(total["mttr_hours"])
    pool = SparePool(64, project["spec"]["failure"]["rate_per_instance_hour"], total["mttr_hours"])
    assert project["spares"]["spares"] == pool.spares_for(0.99)
    assert pool.free_spare_probability(project["spares"]["spares"] - 1) < 0.99


def test_every_command_is_in_the_lazy_table_with_its_module():
    """`main` imports a command's module only when the command is used (cli.common.COMMANDS): every
    module's commands must be in the table, under the module that defines them."""
    import importlib
    import pkgutil

    import pipeline.cli
    from pipeline.cli.common import COMMANDS

    for module in pkgutil.iter_modules(pipeline.cli.__path__):
        importlib.import_module(f"pipeline.cli.{module.name}")
    assert set(main.commands) == set(COMMANDS)
    for name, command in main.commands.items():
        assert command.callback.__module__ == f"pipeline.cli.{COMMANDS[name]}", name


def test_ingest_starts_without_the_statistics_and_report_libraries(tmp_path):
    """`failcast ingest` (run after every export) does not import scipy.stats, lifelines or Altair: a
    fresh interpreter ingests a file and reports which of them it loaded."""
    (tmp_path / "i.csv").write_text(
        "timestamp,cluster_id,node_id,category\n2026-03-02T04:26:29Z,c1,n1,nvlink\n"
    )
    code = (
        "import sys\n"
        "from pipeline.cli import main\n"
        "try:\n"
        f"    main(['ingest', {str(tmp_path / 'i.csv')!r}, '--db', {str(tmp_path / 'w.duckdb')!r}, '-q'])\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "print(sorted(m for m in ('scipy.stats', 'lifelines', 'altair') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert (tmp_path / "w.duckdb").exists()


@pytest.mark.parametrize("command", ["project", "report"])
def test_recovery_measured_without_any_measurement_is_one_line_and_exit_2(tmp_path, command):
    """No outage with an end and no training log: `--recovery measured` says what is missing."""
    incidents = tmp_path / "i.csv"
    incidents.write_text("timestamp,cluster_id,node_id,category\n2026-03-02T04:26:29Z,c1,n1,nvlink\n")
    inventory = tmp_path / "inventory.csv"
    inventory.write_text(
        "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n"
        "c1,n1,p5.48xlarge,8,2026-03-01T00:00:00Z,\n"
    )
    db = tmp_path / "w.duckdb"
    ingested = CliRunner().invoke(main, ["ingest", str(inventory), str(incidents), "--db", str(db), "-q"])
    assert ingested.exit_code == 0, ingested.output
    job = tmp_path / "job.toml"
    job.write_text(
        '[work]\ngpu_hours = 1e5\ngpu = "H100"\n[cluster]\ninstances = 8\nprice_per_gpu_hour_usd = 2\n'
    )
    args = ["--db", str(db), "--recovery", "measured", "--monte-carlo-runs", "0"]
    args += (
        ["--spec", str(job)] if command == "project" else ["--job", str(job), "--out", str(tmp_path / "r")]
    )
    result = CliRunner().invoke(main, [command, *args])
    assert result.exit_code == 2, result.output
    assert "--recovery measured: no outage in" in result.stderr and "use --recovery assumed" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_output_piped_into_head_ends_quietly(sample_db):
    """`failcast rates | head -1`: the reader goes away early; failcast exits with the shell's
    SIGPIPE code and no 'unexpected error' line. The reader here closes the pipe before failcast
    has written anything, so its first write always meets the closed pipe (with a real `head`,
    a table that fits in the pipe's 64 KiB is sometimes written whole before `head` exits, and
    failcast then rightly exits 0: the test depended on scheduling)."""
    writer = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "rates", "--db", str(sample_db), "--by", "node_id"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    writer.stdout.close()
    stderr = writer.stderr.read()
    assert writer.wait(timeout=120) == 141, stderr
    assert "unexpected error" not in stderr and "Traceback" not in stderr, stderr


def test_repairs_by_instance_type_take_the_nodes_type_when_the_outage_began(tmp_path) -> None:
    """n3 was type A until March 10, then B: its outages count under the type it had then."""
    (tmp_path / "inv.csv").write_text(
        "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n"
        "c1,n1,A,8,2026-03-01T00:00:00Z,\nc1,n2,B,8,2026-03-01T00:00:00Z,\n"
        "c1,n3,A,8,2026-03-01T00:00:00Z,2026-03-10T00:00:00Z\nc1,n3,B,8,2026-03-10T00:00:00Z,\n"
    )
    (tmp_path / "t.csv").write_text(
        "timestamp,cluster_id,node_id,category,resolved_at\n"
        "2026-03-02T00:00:00Z,c1,n1,Xid 79,2026-03-02T02:00:00Z\n"
        "2026-03-03T00:00:00Z,c1,n2,Xid 79,2026-03-03T04:00:00Z\n"
        "2026-03-05T00:00:00Z,c1,n3,Xid 79,2026-03-05T06:00:00Z\n"
        "2026-03-15T00:00:00Z,c1,n3,Xid 79,2026-03-15T08:00:00Z\n"
        "2026-03-08T00:00:00Z,c1,n1,Xid 48,2026-03-08T01:00:00Z\n"
        "2026-03-31T00:00:00Z,c1,n2,Xid 48,\n"  # the window's end: open, no downtime yet
    )
    db = str(tmp_path / "w.duckdb")
    assert invoke("ingest", str(tmp_path / "inv.csv"), str(tmp_path / "t.csv"), "--db", db).exit_code == 0
    groups = json.loads(invoke("repairs", "--db", db, "--by", "instance_type", "--json").stdout)["groups"]
    got = {g["instance_type"]: (g["outages"], g["downtime_hours"]) for g in groups}
    assert got == {"A": (3, 9.0), "B": (3, 12.0)}
    assert all(0.9 < g["availability"] < 1 for g in groups)
    bad = invoke("repairs", "--db", db, "--by", "rack")
    assert bad.exit_code == 2 and "instance_type" in bad.output and "repair_hours" not in bad.output


def test_rates_before_any_service_is_one_line_and_late_records_are_a_warning(tmp_path) -> None:
    (tmp_path / "inv.csv").write_text(
        "cluster_id,node_id,instance_type,gpus_per_node,in_service_from\nc1,n1,p5,8,2026-01-01T00:00:00Z\n"
    )
    (tmp_path / "t.csv").write_text(
        "timestamp,cluster_id,node_id,category\n"
        + "".join(f"2026-03-0{d}T00:00:00Z,c1,n1,Xid 79\n" for d in (1, 2, 3))
    )
    db = str(tmp_path / "w.duckdb")
    assert invoke("ingest", str(tmp_path / "inv.csv"), str(tmp_path / "t.csv"), "--db", db).exit_code == 0
    early = invoke("rates", "--db", db, "--until", "2025-06-01")
    assert early.exit_code == 2 and len(early.output.strip().splitlines()) == 1
    assert "no node was in service before the window's end (2025-06-01 00:00 UTC)" in early.output
    assert "Warning" not in early.output  # no division by zero exposure reached NumPy
    late = "warning: c1: no failure recorded in its first 59 days"
    rates = invoke("rates", "--db", db)
    assert rates.exit_code == 0 and late in rates.stderr
    assert rates.stdout.startswith("Fleet: ")
    # the fits and a projection from the fleet's own rate are as wrong as the rates: they say so too
    fit = invoke("fit", "--db", db, "--json")
    assert fit.exit_code == 0 and late in fit.stderr and json.loads(fit.stdout)
    spec = ["--instances", "8", "--gpu-hours", "1000", "--price-per-gpu-hour", "2"]
    job = invoke("project", "--db", db, *spec)
    assert job.exit_code == 0 and late in job.stderr and late not in job.stdout
    given = invoke("project", "--db", str(tmp_path / "none.duckdb"), *spec, "--failure-rate", "0.05")
    assert given.exit_code == 0 and "warning" not in given.stderr  # no fleet numbers used: nothing to warn of


def _left_out_fleet(tmp_path, inventory_node: str, until_ok: int) -> str:
    """c1 with one node in service from Jan 1, written ``inventory_node`` in the inventory; 4
    failures of ``gpu-1`` in the tickets, the first ``until_ok`` of them before Mar 1."""
    (tmp_path / "inv.csv").write_text(
        "cluster_id,node_id,instance_type,gpus_per_node,in_service_from\n"
        f"c1,{inventory_node},p5,8,2026-01-01T00:00:00Z\n"
    )
    days = [f"2026-02-0{d}" for d in range(1, until_ok + 1)] + [
        f"2026-03-0{d}" for d in range(1, 5 - until_ok)
    ]
    (tmp_path / "t.csv").write_text(
        "timestamp,cluster_id,node_id,category\n" + "".join(f"{d}T00:00:00Z,c1,gpu-1,Xid 79\n" for d in days)
    )
    db = str(tmp_path / "w.duckdb")
    assert invoke("ingest", str(tmp_path / "inv.csv"), str(tmp_path / "t.csv"), "--db", db).exit_code == 0
    return db


def test_most_failures_left_out_is_said_before_the_numbers_with_the_respelled_nodes(tmp_path) -> None:
    """Every failure is on a node the inventory spells GPU-1.ib.example.net: rates would say "no
    failures"; the first line says they are all left out and why, in text, JSON (stderr), fit and
    the report."""
    db = _left_out_fleet(tmp_path, "GPU-1.ib.example.net", until_ok=4)
    rates = invoke("rates", "--db", db)
    first, second = rates.stdout.splitlines()[:2]
    assert first.startswith("Warning: 4 of 4 failures (100%) are left out of every rate and fit")
    assert "'gpu-1' is 'GPU-1.ib.example.net' there" in first and second.startswith("Fleet: no failures")
    as_json = invoke("rates", "--db", db, "--json")
    assert json.loads(as_json.stdout)[0]["failures"] == 0
    assert "warning: 4 of 4 failures (100%) are left out" in as_json.stderr
    assert invoke("fit", "--db", db).stdout.startswith("Warning: 4 of 4 failures (100%)")
    out = tmp_path / "r.html"
    assert invoke("report", "--db", db, "--out", str(out)).exit_code == 0
    assert "Most failures are not in these numbers: 4 of 4 failures" in out.read_text()


@pytest.mark.parametrize("until_ok", [2, 1])
def test_what_until_leaves_out_is_said_not_warned_of(tmp_path, until_ok) -> None:
    """--until Feb 28 leaves out the March failures, half of them or more: the user chose that
    window, so it is a note on stderr, not a warning before the numbers
    (tests/test_since.py holds the warning's threshold on failures out of service)."""
    db = _left_out_fleet(tmp_path, "gpu-1", until_ok=until_ok)
    rates = invoke("rates", "--db", db, "--until", "2026-02-28")
    assert rates.exit_code == 0
    assert "Warning:" not in rates.stdout and "warning" not in rates.stderr
    assert "spelling" not in rates.output
    assert f"note: {4 - until_ok} failure" in rates.stderr
    assert f"{4 - until_ok} after the window end (--until)" in rates.stderr


def test_the_per_gpu_hour_rate_counts_only_failures_of_nodes_with_gpus(tmp_path) -> None:
    """A cluster with a GPU node and a CPU (login) node: the instance-hour rate counts both nodes'
    failures over both nodes' hours; the GPU-hour rate the GPU node's over its GPU-hours."""
    (tmp_path / "inv.csv").write_text(
        "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n"
        "c1,gpu1,p5,8,2026-01-01T00:00:00Z,2026-02-11T16:00:00Z\n"  # 1000 h
        "c1,login1,c7i,0,2026-01-01T00:00:00Z,2026-02-11T16:00:00Z\n"
    )
    (tmp_path / "t.csv").write_text(
        "timestamp,cluster_id,node_id,category\n"
        "2026-01-05T00:00:00Z,c1,gpu1,Xid 79\n2026-01-20T00:00:00Z,c1,gpu1,Xid 79\n"
        "2026-01-06T00:00:00Z,c1,login1,Kernel panic\n2026-01-16T00:00:00Z,c1,login1,Kernel panic\n"
        "2026-01-26T00:00:00Z,c1,login1,Kernel panic\n"
    )
    db = str(tmp_path / "w.duckdb")
    assert invoke("ingest", str(tmp_path / "inv.csv"), str(tmp_path / "t.csv"), "--db", db).exit_code == 0
    for extra in ([], ["--interruption-window", "0"]):  # counted in DuckDB, and from rows in Polars
        [row] = json.loads(invoke("rates", "--db", db, "--json", "--exposure", "calendar", *extra).stdout)
        assert (row["failures"], row["exposure_node_hours"], row["exposure_gpu_hours"]) == (5, 2000, 8000)
        assert row["rate_per_node_hour"] == pytest.approx(5 / 2000)
        assert row["rate_per_gpu_hour"] == pytest.approx(2 / 8000)  # not 5 / 8000
        low, high = transform.poisson_interval(np.array([2]), np.array([8000.0]))
        assert (row["rate_per_gpu_hour_ci_low"], row["rate_per_gpu_hour_ci_high"]) == pytest.approx(
            (low[0], high[0])
        )
    by_type = json.loads(invoke("rates", "--db", db, "--json", "--by", "instance_type").stdout)
    assert {r["instance_type"]: r["rate_per_gpu_hour"] for r in by_type}["c7i"] is None
