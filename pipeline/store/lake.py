"""A log lake written by ``failcast extract`` -> the warehouse, incrementally.

Layout (one directory, ``LAKE``; every file named by the sha256 of the input it came from)::

    LAKE/manifest/<sha>.json                                  one per input, written last
    LAKE/events/cluster=<cluster>/month=<YYYY-MM>/part-<sha>.parquet
    LAKE/jobs/part-<sha>.parquet                              sacct jobs
    LAKE/inventory/part-<sha>.parquet                         canonical inventory rows
    LAKE/rejects/part-<sha>.parquet                           file, line, raw, reason

Each input was parsed by its ingest reader on a scratch warehouse of its own (so within the file
records are already deduplicated, and its rejects and counts are final), with events left
unclassified. The manifest entry states the input's path, size, sha256, format and kind, its lines
read / accepted (records: stored + duplicate in the file) / stored / duplicate / rejected / ignored,
the reader's notes and its part files. ``<cluster>`` is percent-encoded (:func:`partition_value`);
the rows keep their ``cluster_id`` as written.

Reading a lake (:func:`ingest_lake`) takes the inputs whose sha256 is not in ``ingested_files`` yet,
in the order they were listed for extraction, each in its own transaction, by the store's rules that
the reader which parsed it applied: an event whose content key is stored is a duplicate (one with an
end closes a stored open one: :func:`pipeline.store.events.close_open_events`, as for a Slurm node
event or a ticket row with its resolved_at), jobs and inventory rows replace the stored ones
(:mod:`pipeline.store.jobs`, :mod:`pipeline.store.inventory`). Lines: read = ingested + duplicate +
rejected + ignored, where duplicate = accepted - ingested; rejects keep their original file and
line. An event row whose ``resolved_at_utc`` is before its ``timestamp_utc`` (the readers reject
those, so the part was damaged or made by hand) is rejected with its line, as the readers would,
never stored.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import duckdb

from pipeline.store import events, inventory, jobs, taxonomy
from pipeline.store.files import FileSummary, InputError, count, now_utc, record_counts, register_file
from pipeline.warehouse import transaction

MANIFEST = "manifest"
TABLES = ("events", "jobs", "inventory", "rejects")

# Columns of an events part: the warehouse's, less file_id and the taxonomy's (set on ingest).
EVENT_COLUMNS = (
    "event_key",
    "line",
    "timestamp_utc",
    "cluster_id",
    "node_id",
    "category",
    "interrupting",
    "gpu_index",
    "job_id",
    "message",
    "resolved_at_utc",
    "xid",
    "pci_bus_id",
    "source_format",
    "attributes",
)
JOB_COLUMNS = (
    "job_id",
    "cluster_id",
    "job_name",
    "state",
    "start_utc",
    "end_utc",
    "elapsed_hours",
    "nnodes",
    "nodes",
    "interrupted",
    "line",
)
INVENTORY_COLUMNS = (
    "cluster_id",
    "node_id",
    "instance_type",
    "gpus_per_node",
    "in_service_from_utc",
    "in_service_to_utc",
    "line",
)
REJECT_COLUMNS = ("path", "line", "raw", "reason", "rejected_at_utc")

# The lines of one input that store or change something, by its events' content keys.
_EVENT_STATUS = """
CREATE OR REPLACE TEMP TABLE lake_status AS
SELECT l.*,
       CASE WHEN l.resolved_at_utc < l.timestamp_utc THEN 'rejected'
            WHEN e.event_key IS NULL THEN 'new'
            WHEN e.resolved_at_utc IS NULL AND l.resolved_at_utc IS NOT NULL THEN 'resolves'
       END AS status
FROM read_parquet($files, hive_partitioning = true) l
LEFT JOIN (SELECT DISTINCT ON (event_key) event_key, resolved_at_utc FROM events) e USING (event_key)
"""
_EVENT_CLOSINGS = """
SELECT event_key, resolved_at_utc AS resolved_utc, line FROM lake_status WHERE status = 'resolves'
"""
_EVENT_WRITE = """
INSERT INTO events (event_key, file_id, line, timestamp_utc, cluster_id, node_id, category, interrupting,
                    gpu_index, job_id, message, resolved_at_utc, xid, pci_bus_id, source_format, attributes)
SELECT event_key, $file_id, line, timestamp_utc, cluster_id, node_id, category, interrupting,
       gpu_index, job_id, message, resolved_at_utc, xid, pci_bus_id, source_format, attributes
FROM lake_status WHERE status = 'new' ORDER BY line, event_key;
"""
# The readers reject an end before its start; a part that holds one was not written by them
# (damaged, or made by hand): its lines are rejected here rather than stored as negative repairs.
_EVENT_REJECTS = """
INSERT INTO rejects
SELECT $file_id, $path, line,
       'timestamp_utc=' || min(timestamp_utc) || ' resolved_at_utc=' || min(resolved_at_utc) || ' node_id='
           || min(node_id) || ' category=' || min(category),
       'resolved_at_utc is before timestamp_utc in the lake part: extract the input again', $now
FROM lake_status WHERE status = 'rejected' GROUP BY line ORDER BY line
"""
_JOBS = """
CREATE OR REPLACE TEMP TABLE jobs_fresh AS
SELECT job_id, cluster_id, job_name, state, start_utc, end_utc, elapsed_hours, nnodes, nodes, interrupted,
       line
