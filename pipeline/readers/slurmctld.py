"""Node failures in ``slurmctld`` logs -> ``events``.

Messages read (the printf strings of SchedMD/slurm; everything else slurmctld logs is ignored):

* ``error("Nodes %s not responding, setting DOWN", hostlist)`` (src/slurmctld/ping_nodes.c): each
  node of the hostlist, category ``Not responding`` - the reason the same code sets on the node,
  so it matches the ``sacctmgr`` event of that outage;
* ``info("update_node: node %s reason set to: %s")`` and ``info("update_node: node %s state set to
  %s")`` (src/slurmctld/node_mgr.c; ``scontrol update ... state=DRAIN reason=...``): one event per
  node and second, category = the reason (the state when no reason line came with it); state lines
  to other than an outage state (IDLE, RESUME ...) are ignored; the second line of a reason + state
  pair counts as a duplicate of the pair's event;
* ``Killing JobId=%u on failed node %s`` (src/slurmctld/job_mgr.c; ``%pS`` prints ``JobId=N``,
  array tasks ``JobId=N_T(ID)``; Slurm before 20.02: ``Killing job_id %u on failed node %s``):
  an event with job_id, taking the category of the node's nearest outage event in the file within
  :data:`PAIR_SECONDS`, so the rebuild merges it into that incident and the incident names the job;
  ``Killed job on failed node`` when there is none.

Line prefixes (src/common/log.c, ``LogTimeFormat``): ``[2024-05-01T12:00:00.123]`` (iso8601_ms,
the default; iso8601 without milliseconds; rfc5424/rfc3339 with an offset), ``[May 01 12:00:00]``
(short), and syslog (``SlurmctldSyslogDebug``): ``May  1 12:00:00 head slurmctld[1533]: ...`` or
RFC 3339 ``2024-05-01T12:00:00.123456+00:00 head slurmctld[1533]: ...``. Times without an offset
are in ``timezone``; times without a year get one as in :mod:`.syslog_years` (``year``, else the
file's modification time, with New Year rollovers). A failure line without a usable time
(``LogTimeFormat=clock`` or ``thread_id``) is rejected with the reason.
"""

from __future__ import annotations

import re

import polars as pl

from pipeline.readers import hostlist
from pipeline.readers.contract import Head, ReadContext
from pipeline.readers.lines import LINE_REASONS, LINE_SCHEMA
from pipeline.readers.slurm_events import state_base
from pipeline.readers.syslog_years import MONTHS, syslog_base_year, year_offsets
from pipeline.store import staging
from pipeline.store.files import FileSummary, account_lines
from pipeline.warehouse import UNKNOWN_CLUSTER
from pipeline.xid import KERNEL_XID

PAIR_SECONDS = 600
NOT_RESPONDING = "Not responding"
KILLED_WITHOUT_CAUSE = "Killed job on failed node"

_MON = "(?:" + "|".join(MONTHS) + ")"

_ISO_TIME = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
_PREFIX = (
    rf"^(?:\[(?<b_iso>{_ISO_TIME})\]"
    rf"|\[(?<s_mon>{_MON}) (?<s_day>[ \d]?\d) (?<s_hms>\d{{2}}:\d{{2}}:\d{{2}})(?:\.\d+)?\]"
    rf"|(?<y_iso>{_ISO_TIME})\s+\S+"
    rf"|(?<y_mon>{_MON})\s+(?<y_day>\d{{1,2}})\s+(?<y_hms>\d{{2}}:\d{{2}}:\d{{2}})\s+\S+)"
    r"\s+(?:[\w.-]+\[\d+\]:\s*|slurmctld:\s*)?(?<message>.*)$"
)
_MESSAGES = {
    "down": r"Nodes (?<down_hosts>\S+) not responding, setting DOWN",
    "reason": r"update_node: node (?<reason_host>\S+) reason set to: (?<reason_text>.*)$",
    "state": r"update_node: node (?<state_host>\S+) state set to (?<state_name>\S+)",
    "kill": r"Killing (?:JobId=|job_id )(?<job>[0-9][^\s(]*)\S* on failed node (?<kill_host>\S+)",
}

_SCHEMA = {
    **LINE_SCHEMA,
    "kind": pl.String,
    "iso": pl.String,
    "month": pl.Int32,
    "day": pl.Int32,
    "hms": pl.String,
    "year_offset": pl.Int32,
    "hosts": pl.String,
    "detail": pl.String,
    "job_id": pl.String,
    "message": pl.String,
    "nodes": pl.List(pl.String),
    "hostlist_error": pl.String,
}


