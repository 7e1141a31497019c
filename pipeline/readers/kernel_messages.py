"""Kernel messages staged by a reader -> ``events``, ``rejects`` and the file's counts.

The kernel-log reader (:mod:`.kernel_log`: syslog, ``journalctl`` text, ``dmesg -T``) and the
journald JSON reader (:mod:`.journald`) parse their lines into Parquet files of the same columns
(:data:`STAGED_SCHEMA`: one row per line that may carry a driver message, with its time parts,
node, message and the driver's fields from :func:`pipeline.xid.driver_messages`); this
module turns them into events in DuckDB, inside the file's transaction:

* times: ISO text with or without an offset (naive: the session time zone), syslog's parts with
  the year found for them (:mod:`.syslog_years`), ``dmesg -T`` parts;
* classes: an Xid's catalog row; an SXid's fabric class; an Xid 154 by its recovery action (none:
  the catalog's row, not interrupting; any other: ``gpu_hardware``, interrupting, the action kept
  as the attribute ``recovery_action``); a GPU fallen off the bus without an Xid:
  ``gpu_fell_off_bus``;
* multi-line messages: a ``fallen off the bus ...`` line whose GPU is not on it is the last line of
  NVRM's three-line message; its first line (``NVRM: The NVIDIA GPU <PCI id>``) at most two lines
  before it is the event (line number, time, node, GPU) with the message's lines joined as its
  message; the lines after the first are ignored by rule (counted as ignored, named in a note). A
  last line without its first line is rejected: it names no GPU;
* reasons: the reader's own (``problem``: a journald entry that is not JSON, has no time ...), a
  truncated ``.gz``, bytes that are not UTF-8, no date or host, an impossible date, an Xid without
  a code;
* storing: the first line of each event not yet stored (content key: UTC time, node, message); the
  rest of the accounted lines are duplicates; every other line the reader read is ignored.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pipeline import xid as xid_catalog
from pipeline.categories import FailureCategory
from pipeline.readers.lines import LINE_SCHEMA
from pipeline.store.files import FileSummary, account_lines, count, registered
from pipeline.warehouse import UNKNOWN_CLUSTER

STAGED_SCHEMA = {
    **LINE_SCHEMA,
    "problem": pl.String,  # the reader's own reason to reject the line (journald: not JSON ...)
    "form": pl.String,  # iso | bsd | ctime | monotonic | NULL (no recognised prefix)
    "ts_text": pl.String,
    "month": pl.Int32,
    "day": pl.Int32,
    "hms": pl.String,
    "year": pl.Int32,
    "year_offset": pl.Int32,
    "node_id": pl.String,
    "message": pl.String,
    "kind": pl.String,  # xid | fell | head | middle | tail (xid.message_kind)
    "xid": pl.Int32,
    "pci_bus_id": pl.String,
    "is_sxid": pl.Boolean,
    "gpu_index": pl.Int32,
    "recovery_action": pl.String,
    "recovery_interrupts": pl.Boolean,
}
STAGED_ARROW = pl.DataFrame(schema=STAGED_SCHEMA).to_arrow().schema

_TAIL_REASON = (
    "last line of NVRM's multi-line 'fallen off the bus' message without its first line "
    "(NVRM: The NVIDIA GPU <PCI id>) in the two lines before it: cannot tell the GPU"
)

_STAGE = r"""
CREATE OR REPLACE TEMP TABLE xid_parsed AS
WITH staged AS (  -- the spans' lines numbered and dated as in one pass over the file
    SELECT s.* EXCLUDE (line, year_offset, filename), s.line + o.line_base AS line,
           s.year_offset + o.year_base + CASE WHEN s.line >= o.new_year_from THEN 1 ELSE 0 END
               AS year_offset
    FROM read_parquet($staged_paths, filename = true) s JOIN span_offsets o ON o.file = s.filename
), shown AS (
    SELECT *,
           CASE form
             WHEN 'iso' THEN ts_text
             WHEN 'bsd' THEN printf('%04d-%02d-%02d %s', $base_year + year_offset, month, day, hms)
             WHEN 'ctime' THEN printf('%04d-%02d-%02d %s', year, month, day, hms)
           END AS ts_shown
    FROM staged
), timed AS MATERIALIZED (
    SELECT *,
           CASE WHEN form = 'iso' THEN TRY_CAST(ts_shown AS TIMESTAMPTZ)
                ELSE TRY_CAST(TRY_CAST(ts_shown AS TIMESTAMP) AS TIMESTAMPTZ) END AS ts
    FROM shown
), tails AS (  -- each last line of a multi-line message with the nearest first line before it
    SELECT t.line AS tail, max(h.line) AS head
    FROM (SELECT line FROM timed WHERE kind = 'tail') t
    JOIN (SELECT line FROM timed WHERE kind = 'head') h ON h.line BETWEEN t.line - 2 AND t.line - 1
    GROUP BY t.line
), records AS (  -- a first line's message: its lines up to the first last line after it, joined
    SELECT r.head, string_agg(CASE WHEN m.line = r.head THEN m.message
                                   ELSE regexp_replace(m.message, '^NVRM:\s*', '') END,
                              ' ' ORDER BY m.line) AS message
    FROM (SELECT head, min(tail) AS tail FROM tails GROUP BY head) r
    JOIN timed m ON m.line BETWEEN r.head AND r.tail AND m.kind IN ('head', 'middle', 'tail')
    GROUP BY r.head
), accounted AS (  -- the lines that carry an event (or should): the rest were read and are ignored
    SELECT t.* EXCLUDE (message), coalesce(r.message, t.message) AS message
    FROM timed t LEFT JOIN records r ON r.head = t.line
    WHERE t.kind IN ('xid', 'fell') OR (t.kind = 'head' AND r.head IS NOT NULL)
       OR (t.kind = 'tail' AND t.line NOT IN (SELECT tail FROM tails))
       OR t.truncated OR t.problem IS NOT NULL
)
SELECT a.line, a.text, a.ts, a.node_id, a.message, a.xid, a.pci_bus_id, a.gpu_index, a.kind,
       CASE
         WHEN problem IS NOT NULL THEN problem
         WHEN truncated THEN 'truncated .gz: the compressed stream ends here, the rest of the file is '
                             || 'lost; copy the file again'
         WHEN bad_utf8 THEN 'line is not valid UTF-8 (undecodable bytes shown as U+FFFD); fix the encoding'
         WHEN kind = 'tail' THEN $tail_reason
         WHEN form = 'monotonic' THEN 'dmesg time since boot has no date; export with dmesg -T or '
                                      || 'journalctl -k -o short-iso'
         WHEN form IS NULL THEN 'no timestamp and host prefix; expected ISO 8601 '
                                || '(2026-03-02T04:26:29+00:00 host ...) or syslog (Mar  2 04:26:29 host ...)'
         WHEN node_id IS NULL THEN 'dmesg -T line has no hostname; pass --node NAME'
         WHEN ts IS NULL THEN 'timestamp ' || ts_shown || ' is not a valid date and time'
         WHEN kind = 'xid' AND a.xid IS NULL
           THEN 'Xid line without (PCI:dddd:bb:dd): CODE; cannot tell the GPU and the code'
       END AS reason,
       CASE WHEN kind <> 'xid' THEN $fell_category
            WHEN is_sxid THEN $sxid_category
            WHEN a.xid = 154 AND recovery_interrupts THEN $recovery_category
            ELSE coalesce(c.category, $unknown_category) END AS category,
       CASE WHEN kind <> 'xid' THEN $fell_interrupting
            WHEN is_sxid THEN $sxid_interrupting
            WHEN a.xid = 154 AND recovery_interrupts IS NOT NULL THEN recovery_interrupts
            ELSE coalesce(c.interrupting, $unknown_interrupting) END AS interrupting,
       CASE WHEN a.xid = 154 AND recovery_action IS NOT NULL AND NOT is_sxid
            THEN json_object('recovery_action', recovery_action) END AS attributes,
       md5(concat_ws(chr(31), CAST(timezone('UTC', ts) AS VARCHAR), node_id, a.message)) AS event_key
