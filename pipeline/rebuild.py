"""``incidents`` rebuilt from ``events``: the collapse rule, its two SQL paths and the choice
between them, full or incremental. Apart from :mod:`pipeline.warehouse` (which owns the connection
and the schema) because it is the step every ingest ends with and the most tuned query of the
pipeline (bench/RESULTS.md, the "incident rebuild" sections of issue 18)."""

from __future__ import annotations

from pipeline.categories import CategoryMap
from pipeline.warehouse import JOB_SYMPTOMS_FORMAT, UNKNOWN_CLUSTER

# Incidents are rebuilt from events: consecutive events of one node, category and GPU closer than
# the window belong to one incident (a storm of XID lines, or one fault reported by two sources).
# The GPU is gpu_index when known, else the PCI bus id of an XID line. Events whose cluster was
# unknown at ingest take the node's cluster from the inventory, whatever order files came in
# (looked up once per such node, not per event). An incident depends only on the events of its
# node, so an incremental rebuild reads only the events of the nodes in the temp table
# ``rebuild_nodes`` (``{nodes}``: _REBUILT_NODES; a full rebuild reads all, unfiltered). Where
# events of an incident tie in time, its job, message, xid and attributes come from the one with
# the smallest event_key, so the result does not depend on the order DuckDB happens to scan them
# in (incremental == full).
#
# Cost: one sort of 16-byte keys. Most events are incidents of their own (a canonical incidents
# file: 99.97% of 1 M rows), so the query first finds the few that are not: one window over the
# whole set, ordered by a 64-bit hash of the fault (cluster, node, category, GPU) and the time
# (microseconds), with no partitions (a window partitioned by the fault's four strings costs 3x
# as much: the strings are sort keys and most partitions hold one or two events). An event with
# no neighbour of the same hash within the window has none of its own fault either: it is an
# incident, written straight from its row. A hash collision can only make events look shared,
# never alone, and the shared ones are collapsed exactly, as before this shortcut: a window by the
# fault's strings, ordered by time and event_key, marks where incidents start and numbers the
# events (position); a second, by fault, numbers the incidents; a group-by collapses them. Job,
# message, xid and attributes are the first event's that has one (arg_min skips NULLs),
# pci_bus_id the smallest of the incident's (several only when one gpu_index was reported with
# different PCI ids). bench/RESULTS.md, "Issue 18, incident rebuild (h18b)": per million events
# of a canonical file 2.4 -> 1.3 CPU-s, of which writing the incident rows takes ~0.65 and their
# md5 ids ~0.25. When nearly every event shares its incident (Xid storms) the shortcut does not
# pay: the hash window and the semi- and anti-joins on the shared row ids come on top of the
# exact collapse. So the path is chosen first from a cheap statistic: the share of shared events
# among the events of a fixed sample of nodes (1 in 32 by hash); from STORM_SHARE on, every event
# goes through the exact collapse alone (both paths give the same rows; "Issue 18, incident
# rebuild on Xid storms (h18x)").
_RESOLVED = """
WITH listed AS (
    SELECT node_id, min(cluster_id) AS cluster_id
    FROM inventory
    WHERE node_id IN (SELECT node_id FROM events WHERE cluster_id = $unknown)
    GROUP BY node_id
), resolved AS NOT MATERIALIZED (
    SELECT e.rowid AS row_id, epoch_us(e.timestamp_utc) AS t, e.event_key, e.timestamp_utc,
           CASE WHEN e.cluster_id = $unknown THEN coalesce(l.cluster_id, e.cluster_id)
                ELSE e.cluster_id END AS cluster_id,
           e.node_id, e.category, coalesce(CAST(e.gpu_index AS VARCHAR), e.pci_bus_id) AS gpu_key,
           e.interrupting, e.gpu_index, e.resolved_at_utc, e.job_id, e.message, e.pci_bus_id, e.xid,
           e.failure_class, e.attributes
    FROM events e LEFT JOIN listed l ON l.node_id = e.node_id
    WHERE {nodes} AND e.source_format IS DISTINCT FROM $job_symptoms
)"""
_ALONE = """
SELECT row_id,
       -- NULL (no previous / next event) or another fault or more than the window apart
       coalesce(fault <> lag(fault) OVER w OR t - lag(t) OVER w > $window_us, true)
       AND coalesce(fault <> lead(fault) OVER w OR lead(t) OVER w - t > $window_us, true) AS alone
FROM (SELECT row_id, t, {fault_hash} AS fault FROM resolved WHERE {sample})
WINDOW w AS (ORDER BY fault, t)
"""
_LONE = """
    SELECT cluster_id, node_id, category, gpu_key, interrupting, gpu_index,
           timestamp_utc, timestamp_utc AS last_event_utc, resolved_at_utc, 1 AS events,
           job_id, message, pci_bus_id, xid, failure_class, attributes
    FROM resolved
    WHERE row_id NOT IN (SELECT row_id FROM shared)
    UNION ALL"""