def _parse_batch(frame: pl.DataFrame, carry: tuple[int | None, int]) -> tuple[pl.DataFrame, tuple]:
    year_offset, carry = year_offsets(frame, carry, prefix=r"\[?")
    kind = pl.lit(None, pl.String)
    for name, pattern in reversed(_MESSAGES.items()):
        kind = pl.when(pl.col("text").str.contains(pattern)).then(pl.lit(name)).otherwise(kind)
    typed = frame.with_columns(year_offset=year_offset, kind=kind).filter(
        pl.col("kind").is_not_null() | pl.col("truncated")
    )
    parts = typed.with_columns(
        pl.col("text").str.extract_groups(_PREFIX).alias("p"),
        *[pl.col("text").str.extract_groups(p).alias(n) for n, p in _MESSAGES.items()],
    ).unnest("p", *_MESSAGES)
    staged = parts.select(
        "line",
        "text",
        "bad_utf8",
        "truncated",
        "kind",
        pl.coalesce("b_iso", "y_iso").alias("iso"),
        pl.coalesce("s_mon", "y_mon")
        .replace_strict(MONTHS, default=None, return_dtype=pl.Int32)
        .alias("month"),
        pl.coalesce("s_day", "y_day").str.strip_chars().cast(pl.Int32).alias("day"),
        pl.coalesce("s_hms", "y_hms").alias("hms"),
        "year_offset",
        pl.coalesce("down_hosts", "reason_host", "state_host", "kill_host").alias("hosts"),
        pl.coalesce(pl.col("reason_text").str.strip_chars(), "state_name").alias("detail"),
        pl.col("job").alias("job_id"),
        pl.coalesce("message", "text").str.strip_chars().alias("message"),
    ).filter(  # a state change to IDLE, RESUME ... is no failure
        (pl.col("kind") != "state").fill_null(True) | state_base(pl.col("detail")).is_not_null()
    )
    expanded = staged.join(hostlist.expand_frame(staged["hosts"]), on="hosts", how="left")
    return expanded.cast(_SCHEMA).select(list(_SCHEMA)), carry


_STAGE = f"""
CREATE OR REPLACE TEMP TABLE slurmctld_parsed AS
WITH timed AS (
    SELECT *,
           CASE WHEN iso IS NOT NULL THEN TRY_CAST(iso AS TIMESTAMPTZ)
                WHEN month IS NOT NULL THEN TRY_CAST(TRY_CAST(
                    printf('%04d-%02d-%02d %s', $base_year + year_offset, month, day, hms) AS TIMESTAMP)
                    AS TIMESTAMPTZ)
           END AS ts
    FROM slurmctld_lines
)
SELECT *,
       CASE
         {LINE_REASONS}
         WHEN iso IS NULL AND month IS NULL
           THEN 'no date: expected Slurm''s [2024-05-01T12:00:00.123] prefix or a syslog prefix '
                || '(LogTimeFormat=clock or thread_id logs carry none)'
         WHEN ts IS NULL THEN 'timestamp ' || coalesce(iso, printf('%02d-%02d %s', month, day, hms))
                              || ' is not a valid date and time'
         WHEN hostlist_error IS NOT NULL THEN hostlist_error
       END AS reason
FROM timed
"""  # noqa: S608 - LINE_REASONS is a constant

# One row per node and event: update_node lines of one node within one second are one event
# (category: the reason, else the state); kills take the category of the node's nearest outage
# within $pair_seconds, the earlier line on equal distance. The nearest outage is the nearer of two
# as-of matches (the node's last outage at or before the kill, its first at or after), so the
# match costs a sort of kills and outages, not kills x outages per node; outages of one node and
# second are reduced to their first line before, so an as-of match has no ties to break.
_EVENTS = """
CREATE OR REPLACE TEMP TABLE slurmctld_events AS
WITH per_node AS (
    SELECT line, timezone('UTC', ts) AS ts, kind, unnest(nodes) AS node_id, detail, job_id, message
    FROM slurmctld_parsed WHERE reason IS NULL
), outages AS (
    SELECT line, ts, node_id, $not_responding AS category, message, 'down' AS grp
    FROM per_node WHERE kind = 'down'
    UNION ALL
    SELECT min(line), min(ts), node_id,
           coalesce(max(detail) FILTER (WHERE kind = 'reason'), max(detail) FILTER (WHERE kind = 'state')),
           string_agg(message, '; ' ORDER BY line),
           'update_node|' || CAST(date_trunc('second', ts) AS VARCHAR)
    FROM per_node WHERE kind IN ('reason', 'state')
    GROUP BY node_id, date_trunc('second', ts)
), outage_times AS (
    SELECT node_id, ts, min(line) AS line, arg_min_null(category, line) AS category
    FROM outages GROUP BY node_id, ts
), kill_rows AS (
    SELECT DISTINCT line, ts, node_id, message, job_id FROM per_node WHERE kind = 'kill'
), before AS (
    SELECT k.line, k.node_id, o.line AS o_line, o.category, epoch(k.ts) - epoch(o.ts) AS distance
    FROM kill_rows k ASOF JOIN outage_times o ON o.node_id = k.node_id AND o.ts <= k.ts
), after AS (
    SELECT k.line, k.node_id, o.line AS o_line, o.category, epoch(o.ts) - epoch(k.ts) AS distance
    FROM kill_rows k ASOF JOIN outage_times o ON o.node_id = k.node_id AND o.ts >= k.ts
), nearest AS (
    SELECT line, node_id, arg_min_null(category, (distance, o_line)) AS category
    FROM (SELECT * FROM before UNION ALL SELECT * FROM after)
    WHERE abs(distance) <= $pair_seconds
    GROUP BY line, node_id
), kills AS (
    SELECT k.line, k.ts, k.node_id, coalesce(n.category, $killed) AS category, k.message,
           'kill|' || k.job_id AS grp, k.job_id
    FROM kill_rows k LEFT JOIN nearest n USING (line, node_id)
), rows AS (
    SELECT *, NULL AS job_id FROM outages
    UNION ALL
    SELECT * FROM kills
)
SELECT r.*, md5(concat_ws(chr(31), $format, CAST(CASE WHEN grp LIKE 'update_node|%' THEN NULL ELSE ts END
                                                 AS VARCHAR), node_id, grp)) AS event_key
FROM rows r
"""

