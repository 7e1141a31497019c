"""Scheduled batch runs (``failcast run``): a lock per warehouse, a manifest row per run, logs.

:func:`run_batch` is what ``failcast run`` does: take the lock, ingest new and grown input files,
rebuild the derived tables, refit, write a dated report, point ``latest.html`` at it and prune old
reports. Operators can trust it because:

* **One run at a time.** ``<warehouse>.lock`` is held with ``fcntl.flock`` for the whole run. The
  kernel releases it when the process dies, so a run killed with SIGKILL never blocks the next
  one; the holder's pid and start time are written inside the file for the "locked by" message,
  and a file still holding them when the lock is free means the last holder did not finish.
* **A manifest.** Every run is a row in the ``runs`` table (status running -> succeeded/failed,
  per-stage seconds and row counts, input files, versions, error). A row left ``running`` by a
  killed process is marked failed by the next run, which holds the lock and so knows it is dead.
* **Readers never block the run.** After a run succeeded, a copy of the warehouse is published as
  ``snapshots/latest.duckdb`` (:mod:`pipeline.runs.snapshots`); readers open that, not the warehouse.
* **No half results.** Each input file is ingested in one transaction; the report is written to a
  temporary name and renamed; ``latest.html`` (and ``failcast-report.html``, the README's name)
  only move after every stage succeeded, so a failed run leaves the previous report in place.
"""

from pipeline.runs.batch import RunResult, classify_inputs, expand_inputs, run_batch
from pipeline.runs.lock import EXIT_LOCKED, LockedError, lock_path, open_warehouse, warehouse_lock
from pipeline.runs.log import setup_logging
from pipeline.runs.manifest import format_run, list_runs, mark_abandoned, versions
from pipeline.runs.reports import REPORT_ALIASES, prune_reports, publish
from pipeline.runs.snapshots import latest_snapshot, publish_snapshot, reader_db, snapshot_dir

__all__ = [
    "EXIT_LOCKED",
    "REPORT_ALIASES",
    "LockedError",
    "RunResult",
    "classify_inputs",
    "expand_inputs",
    "format_run",
    "latest_snapshot",
    "list_runs",
    "lock_path",
    "mark_abandoned",
    "open_warehouse",
    "prune_reports",
    "publish",
    "publish_snapshot",
    "reader_db",
    "run_batch",
    "setup_logging",
    "snapshot_dir",
    "versions",
    "warehouse_lock",
]