_COLLAPSE = """, runs AS (
    SELECT row_id, cluster_id, node_id, category, gpu_key,
           coalesce(t - lag(t) OVER w > $window_us, true) AS starts_incident,
           first_value(row_id) OVER w AS fault_id, row_number() OVER w AS position
    FROM resolved
    {shared_only}
    WINDOW w AS (PARTITION BY cluster_id, node_id, category, gpu_key ORDER BY t, event_key)
), numbered AS (
    SELECT *, count(*) FILTER (WHERE starts_incident)
                  OVER (PARTITION BY fault_id ORDER BY position ROWS UNBOUNDED PRECEDING) AS incident_seq
    FROM runs
), grouped AS (
    SELECT any_value(n.cluster_id) AS cluster_id, any_value(n.node_id) AS node_id,
           any_value(n.category) AS category, any_value(n.gpu_key) AS gpu_key,
           bool_or(e.interrupting) AS interrupting, any_value(e.gpu_index) AS gpu_index,
           min(e.timestamp_utc) AS timestamp_utc, max(e.timestamp_utc) AS last_event_utc,
           max(e.resolved_at_utc) AS resolved_at_utc, count(*) AS events,
           arg_min(e.job_id, n.position) AS job_id, arg_min(e.message, n.position) AS message,
           min(e.pci_bus_id) AS pci_bus_id, arg_min(e.xid, n.position) AS xid,
           any_value(e.failure_class) AS failure_class, arg_min(e.attributes, n.position) AS attributes
    FROM numbered n JOIN events e ON e.rowid = n.row_id
    GROUP BY n.fault_id, n.incident_seq
), collapsed AS ({lone}
    SELECT * FROM grouped
)
SELECT CAST(md5_number(concat_ws(chr(31), cluster_id, node_id, category, coalesce(gpu_key, ''),
                                 CAST(timestamp_utc AS VARCHAR))) >> 65 AS BIGINT) AS incident_id,
       * EXCLUDE (gpu_key)
FROM collapsed
"""
_REBUILT_NODES = "e.node_id IN (SELECT node_id FROM rebuild_nodes)"
_FAULT_HASH = "hash(cluster_id, node_id, category, gpu_key)"  # tests replace it with a colliding one
_SAMPLE = "hash(node_id) % 32 = 0"  # the nodes whose events estimate the share of shared events
STORM_SHARE = 0.5
"""Share of shared events (in the sample of nodes) from which the rebuild collapses every event
exactly instead of finding the lone ones first (tests set 0 or 2 to force either path)."""


_SHARED_CTE = ", shared AS MATERIALIZED (SELECT row_id FROM ({alone}) WHERE NOT alone)"
_INSERT_INCIDENTS = "INSERT INTO incidents BY NAME {resolved}{shared}{collapse}"
_SHARE_QUERY = "{resolved} SELECT avg(CAST(NOT alone AS INTEGER)) FROM ({alone})"


