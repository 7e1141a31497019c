"""Hostile text and hostile paths (threat model in SECURITY.md: log content is untrusted, the config
is trusted but must not wander out of its input roots by accident).

* SQL is always parameterised: an AST scan of ``pipeline/`` finds every f-string, ``%`` or ``+``
  that builds SQL and allows only a reviewed list of interpolations; hostile values are stored
  verbatim and the tables survive them; a hostile ``--timezone`` is refused.
* The command line neutralises terminal escapes (clear screen, OSC 8 hyperlinks, window titles) in
  ingest summaries, rejects, warnings, rates and the runs listing (CliRunner and a real process).
* Config input paths stay under ``[inputs] roots`` unless ``allow_outside_roots = true``.
* The report never carries local file contents it does not show (a planted secret stays out).

The HTML report's escaping of script and markup is checked in a real browser in
``test_report_browser.py`` (``hostile_warehouse``).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from pipeline import config, sample, warehouse
from pipeline.cli import main
from pipeline.ingest import InputError, ReaderOptions, ingest_files

REPO = Path(__file__).parents[1]
SQL_INJECTION = "'; DROP TABLE incidents; --"
CLEAR_SCREEN = "\x1b[2J"
OSC8_LINK = "\x1b]8;;http://evil.example/\x1b\\click me\x1b]8;;\x1b\\"
WINDOW_TITLE = "\x1b]0;pwned\x07"
TERMINAL = CLEAR_SCREEN + OSC8_LINK + WINDOW_TITLE
HTML = "<script>alert(1)</script><img src=x onerror=alert(2)>"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # anything but \t and \n: no raw control chars
INVENTORY_HEADER = "cluster_id,node_id,instance_type,gpus_per_node,in_service_from\n"
INCIDENT_HEADER = "timestamp,cluster_id,node_id,category,gpu_index,job_id,message,resolved_at\n"


def quote(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


# --- SQL -----------------------------------------------------------------------------------------
SQL_WORDS = re.compile(
    r"\b(SELECT|INSERT|UPDATE|DELETE|CREATE|DROP|ALTER|SET|PRAGMA|ATTACH|COPY|FROM|WHERE)\b"
)
# Reviewed interpolations into SQL text: (file, expression) -> why it is safe.
ALLOWED_SQL_INTERPOLATIONS = {
    ("pipeline/analysis/fleet.py", "', '.join(INVENTORY_COLUMNS)"): "the module's literal column names",
    ("pipeline/transform/exposure.py", "', '.join(INTERVAL_COLUMNS)"): "the module's literal column names",
    ("pipeline/transform/exposure.py", "_CLIPPED"): "the module's literal SQL (window values bound)",
    ("pipeline/transform/exposure.py", "hours_sql('sum(_us)')"): "SQL of a literal column",
    ("pipeline/transform/exposure.py", "hours_sql(_SPAN_US)"): "SQL of literal columns",
    ("pipeline/transform/exposure.py", "hours_sql('k._us')"): "SQL of a literal column",
    ("pipeline/transform/exposure.py", "hours_sql('_node_us')"): "SQL of a literal column",
    ("pipeline/transform/exposure.py", "hours_sql('_gpu_us')"): "SQL of a literal column",
    ("pipeline/ingest/files.py", "checked_timezone(con, timezone)"): "a name from pg_timezone_names",
    ("pipeline/store/events.py", "closings"): "a reader's literal SELECT of closing rows (values bound)",
    ("pipeline/store/events.py", "window_sql"): "a literal condition or nothing",
    ("pipeline/store/files.py", "text"): "a column name checked against [a-z][a-z0-9_]*",
    ("pipeline/store/files.py", "reason"): "a column name checked against [a-z][a-z0-9_]*",
    ("pipeline/store/files.py", "lines"): "account_lines' SELECT of checked column names",
    ("pipeline/store/staging.py", "_checked(table)"): "a reader's table name checked against [a-z][a-z0-9_]*",
    ("pipeline/runs/batch.py", "name"): "table names from a literal tuple",
    ("pipeline/warehouse.py", "name"): "table() checks the name against the schema's tables",
    ("pipeline/warehouse.py", "query"): "read_incidents: one of incidents_query's literal queries",
    ("pipeline/warehouse.py", "select"): "read_incidents: column names checked against the table's",
    ("pipeline/warehouse.py", "where"): "read_incidents: a literal WHERE or nothing",
    ("pipeline/readers/sacct.py", "slurm_time('start')"): "SQL of a literal column name",
    ("pipeline/readers/sacct.py", "slurm_time('\"end\"')"): "SQL of a literal column name",
    ("pipeline/readers/slurm_events.py", "slurm_time('timestart')"): "SQL of a literal column name",
    ("pipeline/readers/slurm_events.py", "slurm_time('timeend')"): "SQL of a literal column name",
    ("pipeline/readers/sacct.py", "PIPE_REASONS"): "constant SQL: the -P readers' first reasons",
    ("pipeline/readers/slurm_events.py", "PIPE_REASONS"): "constant SQL: the -P readers' first reasons",
    ("pipeline/readers/slurmctld.py", "LINE_REASONS"): "constant SQL: a line reader's first reasons",
    ("pipeline/readers/cloud_events.py", "time_sql('start_text')"): "SQL of a literal column name",
    ("pipeline/readers/cloud_events.py", "time_sql('end_text')"): "SQL of a literal column name",
    ("pipeline/readers/cloud_events.py", "time_sql('ts_text')"): "SQL of a literal column name",
    ("pipeline/readers/hyperpod_hma.py", "time_sql('time_text')"): "SQL of a literal column name",
    ("pipeline/readers/canonical_checks.py", "time_sql('trim(timestamp)', time_format=time_format)"): (
        "SQL of a column; the format itself is bound as $time_format"
    ),
    (
        "pipeline/readers/canonical_checks.py",
        "time_sql(\"nullif(trim(resolved_at), '')\", time_format=time_format)",
    ): ("SQL of a column; the format itself is bound as $time_format"),
    ("pipeline/readers/canonical_checks.py", "time_sql('trim(in_service_from)', time_format=time_format)"): (
        "SQL of a column; the format itself is bound as $time_format"
    ),
    (
        "pipeline/readers/canonical_checks.py",
        "time_sql(\"nullif(trim(in_service_to), '')\", time_format=time_format)",
    ): ("SQL of a column; the format itself is bound as $time_format"),
    ("pipeline/readers/canonical_checks.py", "not_a_time"): "one of two literal reasons (_NOT_A_TIME)",
    ("pipeline/readers/canonical_checks.py", "incident_key_sql('make_timestamp(epoch_us(ts))')"): (
        "the content key's SQL over a literal expression"
    ),
    ("pipeline/store/canonical_events.py", "incident_key_sql('timestamp_utc')"): (
        "the content key's SQL over a literal column"
    ),
    ("pipeline/readers/canonical_checks.py", "_ABSENT"): "a literal list of no-value markers",
    (
        "pipeline/readers/canonical_checks.py",
        "whole_number_sql(\"nullif(trim(gpu_index), '')\")",
    ): "SQL of a literal column",
    ("pipeline/readers/canonical_checks.py", "whole_number_sql('trim(gpus_per_node)')"): "SQL of a column",
}


def sql_interpolations(source: str) -> list[tuple[int, str]]:
    """(line, expression) for every value formatted into a string that reads like SQL."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.JoinedStr):
            literal = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
            if SQL_WORDS.search(literal):
                found += [
                    (node.lineno, ast.unparse(v.value))
                    for v in node.values
                    if isinstance(v, ast.FormattedValue)
                ]
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod | ast.Add):
            sides = (node.left, node.right)
            texts = [s.value for s in sides if isinstance(s, ast.Constant) and isinstance(s.value, str)]
            if any(SQL_WORDS.search(t) for t in texts) and len(texts) < 2:
                found.append((node.lineno, ast.unparse(node)))
        elif (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"
        ):
            target = node.func.value
            if (
                isinstance(target, ast.Constant)
                and isinstance(target.value, str)
                and SQL_WORDS.search(target.value)
            ):
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_sql_is_never_built_from_values():
    seen, unreviewed = set(), []
    for path in sorted((REPO / "pipeline").rglob("*.py")):
        name = path.relative_to(REPO).as_posix()
        for line, expression in sql_interpolations(path.read_text(encoding="utf-8")):
            if (name, expression) in ALLOWED_SQL_INTERPOLATIONS:
                seen.add((name, expression))
            else:
                unreviewed.append(f"{name}:{line}: {expression}")
    assert not unreviewed, "bind SQL parameters instead of formatting values into SQL:\n" + "\n".join(
        unreviewed
    )
    assert seen == set(ALLOWED_SQL_INTERPOLATIONS), "stale entries in ALLOWED_SQL_INTERPOLATIONS"


