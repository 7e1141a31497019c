"""Config loading: every key of the example, errors that name file, line and key, overrides."""

from __future__ import annotations

import json
import tomllib
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline import config, projection
from pipeline.cli import main

REPO = Path(__file__).parents[1]

FULL = """\
warehouse = "wh/failcast.duckdb"
report_dir = "out"
timezone = "Europe/Paris"
dedup_window_minutes = 5
observed_until = 2026-06-01T12:00:00+02:00
lock_timeout_seconds = 2.5
log_format = "json"
recovery_source = "measured"
jobs = ["job.toml"]

[inputs]
inventory = ["inv/*.csv"]
csv = ["logs/**/*.csv"]
jsonl = ["logs/*.jsonl"]
column_map = { node_id = "hostname", cluster_id = ["cluster", "site"] }

[retention]
keep_reports = 7
keep_days = 30

[recovery.manual]
detect_hours = 0.5
restart_hours = 1

[recovery."auto mode"]
detect_hours = 0.08

[ingest]
year = 2025
cluster = "c0512"
node = "gpu-017"
gpu_bus_order = "18,2a,3a,5d"
estimate_exposure = 8
max_rejected_percent = 5
time_format = "%d.%m.%Y %H:%M"
"""


def write(tmp_path: Path, text: str, name: str = "failcast.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_read_the_bundled_sample():
    cfg = config.load_config(None)
    assert cfg.inputs == {"inventory": ("data/sample/inventory.csv",), "csv": ("data/sample/incidents.csv",)}
    assert (cfg.warehouse, cfg.report_dir, cfg.keep_reports, cfg.keep_days) == (
        "data/failcast.duckdb",
        "reports",
        30,
        None,
    )


def test_every_key_is_read_and_paths_are_relative_to_the_file(tmp_path):
    (tmp_path / "job.toml").write_text('name = "j"\n')
    cfg = config.load_config(write(tmp_path, FULL))
    assert cfg.warehouse == str(tmp_path / "wh/failcast.duckdb")
    assert cfg.report_dir == str(tmp_path / "out")
    assert cfg.inputs == {
        "inventory": (str(tmp_path / "inv/*.csv"),),
        "csv": (str(tmp_path / "logs/**/*.csv"),),
        "jsonl": (str(tmp_path / "logs/*.jsonl"),),
    }
    assert cfg.column_map == {"node_id": "hostname", "cluster_id": ("cluster", "site")}
    printed = write(tmp_path, config.render_toml(cfg.to_document()), "printed.toml")
    assert config.load_config(printed).column_map == cfg.column_map
    assert (cfg.timezone, cfg.dedup_window_minutes, cfg.lock_timeout_seconds) == ("Europe/Paris", 5.0, 2.5)
    assert cfg.observed_until == datetime(2026, 6, 1, 10, 0)  # converted to naive UTC
    assert (cfg.log_format, cfg.keep_reports, cfg.keep_days) == ("json", 7, 30.0)
    assert cfg.recovery_source == "measured"
    assert cfg.jobs == (str(tmp_path / "job.toml"),)
    assert cfg.recovery == {
        "manual": {"detect_hours": 0.5, "restart_hours": 1.0},
        "auto mode": {"detect_hours": 0.08},
    }
    assert (cfg.year, cfg.cluster, cfg.node, cfg.estimate_exposure) == (2025, "c0512", "gpu-017", 8)
    assert cfg.gpu_bus_order == ("18", "2a", "3a", "5d")
    assert cfg.reader_options("csv").max_rejected_percent == 5.0
    assert cfg.reader_options("csv").time_format == "%d.%m.%Y %H:%M"


def test_the_example_in_the_repo_loads_and_projection_accepts_its_jobs_and_profiles():
    cfg = config.load_config(REPO / "failcast.example.toml")
    assert cfg.inputs and cfg.jobs and cfg.recovery
    for job in cfg.jobs:  # config-wide profiles first, a job's own [recovery] wins
        doc = job if isinstance(job, dict) else tomllib.loads(Path(job).read_text())
        spec = projection.job_spec_from_mapping(
            {**doc, "recovery": {**cfg.recovery, **doc.get("recovery", {})}}
        )
        assert spec.recovery["manual"].detect_hours == cfg.recovery["manual"]["detect_hours"]


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ('report_dir = "r"\nwarehose = "x.duckdb"\n', 2, "key 'warehose' is unknown"),
        ("[retention]\nkeep = 3\n", 2, "key 'retention.keep' is unknown"),
        ("[retension]\nkeep_reports = 3\n", 1, "key 'retension' is unknown"),
        ('[inputs]\ncsv = "logs/*.csv"\n', 2, "key 'inputs.csv' must be a list of strings"),
        ('dedup_window_minutes = "10"\n', 1, "key 'dedup_window_minutes' must be a number, got str"),
        ("lock_timeout_seconds = true\n", 1, "must be a number, got bool"),
        ("\n\n[retention]\nkeep_reports = 0\n", 4, "key 'retention.keep_reports' must be at least 1"),
        ("retention.keep_days = -1\n", 1, "key 'retention.keep_days' must be positive"),
        ('timezone = "Mars/Olympus"\n', 1, "key 'timezone' is not an IANA time zone"),
        ('log_format = "xml"\n', 1, "key 'log_format' must be one of text, json"),
        ('recovery_source = "fast"\n', 1, "key 'recovery_source' must be one of assumed, measured"),
        ('observed_until = "yesterday"\n', 1, "'yesterday' is not ISO 8601"),
        ('[recovery.manual]\ndetect_hours = "5 min"\n', 2, "key 'recovery.manual.detect_hours'"),
        ('jobs = ["missing.toml"]\n', 1, "names 'missing.toml'"),
        ("jobs = [3]\n", 1, "item 0 must be a path to a job TOML file or a table"),
        ('[inputs]\npdf = ["k.pdf"]\n', 2, "key 'inputs.pdf' is unknown"),
        ("[inputs.column_map]\nnode_id = [1]\n", 2, "must be a source column name or a list of them"),
        ("[inputs.column_map]\nnode_id = []\n", 2, "must be a source column name or a list of them"),
        ('report_dir = "r"\ninputs = { csv = "x.csv" }\n', 2, "key 'inputs.csv' must be a list"),
        ("[ingest]\nyear = 26\n", 2, "key 'ingest.year' must be a year between 1970 and 2999"),
        ("[ingest]\nestimate_exposure = 0\n", 2, "key 'ingest.estimate_exposure' must be the GPUs per node"),
        ('[ingest]\ngpu_bus_order = "18,zz"\n', 2, "key 'ingest.gpu_bus_order' expected distinct hex"),
        ('[ingest]\nbus_order = "18"\n', 2, "key 'ingest.bus_order' is unknown"),
        ("[ingest]\nnode = 17\n", 2, "key 'ingest.node' must be a string"),
        ("[ingest]\nmax_rejected_percent = 150\n", 2, "must be a percentage from 0 to 100"),
        ('[ingest]\ntime_format = "%d.%m.%Q"\n', 2, "key 'ingest.time_format' time format '%d.%m.%Q':"),
    ],
)
def test_bad_config_names_file_line_and_key(tmp_path, text, line, fragment):
    path = write(tmp_path, text)
    with pytest.raises(config.ConfigError) as caught:
        config.load_config(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: ")
    assert fragment in message


def test_invalid_toml_and_missing_file_name_the_file(tmp_path):
    with pytest.raises(config.ConfigError, match="not valid TOML"):
        config.load_config(write(tmp_path, "warehouse = \n"))
    with pytest.raises(config.ConfigError, match="config file not found"):
        config.load_config(tmp_path / "nope.toml")


def test_bad_config_on_the_command_line_is_one_line_and_exit_2(tmp_path):
    path = write(tmp_path, "[retention]\nkeep_reports = 'all'\n")
    result = CliRunner().invoke(main, ["run", "--config", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"failcast: {path}:2: key 'retention.keep_reports' must be an integer, got str 'all'"
    ]


def test_flags_override_the_file_in_print_config(tmp_path):
    (tmp_path / "job.toml").write_text('name = "j"\n')
    path = write(tmp_path, FULL)
    result = CliRunner().invoke(
        main,
        [
            "run",
            "--config",
            str(path),
            "--print-config",
            "json",
            "--db",
            "other.duckdb",
            "--keep-reports",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed["warehouse"] == "other.duckdb"
    assert printed["retention"] == {"keep_reports": 2, "keep_days": 30.0, "keep_snapshots": 3}
    assert printed["timezone"] == "Europe/Paris"  # from the file


def test_printed_toml_loads_back_to_the_same_config(tmp_path):
    (tmp_path / "job.toml").write_text('name = "j"\n')
    original = config.load_config(write(tmp_path, FULL)).with_overrides(
        jobs=(str(tmp_path / "job.toml"), {"name": "inline", "work": {"gpu_hours": 1e6}})
    )
    result = CliRunner().invoke(main, ["run", "--config", str(tmp_path / "failcast.toml"), "--print-config"])
    assert result.exit_code == 0, result.output
    assert "[retention]" in result.stdout
    again = config.load_config(write(tmp_path, config.render_toml(original.to_document()), "printed.toml"))
    assert again == original
