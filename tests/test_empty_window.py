"""A window in which no node was in service (``--until`` before the first service, ``--since``
after the last): every command that divides by hours in service stops with one line (exit 2) that
says where the service lies and which end to move (:func:`pipeline.analysis.require_service`),
never "the rate is at most inf" or a lemon test of 0 nodes."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from pipeline.cli import main

INVENTORY = (
    "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n"
    "c1,n1,p5,8,2026-01-01T00:00:00Z,2026-02-01T00:00:00Z\n"
    "c1,n2,p5,8,2026-01-01T00:00:00Z,2026-02-01T00:00:00Z\n"
    "c1,n3,p5,8,2026-03-01T00:00:00Z,2026-04-01T00:00:00Z\n"
)
INCIDENTS = (
    "timestamp,cluster_id,node_id,category,resolved_at\n"
    "2026-01-05T00:00:00Z,c1,n1,Xid 79,2026-01-05T02:00:00Z\n"
    "2026-01-15T00:00:00Z,c1,n2,Xid 79,2026-01-15T02:00:00Z\n"
    "2026-03-10T00:00:00Z,c1,n3,Xid 79,\n"
)
COMMANDS = ["rates", "lemons", "fit", "repairs", "backtest", "report"]
WINDOWS = {
    "until before any service": (
        ["--until", "2025-06-01"],
        "no node was in service before the window's end (2025-06-01 00:00 UTC): the first one enters "
        "service 2026-01-01 00:00; a later --until has instance-hours to rate",
    ),
    "since after all service": (
        ["--since", "2026-04-15", "--until", "2026-05-01"],
        "no node was in service in the window (2026-04-15 00:00 to 2026-05-01 00:00 UTC): the last one "
        "leaves service 2026-04-01 00:00; an earlier --since has instance-hours to rate",
    ),
    "between service intervals": (
        ["--since", "2026-02-10", "--until", "2026-02-20"],
        "no node was in service in the window (2026-02-10 00:00 to 2026-02-20 00:00 UTC): the window "
        "lies between the service intervals; a wider one has instance-hours to rate",
    ),
}


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    folder = tmp_path_factory.mktemp("empty-window")
    (folder / "inventory.csv").write_text(INVENTORY)
    (folder / "incidents.csv").write_text(INCIDENTS)
    path = str(folder / "w.duckdb")
    files = [str(folder / "inventory.csv"), str(folder / "incidents.csv")]
    result = CliRunner().invoke(main, ["ingest", *files, "--db", path])
    assert result.exit_code == 0, result.output
    return path


@pytest.mark.parametrize("window", list(WINDOWS))
@pytest.mark.parametrize("command", COMMANDS)
def test_a_window_without_service_is_one_line(db, command, window, tmp_path):
    flags, line = WINDOWS[window]
    extra = ["--out", str(tmp_path)] if command == "report" else []
    result = CliRunner().invoke(main, [command, "--db", db, *flags, *extra])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [f"failcast: {line}"]


def test_a_window_with_service_still_runs(db):
    """The check stops only the empty window: one day of n1 and n2 in service has its rate bound."""
    day = ["--db", db, "--since", "2026-01-10", "--until", "2026-01-11"]
    result = CliRunner().invoke(main, ["lemons", *day])
    assert result.exit_code == 0, result.output
    assert "none of 2 nodes" in result.output
    fit = CliRunner().invoke(main, ["fit", *day])
    assert fit.exit_code == 0 and "at most inf" not in fit.output