# interrupting = true is the source's own flag (every event read here took a node out of service):
# the taxonomy step (pipeline.store.taxonomy) keeps it as source_interrupting; only the user's
# --category-map / [categories] entry overrides it.
_INSERT = """
INSERT INTO events (event_key, file_id, line, timestamp_utc, cluster_id, node_id, category, interrupting,
                    gpu_index, job_id, message, resolved_at_utc, xid, pci_bus_id, source_format)
SELECT event_key, $file_id, line, ts, $cluster, node_id, category, true,
       NULL, job_id, message, NULL, NULL, NULL, $format
FROM slurmctld_events s
WHERE line = (SELECT min(line) FROM slurmctld_events t WHERE t.event_key = s.event_key)
  AND NOT EXISTS (SELECT 1 FROM events e WHERE e.event_key = s.event_key)
"""


def read(ctx: ReadContext) -> FileSummary:
    """One slurmctld log; the caller holds the transaction and the session time zone. Only the
    failure lines are kept while the log streams by; every line is counted."""
    con, path, cluster = ctx.con, ctx.path, ctx.options.cluster
    summary = ctx.open_file("node_events")
    file_id = summary.file_id
    staging.create(con, "slurmctld_lines", _SCHEMA)
    carry: tuple[int | None, int] = (None, 0)
    for frame in ctx.lines():
        summary.rows_read += frame.height
        parsed, carry = _parse_batch(frame, carry)
        staging.append(con, "slurmctld_lines", parsed)
    undated = con.sql("SELECT count(*) FROM slurmctld_lines WHERE month IS NOT NULL").fetchall()[0][0]
    base_year = syslog_base_year(path, ctx.options.year, carry, summary) if undated else 0
    con.execute(_STAGE, {"base_year": base_year})
    con.execute(
        _EVENTS,
        {
            "not_responding": NOT_RESPONDING,
            "killed": KILLED_WITHOUT_CAUSE,
            "pair_seconds": PAIR_SECONDS,
            "format": ctx.fmt,
        },
    )
    con.execute(_INSERT, {"file_id": file_id, "cluster": cluster or UNKNOWN_CLUSTER, "format": ctx.fmt})
    events, lines = con.sql(
        "SELECT count(*), count(DISTINCT line) FROM events WHERE file_id = ?", params=[file_id]
    ).fetchall()[0]
    summary.rows_ingested = lines
    account_lines(con, summary, "slurmctld_parsed")
    if events > lines:
        summary.notes.append(f"{events} node event(s) from {lines} line(s) naming hostlists")
    if cluster is None:
        summary.notes.append("cluster_id not given (--cluster): taken from the inventory by node name")
    staging.drop(con, "slurmctld_events", "slurmctld_parsed", "slurmctld_lines")
    return summary


# Slurm's own log prefix ([2024-05-01T12:00:00.123]: LogTimeFormat iso8601[_ms], rfc5424, rfc3339;
# [May 01 12:00:00]: short) or a syslog line of slurmctld. A file that also has kernel Xid lines is
# read as a kernel log: a drain reason may say "Xid 79", a kernel line says "Xid (PCI:0000:18:00): 79".
_SLURMCTLD_LINE = re.compile(
    r"^\[(?:\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{2} \d{2}:\d{2}:\d{2})\] "
    r"|\bslurmctld(?:\[\d+\])?: ",
    re.M,
)


def is_slurmctld(head: Head) -> bool:
    return KERNEL_XID.search(head.text) is None and _SLURMCTLD_LINE.search(head.text) is not None
