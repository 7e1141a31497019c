"""The warehouse's tables and their DDL, applied by :func:`pipeline.warehouse.connect`: only
:mod:`pipeline.warehouse` imports this module (it alone opens DuckDB and owns the schema;
tests/test_import_cycles.py holds every other module to that).

All times are stored as naive ``TIMESTAMP`` values in UTC (columns end in ``_utc``).

Tables
------
ingested_files  one row per input file committed: path, sha256, size, kind (incidents, inventory,
                xid_log, jobs, node_events, training_log), format, line counts (read = ingested +
                duplicate + rejected + ignored, where ignored lines are ordinary log lines that carry
                no fault).
events          every accepted raw event (a canonical incident row, one XID line ...), keyed by
                content (``event_key``). Columns: time, cluster, node, category, interrupting,
                gpu_index, job_id, message, resolved time; ``xid`` (NVIDIA Xid or SXid code),
                ``pci_bus_id`` (``0000:18:00``: identifies the GPU when no gpu_index mapping is
                known), ``source_format`` (canonical, kernel-log, slurm-events, slurmctld,
                training-log: job symptoms kept out of incidents, see ``JOB_SYMPTOMS_FORMAT``). XID
                and slurmctld lines whose node's cluster is not known at ingest carry cluster_id
                ``UNKNOWN_CLUSTER``; the rebuild resolves it from the inventory. ``category`` is
                the source's text; ``failure_class`` (a FailureCategory value) and ``interrupting``
                come from the taxonomy (:mod:`pipeline.store.taxonomy`), ``source_interrupting``
                is the source's own flag (an Xid's catalog entry; NULL: none); ``attributes``
                (JSON) holds a canonical row's extra columns. ``changed_file_id``: the file of a later
                export that closed this stored event (Slurm node events, Kubernetes, a lake), so the
                incremental rebuild revisits its node (NULL: never changed).
incidents       events collapsed per node and fault (category + GPU, the GPU being gpu_index or
                else pci_bus_id) within a window; rates are computed on these. ``incident_id`` is
                derived from the incident's content (node, fault, first event time), so it does not
                change when other incidents are added; it is unique with overwhelming probability
                (63 bits of an md5), not by construction. ``failure_class`` is its category's,
                ``attributes`` its first event's.
incidents_built one row: the window, the category map (fingerprint) and the last events file_id
                the incidents were built with, so :func:`pipeline.rebuild.rebuild_incidents`
                recomputes only the nodes that received events since.
inventory       node service intervals; exposure (node-hours) comes from these. ``estimated`` rows
                are NOT a real inventory: with no inventory at all they are inferred from the nodes
                seen in events and jobs (see :func:`pipeline.warehouse.estimate_inventory`), and every
                output using them must say ``exposure_estimated``. A real inventory replaces them.
jobs            scheduler job records (Slurm sacct): job_id, cluster_id (if known), job_name, state
                (first word: NODE_FAIL, COMPLETED ...), start/end (UTC), elapsed_hours, nnodes,
                nodes (expanded hostlist), interrupted (NODE_FAIL or BOOT_FAIL: the infrastructure
                ended the job), file_id, line. One row per (cluster_id, job_id); a later export of
                the same job replaces the row (a RUNNING job that finished).
rejects         every input line that could not be used, with file, line number, raw text, reason.
runs            one row per ``failcast run`` (see :mod:`pipeline.runs`): run_id, start/end, status
                (running, succeeded, failed), pid and host, and JSON columns ``stages`` (per stage:
                seconds and row counts), ``input_files`` (path, new/grown/unchanged, row counts),
                ``versions`` (failcast, Python, libraries), ``config`` (the merged run config); the
                report written and the error of a failed run.
migrations      one row per one-time change of stored data (name, when, what it changed), so it
                runs once per warehouse: ``canonical_key_utc`` (see
                :func:`pipeline.store.canonical_events.rekey_stored_incidents`).
"""

SCHEMA_VERSION = 1

DDL = """
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
    message        VARCHAR,
    pci_bus_id     VARCHAR,
    xid            INTEGER
);
CREATE TABLE IF NOT EXISTS incidents_built (
    window_seconds  DOUBLE NOT NULL,
    through_file_id BIGINT NOT NULL
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
ALTER TABLE inventory ADD COLUMN IF NOT EXISTS estimated BOOLEAN DEFAULT false;
ALTER TABLE events ADD COLUMN IF NOT EXISTS xid INTEGER;
ALTER TABLE events ADD COLUMN IF NOT EXISTS pci_bus_id VARCHAR;
ALTER TABLE events ADD COLUMN IF NOT EXISTS source_format VARCHAR DEFAULT 'canonical';
ALTER TABLE events ADD COLUMN IF NOT EXISTS source_interrupting BOOLEAN;
ALTER TABLE events ADD COLUMN IF NOT EXISTS failure_class VARCHAR;
ALTER TABLE events ADD COLUMN IF NOT EXISTS attributes JSON;
ALTER TABLE events ADD COLUMN IF NOT EXISTS changed_file_id BIGINT;
ALTER TABLE incidents ADD COLUMN IF NOT EXISTS failure_class VARCHAR;
ALTER TABLE incidents ADD COLUMN IF NOT EXISTS attributes JSON;
ALTER TABLE incidents_built ADD COLUMN IF NOT EXISTS category_map VARCHAR;
-- rows from before failure classes: their categories were class names, their flags the source's
UPDATE events SET failure_class = category, source_interrupting = interrupting WHERE failure_class IS NULL;
UPDATE incidents SET failure_class = category WHERE failure_class IS NULL;
CREATE TABLE IF NOT EXISTS jobs (
    job_id         VARCHAR NOT NULL,
    cluster_id     VARCHAR,
    job_name       VARCHAR,
    state          VARCHAR NOT NULL,
    start_utc      TIMESTAMP,
    end_utc        TIMESTAMP,
    elapsed_hours  DOUBLE,
    nnodes         INTEGER,
    nodes          VARCHAR[] NOT NULL,
    interrupted    BOOLEAN NOT NULL,
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
CREATE TABLE IF NOT EXISTS migrations (
    name           VARCHAR NOT NULL,
    applied_at_utc TIMESTAMP NOT NULL,
    detail         VARCHAR
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
