"""Slurm node events (``sacctmgr show event -P``, or ``-p`` with a trailing ``|``) -> ``events``.

Source: SchedMD/slurm src/sacctmgr/event_functions.c (``sacctmgr_list_event``) and
src/sacctmgr/common.c (column names). The header line names the columns, in any order (export
without ``-n``/``--noheader``); ``Format=`` chooses them, the default being
``Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User``. Needed: NodeName, TimeStart, State;
used when present: TimeEnd, Reason, User, Cluster, Event. Times are printed by
``slurm_make_time_str`` (src/common/parse_time.c): ``%FT%T`` in the exporting host's time zone (give
it with ``timezone``), epoch seconds with ``SLURM_TIME_FORMAT=%s``; ``Unknown`` is an unset time, so
a TimeEnd of ``Unknown`` (or empty) is an open event: the node is still out of service.

State is ``node_state_string_compact`` (src/common/slurm_protocol_defs.c): a base word plus flag
characters (``DOWN*``: not responding, ``DRAIN$``: maintenance ...). The outage states are
:data:`OUTAGE_STATES` (DOWN; DRAIN, DRNG = draining, and the long forms DRAINED, DRAINING; FAIL,
FAILG = failing, FAILING); each such event becomes one event row per node of NodeName (a hostlist,
expanded): timestamp = TimeStart, resolved_at = TimeEnd, category = the Reason verbatim (the
state's base word when the reason is empty; the taxonomy is applied centrally, never here), message
= state, reason and ``set by USER``.

Ignored lines (counted, not rejected): blank lines, repeated header lines, cluster events (Event
``Cluster`` or no NodeName: a cluster's CPU count changed, no node failed) and node events in
other states (IDLE, MAINT, reservation states ...). A Reason that contains ``|`` yields more fields
than the header: the extra fields are joined back into the Reason (the only free-text column).

Event key: (reader, cluster, UTC start, node, category). A later export of the same event that now
has a TimeEnd fills in ``resolved_at`` of the stored event (the line counts as ingested); otherwise
the line is a duplicate.
"""

from __future__ import annotations

import polars as pl

from pipeline.readers import hostlist
from pipeline.readers.contract import Head, ReadContext
from pipeline.readers.slurm_pipe import (
    PIPE_REASONS,
    Header,
    PipeExport,
    pipe_columns,
    slurm_time,
    stage_pipe_export,
)
from pipeline.store import events, staging
from pipeline.store.files import FileSummary, account_lines, count
from pipeline.warehouse import UNKNOWN_CLUSTER

REQUIRED = ("nodename", "timestart", "state")
OPTIONAL = ("timeend", "reason", "user", "cluster", "event")
OUTAGE_STATES = ("DOWN", "DRAIN", "DRNG", "DRAINED", "DRAINING", "FAIL", "FAILG", "FAILING")


def state_base(state: pl.Expr) -> pl.Expr:
    """The outage word of a Slurm node state (``DOWN*`` -> DOWN, ``IDLE+DRAIN`` -> DRAIN), else
    null: flag characters (``*$@#~!%^+``) stripped, each ``+``-joined part tried in turn."""
    words = state.str.to_uppercase().str.split("+").list.eval(pl.element().str.strip_chars("*$@#~!%^ "))
    return words.list.eval(pl.element().filter(pl.element().is_in(OUTAGE_STATES))).list.first()


def _parse_batch(frame: pl.DataFrame, header_fields: Header) -> pl.DataFrame:
    header, columns, expected = header_fields
    trailing = header.endswith("|")
    text = pl.col("text").str.strip_suffix("|") if trailing else pl.col("text")
    split = frame.with_columns(parts=text.str.split("|")).with_columns(
        fields=pl.col("parts").list.len().cast(pl.Int32)
    )
    reason_at = columns.get("reason")
    # fields past the header's count belong to a Reason that contains '|'
    extra = (pl.col("fields") - expected).clip(lower_bound=0) if reason_at is not None else pl.lit(0)

    def field(name: str) -> pl.Expr:
        if name not in columns:
            return pl.lit(None, pl.String)
        at = columns[name]
        if name == "reason":
            return pl.col("parts").list.slice(at, extra + 1).list.join("|").str.strip_chars()
        index = pl.lit(at) + extra if reason_at is not None and at > reason_at else pl.lit(at)
        return pl.col("parts").list.get(index, null_on_oob=True).str.strip_chars()

    fields = split.select(
        "line",
        "text",
        "bad_utf8",
        "truncated",
        pl.col("fields") - extra,
        *[field(c).alias(c) for c in (*REQUIRED, *OPTIONAL)],
    ).with_columns(state_base=state_base(pl.col("state")))
    cluster_event = (pl.col("nodename").fill_null("x") == "") | (
        pl.col("event").str.to_lowercase().fill_null("") == "cluster"
    )
    other_state = (pl.col("state").fill_null("") != "") & pl.col("state_base").is_null()
    keep = fields.filter(
        pl.col("truncated")
        | (pl.col("text").str.strip_chars() != "")
        & (pl.col("text") != header)
        & ~cluster_event
        & ~(other_state & (pl.col("fields") == expected))
    )
    return keep.join(hostlist.expand_frame(keep["nodename"]), on="nodename", how="left").cast(_EXPORT.schema)


