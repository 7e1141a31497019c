"""Read-only snapshots of the warehouse, so that readers never block the nightly run.

DuckDB lets one process write a file and no other process open it meanwhile, and a reader (a
notebook, the DuckDB CLI, even read-only) keeps the writer out. So readers do not open the
warehouse: after every successful run, ``failcast run`` publishes a copy of it,

    <snapshot_dir>/failcast-<run id>.duckdb     one per run, mode 0444, never written again
    <snapshot_dir>/latest.duckdb                a hard link to the newest one

and readers open ``latest.duckdb`` (``failcast rates/fit/report/metrics --db``, the notebooks,
``duckdb -readonly``). The snapshot is a byte copy of the warehouse taken right after a
``CHECKPOINT`` by the run's own connection (DuckDB's lock keeps every other process out while it
is open), so it holds exactly the committed state, including this run's ``runs`` row.

No reader ever sees a half-written snapshot: the copy goes to ``.<name>.tmp`` (a name no reader
opens), is fsynced and opened once to check it, then renamed to its dated name; ``latest.duckdb``
is a hard link made under a temporary name and renamed over the old one (rename is atomic), then
the folder is fsynced. The race with pruning: a reader that opens ``latest.duckdb`` while it is
swapped gets the old file or the new one; pruning deletes only old *dated names*, and on POSIX a
file stays readable by every process that has it open until the last one closes it (its disk
space is freed then), so a reader that opened the previous snapshot, by any name, keeps reading
it. What pruning could break is a reader that resolved a dated name but has not opened it yet:
the newest ``keep_snapshots`` (at least 2) are kept, so the snapshot that was latest before this
run's swap survives it; only one older than that, named by hand a whole run interval ago, can be
gone when opened (the error names the file; open ``latest.duckdb`` instead).
"""

from __future__ import annotations

import os
import re
import shutil
from datetime import datetime
from pathlib import Path

from pipeline import warehouse
from pipeline.runs.reports import fsync_dir, prune_dated, publish

LATEST = "latest.duckdb"
SNAPSHOT_PREFIX = "failcast-"
MIN_KEEP = 2  # the latest and the one before it (a reader may be opening it mid-swap)
_DATED_SNAPSHOT = re.compile(rf"{SNAPSHOT_PREFIX}(\d{{8}}T\d{{6}}Z)-[0-9a-f]+\.duckdb")


def snapshot_dir(db: Path | str, configured: Path | str | None = None) -> Path:
    """Where snapshots of ``db`` go: ``configured``, else ``snapshots/`` beside the warehouse."""
    return Path(configured) if configured else Path(db).parent / "snapshots"


def latest_snapshot(db: Path | str, configured: Path | str | None = None) -> Path:
    return snapshot_dir(db, configured) / LATEST


def reader_db(db: Path | str = warehouse.DEFAULT_DB_PATH, configured: Path | str | None = None) -> Path:
    """What a reader should open for warehouse ``db``: its latest snapshot if one was published,
    else the warehouse itself (before the first ``failcast run``)."""
    latest = latest_snapshot(db, configured)
    return latest if latest.exists() else Path(db)


def write_snapshot(con, db: Path | str, out_dir: Path, run_id: str) -> Path:
    """Copy the warehouse behind ``con`` (the writing connection, held open) to
    ``out_dir/failcast-<run_id>.duckdb`` and return that path; not yet ``latest`` (see :func:`publish`)."""
    con.execute("CHECKPOINT")  # everything committed is in the main file, the WAL is empty
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / f"{SNAPSHOT_PREFIX}{run_id}.duckdb"
    tmp = out_dir / f".{final.name}.tmp"
    try:
        shutil.copyfile(db, tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        with warehouse.connect(tmp, read_only=True) as check:  # a copy DuckDB cannot open is no snapshot
            check.sql("SELECT count(*) FROM runs").fetchall()
        tmp.chmod(0o444)
        tmp.replace(final)
        fsync_dir(out_dir)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return final


def publish_snapshot(con, db: Path | str, out_dir: Path, run_id: str, *, keep: int, now: datetime) -> dict:
    """Write, publish as ``latest.duckdb`` and prune; returns what the manifest records."""
    if keep < MIN_KEEP:
        raise ValueError(f"keep_snapshots must be at least {MIN_KEEP} (the latest and the one before it)")
    path = write_snapshot(con, db, out_dir, run_id)
    (latest,) = publish(path, (LATEST,))
    pruned = prune_dated(out_dir, _DATED_SNAPSHOT, keep=keep, keep_days=None, now=now, aliases=(LATEST,))
    return {"path": str(path), "latest": str(latest), "bytes": path.stat().st_size, "pruned": len(pruned)}