FROM read_parquet($files)
"""
_INVENTORY = """
INSERT INTO fresh
SELECT cluster_id, node_id, instance_type, gpus_per_node, in_service_from_utc, in_service_to_utc, line
FROM read_parquet($files)
"""
_REJECTS = """
INSERT INTO rejects
SELECT $file_id, path, line, raw, reason, rejected_at_utc FROM read_parquet($files) ORDER BY line
"""


def partition_value(value: str) -> str:
    """A value as a hive partition directory name: percent-encoded, so ``/``, ``=`` and ``..`` in a
    cluster name stay inside one directory level."""
    quoted = quote(value, safe="")
    return quoted if quoted.strip(".") else quoted.replace(".", "%2E")


def manifest_path(lake: Path, sha: str) -> Path:
    return lake / MANIFEST / f"{sha}.json"


def is_lake(path: Path) -> bool:
    """A directory with a lake manifest (what ``failcast ingest LAKE`` reads)."""
    return path.is_dir() and (path / MANIFEST).is_dir()


def entries(lake: Path) -> Iterator[dict]:
    """The lake's manifest entries in the order their inputs were listed for extraction."""
    listed = [json.loads(p.read_text()) for p in (lake / MANIFEST).glob("*.json")]
    yield from sorted(listed, key=lambda e: (e["listed"], e["path"]))


def ingest_lake(con, lake: Path, *, category_map) -> Iterator[FileSummary]:
    """Every input of the lake not ingested yet (by sha256), each in its own transaction, its new
    events classified like a file's; yields each input's summary once it is committed. A missing or
    unreadable part file stops with an :class:`InputError` (the inputs before it are committed).
    The caller rebuilds incidents after. A lake without a single finished input (every input of
    ``failcast extract`` failed, or it has not finished one yet) is an :class:`InputError` that
    says so: ingesting it would otherwise print nothing and succeed."""
    listed = list(entries(lake))
    if not listed:
        raise InputError(
            f"{lake}: the lake holds no finished input ({lake / MANIFEST} has no entry): every input of "
            f"failcast extract failed or none has finished yet; see extract's errors, fix them and run "
            f"failcast extract SOURCE... --out {lake} again"
        )
    for entry in listed:
        if con.sql("SELECT 1 FROM ingested_files WHERE sha256 = ?", params=[entry["sha256"]]).fetchall():
            yield FileSummary(entry["path"], entry["kind"], entry["format"], skipped=True)
            continue
        redo = f"delete {manifest_path(lake, entry['sha256'])} and extract {entry['path']} again"
        missing = [p for parts in entry["parts"].values() for p in parts if not (lake / p).is_file()]
        if missing:
            raise InputError(f"{lake / missing[0]}: part file of {entry['path']} is missing; {redo}")
        try:
            with transaction(con):
                summary = _ingest_entry(con, lake, entry)
                summary.notes.extend(taxonomy.classify_new_events(con, category_map))
        except duckdb.IOException as exc:
            raise InputError(f"{lake}: a part file of {entry['path']} is unreadable ({exc}); {redo}") from exc
        yield summary


def _ingest_entry(con, lake: Path, entry: dict) -> FileSummary:
    path, kind, fmt = entry["path"], entry["kind"], entry["format"]
    summary = FileSummary(path, kind, fmt, notes=list(entry["notes"]), rows_read=entry["rows_read"])
    file_id = summary.file_id = register_file(
        con, path, entry["sha256"], kind, fmt, size_bytes=entry["size_bytes"]
    )
    files = {table: [str(lake / part) for part in entry["parts"].get(table, [])] for table in TABLES}
    rejected = 0
    if files["events"]:
        con.execute(_EVENT_STATUS, {"files": files["events"]})
        summary.rows_ingested = count(
            con, "SELECT count(DISTINCT line) FROM lake_status WHERE status IN ('new', 'resolves')"
        )
        rejected = count(con, "SELECT count(DISTINCT line) FROM lake_status WHERE status = 'rejected'")
        con.execute(_EVENT_REJECTS, {"file_id": file_id, "path": path, "now": now_utc()})
        events.close_open_events(con, _EVENT_CLOSINGS, file_id)
        con.execute(_EVENT_WRITE, {"file_id": file_id})
        con.execute("DROP TABLE lake_status")
    if files["jobs"]:
        con.execute(_JOBS, {"files": files["jobs"]})
        summary.rows_ingested = jobs.replace_jobs(con, file_id)
    if files["inventory"]:
        inventory.stage(con)
        con.execute(_INVENTORY, {"files": files["inventory"]})
        summary.rows_ingested = inventory.replace_inventory(con, file_id)
    if files["rejects"]:
        con.execute(_REJECTS, {"file_id": file_id, "files": files["rejects"]})
    summary.rows_rejected = entry["rows_rejected"] + rejected
    summary.rows_ignored = entry["rows_ignored"]
    summary.rows_duplicate = entry["rows_accepted"] - summary.rows_ingested - rejected
    summary.ignored_columns = list(entry.get("ignored_columns", []))
    summary.attribute_columns = list(entry.get("attribute_columns", []))
    record_counts(con, file_id, summary)
    return summary
