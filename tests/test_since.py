"""The window start (``--since``, ``AnalysisOptions.since``): its boundaries, what it leaves out and
that every command says so.

The fleet: n1 in service from 2026-01-01, n2 from 2026-01-15 to 2026-02-15 (its interval straddles
the window start 2026-02-01). Interrupting failures: n1 2026-01-10 (before), n2 2026-01-31 23:00
with a repair until 2026-02-01 03:00 (before, its outage reaches into the window), n1 exactly at
the start, n1 2026-02-20, n1 2026-03-01 (the data's end, so the window's). Slurm jobs: one started
before the start, one after.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import polars as pl
import pytest
from click.testing import CliRunner

from pipeline import analysis, config, report, transform, warehouse
from pipeline.cli import main
from pipeline.report.lemons import lemon_note
from tests._fleets import analysis_rows, write_warehouse

SINCE = datetime(2026, 2, 1)
UNTIL = datetime(2026, 3, 1)
INVENTORY = (
    "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n"
    "c1,n1,p5,8,2026-01-01T00:00:00Z,\n"
    "c1,n2,p5,8,2026-01-15T00:00:00Z,2026-02-15T00:00:00Z\n"
)
INCIDENTS = (
    "timestamp,cluster_id,node_id,category,resolved_at\n"
    "2026-01-10T00:00:00Z,c1,n1,Xid 79,2026-01-10T02:00:00Z\n"
    "2026-01-31T23:00:00Z,c1,n2,Xid 79,2026-02-01T03:00:00Z\n"
    "2026-02-01T00:00:00Z,c1,n1,Xid 79,2026-02-01T01:00:00Z\n"
    "2026-02-20T00:00:00Z,c1,n1,Xid 79,2026-02-20T02:00:00Z\n"
    "2026-03-01T00:00:00Z,c1,n1,Xid 79,\n"
)
SACCT = (
    "JobID|State|Start|End|NodeList\n"
    "1|NODE_FAIL|2026-01-10T00:00:00|2026-01-10T00:00:00|n1\n"
    "2|COMPLETED|2026-02-10T00:00:00|2026-02-11T00:00:00|n1\n"
)
CALENDAR_HOURS = 28 * 24 + 14 * 24  # n1 Feb 1 - Mar 1, n2 Feb 1 - Feb 15: clipped at the start
UPTIME_HOURS = CALENDAR_HOURS - 3 - 1 - 2  # n2's repair after the start, n1's two repairs


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("since")
    (root / "inventory.csv").write_text(INVENTORY)
    (root / "incidents.csv").write_text(INCIDENTS)
    (root / "jobs.sacct").write_text(SACCT)
    path = str(root / "w.duckdb")
    files = [str(root / n) for n in ("inventory.csv", "incidents.csv")]
    assert invoke("ingest", *files, "--db", path).exit_code == 0
    assert invoke("ingest", str(root / "jobs.sacct"), "--format", "sacct", "--db", path).exit_code == 0
    return path


def _rates(db: str, *args: str) -> tuple[dict, str]:
    done = invoke("rates", "--db", db, "--by", "cluster_id", "--json", "--since", "2026-02-01", *args)
    assert done.exit_code == 0, done.output
    (row,) = json.loads(done.stdout)
    return row, done.stderr


@pytest.mark.parametrize("rows", [False, True], ids=["counted-in-duckdb", "from-rows"])
def test_a_failure_at_the_start_counts_and_an_interval_straddling_it_is_clipped(db, rows):
    row, err = _rates(db, "--exposure", "calendar", *(["--all-categories"] if rows else []))
    assert row["failures"] == 3  # at the start, inside, at the end
    assert row["exposure_node_hours"] == pytest.approx(CALENDAR_HOURS)
    assert "2 failures left out" in err and "2 before the window start (--since)" in err


@pytest.mark.parametrize("rows", [False, True], ids=["counted-in-duckdb", "from-rows"])
def test_uptime_is_clipped_at_the_start(db, rows):
    row, err = _rates(db, *(["--all-categories"] if rows else []))
    assert row["exposure_node_hours"] == pytest.approx(UPTIME_HOURS)  # n2's repair: 3 h in the window
    assert "2 before the window start (--since)" in err


@pytest.mark.parametrize("rows", [False, True], ids=["counted-in-duckdb", "from-rows"])
def test_uptime_counts_a_failure_at_the_start_with_its_repair(db, rows):
    """n1 fails at the window start and is repaired until 01:00: its up piece there is the instant
    [start, start] (0 h), which holds the failure, so it counts, as it does on calendar exposure."""
    row, err = _rates(db, *(["--all-categories"] if rows else []))
    assert row["failures"] == 3
    assert row["exposure_node_hours"] == pytest.approx(UPTIME_HOURS)
    assert "node out of service" not in err


def test_analyze_counts_a_failure_at_the_start_with_its_repair(db):
    con = warehouse.connect(db, read_only=True)
    result = analysis.analyze(con, analysis.AnalysisOptions(since=SINCE))
    assert result.rates.overall["failures"].item() == 3
    assert result.rates.overall["exposure_node_hours"].item() == pytest.approx(UPTIME_HOURS)
    # n1's failure at the start counts in the MCF at age 0, its 2 others after: 3 on the Duane plot
    assert result.counted.mcf["age_hours"][0] == 0.0
    assert result.counted.duane_points["cumulative_failures"].max() == 3
    left = dict(result.failures_left_out.iter_rows())
    assert left == {transform.BEFORE_WINDOW_REASON: 2, **dict.fromkeys(transform.LEFT_OUT_REASONS, 0)}
    # the window's own exclusions are said, not warned of
    assert result.left_out_warning is None
    con.close()


def test_a_node_without_hours_at_risk_is_not_a_lemon(tmp_path):
    """A node whose one failure came as its service began, repaired past the window end, has one
    failure in 0 h at risk: its rate interval bounds nothing, (0, inf), and the lemon test leaves
    it out (its expected count is 0 whatever its rate) and counts it, instead of flagging it
    (p = 0 under the cluster's binomial)."""
    start = datetime(2026, 1, 1)
    nodes = [f"n{i}" for i in range(8)]
    inventory = pl.DataFrame(
        {
            "cluster_id": ["c1"] * 9,
            "node_id": [*nodes, "z"],
            "instance_type": ["p5"] * 9,
            "gpus_per_node": [8] * 9,
            "in_service_from_utc": [start] * 9,
            "in_service_to_utc": [None] * 8 + [datetime(2026, 1, 10)],
        },
        schema_overrides={"gpus_per_node": pl.Int32},
    )
    failures = [(n, start + timedelta(days=3 + i), None) for i, n in enumerate(nodes[:4])]
    failures.append(("z", start, datetime(2026, 2, 1)))  # at its service start, repaired past its end
    incidents = pl.DataFrame(
        {
            "timestamp_utc": [t for _, t, _ in failures],
            "cluster_id": ["c1"] * len(failures),
            "node_id": [n for n, _, _ in failures],
            "category": ["Xid 79"] * len(failures),
            "failure_class": ["gpu"] * len(failures),
            "interrupting": [True] * len(failures),
            "resolved_at_utc": [r for _, _, r in failures],
        },
        schema_overrides={"resolved_at_utc": pl.Datetime("us"), "timestamp_utc": pl.Datetime("us")},
    )
    con = write_warehouse(tmp_path / "w.duckdb", incidents, inventory)
    result = analysis.analyze(con, analysis.AnalysisOptions(until=datetime(2026, 1, 31)))
    z = result.nodes.rates.filter(pl.col("node_id") == "z").row(0, named=True)
    assert z["failures"] == 1 and z["exposure_node_hours"] == 0
    assert z["rate_ci_low"] == 0 and z["rate_ci_high"] == float("inf")
    assert result.rates.overall["failures"].item() == 5  # z's failure counts in the fleet's rate
    lemons = result.nodes.lemons
    assert lemons.untested_ == 1
    assert "z" not in lemons.lemons_["node_id"].to_list()
    assert lemons.table_.filter(pl.col("node_id") == "z")["p_value"].item() == 1
    assert "1 node with failures but no hours at risk" in lemon_note(lemons)
    con.close()


def test_what_since_leaves_out_is_said_not_warned_of(db):
    """--since Feb 20 leaves out 3 failures and counts 2: the user's own window, said in the note,
    never the warning that most failures are not in the numbers."""
    done = invoke("rates", "--db", db, "--since", "2026-02-20")
    assert done.exit_code == 0, done.output
    assert "Warning" not in done.stdout and "warning" not in done.stderr
    assert "3 failures left out" in done.stderr and "3 before the window start (--since)" in done.stderr
    con = warehouse.connect(db, read_only=True)
    result = analysis.analyze(con, analysis.AnalysisOptions(since=datetime(2026, 2, 20)))
    assert result.left_out_warning is None and result.rates.overall["failures"].item() == 2
    con.close()


@pytest.mark.parametrize(("out_of_service", "warned"), [(2, True), (1, False)])
def test_failures_out_of_service_are_warned_of_from_half(tmp_path, out_of_service, warned):
    """The warning counts what the user did not choose: with the window's start leaving out one
    more failure, 2 out of service against 2 counted is warned of (half), 1 against 2 is not."""
    (tmp_path / "inventory.csv").write_text(
        "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n"
        "c1,n1,p5,8,2026-01-01T00:00:00Z,2026-02-01T00:00:00Z\n"
    )
    times = ["2026-01-02", "2026-01-10", "2026-01-20"] + ["2026-02-10", "2026-02-20"][:out_of_service]
    (tmp_path / "incidents.csv").write_text(
        "timestamp,cluster_id,node_id,category\n" + "".join(f"{t}T00:00:00Z,c1,n1,Xid 79\n" for t in times)
    )
    path = str(tmp_path / "w.duckdb")
    files = [str(tmp_path / n) for n in ("inventory.csv", "incidents.csv")]
    assert invoke("ingest", *files, "--db", path).exit_code == 0
    done = invoke("rates", "--db", path, "--since", "2026-01-05", "--until", "2026-03-01")
    assert done.exit_code == 0, done.output
    assert done.stdout.startswith("Warning:") is warned
    if warned:
        assert done.stdout.startswith("Warning: 2 of 4 failures (50%) are left out of every rate and fit")
        assert "(2 node out of service)" in done.stdout.splitlines()[0]
    assert f"1 before the window start (--since); {out_of_service} node out of service" in done.stderr


def test_without_since_nothing_changes(db):
    done = invoke("rates", "--db", db, "--json", "--exposure", "calendar")
    (row,) = json.loads(done.stdout)
    assert row["failures"] == 5 and "--since" not in done.output


def test_analyze_counts_what_the_start_leaves_out(db):
    con = warehouse.connect(db, read_only=True)
    result = analysis.analyze(con, analysis.AnalysisOptions(since=SINCE, exposure_basis="calendar"))
    assert result.options.until == UNTIL and result.options.since == SINCE
    assert result.rates.overall["failures"].item() == 3
    assert result.rates.overall["exposure_node_hours"].item() == pytest.approx(CALENDAR_HOURS)
    left = dict(result.failures_left_out.iter_rows())
    assert left == {transform.BEFORE_WINDOW_REASON: 2, **dict.fromkeys(transform.LEFT_OUT_REASONS, 0)}
    assert result.counted.mcf["age_hours"][0] == 0.0  # n1's failure at the start counts, at age 0
    rows = analysis_rows(con, analysis.AnalysisOptions(since=SINCE, exposure_basis="calendar"))
    assert rows.exposure["start_utc"].min() == SINCE
    outages = rows.outages
    assert outages["start_utc"].min() == SINCE  # the straddling outage is before the window
    assert result.repairs.outages == outages.height
    assert result.before_window == {"outages": 2, "Slurm jobs": 1, "training-job interruptions": 0}
    assert analysis.read_jobs(con, since=SINCE)["job_id"].to_list() == ["2"]
    assert result.jobs.badput.is_empty() or result.jobs.badput["failures"].sum() == 0  # job 1 is before it
    note = analysis.before_window_note(SINCE, result.before_window)
    assert (
        note == "before the window start (--since 2026-02-01 00:00:00) and left out: 2 outages, 1 Slurm jobs"
    )
    html = report.render_html(result)
    assert "Observed from 2026-02-01 00:00:00 UTC until 2026-03-01 00:00:00 UTC" in html
    assert "2 before the window start (--since)" in html and "2 outages, 1 Slurm jobs" in html
    con.close()


def test_repairs_leave_out_outages_that_began_before_the_start(db):
    done = invoke("repairs", "--db", db, "--since", "2026-02-01", "--json")
    payload = json.loads(done.stdout)
    assert payload["outages_before_window"] == 2 and payload["total"]["outages"] == 3
    text = invoke("repairs", "--db", db, "--since", "2026-02-01").stdout
    assert "and left out: 2 outages" in text


@pytest.mark.parametrize(
    "command", [["rates"], ["fit"], ["repairs"], ["lemons"], ["backtest"], ["report", "--no-images"]]
)
def test_an_empty_window_is_one_line(db, tmp_path, command):
    extra = ["--out", str(tmp_path)] if command[0] == "report" else []
    same = invoke(*command, "--db", db, *extra, "--since", "2026-02-01", "--until", "2026-02-01")
    assert same.exit_code == 2 and len(same.output.strip().splitlines()) == 1, same.output
    assert "--since 2026-02-01 00:00:00 is not before --until 2026-02-01 00:00:00" in same.output
    late = invoke(*command, "--db", db, *extra, "--since", "2027-01-01")
    assert late.exit_code == 2 and len(late.output.strip().splitlines()) == 1, late.output
    assert "not before the data's end (2026-03-01 00:00:00" in late.output


def test_zero_failures_in_the_window(db):
    window = ["--since", "2026-02-02", "--until", "2026-02-19"]
    done = invoke("rates", "--db", db, *window)
    assert done.exit_code == 0 and "no failures" in done.stderr
    assert "3 before the window start (--since)" in done.stderr and "2 after the window end" in done.stderr
    fit = invoke("fit", "--db", db, *window)
    assert fit.exit_code == 0 and "nothing to fit" in fit.stdout  # after the warning of 5 of 5 left out
    repairs = invoke("repairs", "--db", db, *window)
    assert repairs.exit_code == 0 and "no outages" in repairs.stdout and "3 outages" in repairs.stdout


def test_config_window(tmp_path):
    path = tmp_path / "failcast.toml"
    path.write_text('observed_since = "2026-02-01T00:00:00Z"\nobserved_until = 2026-03-01T00:00:00Z\n')
    options = config.load_config(path).analysis_options()
    assert (options.since, options.until) == (SINCE, UNTIL)
    path.write_text('observed_since = "2026-03-01"\nobserved_until = "2026-03-01"\n')
    with pytest.raises(config.ConfigError, match=r"failcast.toml:1: key 'observed_since' must be before"):
        config.load_config(path)


def test_options_are_one_frozen_value():
    options = analysis.AnalysisOptions(interruption_window_minutes=0)
    assert options.interruption_window_minutes is None  # 0 counts every incident, as None does
    with pytest.raises(AttributeError):
        options.since = SINCE  # type: ignore[misc]
    with pytest.raises(ValueError, match="unknown exposure basis"):
        analysis.AnalysisOptions(exposure_basis="wall")
    frame = pl.DataFrame({"timestamp_utc": [None, datetime(2026, 1, 1), SINCE]})
    assert analysis.AnalysisOptions(since=SINCE).in_window(frame).height == 2  # a null time is kept
