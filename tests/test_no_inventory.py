"""A warehouse with failures and no inventory yet (a new user's first ingest): every command that
divides by hours in service stops with one line naming the fix (exit 2), never a traceback or a
rate of 0%; repairs still gives repair times, and says availability is unknown, not 0%."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from pipeline.cli import main

INCIDENTS = (
    "timestamp,cluster_id,node_id,category,resolved_at\n"
    "2026-03-01T00:00:00Z,c1,n1,gpu_memory,2026-03-01T05:00:00Z\n"
    "2026-03-03T00:00:00Z,c1,n2,nvlink,2026-03-03T02:00:00Z\n"
    "2026-03-07T00:00:00Z,c1,n1,gpu_memory,\n"
)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    folder = tmp_path_factory.mktemp("no-inventory")
    (folder / "incidents.csv").write_text(INCIDENTS)
    path = str(folder / "w.duckdb")
    result = CliRunner().invoke(main, ["ingest", str(folder / "incidents.csv"), "--db", path])
    assert result.exit_code == 0, result.output
    assert "no inventory yet" in result.output
    return path


@pytest.mark.parametrize("command", ["rates", "lemons", "fit", "backtest", "report"])
def test_commands_that_need_exposure_name_the_fix(db, command, tmp_path):
    args = [command, "--db", db] + (["--out", str(tmp_path)] if command == "report" else [])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert lines[-1].startswith("failcast: the warehouse has no inventory: ingest an inventory file")
    assert "--estimate-exposure" in lines[-1]
    assert "Traceback" not in result.output and "unexpected error" not in result.output


def test_repairs_without_inventory_leave_availability_unknown(db):
    text = CliRunner().invoke(main, ["repairs", "--db", db])
    assert text.exit_code == 0, text.output
    assert "availability n/a" in text.output and "0.000%" not in text.output
    assert "availability needs each node's hours in service: ingest an inventory file" in text.output
    assert text.output.startswith("3 outages, ")  # 3 interruptions of 2 nodes, none overlapping
    as_json = CliRunner().invoke(main, ["repairs", "--db", db, "--json"])
    total = json.loads(as_json.output)["total"]
    assert total["outages"] == 3 and total["availability"] is None
    assert total["mttr_hours"] > 0


def test_an_estimated_inventory_gives_rates(tmp_path):
    (tmp_path / "incidents.csv").write_text(INCIDENTS)
    db = str(tmp_path / "w.duckdb")
    ingest = ["ingest", str(tmp_path / "incidents.csv"), "--db", db, "--estimate-exposure", "8"]
    assert CliRunner().invoke(main, ingest).exit_code == 0
    result = CliRunner().invoke(main, ["rates", "--db", db, "--json", "--exposure", "calendar"])
    assert result.exit_code == 0, result.output
    assert sum(row["failures"] for row in json.loads(result.stdout)) == 3