@pytest.mark.parametrize(
    "snippet",
    [
        "con.sql(f\"SELECT * FROM events WHERE node_id = '{node}'\")",
        "con.execute(\"DELETE FROM events WHERE node_id = '%s'\" % node)",
        'con.execute("SELECT * FROM events WHERE node_id = " + node)',
        "con.sql(\"SELECT * FROM events WHERE node_id = '{}'\".format(node))",
    ],
)
def test_the_sql_scan_catches_formatted_values(snippet):
    assert sql_interpolations(snippet)


def test_hostile_values_are_stored_verbatim_and_the_tables_survive(tmp_path):
    hostile = [SQL_INJECTION, HTML, TERMINAL, "../../etc/passwd", "a\\b/c"]
    (tmp_path / "inventory.csv").write_text(
        INVENTORY_HEADER + "".join(f"{quote(h)},{quote(h)},p5,8,2026-01-01T00:00:00Z\n" for h in hostile)
    )
    rows = [
        f"2026-03-02T04:26:{i:02d}Z,{quote(h)},{quote(h)},host,,{quote(h)},{quote(h)},\n"
        for i, h in enumerate(hostile)
    ]
    rows.append(f"2026-03-02T05:00:00Z,c1,n1,{quote(SQL_INJECTION)},,,,\n")  # an unknown category: kept
    (tmp_path / "incidents.csv").write_text(INCIDENT_HEADER + "".join(rows))
    (tmp_path / "kernel.log").write_text(
        f"2026-03-02T04:26:29+00:00 {SQL_INJECTION.replace(' ', '')} kernel: NVRM: Xid (PCI:0000:18:00): 79,"
        f" {HTML}\n"
    )
    (tmp_path / "sacct.txt").write_text(
        f"JobID|JobName|State|Start|End|NodeList\n1|{SQL_INJECTION}|NODE_FAIL|2026-03-02T04:00:00|"
        f"2026-03-02T05:00:00|{SQL_INJECTION.replace(' ', '')}\n"
    )
    con = warehouse.connect(tmp_path / "w.duckdb")
    files = ["inventory.csv", "incidents.csv", "kernel.log", "sacct.txt"]
    summaries = ingest_files(con, [tmp_path / f for f in files], ReaderOptions(cluster="c1"))
    assert [s.rows_ingested for s in summaries] == [5, 6, 1, 1]
    stored = con.sql(
        "SELECT cluster_id, node_id, job_id, message FROM events WHERE source_format = 'canonical'"
        " AND category = 'host'"
    ).fetchall()
    assert sorted(stored) == sorted((h, h, h, h) for h in hostile)
    assert con.sql("SELECT count(*) FROM events").fetchall() == [(7,)]  # every table is still there
    assert con.sql("SELECT count(*) > 0 FROM incidents").fetchall() == [(True,)]
    assert con.sql("SELECT count(*) FROM rejects").fetchall() == [(0,)]
    assert con.sql(
        "SELECT failure_class FROM events WHERE category = ?", params=[SQL_INJECTION]
    ).fetchall() == [("other",)]
    assert repr(SQL_INJECTION) in summaries[1].notes[0]
    assert con.sql("SELECT job_name, nodes FROM jobs").fetchall() == [
        (SQL_INJECTION, [SQL_INJECTION.replace(" ", "")])
    ]


