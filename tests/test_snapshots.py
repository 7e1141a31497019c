"""Readers never block the run: a reader in another process holding the latest snapshot open while
``failcast run`` ingests and publishes; readers polling ``latest.duckdb`` through swaps and pruning;
a failed copy that leaves the previous snapshot in place; a reader on the warehouse itself."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from pipeline import runs, sample, warehouse
from pipeline.cli import main
from pipeline.runs import snapshots
from pipeline.runs.reports import prune_dated

SPEC = sample.FleetSpec(cluster_sizes=(8, 16), days=30, rate_per_node_hour=0.004, seed=5)
ISO = "%Y-%m-%dT%H:%M:%SZ"

# Holds the file open: prints the events it sees, waits for a line on stdin, prints them again.
HOLDER = """
import sys, duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
print(con.sql("SELECT count(*) FROM events").fetchall()[0][0], flush=True)
sys.stdin.readline()
print(con.sql("SELECT count(*) FROM events").fetchall()[0][0], flush=True)
"""
# Opens latest.duckdb again and again until the stop file appears: prints opens and failures.
POLLER = """
import sys, os, time, duckdb
path, stop = sys.argv[1], sys.argv[2]
opens, errors = 0, []
print("ready", flush=True)
while not os.path.exists(stop):
    try:
        with duckdb.connect(path, read_only=True) as con:
            con.sql("SELECT count(*) FROM runs, events").fetchall()
        opens += 1
    except Exception as exc:
        errors.append(repr(exc))
    time.sleep(0.02)  # leave the CPU to the run
