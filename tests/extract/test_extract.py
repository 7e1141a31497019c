"""failcast extract (local engine) -> lake -> ingest LAKE gives what direct ingest gives, once."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from pipeline import ingest, warehouse
from pipeline.cli import main
from pipeline.extract import extract_files, extract_one
from pipeline.extract.engines import run_local
from pipeline.ingest import InputError, ReaderOptions
from pipeline.store import lake as layout
from tests.extract._lake_fleet import (
    BAD_XID,
    BUSES,
    YEAR,
    crash_always,
    crash_once,
    direct_ingest,
    lake_ingest,
    tables,
    write_fleet,
)

OPTIONS = ReaderOptions(year=YEAR, bus_order=tuple(BUSES))


def counts(summary) -> tuple:
    return (summary.path, summary.rows_read, summary.rows_ingested, summary.rows_duplicate,
            summary.rows_rejected, summary.rows_ignored)  # fmt: skip


def cli_json(*args: str) -> object:
    result = CliRunner().invoke(main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def assert_same_warehouse(direct_db: Path, lake_db: Path) -> None:
    """Same rows in every table, and the same rates and fits from the CLI."""
    direct, from_lake = tables(direct_db), tables(lake_db)
    assert direct["events"].height and direct["incidents"].height and direct["rejects"].height
    for name, frame in direct.items():
        assert from_lake[name].equals(frame), name
    for command in (["rates"], ["rates", "--by", "node_id"], ["fit"]):
        assert cli_json(*command, "--db", str(lake_db)) == cli_json(*command, "--db", str(direct_db))


def test_lake_ingest_gives_exactly_what_direct_ingest_gives(fleet, tmp_path):
    direct = direct_ingest(fleet, tmp_path / "direct.duckdb")
    extracted = extract_files([str(f) for f in fleet], tmp_path / "lake", options=OPTIONS, workers=2)
    assert [e.error for e in extracted] == [None] * len(fleet)
    for e in extracted:  # within each file every line is counted once
        assert e.rows_read == e.rows_stored + e.rows_duplicate + e.rows_rejected + e.rows_ignored > 0
    from_lake = lake_ingest(tmp_path / "lake", tmp_path / "lake.duckdb")
    assert [counts(s) for s in from_lake] == [counts(s) for s in direct]
    # across files: the Xid line shared by consecutive shards is a duplicate in the later one
    kern = [s for s in from_lake if s.format == "kernel-log"]
    assert [s.rows_duplicate for s in kern] == [1, 2, 2]
    attributes = tables(tmp_path / "lake.duckdb")["events"]["attributes"].drop_nulls()
    assert attributes.len() == 3 and attributes.str.contains('"level":"sev1"').sum() == 1
    assert_same_warehouse(tmp_path / "direct.duckdb", tmp_path / "lake.duckdb")
    assert all(frame.height for frame in tables(tmp_path / "lake.duckdb").values())


def test_a_later_ticket_export_closes_the_open_one_through_the_lake_as_directly(tmp_path):
    header = "timestamp,cluster_id,node_id,category,resolved_at\n"
    ticket = "2026-03-02T04:26:29Z,c1,n1,Xid 79,"
    files = [tmp_path / "open.csv", tmp_path / "closed.csv"]
    files[0].write_text(f"{header}{ticket}\n")
    files[1].write_text(f"{header}{ticket}2026-03-02T08:00:00Z\n")
    direct = direct_ingest(files, tmp_path / "direct.duckdb")
    extract_files([str(f) for f in files], tmp_path / "lake", options=OPTIONS, workers=1)
    from_lake = lake_ingest(tmp_path / "lake", tmp_path / "lake.duckdb")
    assert [counts(s)[1:] for s in from_lake] == [counts(s)[1:] for s in direct] == [(1, 1, 0, 0, 0)] * 2
    lake_tables, direct_tables = tables(tmp_path / "lake.duckdb"), tables(tmp_path / "direct.duckdb")
    for name in ("events", "incidents"):
        assert lake_tables[name].equals(direct_tables[name]), name
        resolved = lake_tables[name]["resolved_at_utc"].cast(pl.String).to_list()
        assert resolved == ["2026-03-02 08:00:00.000000"]


def test_rerunning_extract_and_ingest_changes_nothing(fleet, tmp_path):
    lake, db = tmp_path / "lake", tmp_path / "w.duckdb"
    extract_files([str(f) for f in fleet], lake, options=OPTIONS, workers=2)
    lake_ingest(lake, db)
    manifests = {p.name: p.read_text() for p in (lake / "manifest").iterdir()}
    parts = sorted(p.relative_to(lake) for p in lake.rglob("*.parquet"))
    before = tables(db)
    again = extract_files([str(f) for f in fleet], lake, options=OPTIONS, workers=2)
    assert all(e.skipped for e in again)
    assert {p.name: p.read_text() for p in (lake / "manifest").iterdir()} == manifests
    assert sorted(p.relative_to(lake) for p in lake.rglob("*.parquet")) == parts
    assert all(s.skipped for s in lake_ingest(lake, db))
    after = tables(db)
    assert all(after[name].equals(frame) for name, frame in before.items())


def test_the_lake_is_hive_partitioned_and_rejects_keep_file_and_physical_line(fleet, tmp_path):
    lake = tmp_path / "lake"
    extract_files([str(f) for f in fleet], lake, options=OPTIONS, workers=2)
    events = {p.relative_to(lake).parent.as_posix() for p in (lake / "events").rglob("*.parquet")}
    assert {"events/cluster=unknown/month=2026-03", "events/cluster=c1/month=2026-03"} <= events
    assert "events/cluster=c2/month=2026-04" in events  # the canonical row of cluster c2 in April
    kern = next(f for f in fleet if f.name == "kern-1.log")
    physical = [i for i, x in enumerate(kern.read_text().splitlines(), start=1) if BAD_XID in x]
    all_rejects = [r for p in lake.glob("rejects/*.parquet") for r in pq.read_table(p).to_pylist()]
    assert set(all_rejects[0]) == {"path", "line", "raw", "reason", "rejected_at_utc"}
    bad = [r for r in all_rejects if r["path"] == str(kern) and BAD_XID in r["raw"]]
    assert [r["line"] for r in bad] == physical
    assert len(physical) == 1 and bad[0]["reason"].startswith("Xid line without (PCI")
    manifest = [json.loads(p.read_text()) for p in (lake / "manifest").glob("*.json")]
    assert {m["path"] for m in manifest} == {str(f) for f in fleet}
    for m in manifest:
        assert m["rows_read"] == m["rows_accepted"] + m["rows_rejected"] + m["rows_ignored"]
        assert m["rows_accepted"] == m["rows_stored"] + m["rows_duplicate"]
        assert all((lake / p).is_file() for ps in m["parts"].values() for p in ps)


def test_a_worker_killed_mid_file_is_redone_and_every_line_counted_once(fleet, tmp_path):
    """The pool's worker dies after the first part of kern-1.log is in place, before its manifest
    entry: the pool runs the task again, and the lake ingests like the files themselves."""
    lake = tmp_path / "lake"
    lake.joinpath("manifest").mkdir(parents=True)
    inner = partial(extract_one, lake=str(lake), options=OPTIONS)
    marker = tmp_path / "died-once"
    task = partial(crash_once, marker=str(marker), victim="kern-1.log", inner=inner)
    items = [{"source": str(f), "listed": ["run", i]} for i, f in enumerate(fleet)]
    results = run_local(task, items, workers=2)
    assert marker.exists()  # the first attempt did die
    assert [r["error"] for r in results] == [None] * len(fleet)
    direct_ingest(fleet, tmp_path / "direct.duckdb")
    lake_ingest(lake, tmp_path / "lake.duckdb")
    assert_same_warehouse(tmp_path / "direct.duckdb", tmp_path / "lake.duckdb")


def test_a_file_that_kills_every_worker_is_reported_and_the_others_are_in_the_lake(fleet, tmp_path):
    """Every attempt at kern-1.log dies (as out of memory would): after three deaths it is reported
    as failed; the other files, even those whose worker the broken pool took down, are in the lake."""
    lake = tmp_path / "lake"
    lake.joinpath("manifest").mkdir(parents=True)
    inner = partial(extract_one, lake=str(lake), options=OPTIONS)
    task = partial(crash_always, victim="kern-1.log", inner=inner)
    items = [{"source": str(f), "listed": ["run", i]} for i, f in enumerate(fleet[:4])]
    results = run_local(task, items, workers=2)
    errors = {Path(r["path"]).name: r["error"] for r in results}
    assert errors.pop("kern-1.log").endswith("died 3 times (out of memory?); not in the lake. Run extract "
                                            "again with fewer --workers per machine (more memory each), "
                                            "or on a bigger machine")  # fmt: skip
    assert set(errors.values()) == {None}
    others = [f for f in fleet[:4] if f.name != "kern-1.log"]
    assert sorted(json.loads(p.read_text())["path"] for p in (lake / "manifest").glob("*.json")) == sorted(
        map(str, others)
    )
    direct_ingest(others, tmp_path / "direct.duckdb")
    lake_ingest(lake, tmp_path / "lake.duckdb")
    assert_same_warehouse(tmp_path / "direct.duckdb", tmp_path / "lake.duckdb")


def test_a_crashed_runs_leftovers_are_replaced_not_read(fleet, tmp_path):
    """A crash left a half-written temp file and a renamed part without a manifest entry: the next
    run removes the temp file, parses the input again and the lake ingests it once."""
    lake = tmp_path / "lake"
    kern = next(f for f in fleet if f.name == "kern-0.log")
    extract_files([str(kern)], lake, options=OPTIONS, workers=2)
    manifest = next((lake / "manifest").glob("*.json"))
    manifest.unlink()  # the crash came before the manifest entry
    stale = lake / "events" / "cluster=unknown" / ".part-half-written.tmp"
    stale.write_bytes(b"PAR1 half")
    extract_files([str(f) for f in fleet], lake, options=OPTIONS, workers=2)
    assert not stale.exists()
    direct_ingest(fleet, tmp_path / "direct.duckdb")
    lake_ingest(lake, tmp_path / "lake.duckdb")
    assert_same_warehouse(tmp_path / "direct.duckdb", tmp_path / "lake.duckdb")


def test_a_lake_grows_incrementally(fleet, tmp_path):
    """Files extracted in two runs and ingested after each give the warehouse of one direct ingest."""
    lake, db = tmp_path / "lake", tmp_path / "w.duckdb"
    extract_files([str(f) for f in fleet[:3]], lake, options=OPTIONS, workers=2)
    first = lake_ingest(lake, db)
    assert len(first) == 3
    extract_files([str(f) for f in fleet], lake, options=OPTIONS, workers=2)
    second = lake_ingest(lake, db)
    assert [s.skipped for s in second] == [True] * 3 + [False] * (len(fleet) - 3)
    direct_ingest(fleet, tmp_path / "direct.duckdb")
    assert_same_warehouse(tmp_path / "direct.duckdb", db)


def test_bad_inputs_are_named_and_kept_out_of_the_lake(tmp_path, fleet):
    odd = tmp_path / "cluster.json"
    odd.write_text('{"kind": "Event", "apiVersion": "v1", "items": []}\n')
    results = extract_files([str(fleet[0]), str(odd)], tmp_path / "lake", options=OPTIONS, workers=2)
    assert results[0].error is None
    assert results[1].error.startswith(f"{odd}: format kubernetes is not extracted to a lake")
    assert len(list((tmp_path / "lake" / "manifest").glob("*.json"))) == 1
    with pytest.raises(InputError, match="no files match"):
        extract_files([str(tmp_path / "missing-*.log")], tmp_path / "lake")
    with pytest.raises(InputError, match="unknown time zone"):
        extract_files([str(fleet[0])], tmp_path / "lake", options=ReaderOptions(timezone="Mars/Olympus"))


def test_cluster_names_stay_one_partition_directory():
    assert layout.partition_value("a/b=c") == "a%2Fb%3Dc"
    assert layout.partition_value("..") == "%2E%2E"
    assert layout.partition_value("c1") == "c1"


def test_urls_are_read_through_pyarrow_filesystems_keeping_the_objects_mtime(tmp_path):
    """A ``file://`` prefix goes the way of ``s3://`` or ``gs://``: listed and streamed by pyarrow
    into a temporary copy. Without --year the syslog lines take their year from the modification
    time (2025 here), which the copy keeps; manifest and rejects name the URL."""
    files = sorted(write_fleet(tmp_path / "logs"))
    stamp = datetime(2025, 6, 1, tzinfo=UTC).timestamp()
    for f in files:
        os.utime(f, (stamp, stamp))
    lake = tmp_path / "lake"
    options = ReaderOptions(bus_order=tuple(BUSES))
    extracted = extract_files([f"file://{tmp_path / 'logs'}/"], lake, options=options, workers=2)
    assert [e.path for e in extracted] == [f"file://{f}" for f in files]
    assert [e.error for e in extracted] == [None] * len(files)
    con = warehouse.connect(tmp_path / "direct.duckdb")
    ingest.ingest_files(con, files, ingest.ReaderOptions(bus_order=BUSES))
    con.close()
    lake_ingest(lake, tmp_path / "lake.duckdb")
    direct, from_lake = tables(tmp_path / "direct.duckdb"), tables(tmp_path / "lake.duckdb")
    for name in ("events", "incidents", "inventory", "jobs"):
        assert from_lake[name].equals(direct[name]), name
    assert direct["events"]["timestamp_utc"].dt.year().is_in([2025, 2026]).all()
    assert (direct["events"]["timestamp_utc"].dt.year() == 2025).any()  # the syslog lines
    as_urls = direct["rejects"].with_columns(path="file://" + pl.col("path"))
    assert from_lake["rejects"].equals(as_urls)
    with pytest.raises(InputError, match="no such file or prefix"):
        extract_files([f"file://{tmp_path / 'nowhere'}/"], lake)


def test_a_lake_with_a_missing_part_stops_with_one_line_after_committing_the_inputs_before(fleet, tmp_path):
    lake, db = tmp_path / "lake", tmp_path / "w.duckdb"
    extract_files([str(f) for f in fleet], lake, options=OPTIONS, workers=2)
    entries = [json.loads(p.read_text()) for p in (lake / "manifest").glob("*.json")]
    sacct = next(e for e in entries if e["format"] == "sacct")
    (lake / sacct["parts"]["jobs"][0]).unlink()
    message = (
        f"{lake / sacct['parts']['jobs'][0]}: part file of {sacct['path']} is missing; delete "
        f"{lake / 'manifest' / (sacct['sha256'] + '.json')} and extract {sacct['path']} again"
    )
    result = CliRunner().invoke(main, ["ingest", str(lake), "--db", str(tmp_path / "cli.duckdb")])
    assert result.exit_code == 2
    before = [str(f) for f in fleet[: [f.name for f in fleet].index("sacct.txt")]]
    kept = f" ({len(before)} file(s) before it were ingested and stay;"
    assert result.stderr.strip().startswith(f"failcast: {message}{kept}")
    con = warehouse.connect(db)
    with pytest.raises(InputError) as raised:
        ingest.ingest_files(con, [lake])
    con.close()
    assert str(raised.value).startswith(message + kept)
    done = tables(db)
    assert sorted(done["ingested_files"]["path"]) == sorted(before)
    assert done["incidents"].height > 0  # rebuilt for the inputs committed before the bad one


def test_the_stages_stay_apart():
    """ingest never imports extract; extract opens no DuckDB connection of its own (warehouse.py does)."""
    root = Path(__file__).resolve().parents[2] / "pipeline"
    for module in (root / "ingest").glob("*.py"):
        assert "pipeline.extract" not in module.read_text(), module
    for module in (root / "extract").glob("*.py"):
        assert "import duckdb" not in module.read_text(), module