@pytest.mark.parametrize("timezone", ["UTC'; DROP TABLE events; --", "UTC' ; SET TimeZone='x"])
def test_a_hostile_time_zone_is_refused_before_it_reaches_sql(tmp_path, timezone):
    path = tmp_path / "i.csv"
    path.write_text(INCIDENT_HEADER + "2026-03-02 04:26:29,c1,n1,host,,,,\n")
    con = warehouse.connect(tmp_path / "w.duckdb")
    with pytest.raises(InputError, match="unknown time zone"):
        ingest_files(con, [path], ReaderOptions(timezone=timezone))
    assert con.sql("SELECT count(*) FROM events").fetchall() == [(0,)]


# --- terminal escapes on the command line --------------------------------------------------------
def assert_neutralised(output: str, *visible: str) -> None:
    assert not CONTROL.search(output), repr(CONTROL.search(output).group())
    for text in visible:
        assert text in output, (text, output)


@pytest.fixture
def hostile_files(tmp_path) -> list[Path]:
    """An inventory and an incidents file whose name, rejected row and unknown node carry escapes."""
    inventory = tmp_path / "inventory.csv"
    inventory.write_text(INVENTORY_HEADER + f"{quote(TERMINAL)},n1,p5,8,2026-01-01T00:00:00Z\n")
    incidents = tmp_path / f"incidents{CLEAR_SCREEN}{WINDOW_TITLE}.csv"
    incidents.write_text(
        INCIDENT_HEADER
        + f"2026-03-02T04:26:29Z,{quote(TERMINAL)},n1,host,,,{quote(TERMINAL)},\n"
        + f"{quote(OSC8_LINK)},c1,n1,host,,,,\n"  # rejected: the reason quotes the timestamp
        + f"2026-03-02T04:26:30Z,c1,{quote('node' + TERMINAL)},host,,,,\n"  # not in the inventory
    )
    return [inventory, incidents]