print(opens, len(errors), errors[:3], flush=True)
"""


@pytest.fixture(scope="module")
def fleet() -> sample.Fleet:
    return sample.simulate_fleet(SPEC)


def setup_folder(folder: Path, fleet: sample.Fleet) -> tuple[Path, pl.DataFrame]:
    """Inventory and the first half of the incidents in ``folder/logs``; returns the config and
    the second half (to add later)."""
    incidents, _ = fleet.write(folder / "logs")
    frame = pl.read_csv(incidents, try_parse_dates=True)
    half = frame.height // 2
    frame.head(half).write_csv(folder / "logs/incidents-1.csv")
    incidents.unlink()
    lines = [
        'warehouse = "failcast.duckdb"',
        'report_dir = "reports"',
        'metrics_file = "textfile/failcast.prom"',
        "lock_timeout_seconds = 0",
        "[inputs]",
        'inventory = ["logs/inventory.csv"]',
        'csv = ["logs/incidents-*.csv"]',
        "[retention]",
        "keep_snapshots = 2",
    ]
    (folder / "failcast.toml").write_text("\n".join(lines) + "\n")
    return folder / "failcast.toml", frame.tail(frame.height - half)


def run(config: Path):
    return CliRunner().invoke(main, ["run", "--config", str(config)])


def dated(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(snapshots.SNAPSHOT_PREFIX))


def test_a_reader_on_the_snapshot_and_the_run_both_succeed(tmp_path, fleet):
    config, rest = setup_folder(tmp_path, fleet)
    assert run(config).exit_code == 0
    snaps = tmp_path / "snapshots"
    latest = snaps / snapshots.LATEST
    first = dated(snaps)
    assert len(first) == 1 and latest.samefile(snaps / first[0])
    assert (latest.stat().st_mode & 0o777) == 0o444  # immutable for readers

    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(latest)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    poller = subprocess.Popen(
        [sys.executable, "-c", POLLER, str(latest), str(tmp_path / "stop")], stdout=subprocess.PIPE, text=True
    )
    try:
        before = int(holder.stdout.readline())
        assert poller.stdout.readline().strip() == "ready"
        rest.write_csv(tmp_path / "logs/incidents-2.csv")  # new input while the reader holds the snapshot
        second = run(config)
        assert second.exit_code == 0, second.output
        third = run(config)  # nothing new, but a new snapshot: the reader's one is pruned by name
        assert third.exit_code == 0, third.output
    finally:
        (tmp_path / "stop").touch()
        holder.stdin.write("\n")
        holder.stdin.flush()
    held_after = int(holder.stdout.readline())
    opens, errors, *seen = poller.communicate(timeout=60)[0].split(maxsplit=2)
    assert holder.wait(timeout=60) == 0
    assert held_after == before  # the pruned snapshot stays whole for the process that has it open
    assert int(errors) == 0 and int(opens) > 0, seen  # every open of latest.duckdb during swaps succeeded
    assert first[0] not in dated(snaps) and len(dated(snaps)) == 2  # keep_snapshots = 2
    with warehouse.connect(latest, read_only=True) as con:
        now = con.sql("SELECT count(*) FROM events").fetchall()[0][0]
        recorded = runs.list_runs(con)
    assert now > before
    assert [r["status"] for r in recorded] == ["succeeded"] * 3  # the snapshot's own run is succeeded
    assert not [p for p in snaps.iterdir() if p.name.endswith(".tmp")]
    # the metrics file of the last run: parses, and names this run
    families = {
        f.name: f for f in text_string_to_metric_families((tmp_path / "textfile/failcast.prom").read_text())
    }
    (ended,) = families["failcast_last_success_timestamp_seconds"].samples
    assert ended.value == recorded[0]["ended_at_utc"].replace(tzinfo=UTC).timestamp()


def test_a_failed_copy_leaves_the_previous_snapshot(tmp_path, fleet, monkeypatch):
    config, rest = setup_folder(tmp_path, fleet)
    assert run(config).exit_code == 0
    snaps = tmp_path / "snapshots"
    before = (snaps / snapshots.LATEST).stat().st_ino, dated(snaps)

    def half_copy(source, target):
        Path(target).write_bytes(Path(source).read_bytes()[:4096])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(snapshots.shutil, "copyfile", half_copy)
    rest.write_csv(tmp_path / "logs/incidents-2.csv")
    result = run(config)
    assert result.exit_code == 1 and "No space left on device" in result.output
    assert ((snaps / snapshots.LATEST).stat().st_ino, dated(snaps)) == before
    assert sorted(p.name for p in snaps.iterdir()) == sorted([*before[1], snapshots.LATEST])  # no temp file
    with warehouse.connect(snaps / snapshots.LATEST, read_only=True) as con:
        assert [r["status"] for r in runs.list_runs(con)] == ["succeeded"]
    with warehouse.connect(tmp_path / "failcast.duckdb", read_only=True) as con:
        newest = runs.list_runs(con)[0]
    assert newest["status"] == "failed" and "snapshot" in newest["stages"] and "No space" in newest["error"]


def test_a_reader_on_the_warehouse_gets_one_line_naming_the_snapshot(tmp_path, fleet):
    config, _ = setup_folder(tmp_path, fleet)
    assert run(config).exit_code == 0
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path / "failcast.duckdb")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        holder.stdout.readline()
        result = run(config)
    finally:
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.communicate(timeout=60)
    assert result.exit_code == runs.EXIT_LOCKED
    message = result.output.strip().splitlines()[-1]
    assert str(tmp_path / "snapshots" / snapshots.LATEST) in message and "point readers at" in message
    assert run(config).exit_code == 0  # once the reader is gone


def test_reader_db_prefers_the_latest_snapshot(tmp_path):
    db = tmp_path / "failcast.duckdb"
    assert runs.reader_db(db) == db
    (tmp_path / "snapshots").mkdir()
    (tmp_path / "snapshots" / snapshots.LATEST).write_bytes(b"")
    assert runs.reader_db(db) == tmp_path / "snapshots" / snapshots.LATEST
    assert runs.reader_db(db, tmp_path / "elsewhere") == db


def test_prune_never_deletes_what_latest_points_at(tmp_path):
    names = [f"failcast-2026010{d}T000000Z-abcdef.duckdb" for d in range(1, 6)]
    for name in names:
        (tmp_path / name).write_text(name)
    os.link(tmp_path / names[0], tmp_path / snapshots.LATEST)  # e.g. the clock went backwards
    pruned = prune_dated(
        tmp_path,
        snapshots._DATED_SNAPSHOT,
        keep=2,
        keep_days=None,
        now=datetime(2026, 1, 6),
        aliases=("latest.duckdb",),
    )
    assert sorted(p.name for p in pruned) == names[1:3]
    assert (tmp_path / snapshots.LATEST).read_text() == names[0]


def test_keep_snapshots_below_two_is_a_config_error(tmp_path):
    path = tmp_path / "failcast.toml"
    path.write_text("[retention]\nkeep_snapshots = 1\n")
    result = CliRunner().invoke(main, ["run", "--config", str(path)])
    assert (
        result.exit_code == 2
        and "failcast.toml:2: key 'retention.keep_snapshots' must be at least 2" in result.output
    )