def _insert_incidents(nodes: str, *, shortcut: bool) -> str:
    """The rebuild's INSERT for the events of ``nodes`` (a condition on ``e``): with ``shortcut``,
    lone events are found by the hash window and written straight from their rows, and only the
    shared ones go through the exact collapse; without it, every event does."""
    shared = _SHARED_CTE.format(alone=_ALONE) if shortcut else ""
    query = _INSERT_INCIDENTS.format(resolved=_RESOLVED, shared=shared, collapse=_COLLAPSE)
    return query.format(
        nodes=nodes,
        fault_hash=_FAULT_HASH,
        sample="true",
        shared_only="WHERE row_id IN (SELECT row_id FROM shared)" if shortcut else "",
        lone=_LONE if shortcut else "",
    )


def _shared_share(con, nodes: str, params: dict) -> float | None:
    """The share of events with a neighbour of the same fault hash within the window, among the
    events of a fixed sample of nodes (None without any): the cheap statistic that chooses the
    rebuild's path."""
    query = _SHARE_QUERY.format(resolved=_RESOLVED, alone=_ALONE)
    query = query.format(nodes=nodes, fault_hash=_FAULT_HASH, sample=_SAMPLE)
    return con.execute(query, params).fetchall()[0][0]


# Nodes that can have changed since the last build: those with events from newer files, and every
# node with an event of unknown cluster (its cluster comes from the inventory, which may have
# changed; such events are few: kernel logs ingested without --cluster).
_REBUILD_NODES = """
CREATE OR REPLACE TEMP TABLE rebuild_nodes AS
SELECT DISTINCT node_id FROM events
WHERE file_id > $through_file_id OR changed_file_id > $through_file_id OR cluster_id = $unknown
"""


def rebuild_incidents(
    con, *, window_seconds: float = 600.0, category_map: str | None = None, full: bool = False
) -> None:
    """Bring ``incidents`` up to date with ``events`` (call inside a transaction).

    Incremental by default: only the nodes that received events since the last build (and nodes
    with events of unknown cluster) are recomputed, which gives the same table as a full rebuild
    because an incident never spans two nodes. A full rebuild runs when asked (``full``), when the
    window or the category map (``CategoryMap.fingerprint``, default: no user entries) changed, or
    when the warehouse has no record of a previous build.
    """
    category_map = CategoryMap().fingerprint if category_map is None else category_map
    built = con.sql("SELECT window_seconds, through_file_id, category_map FROM incidents_built").fetchall()
    through = con.sql(
        "SELECT coalesce(max(greatest(file_id, coalesce(changed_file_id, 0))), 0) FROM events"
    ).fetchall()[0][0]
    full = full or not built or built[0][0] != window_seconds or built[0][2] != category_map
    window_us = con.sql("SELECT epoch_us(to_seconds(CAST(? AS DOUBLE)))", params=[window_seconds])
    params = {
        "window_us": window_us.fetchall()[0][0],
        "unknown": UNKNOWN_CLUSTER,
        "job_symptoms": JOB_SYMPTOMS_FORMAT,
    }
    if full:
        nodes = "true"
        con.execute("DELETE FROM incidents")
    else:
        nodes = _REBUILT_NODES
        con.execute(_REBUILD_NODES, {"through_file_id": built[0][1], "unknown": UNKNOWN_CLUSTER})
        con.execute("DELETE FROM incidents WHERE node_id IN (SELECT node_id FROM rebuild_nodes)")
    share = _shared_share(con, nodes, params)
    con.execute(_insert_incidents(nodes, shortcut=(share or 0) < STORM_SHARE), params)
    if not full:
        con.execute("DROP TABLE rebuild_nodes")
    con.execute("DELETE FROM incidents_built")
    con.execute(
        "INSERT INTO incidents_built VALUES ($window_seconds, $through, $category_map)",
        {"window_seconds": window_seconds, "through": through, "category_map": category_map},
    )