def test_ingest_output_neutralises_terminal_escapes(tmp_path, hostile_files):
    args = ["ingest", *map(str, hostile_files), "--db", str(tmp_path / "w.duckdb")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert_neutralised(
        result.output, "incidents\\x1b[2J\\x1b]0;pwned\\x07.csv", "\\x1b]8;;http://evil.example/"
    )


def test_ingest_output_neutralises_terminal_escapes_in_a_real_terminal_process(tmp_path, hostile_files):
    """A real process: what reaches the terminal's byte stream (stdout and stderr) is inert."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "ingest",
            *map(str, hostile_files),
            "--db",
            str(tmp_path / "w.duckdb"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, result.stderr
    assert_neutralised(result.stdout + result.stderr, "rejected", "node\\x1b[2J")


def test_errors_naming_hostile_paths_are_neutralised(tmp_path):
    bad = tmp_path / f"x{CLEAR_SCREEN}.bin"
    bad.write_bytes(b"\x00\x01 nothing recognisable")
    result = CliRunner().invoke(main, ["ingest", str(bad), "--db", str(tmp_path / "w.duckdb")])
    assert result.exit_code == 2
    assert_neutralised(result.output, "x\\x1b[2J.bin: cannot tell the format")
    result = CliRunner().invoke(main, ["ingest", str(tmp_path / f"*{WINDOW_TITLE}*.csv"), "--db", "x"])
    assert result.exit_code == 2
    assert_neutralised(result.output, "no files match")


@pytest.fixture(scope="module")
def escape_fleet_db(tmp_path_factory) -> str:
    """A simulated fleet whose cluster id and node ids carry terminal escapes."""
    root = tmp_path_factory.mktemp("escapes")
    fleet = sample.simulate_fleet(
        sample.FleetSpec(cluster_sizes=(8, 16), days=60.0, rate_per_node_hour=0.004)
    )
    rename = {"cluster_id": pl.lit(TERMINAL), "node_id": pl.lit(CLEAR_SCREEN) + pl.col("node_id")}
    incidents, inventory = sample.Fleet(
        incidents=fleet.incidents.with_columns(**rename),
        inventory=fleet.inventory.with_columns(**rename),
        spec=fleet.spec,
    ).write(root)
    db = str(root / "w.duckdb")
    assert CliRunner().invoke(main, ["ingest", str(inventory), str(incidents), "--db", db]).exit_code == 0
    return db


@pytest.mark.parametrize(
    "args",
    [
        ["rates", "--by", "cluster_id"],
        ["rates", "--by", "node_id", "--view", "rates"],
        ["repairs", "--by", "cluster_id"],
        ["lemons", "--fdr", "0.999"],
    ],
)
def test_tables_in_text_output_neutralise_terminal_escapes(escape_fleet_db, args):
    result = CliRunner().invoke(main, [*args, "--db", escape_fleet_db])
    assert result.exit_code == 0, result.output
    assert_neutralised(result.output, "\\x1b[2J")


def test_fit_text_output_neutralises_terminal_escapes(escape_fleet_db):
    result = CliRunner().invoke(main, ["fit", "--db", escape_fleet_db])
    assert result.exit_code == 0, result.output
    assert_neutralised(result.output, "best family", "trend \\x1b[2J")


def test_runs_listing_neutralises_terminal_escapes(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / f"bad{CLEAR_SCREEN}{WINDOW_TITLE}.log").write_text("nothing recognisable\n")
    cfg = tmp_path / "failcast.toml"
    cfg.write_text('warehouse = "w.duckdb"\nreport_dir = "r"\n[inputs]\nauto = ["logs/*"]\n')
    failed = CliRunner().invoke(main, ["run", "--config", str(cfg)])
    assert failed.exit_code == 2, failed.output
    assert_neutralised(failed.output, "cannot tell the format")
    listing = CliRunner().invoke(main, ["runs", "--config", str(cfg)])
    assert listing.exit_code == 0, listing.output
    assert_neutralised(listing.output, "failed", "bad\\x1b[2J")


# --- config paths stay under the input roots -----------------------------------------------------
@pytest.mark.parametrize(
    ("body", "line", "key"),
    [
        ('[inputs]\ncsv = ["../../etc/*"]\n', 2, "inputs.csv"),
        ('[inputs]\ninventory = ["inv.csv"]\nauto = ["/etc/*"]\n', 3, "inputs.auto"),
        ('[inputs]\ncsv = ["logs/**/../../../outside/*.csv"]\n', 2, "inputs.csv"),
        ('[inputs]\ncsv = ["escape/*.csv"]\n', 2, "inputs.csv"),  # a symlink out of the folder
        ('[inputs]\nroots = ["logs"]\ncsv = ["other/*.csv"]\n', 3, "inputs.csv"),
        ('jobs = ["../job.toml"]\n', 1, "jobs"),
    ],
)
def test_config_paths_outside_the_input_roots_are_refused(tmp_path, body, line, key):
    folder = tmp_path / "cfg"
    (folder / "logs").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (folder / "escape").symlink_to(tmp_path / "outside", target_is_directory=True)
    (tmp_path / "job.toml").write_text("")
    path = folder / "failcast.toml"
    path.write_text(body)
    with pytest.raises(config.ConfigError) as error:
        config.load_config(path)
    message = str(error.value)
    assert message.startswith(f"{path}:{line}: key {key!r} names ") and "outside the input roots" in message
    assert "allow_outside_roots = true" in message


@pytest.mark.parametrize(
    "body",
    [
        '[inputs]\ncsv = ["logs/**/*.csv", "./x.csv"]\n',
        '[inputs]\nroots = [".", "../outside"]\ncsv = ["../outside/*.csv"]\n',
        '[inputs]\nallow_outside_roots = true\ncsv = ["/etc/*", "../../x"]\n',
    ],
)
def test_config_paths_inside_the_roots_or_explicitly_allowed_load(tmp_path, body):
    folder = tmp_path / "cfg"
    folder.mkdir()
    (tmp_path / "outside").mkdir()
    path = folder / "failcast.toml"
    path.write_text(body)
    cfg = config.load_config(path)
    assert cfg.inputs["csv"]
    reloaded = folder / "printed.toml"  # the printed config keeps the roots, so it loads again
    reloaded.write_text(config.render_toml(cfg.to_document()))
    assert config.load_config(reloaded).inputs == cfg.inputs


# --- the report carries nothing it does not show -------------------------------------------------
def test_report_does_not_embed_local_files_beyond_what_it_shows(tmp_path):
    secret = "SECRET-7f3a9c-do-not-publish"
    site = tmp_path / "site"
    logs = site / "logs"
    fleet = sample.simulate_fleet(sample.FleetSpec(cluster_sizes=(4,), days=30.0, rate_per_node_hour=0.004))
    incidents, _ = fleet.write(logs)
    (logs / "secret.txt").write_text(secret)  # beside the inputs, not matched by the globs
    (logs / ".env").write_text(f"TOKEN={secret}\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    pl.DataFrame(
        {
            "cluster_id": ["c9"],
            "node_id": [secret],
            "instance_type": ["p5"],
            "gpus_per_node": [8],
            "in_service_from": ["2026-01-01T00:00:00Z"],
        }
    ).write_csv(outside / "inventory.csv")
    # A message pointing at the secret: shown as text, never fetched or inlined.
    extra = logs / "incidents-extra.csv"
    extra.write_text(
        INCIDENT_HEADER + f"2026-01-02T00:00:00Z,c9,n1,host,,,{quote(f'<iframe src={logs}/secret.txt>')},\n"
    )
    cfg = site / "failcast.toml"
    cfg.write_text(
        'warehouse = "w.duckdb"\nreport_dir = "r"\n[inputs]\ninventory = ["logs/inventory.csv"]\n'
        f'csv = ["logs/{incidents.name}", "logs/incidents-extra.csv"]\n'
    )
    result = CliRunner().invoke(main, ["run", "--config", str(cfg)])
    assert result.exit_code == 0, result.output
    html = (site / "r" / "failcast-report.html").read_text(encoding="utf-8")
    assert secret not in html
    # the hostile config glob that would have read the outside inventory is refused
    cfg.write_text(
        cfg.read_text().replace('["logs/inventory.csv"]', '["logs/inventory.csv", "../outside/*.csv"]')
    )
    refused = CliRunner().invoke(main, ["run", "--config", str(cfg)])
    assert refused.exit_code == 2 and "outside the input roots" in refused.output
