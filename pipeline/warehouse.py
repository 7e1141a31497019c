"""The DuckDB warehouse: the one place that opens the database file and owns its schema.

All times are stored as naive ``TIMESTAMP`` values in UTC (columns end in ``_utc``). Every write
of one input file happens inside one transaction (see :func:`transaction`), so an interrupted
run leaves the warehouse as it was before that file.

Tables
------
ingested_files  one row per input file committed: path, sha256, size, kind, format, line counts.
events          every accepted raw event (an incident row, an XID line ...), keyed by content.
incidents       events collapsed per node and fault within a window; rates are computed on these.
inventory       node service intervals; exposure (node-hours) comes from these.
rejects         every input line that could not be used, with file, line number, raw text, reason.
runs            one row per ``failcast run`` (see :mod:`pipeline.runs`): run_id, start/end, status
                (running, succeeded, failed), pid and host, and JSON columns ``stages`` (per stage:
                seconds and row counts), ``input_files`` (path, new/grown/unchanged, row counts),
                ``versions`` (failcast, Python, libraries), ``config`` (the merged run config); the
                report written and the error of a failed run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import polars as pl

DEFAULT_DB_PATH = Path("data/failcast.duckdb")

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE SEQUENCE IF NOT EXISTS file_id_seq;
CREATE TABLE IF NOT EXISTS ingested_files (
    file_id        BIGINT PRIMARY KEY DEFAULT nextval('file_id_seq'),
    path           VARCHAR NOT NULL,
    sha256         VARCHAR NOT NULL,
    size_bytes     BIGINT NOT NULL,
    kind           VARCHAR NOT NULL,
    format         VARCHAR NOT NULL,
    rows_read      BIGINT NOT NULL,
    rows_ingested  BIGINT NOT NULL,
    rows_duplicate BIGINT NOT NULL,
    rows_rejected  BIGINT NOT NULL,
    ingested_at_utc TIMESTAMP NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    event_key      VARCHAR NOT NULL,
    file_id        BIGINT NOT NULL,
    line           BIGINT NOT NULL,
    timestamp_utc  TIMESTAMP NOT NULL,
    cluster_id     VARCHAR NOT NULL,
    node_id        VARCHAR NOT NULL,
    category       VARCHAR NOT NULL,
    interrupting   BOOLEAN NOT NULL,
    gpu_index      INTEGER,
    job_id         VARCHAR,
    message        VARCHAR,
    resolved_at_utc TIMESTAMP
);
CREATE TABLE IF NOT EXISTS incidents (
    incident_id    BIGINT NOT NULL,
    cluster_id     VARCHAR NOT NULL,
    node_id        VARCHAR NOT NULL,
    category       VARCHAR NOT NULL,
    interrupting   BOOLEAN NOT NULL,
    gpu_index      INTEGER,
    timestamp_utc  TIMESTAMP NOT NULL,
    last_event_utc TIMESTAMP NOT NULL,
    resolved_at_utc TIMESTAMP,
    events         BIGINT NOT NULL,
    job_id         VARCHAR,
    message        VARCHAR
);
CREATE TABLE IF NOT EXISTS inventory (
    cluster_id     VARCHAR NOT NULL,
    node_id        VARCHAR NOT NULL,
    instance_type  VARCHAR NOT NULL,
    gpus_per_node  INTEGER NOT NULL,
    in_service_from_utc TIMESTAMP NOT NULL,
    in_service_to_utc   TIMESTAMP,
    file_id        BIGINT NOT NULL,
    line           BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS rejects (
    file_id        BIGINT,
    path           VARCHAR NOT NULL,
    line           BIGINT,
    raw            VARCHAR,
    reason         VARCHAR NOT NULL,
    rejected_at_utc TIMESTAMP NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    run_id         VARCHAR PRIMARY KEY,
    started_at_utc TIMESTAMP NOT NULL,
    ended_at_utc   TIMESTAMP,
    status         VARCHAR NOT NULL,
    pid            INTEGER,
    host           VARCHAR,
    stages         JSON,
    input_files    JSON,
    versions       JSON,
    config         JSON,
    report_path    VARCHAR,
    error          VARCHAR
);
"""

# Incidents are rebuilt from events: consecutive events of one node and category closer than the
# window belong to one incident (a storm of XID lines, or one fault reported by two sources).
_REBUILD_INCIDENTS = """
CREATE OR REPLACE TABLE incidents AS
WITH ordered AS (
    SELECT *,
           lag(timestamp_utc) OVER w AS previous_utc
    FROM events
    WINDOW w AS (PARTITION BY cluster_id, node_id, category, gpu_index ORDER BY timestamp_utc)
), flagged AS (
    SELECT *,
           CASE WHEN previous_utc IS NULL
                  OR timestamp_utc - previous_utc > to_seconds(CAST($window_seconds AS DOUBLE))
                THEN 1 ELSE 0 END AS starts_incident
    FROM ordered
), numbered AS (
    SELECT *,
           sum(starts_incident) OVER (
               PARTITION BY cluster_id, node_id, category, gpu_index ORDER BY timestamp_utc
               ROWS UNBOUNDED PRECEDING) AS incident_seq
    FROM flagged
)
SELECT row_number() OVER (ORDER BY min(timestamp_utc), cluster_id, node_id, category)
           AS incident_id,
       cluster_id, node_id, category, bool_or(interrupting) AS interrupting, gpu_index,
       min(timestamp_utc) AS timestamp_utc,
       max(timestamp_utc) AS last_event_utc,
       max(resolved_at_utc) AS resolved_at_utc,
       count(*) AS events,
       arg_min(job_id, timestamp_utc) AS job_id,
       arg_min(message, timestamp_utc) AS message
FROM numbered
GROUP BY cluster_id, node_id, category, gpu_index, incident_seq
"""


def connect(db_path: Path | str = DEFAULT_DB_PATH, *, read_only: bool = False):
    """Open (creating if needed) the warehouse file with its schema in place."""
    db_path = Path(db_path)
    if read_only and not db_path.exists():
        raise FileNotFoundError(
            f"{db_path}: no warehouse here; run 'failcast ingest ... --db {db_path}' first"
        )
    db_path.parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(db_path), read_only=read_only)
    con.execute("SET TimeZone = 'UTC'")
    if not read_only:
        con.execute(_SCHEMA)
    return con


@contextmanager
def transaction(con) -> Iterator[None]:
    """All-or-nothing: commit on success, roll back on any exception (including Ctrl-C)."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


def rebuild_incidents(con, *, window_seconds: float = 600.0) -> None:
    """Recompute ``incidents`` from ``events`` (call inside the ingest transaction)."""
    con.execute(_REBUILD_INCIDENTS, {"window_seconds": window_seconds})


def table(con, name: str) -> pl.DataFrame:
    """A whole warehouse table as a Polars frame (names are checked, never user text in SQL)."""
    if name not in TABLES:
        raise ValueError(f"unknown table {name!r}; known: {', '.join(TABLES)}")
    return con.sql(f"SELECT * FROM {name}").pl()  # noqa: S608 - name is whitelisted


TABLES = ("ingested_files", "events", "incidents", "inventory", "rejects", "runs")