FROM accounted a LEFT JOIN xid_catalog c ON c.xid = a.xid AND NOT a.is_sxid
"""

# The first line of each event not yet stored. A GROUP BY rather than a window over all lines:
# DuckDB spills it to disk under a memory cap (the window ran out of memory at 64 MB).
_INSERT = """
INSERT INTO events (event_key, file_id, line, timestamp_utc, cluster_id, node_id, category, interrupting,
                    gpu_index, job_id, message, resolved_at_utc, xid, pci_bus_id, source_format, attributes)
SELECT event_key, $file_id, line, timezone('UTC', ts), $cluster, node_id, category, interrupting,
       gpu_index, NULL, message, NULL, xid, pci_bus_id, $format, attributes
FROM xid_parsed
WHERE line IN (SELECT min(line) FROM xid_parsed s
               WHERE reason IS NULL AND NOT EXISTS (SELECT 1 FROM events e WHERE e.event_key = s.event_key)
               GROUP BY event_key)
"""


def store_staged(
    con,
    path: Path,
    summary: FileSummary,
    *,
    offsets: pl.DataFrame,
    base_year: int,
    cluster: str | None,
    source_format: str,
) -> None:
    """Store the lines staged in the Parquet files ``offsets["file"]`` (``line_base``, ``year_base``,
    ``new_year_from`` per file, see :func:`pipeline.readers.kernel_log.ingest_kernel_log`) as events
    of ``summary.file_id`` and complete the summary's counts and notes. ``summary.rows_read`` must
    hold every line the reader read."""
    staged_paths = offsets["file"].to_list()
    with (
        registered(con, "xid_catalog", xid_catalog.catalog_frame()),
        registered(con, "span_offsets", offsets),
    ):
        con.execute(
            _STAGE,
            {
                "staged_paths": staged_paths,
                "base_year": base_year,
                "tail_reason": _TAIL_REASON,
                "fell_category": FailureCategory.GPU_FELL_OFF_BUS.value,
                "fell_interrupting": FailureCategory.GPU_FELL_OFF_BUS.interrupting,
                "sxid_category": xid_catalog.SXID_CATEGORY.value,
                "sxid_interrupting": xid_catalog.SXID_CATEGORY.interrupting,
                "recovery_category": xid_catalog.RECOVERY_CATEGORY.value,
                "unknown_category": FailureCategory.UNKNOWN_XID.value,
                "unknown_interrupting": FailureCategory.UNKNOWN_XID.interrupting,
            },
        )
    before = count(con, "SELECT count(*) FROM events")
    con.execute(
        _INSERT, {"file_id": summary.file_id, "cluster": cluster or UNKNOWN_CLUSTER, "format": source_format}
    )
    summary.rows_ingested = count(con, "SELECT count(*) FROM events") - before
    account_lines(con, summary, "xid_parsed")
    unknown, codes, fell, records = con.sql(
        "SELECT count(*) FILTER (WHERE kind = 'xid' AND category = $unknown),"
        " list(DISTINCT xid ORDER BY xid) FILTER (WHERE kind = 'xid' AND category = $unknown),"
        " count(*) FILTER (WHERE kind IN ('fell', 'head')), count(*) FILTER (WHERE kind = 'head')"
        " FROM xid_parsed WHERE reason IS NULL",
        params={"unknown": FailureCategory.UNKNOWN_XID.value},
    ).fetchall()[0]
    con.execute("DROP TABLE xid_parsed")
    if unknown:
        summary.notes.append(
            f"{unknown} Xid line(s) with codes not in the catalog kept as unknown_xid: {codes}"
        )
    if fell:
        summary.notes.append(
            f"{fell} message(s) of a GPU fallen off the bus without an Xid read as gpu_fell_off_bus"
            + (
                f" ({records} of them over several lines: each read at its first line, the lines after it"
                " counted as ignored)"
                if records
                else ""
            )
        )
