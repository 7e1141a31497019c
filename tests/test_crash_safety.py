"""Crash safety: ``kill -9`` an ingest at random points, then check the warehouse.

After every kill the warehouse must open and hold exactly the files that committed: each
``ingested_files`` row has all its events and rejects, and no event or reject belongs to a file that
is not recorded. Each rerun starts from what the killed one left (from an empty warehouse again
once a kill came after the last commit); after the kills a last run completes the rest, and the
tables must equal those of one clean run (no duplicates, nothing lost).
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from pipeline import warehouse

REPO = Path(__file__).parents[1]
FILES = 6
ROWS_PER_FILE = 4_000
# Imports first, then "ready", so that the parent's random delay falls inside the ingest itself.
CHILD = """
import sys
from pipeline import ingest, warehouse
con = warehouse.connect(sys.argv[1])
print("ready", flush=True)
ingest.ingest_files(con, sys.argv[2:])
con.close()
print("done", flush=True)
"""


def write_inputs(folder: Path) -> list[Path]:
    """An inventory, incident CSVs (a few bad rows each), a kernel log and a sacct export."""
    folder.mkdir()
    paths = [folder / "inventory.csv"]
    nodes = [f"n{i:03d}" for i in range(64)]
    pl.DataFrame(
        {
            "cluster_id": "c1",
            "node_id": nodes,
            "instance_type": "p5",
            "gpus_per_node": 8,
            "in_service_from": "2025-01-01T00:00:00Z",
        }
    ).write_csv(paths[0])
    for f in range(FILES):
        seconds = pl.int_range(ROWS_PER_FILE, eager=True).alias("s") * 37 + f * 10_000_000
        frame = pl.DataFrame(seconds).select(
            timestamp=pl.when(pl.col("s") % 1000 == 7)
            .then(pl.lit("bad"))  # a rejected row now and then
            .otherwise(
                ((pl.col("s") + 1_735_689_600) * 1000)
                .cast(pl.Datetime("ms"))
                .dt.strftime("%Y-%m-%dT%H:%M:%SZ")
            ),
            cluster_id=pl.lit("c1"),
            node_id=pl.format("n{}", (pl.col("s") % 64).cast(pl.String).str.zfill(3)),
            category=pl.lit("gpu_fell_off_bus"),
            message=pl.format("event {}", pl.col("s")),
        )
        path = folder / f"incidents-{f:02d}.csv"
        frame.write_csv(path)
        paths.append(path)
    log = folder / "kernel.log"
    log.write_text(
        "".join(
            f"2026-03-02T04:{m:02d}:{s:02d}+00:00 n{m:03d} kernel: NVRM: Xid (PCI:0000:18:00): 79, x\n"
            f"2026-03-02T04:{m:02d}:{s:02d}+00:00 n{m:03d} kernel: ordinary message\n"
            for m in range(20)
            for s in range(60)
        )
    )
    sacct = folder / "sacct.txt"
    sacct.write_text(
        "JobID|State|Start|End|NodeList\n"
        + "".join(
            f"{j}|NODE_FAIL|2025-02-01T00:00:00|2025-02-01T01:00:00|n[{j % 60:03d}-{j % 60 + 3:03d}]\n"
            for j in range(1000)
        )
    )
    return [*paths, log, sacct]


def start(db: Path, inputs: list[Path]) -> subprocess.Popen:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db), *map(str, inputs)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline().strip() == "ready", child.stderr.read()
    return child


def finish(db: Path, inputs: list[Path]) -> float:
    """Run to completion; returns the seconds the ingest took after the imports."""
    child = start(db, inputs)
    began = time.perf_counter()
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0 and out.strip() == "done", err
    return time.perf_counter() - began


def check_consistent(db: Path, inputs: list[Path]) -> int:
    """The warehouse opens and holds whole files only; returns how many files committed."""
    con = warehouse.connect(db)
    try:
        files = con.sql(
            "SELECT f.file_id, f.path, f.kind, f.rows_ingested, f.rows_rejected,"
            " (SELECT count(*) FROM events e WHERE e.file_id = f.file_id),"
            " (SELECT count(*) FROM jobs j WHERE j.file_id = f.file_id),"
            " (SELECT count(*) FROM inventory i WHERE i.file_id = f.file_id),"
            " (SELECT count(*) FROM rejects r WHERE r.file_id = f.file_id)"
            " FROM ingested_files f"
        ).fetchall()
        for _, path, kind, ingested, rejected, events, jobs, inventory, rejects in files:
            stored = {"incidents": events, "xid_log": events, "jobs": jobs, "inventory": inventory}[kind]
            assert (stored, rejects) == (ingested, rejected), path
            assert Path(path) in inputs
        assert len({p for _, p, *_ in files}) == len(files)
        for table in ("events", "jobs", "inventory", "rejects"):
            orphans = con.sql(
                f"SELECT count(*) FROM {table} WHERE file_id NOT IN (SELECT file_id FROM ingested_files)"  # noqa: S608
            ).fetchall()
            assert orphans == [(0,)], table
        return len(files)
    finally:
        con.close()


TABLES = {
    "ingested_files": "path, sha256, kind, format, rows_read, rows_ingested, rows_duplicate, rows_rejected",
    "events": "event_key, line, timestamp_utc, cluster_id, node_id, category, message",
    "incidents": "* EXCLUDE (incident_id)",
    "jobs": "job_id, cluster_id, state, start_utc, end_utc, nodes, line",
    "inventory": "cluster_id, node_id, in_service_from_utc, line",
    "rejects": "path, line, raw, reason",
}


def contents(db: Path) -> dict[str, pl.DataFrame]:
    con = warehouse.connect(db, read_only=True)
    try:
        return {t: con.sql(f"SELECT {cols} FROM {t} ORDER BY ALL").pl() for t, cols in TABLES.items()}  # noqa: S608
    finally:
        con.close()


def kill_and_rerun(tmp_path: Path, kills: int, seed: int) -> None:
    inputs = write_inputs(tmp_path / "inputs")
    clean = tmp_path / "clean.duckdb"
    work_seconds = finish(clean, inputs)
    rng = random.Random(seed)
    db = tmp_path / "killed.duckdb"
    committed = [0]
    for _ in range(kills):
        if committed[-1] == len(inputs):  # a kill came too late: start again from an empty warehouse
            for leftover in tmp_path.glob("killed.duckdb*"):
                leftover.unlink()
            committed[-1] = 0
        child = start(db, inputs)
        left = 1 - committed[-1] / len(inputs)  # earlier runs committed some files: less is left to do
        time.sleep(rng.uniform(0, work_seconds * max(left, 0.1)))
        child.kill()  # SIGKILL: no cleanup, no rollback handler runs
        child.communicate(timeout=30)
        committed.append(check_consistent(db, inputs))
    committed.pop(0)
    finish(db, inputs)
    assert check_consistent(db, inputs) == len(inputs)
    got, want = contents(db), contents(clean)
    for table in TABLES:
        assert got[table].equals(want[table]), table
    assert any(0 < c < len(inputs) for c in committed), f"no kill landed mid-ingest: {committed}"


def test_sigkill_at_random_points_leaves_whole_files_and_a_rerun_completes(tmp_path):
    kill_and_rerun(tmp_path, kills=10, seed=2026)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
def test_sigkill_many_seeds(tmp_path, seed):
    kill_and_rerun(tmp_path, kills=20, seed=seed)
