"""How a staged batch of canonical incidents is stored: its new events, deduplicated against the
earlier batches and the stored rows by content key (see :mod:`.canonical_checks`), and the stored
open events it closes (a ticket exported while open, then again once resolved); and the one-time
migration of keys stored while the key still depended on the session's time zone.

Kept apart from :mod:`pipeline.readers.canonical` (which reads, validates and accounts for the
file) because this is the part that must stay exactly right for re-ingests and exactly cheap for
first ingests.
SQL reads the batch (``staged``) and the file's categories (``classes``) by their Python names.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
import pyarrow as pa

from pipeline import warehouse
from pipeline.store import events
from pipeline.store.files import count, now_utc


def incident_key_sql(time_utc: str) -> str:
    """The content key of an incident row, over the staged or the stored columns; ``time_utc`` is
    an expression of its time as a UTC TIMESTAMP. The time goes in as UTC text whatever the
    session's time zone (``--timezone``): the key was once the text of the TIMESTAMPTZ, which
    carries the session's offset, so the same row ingested under UTC and then under
    Europe/Berlin was stored twice. The text is the one the old key had under UTC ('+00'), so keys
    stored under UTC stay valid; :func:`rekey_stored_incidents` redoes the others."""
    return f"""md5(concat_ws(chr(31), CAST({time_utc} AS VARCHAR) || '+00', cluster_id, node_id,
                       lower(category), CAST(gpu_index AS VARCHAR), coalesce(message, '')))"""


# A batch's new events: its valid rows, less those whose event key an earlier row has (an earlier
# file, an earlier batch of this file, a smaller line of this batch). The two checks cost as much
# as the insert itself, so each runs only when it can find something (_BATCH_FACTS): the batch's
# first row per key only when two of its keys share a 64-bit hash, the stored rows only when some
# lie within the batch's time range (the same key means the same time), read by that range so
# DuckDB skips the row groups outside it. A first ingest of a file in time order needs neither.
# The facts take in the rejected rows too (half the cost): that can only make a check run.
# The range goes out as text: Python has no datetime for years past 9999.
_BATCH_FACTS = """
SELECT CAST(timezone('UTC', min(ts)) AS VARCHAR), CAST(timezone('UTC', max(ts)) AS VARCHAR),
       count(*) > count(DISTINCT hash(event_key)), count(resolved_at) > 0
FROM staged
"""
_STORED_IN_RANGE = """
SELECT count(*) > 0
FROM (SELECT 1 FROM events WHERE timestamp_utc BETWEEN CAST($lo AS TIMESTAMP) AND CAST($hi AS TIMESTAMP)
      LIMIT 1)
"""
# ``classes``: the taxonomy's verdict on the file's categories (taxonomy.classes_frame; no rows when
# the rows are left for taxonomy.classify_new_events), set as that step would (no source flag).
_INSERT_EVENTS = """
INSERT INTO events (event_key, file_id, line, timestamp_utc, cluster_id, node_id, category, interrupting,
                    gpu_index, job_id, message, resolved_at_utc, source_format, attributes, failure_class)
SELECT event_key, $file_id, line, timezone('UTC', ts), cluster_id, node_id, category,
       coalesce(c.user_interrupting, c.interrupting), gpu_index, job_id, message,
       timezone('UTC', resolved_at), 'canonical', attributes, c.failure_class
FROM staged s LEFT JOIN classes c USING (category)
WHERE reason IS NULL
"""
_FIRST_IN_BATCH = """
  AND (event_key, line) IN (SELECT event_key, min(line) FROM staged WHERE reason IS NULL GROUP BY event_key)
"""
_NOT_STORED = """
  AND NOT EXISTS (SELECT 1 FROM events e
                  WHERE e.timestamp_utc BETWEEN CAST($lo AS TIMESTAMP) AND CAST($hi AS TIMESTAMP)
                    AND e.event_key = s.event_key AND e.timestamp_utc = timezone('UTC', s.ts))
"""


# A ticket exported open and exported again once resolved: the later row is the same event (the
# key leaves resolved_at out) and closes the stored one, which the incremental rebuild then
# revisits (changed_file_id). Of several closing rows the first line's time closes it; a stored
# closing time is never changed (re-ingesting an older export changes nothing), and rows that
# give another are counted in a note. A daily export of every ticket repeats all of them: one
# join of its rows with an end against the stored events finds both counts, and the UPDATE (and
# a second count, as it changes what "another" means) runs only when something is open.
_CLOSING_ROWS = """
SELECT count(*) FILTER (WHERE e.resolved_at_utc IS NULL),
       count(*) FILTER (WHERE e.resolved_at_utc <> s.resolved_utc)
FROM (SELECT event_key, make_timestamp(epoch_us(resolved_at)) AS resolved_utc
      FROM staged WHERE reason IS NULL AND resolved_at IS NOT NULL) s
JOIN events e
  ON e.event_key = s.event_key AND e.timestamp_utc BETWEEN CAST($lo AS TIMESTAMP) AND CAST($hi AS TIMESTAMP)
"""
# The rows of a batch that give an end, for pipeline.store.events.close_open_events.
_CLOSINGS = """
SELECT event_key, make_timestamp(epoch_us(resolved_at)) AS resolved_utc, line
FROM staged WHERE reason IS NULL AND resolved_at IS NOT NULL
"""


@dataclass
class Closings:
    """What a file's rows did to stored open events: closed them, or gave another closing time."""

    closed: int = 0
    other_time: int = 0

    def notes(self) -> list[str]:
        notes = []
        if self.closed:
            notes.append(f"{self.closed} stored open incident(s) closed by this file's resolved_at")
        if self.other_time:
            notes.append(
                f"{self.other_time} row(s) give another resolved_at for an incident already closed:"
                " the stored time is kept (a file ingested earlier closed it)"
            )
        return notes