_STAGE = f"""
CREATE OR REPLACE TEMP TABLE slurm_events_parsed AS
WITH typed AS (
    SELECT *, {slurm_time("timestart")} AS start_ts, {slurm_time("timeend")} AS end_ts
    FROM slurm_events_lines
)
SELECT *,
       CASE
         {PIPE_REASONS}
         WHEN state IS NULL OR state = '' THEN 'State is empty'
         WHEN start_ts IS NULL THEN 'TimeStart ' || coalesce(timestart, '') || ' is not a time '
                                    || '(ISO 8601 or epoch seconds)'
         WHEN end_ts IS NULL AND coalesce(timeend, '') NOT IN ('', 'Unknown', 'None')
           THEN 'TimeEnd ' || timeend || ' is not a time (ISO 8601 or epoch seconds)'
         WHEN end_ts < start_ts THEN 'TimeEnd is before TimeStart'
         WHEN hostlist_error IS NOT NULL THEN hostlist_error
       END AS reason_rejected
FROM typed
"""  # noqa: S608 - slurm_time() of fixed column names

# One row per node. interrupting = true is the source's own flag (every outage state takes the node
# from its jobs): the taxonomy step (pipeline.store.taxonomy) keeps it as source_interrupting, and
# only the user's --category-map / [categories] entry overrides it.
_NODES = """
CREATE OR REPLACE TEMP TABLE slurm_events_nodes AS
WITH per_node AS (
    SELECT line, timezone('UTC', start_ts) AS ts, timezone('UTC', end_ts) AS resolved,
           coalesce(nullif(cluster, ''), $cluster) AS cluster_id, unnest(nodes) AS node_id,
           coalesce(nullif(reason, ''), state_base) AS category, true AS interrupting,
           concat_ws(' ', state || ':', nullif(reason, ''),
                     '(set by ' || nullif(user, '') || ')') AS message
    FROM slurm_events_parsed WHERE reason_rejected IS NULL
)
SELECT *, md5(concat_ws(chr(31), $format, cluster_id, CAST(ts AS VARCHAR), node_id, category)) AS event_key
FROM per_node
"""

# Lines that add an event (the first line of each new key) or close a stored open one.
_STATUS = """
CREATE OR REPLACE TEMP TABLE slurm_events_status AS
SELECT n.*,
       CASE WHEN e.event_key IS NULL
                 AND line = min(line) OVER (PARTITION BY n.event_key) THEN 'new'
            WHEN e.event_key IS NOT NULL AND e.resolved_at_utc IS NULL AND n.resolved IS NOT NULL
                 AND line = min(line) FILTER (WHERE n.resolved IS NOT NULL)
                            OVER (PARTITION BY n.event_key) THEN 'resolves'
       END AS status
FROM slurm_events_nodes n
LEFT JOIN (SELECT DISTINCT ON (event_key) event_key, resolved_at_utc FROM events) e
       ON e.event_key = n.event_key
"""

_CLOSINGS = """
SELECT event_key, resolved AS resolved_utc, line FROM slurm_events_status WHERE status = 'resolves'
"""
_WRITE = """
INSERT INTO events (event_key, file_id, line, timestamp_utc, cluster_id, node_id, category, interrupting,
                    gpu_index, job_id, message, resolved_at_utc, xid, pci_bus_id, source_format)
SELECT event_key, $file_id, line, ts, cluster_id, node_id, category, interrupting,
       NULL, NULL, message, resolved, NULL, NULL, $format
FROM slurm_events_status WHERE status = 'new';
"""


_EXPORT = PipeExport(
    what="sacctmgr event",
    export="sacctmgr -P show event Format=Cluster,NodeName,TimeStart,TimeEnd,State,Reason,User (header kept)",
    required=REQUIRED,
    optional=OPTIONAL,
    table="slurm_events_lines",
    parse=_parse_batch,
    derived=("state_base",),
)


def read(ctx: ReadContext) -> FileSummary:
    """One ``sacctmgr show event -P`` export; the caller holds the transaction and the session
    time zone. Lines are counted (read = ingested + duplicate + rejected + ignored); a line whose
    NodeName names several nodes gives one event per node, stated in a note."""
    con, cluster = ctx.con, ctx.options.cluster
    summary = ctx.open_file("node_events")
    header = stage_pipe_export(ctx, _EXPORT, summary)
    con.execute(_STAGE, {"fields": header[2]})
    con.execute(_NODES, {"cluster": cluster or UNKNOWN_CLUSTER, "format": ctx.fmt})
    con.execute(_STATUS)
    new_events, lines, resolved, new_lines = con.sql(
        "SELECT count(*) FILTER (WHERE status = 'new'),"
        " count(DISTINCT line) FILTER (WHERE status IS NOT NULL),"
        " count(*) FILTER (WHERE status = 'resolves'), count(DISTINCT line) FILTER (WHERE status = 'new')"
        " FROM slurm_events_status"
    ).fetchall()[0]
    events.close_open_events(con, _CLOSINGS, summary.file_id)
    con.execute(_WRITE, {"file_id": summary.file_id, "format": ctx.fmt})
    summary.rows_ingested = lines
    account_lines(con, summary, "slurm_events_parsed", reason="reason_rejected")
    if new_events > new_lines:
        summary.notes.append(f"{new_events} node event(s) from {new_lines} line(s) naming hostlists")
    if resolved:
        summary.notes.append(f"{resolved} stored open event(s) closed by a TimeEnd in this export")
    open_events = count(
        con, "SELECT count(*) FROM slurm_events_status WHERE status = 'new' AND resolved IS NULL"
    )
    if open_events:
        summary.notes.append(f"{open_events} event(s) still open (TimeEnd Unknown): node out of service")
    if cluster is None and "cluster" not in header[1]:
        summary.notes.append("cluster_id not given (--cluster): taken from the inventory by node name")
    staging.drop(
        con, "slurm_events_status", "slurm_events_nodes", "slurm_events_parsed", "slurm_events_lines"
    )
    return summary


def is_slurm_events(head: Head) -> bool:
    """A ``|``-separated header naming NodeName and TimeStart."""
    return "|" in head.first_line and {"nodename", "timestart"} <= pipe_columns(head.first_line)