def insert_new_events(con, staged: pa.Table, classes: pl.DataFrame, file_id: int, closings: Closings) -> None:
    """Store the staged batch's new events (see :data:`_INSERT_EVENTS`) and close stored open ones
    (:func:`pipeline.store.events.close_open_events`); SQL reads ``staged`` and ``classes`` by name."""
    lo, hi, repeated, resolves = con.sql(_BATCH_FACTS).fetchall()[0]
    if lo is None:  # no valid row
        return
    stored = count(con, _STORED_IN_RANGE, {"lo": lo, "hi": hi})
    sql = _INSERT_EVENTS + (_FIRST_IN_BATCH if repeated else "") + (_NOT_STORED if stored else "")
    con.execute(sql, {"file_id": file_id} | ({"lo": lo, "hi": hi} if stored else {}))
    if resolves and (stored or repeated):
        window = {"lo": lo, "hi": hi}
        open_rows, other_time = con.execute(_CLOSING_ROWS, window).fetchone()
        if open_rows:
            closings.closed += events.close_open_events(
                con, _CLOSINGS, file_id, window=(lo, hi), staged=staged
            )
            other_time = con.execute(_CLOSING_ROWS, window).fetchone()[1]
        closings.other_time += other_time


REKEY = "canonical_key_utc"
# Stored canonical events whose key is not the one :func:`incident_key_sql` gives their stored
# columns (time in UTC, cluster, node, category as written, GPU, message): they were ingested
# under a session time zone other than UTC. Only rows of incidents files: a warehouse from before
# ``source_format`` existed has its kernel-log events labelled canonical by the column's default.
_REKEYED = f"""
CREATE OR REPLACE TEMP TABLE rekeyed AS
SELECT row_id, new_key
FROM (SELECT rowid AS row_id, event_key, {incident_key_sql("timestamp_utc")} AS new_key
      FROM events
      WHERE source_format = 'canonical'
        AND file_id IN (SELECT file_id FROM ingested_files WHERE kind = 'incidents'))
WHERE event_key <> new_key
"""  # noqa: S608 - incident_key_sql() of fixed columns
# The same row ingested under two time zones is two events with one key now: the first (file,
# line) stays and the later copies go. As if they had been ingested with this key: the first copy
# with an end closes the kept event when it had none (and stays counted as ingested, as a closing
# row is); each other copy moves its file's count from ingested to duplicate, so read = ingested +
# duplicate + rejected + ignored still holds.
_MERGE_COPIES = """
UPDATE events SET event_key = r.new_key FROM rekeyed r WHERE events.rowid = r.row_id;
CREATE OR REPLACE TEMP TABLE copies AS
SELECT row_id, file_id, event_key, resolved_at_utc,
       kept_resolved IS NULL AND resolved_at_utc IS NOT NULL
       AND row_number() OVER (PARTITION BY event_key, resolved_at_utc IS NULL ORDER BY file_id, line) = 1
       AS closes
FROM (SELECT rowid AS row_id, file_id, line, event_key, resolved_at_utc,
             first_value(resolved_at_utc) OVER key_order AS kept_resolved,
             row_number() OVER key_order AS n
      FROM events
      WHERE source_format = 'canonical' AND event_key IN (SELECT new_key FROM rekeyed)
      WINDOW key_order AS (PARTITION BY event_key ORDER BY file_id, line))
WHERE n > 1;
UPDATE events SET resolved_at_utc = c.resolved_at_utc, changed_file_id = c.file_id
FROM copies c
WHERE c.closes AND events.event_key = c.event_key AND events.rowid NOT IN (SELECT row_id FROM copies);
DELETE FROM events WHERE rowid IN (SELECT row_id FROM copies);
UPDATE ingested_files SET rows_ingested = rows_ingested - c.n, rows_duplicate = rows_duplicate + c.n
FROM (SELECT file_id, count(*) FILTER (WHERE NOT closes) AS n FROM copies GROUP BY file_id) c
WHERE ingested_files.file_id = c.file_id;
DELETE FROM incidents_built;
"""


def rekey_stored_incidents(con) -> str | None:
    """Once per warehouse (recorded in ``migrations``): give the stored canonical events the key
    that does not depend on the time zone, merge the copies that this reveals and have the next
    rebuild of incidents run in full (ties within an incident are broken by key). Returns what it
    changed, also kept as the migration's ``detail`` (None when it had run already)."""
    if count(con, "SELECT count(*) FROM migrations WHERE name = ?", [REKEY]):
        return None
    with warehouse.transaction(con):
        con.execute(_REKEYED)
        rekeyed = count(con, "SELECT count(*) FROM rekeyed")
        copies = 0
        if rekeyed:
            con.execute(_MERGE_COPIES)
            copies = count(con, "SELECT count(*) FROM copies")
            con.execute("DROP TABLE copies")
        con.execute("DROP TABLE rekeyed")
        detail = f"{rekeyed} canonical event key(s) redone in UTC, {copies} copy(ies) merged"
        con.execute("INSERT INTO migrations VALUES (?, ?, ?)", [REKEY, now_utc(), detail])
    return detail
