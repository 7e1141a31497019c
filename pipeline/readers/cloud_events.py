"""Cloud maintenance and host-error events -> ``events``, each flagged planned or unplanned.

Two formats, each JSON (one document, several concatenated documents, or JSON Lines; ``.gz`` too):

``ec2-status``: ``aws ec2 describe-instance-status [--include-all-instances]`` output
(DescribeInstanceStatus, https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstanceStatus.html):
``{"InstanceStatuses": [{"InstanceId": ..., "Events": [InstanceStatusEvent, ...]}, ...]}``, or one
InstanceStatus object per line (``jq -c '.InstanceStatuses[]'``). An InstanceStatusEvent
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_InstanceStatusEvent.html) has Code
(instance-reboot | system-reboot | system-maintenance | instance-retirement | instance-stop),
Description ("[Completed] ..." once done, "[Canceled] ..." when called off), NotBefore, NotAfter,
NotBeforeDeadline, InstanceEventId. These are scheduled maintenance: ``planned`` true. Only
completed events are stored (the instance was rebooted, stopped or retired): timestamp = NotBefore,
resolved_at = NotAfter (the scheduled window, an upper bound on the outage); category = Code;
node_id = InstanceId; interrupting = true (every code reboots, stops or cuts off the instance).
Canceled events and events not yet completed (scheduled for later: they may still be moved or
canceled; AWS lists completed events for a week, so a later export brings them) are ignored and
counted.

``gce-audit``: Cloud Logging LogEntry objects (``gcloud logging read ... --format=json``: a JSON
array) of Compute Engine's System Event audit log
(https://cloud.google.com/compute/docs/logging/audit-logging,
https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-reboots). Stored by
``protoPayload.methodName``, verbatim as category: :data:`GCE_METHODS` (``compute.instances.hostError``:
the host failed and the VM crashed, unplanned; ``terminateOnHostMaintenance``: the VM was stopped
for host maintenance, planned; ``migrateOnHostMaintenance``: live-migrated, planned, the VM kept
running so not interrupting). node_id = the instance name (last part of ``protoPayload.resourceName``
``projects/P/zones/Z/instances/NAME``), else ``resource.labels.instance_id``; timestamp = the entry's
``timestamp``; message = ``protoPayload.status.message``; a host error's resolved_at = the
instance's next ``automaticRestart`` in the file (see ``_RESOLVED``). Other entries (admin activity,
``automaticRestart`` itself, ``preempted`` Spot VMs: a capacity contract, not a failure or
maintenance) are ignored and counted.

The flag goes into ``attributes`` as ``{"planned": "true"|"false"}``, so ``failcast rates --by
planned`` separates planned maintenance from unplanned failures. The taxonomy step classifies the
category (built-in synonyms: host) and keeps the source's ``interrupting``.

Accounting: the unit is a record (an EC2 event, a LogEntry), not a line: read = ingested +
duplicate + rejected + ignored. A record without its node, code/method or a valid time is rejected
with the line it starts on. JSON that cannot be parsed is rejected from where it breaks up to the
next line that starts a document at column 0 (the next JSON Lines line); the records of an array
before a truncation are kept. The file is read whole: these exports are small (a few events per
instance per month); ``.gz`` is bounded like every input.

Event key: (format, cluster, node, UTC time, category): a later export listing the same event is a
duplicate.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterator

import polars as pl

from pipeline.readers.contract import Head, ReadContext
from pipeline.readers.lines import RAW_CHARS
from pipeline.store import staging
from pipeline.store.files import FileSummary, InputError, account_lines, registered, time_sql
from pipeline.warehouse import UNKNOWN_CLUSTER

FORMATS = ("ec2-status", "gce-audit")
TRUNCATED = "truncated .gz: the compressed stream ends early; copy the file again"

# methodName -> (planned, interrupting)
RESTART = "compute.instances.automaticRestart"  # ends the outage of a host error, not a record
GCE_METHODS = {
    "compute.instances.hostError": (False, True),
    "compute.instances.terminateOnHostMaintenance": (True, True),
    "compute.instances.migrateOnHostMaintenance": (True, False),
}
_INSTANCE_NAME = re.compile(r"(?:^|/)instances/([^/]+)$")
_BETWEEN = " \t\r\n,]"  # skipped between top-level values (a stray "]" after a broken array too)
_DOCUMENT_START = re.compile(r"^[\[{]", re.M)

_RESTART_SCHEMA = {"node_id": pl.String, "ts_text": pl.String}
_SCHEMA = {
    "line": pl.Int64,
    "raw": pl.String,
    "problem": pl.String,
    "node_id": pl.String,
    "category": pl.String,
    "start_text": pl.String,
    "end_text": pl.String,
    "interrupting": pl.Boolean,
    "planned": pl.Boolean,
    "message": pl.String,
}


# one record's fields (keys of _SCHEMA); "ignored" names the rule that skips it
_Record = dict


def json_values(text: str) -> Iterator[tuple[int, int, object, str | None]]:
    """(start, end, value, error) of each top-level JSON value (on an error: the text skipped, from
    the broken value to where reading resumes); an array's elements come one by one,
    so the records before a truncation are kept. After an error, reading resumes at the next line
    that starts with ``{`` or ``[`` (the next line of JSON Lines)."""
    decoder = json.JSONDecoder()
    pos, end = 0, len(text)
    while True:
        while pos < end and text[pos] in _BETWEEN:
            pos += 1
        if pos >= end:
            return
        start = pos
        try:
            if text[pos] != "[":
                value, pos = decoder.raw_decode(text, pos)
                yield start, pos, value, None
                continue
            pos += 1
            while True:
                while pos < end and text[pos] in _BETWEEN[:-1]:
                    pos += 1
                if pos < end and text[pos] == "]":
                    pos += 1
                    break
                start = pos
                value, pos = decoder.raw_decode(text, pos)
                yield start, pos, value, None
        except json.JSONDecodeError as exc:
            # resume at the next line, after the broken value's first, that starts a document
            line_end = text.find("\n", start)
            following = _DOCUMENT_START.search(text, line_end + 1) if line_end >= 0 else None
            stop = following.start() if following else end
            cut = following is None and "\n" not in text[exc.pos :].strip()
            where = "the text ends inside it" if cut else f"line {exc.lineno} column {exc.colno}"
            reason = f"not valid JSON (truncated or malformed): {exc.msg}, {where}"
            yield start, stop, text[start:stop], reason
            if following is None:
                return
            pos = stop


def _text(value: object) -> str | None:
    """A JSON scalar as text (times may be ISO strings or epoch numbers); None for missing/empty."""
    if value is None or isinstance(value, dict | list) or value == "":
        return None
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _compact(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))[:RAW_CHARS]


def _ec2_records(value: object) -> Iterator[tuple[int, int | None, _Record]]:
    """(status index, event index, record) per event of an output document or one InstanceStatus;
    a status that cannot be read gives one record with event index None."""
    if isinstance(value, dict) and "InstanceStatuses" in value:
        statuses = value["InstanceStatuses"]
        if not isinstance(statuses, list):
            yield 0, None, _Record(problem="InstanceStatuses is not a list", raw=_compact(value))
            return
    else:
        statuses = [value]
    for i, status in enumerate(statuses):
        if not isinstance(status, dict) or ("InstanceId" not in status and "Events" not in status):
            yield (
                i,
                None,
                _Record(problem="not an InstanceStatus object (no InstanceId)", raw=_compact(status)),
            )
            continue
        instance = _text(status.get("InstanceId"))
        events = status.get("Events") or []
        if not isinstance(events, list):
            yield i, None, _Record(problem="Events is not a list", raw=_compact(status))
            continue
        for j, event in enumerate(events):
            yield i, j, _ec2_event(instance, event)


def item_starts(text: str, start: int, end: int, key: str, count: int) -> list[int] | None:
    """Where each element of the array under ``key`` of the (valid) JSON object in
    ``text[start:end]`` starts, or None when they cannot be told (not ``count`` elements found).
    A quote inside a JSON string is escaped, so ``"key":`` cannot match inside a value."""
    match = re.compile(rf'"{key}"\s*:\s*\[').search(text, start, end)
    if match is None:
        return None
    decoder, starts, pos = json.JSONDecoder(), [], match.end()
    while len(starts) < count:
        while pos < end and text[pos] in _BETWEEN[:-1]:
            pos += 1
        starts.append(pos)
        try:
            _, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:  # the key matched a nested array: fall back to the object's line
            return None
    return starts


def _ec2_event(instance: str | None, event: object) -> _Record:
    raw = _compact({"InstanceId": instance, **event} if isinstance(event, dict) else event)
    if not isinstance(event, dict):
        return _Record(problem="event is not a JSON object", raw=raw)
    description = _text(event.get("Description")) or ""
    record = _Record(
        raw=raw,
        node_id=instance,
        category=_text(event.get("Code")),
        start_text=_text(event.get("NotBefore")),
        end_text=_text(event.get("NotAfter")),
        interrupting=True,
        planned=True,
        message=description or None,
    )
    if description.startswith("[Canceled]"):
        record["ignored"] = "canceled"
    elif not description.startswith("[Completed]"):
        record["ignored"] = "not completed yet"
    if "ignored" in record:  # carries nothing, whatever its fields
        return record
    if instance is None:
        record["problem"] = "InstanceId is missing"
    elif record["category"] is None:
        record["problem"] = "event Code is missing"
    elif record["start_text"] is None:
        record["problem"] = "NotBefore is missing"
    return record


def _gce_record(entry: object) -> _Record:
    if not isinstance(entry, dict):
        return _Record(problem="not a LogEntry object", raw=_compact(entry))
    payload = entry.get("protoPayload") if isinstance(entry.get("protoPayload"), dict) else {}
    method = _text(payload.get("methodName"))
    record = _Record(raw=_compact(entry), category=method, start_text=_text(entry.get("timestamp")))
    labels = (entry.get("resource") or {}).get("labels") if isinstance(entry.get("resource"), dict) else None
    name = _INSTANCE_NAME.search(_text(payload.get("resourceName")) or "")
    record["node_id"] = name.group(1) if name else _text((labels or {}).get("instance_id"))
    if method not in GCE_METHODS:
        record["ignored"] = method or "no protoPayload.methodName"
        return record
    record["planned"], record["interrupting"] = GCE_METHODS[method]
    status = payload.get("status") if isinstance(payload.get("status"), dict) else {}
    record["message"] = _text(status.get("message"))
    if record["node_id"] is None:
        record["problem"] = "no instance: protoPayload.resourceName and resource.labels.instance_id missing"
    elif record["start_text"] is None:
        record["problem"] = "timestamp is missing"
    return record


def _records(text: str, fmt: str) -> Iterator[tuple[int, _Record]]:
    """(offset, record) of every record of the file, in order: a record's offset is where its
    JSON object starts (an EC2 event's own object), so rejects name its line."""
    for start, end, value, error in json_values(text):
        if error is not None:
            yield start, _Record(problem=error, raw=str(value)[:RAW_CHARS])
        elif fmt == "gce-audit":
            yield start, _gce_record(value)
        else:
            yield from _ec2_located(text, start, end, value)


def _ec2_located(text: str, start: int, end: int, value: object) -> Iterator[tuple[int, _Record]]:
    statuses = value.get("InstanceStatuses") if isinstance(value, dict) else None
    status_starts = [start]
    if isinstance(statuses, list):
        status_starts = item_starts(text, start, end, "InstanceStatuses", len(statuses)) or [start] * len(
            statuses
        )
    event_starts: dict[int, list[int] | None] = {}
    for i, j, record in _ec2_records(value):
        at = status_starts[i] if i < len(status_starts) else start
        if j is not None:
            if i not in event_starts:
                status = statuses[i] if isinstance(statuses, list) else value
                after = status_starts[i + 1] if i + 1 < len(status_starts) else end
                event_starts[i] = item_starts(text, at, after, "Events", len(status["Events"]))
            at = event_starts[i][j] if event_starts[i] else at
        yield at, record


_STAGE = f"""
CREATE OR REPLACE TEMP TABLE cloud_events_parsed AS
WITH typed AS (
    SELECT *, {time_sql("start_text")} AS start_ts, {time_sql("end_text")} AS end_ts
    FROM cloud_events_frame
)
SELECT *,
       CASE
         WHEN problem IS NOT NULL THEN problem
         WHEN start_ts IS NULL THEN 'time ' || start_text || ' is not a time (ISO 8601 or epoch seconds)'
         WHEN end_text IS NOT NULL AND end_ts IS NULL
           THEN 'NotAfter ' || end_text || ' is not a time (ISO 8601 or epoch seconds)'
         WHEN end_ts < start_ts THEN 'NotAfter is before NotBefore'
       END AS reason
FROM typed
"""  # noqa: S608 - time_sql() of fixed column names

_RESTARTS = f"""
CREATE OR REPLACE TEMP TABLE cloud_restarts AS
SELECT node_id, {time_sql("ts_text")} AS ts FROM cloud_restarts_frame
"""  # noqa: S608 - time_sql() of a fixed column name

# A host error's outage ends at the instance's first automaticRestart in the file at or after it,
# unless another host error of the instance comes first (that restart is the later error's).
_RESOLVED = """
CREATE OR REPLACE TEMP TABLE cloud_events_resolved AS
SELECT p.*, coalesce(p.end_ts, (
    SELECT min(r.ts) FROM cloud_restarts r
    WHERE p.category = 'compute.instances.hostError' AND r.node_id = p.node_id AND r.ts >= p.start_ts
      AND NOT EXISTS (SELECT 1 FROM cloud_events_parsed q
                      WHERE q.node_id = p.node_id AND q.category = p.category AND q.reason IS NULL
                        AND q.start_ts > p.start_ts AND q.start_ts <= r.ts)
)) AS end_or_restart_ts
FROM cloud_events_parsed p WHERE p.reason IS NULL
"""

_KEYED = """
CREATE OR REPLACE TEMP TABLE cloud_events_keyed AS
WITH rows AS (
    SELECT line, timezone('UTC', start_ts) AS ts, timezone('UTC', end_or_restart_ts) AS resolved,
           $cluster AS cluster_id, node_id, category, interrupting, message,
           CASE WHEN planned THEN '{"planned":"true"}' ELSE '{"planned":"false"}' END AS attributes,
           end_ts IS NULL AND end_or_restart_ts IS NOT NULL AS restarted
    FROM cloud_events_resolved
), keyed AS (
    SELECT *,
           md5(concat_ws(chr(31), $format, cluster_id, node_id, CAST(ts AS VARCHAR), category)) AS event_key
    FROM rows
)
SELECT * FROM keyed
WHERE event_key NOT IN (SELECT event_key FROM events)
QUALIFY line = min(line) OVER (PARTITION BY event_key)
"""

_WRITE = """
INSERT INTO events (event_key, file_id, line, timestamp_utc, cluster_id, node_id, category, interrupting,
                    gpu_index, job_id, message, resolved_at_utc, xid, pci_bus_id, source_format, attributes)
SELECT event_key, $file_id, line, ts, cluster_id, node_id, category, interrupting,
       NULL, NULL, message, resolved, NULL, NULL, $format, CAST(attributes AS JSON)
FROM cloud_events_keyed
"""


def read(ctx: ReadContext) -> FileSummary:
    """One EC2 instance-status or GCE audit-log export (``ctx.fmt`` in :data:`FORMATS`); the caller
    holds the transaction and the session time zone (for times without an offset)."""
    con, path, fmt, cluster = ctx.con, ctx.path, ctx.fmt, ctx.options.cluster
    if fmt not in FORMATS:
        raise InputError(f"{path}: unknown cloud event format {fmt!r}; use one of {', '.join(FORMATS)}")
    summary = ctx.open_file("node_events")
    file_id = summary.file_id
    text, truncated = ctx.text()
    if truncated:
        summary.notes.append(TRUNCATED)
    starts = [0, *(m.end() for m in re.finditer("\n", text))]
    rows, restarts, ignored = [], [], {}
    for offset, record in _records(text, fmt):
        summary.rows_read += 1
        if "ignored" in record:
            ignored[record["ignored"]] = ignored.get(record["ignored"], 0) + 1
            if record["ignored"] == RESTART and record["node_id"] and record["start_text"]:
                restarts.append({"node_id": record["node_id"], "ts_text": record["start_text"]})
            continue
        rows.append({**{k: record.get(k) for k in _SCHEMA}, "line": bisect.bisect_right(starts, offset)})
    if not summary.rows_read and not text.strip():
        raise InputError(
            f"{path}: no JSON records; export with --output json (aws) or --format=json (gcloud)"
        )
    with registered(con, "cloud_events_frame", pl.DataFrame(rows, schema=_SCHEMA)):
        con.execute(_STAGE)
    with registered(con, "cloud_restarts_frame", pl.DataFrame(restarts, schema=_RESTART_SCHEMA)):
        con.execute(_RESTARTS)
    con.execute(_RESOLVED)
    con.execute(_KEYED, {"cluster": cluster or UNKNOWN_CLUSTER, "format": fmt})
    restarted = con.sql("SELECT count(*) FILTER (WHERE restarted) FROM cloud_events_keyed").fetchall()[0][0]
    summary.rows_ingested = con.sql("SELECT count(*) FROM cloud_events_keyed").fetchall()[0][0]
    con.execute(_WRITE, {"file_id": file_id, "format": fmt})
    account_lines(con, summary, "cloud_events_parsed", text="raw")
    for rule, n in sorted(ignored.items()):
        why = _IGNORED.get(rule, f"method {rule} is not a host event")
        summary.notes.append(f"{n} record(s) ignored: {why}")
    if cluster is None:
        summary.notes.append("cluster_id not given (--cluster): taken from the inventory by node name")
    if restarted:
        summary.notes.append(f"{restarted} host error(s) end at the instance's automaticRestart (outages)")
    staging.drop(con, "cloud_events_keyed", "cloud_events_resolved", "cloud_restarts", "cloud_events_parsed")
    return summary


_IGNORED = {
    "canceled": "canceled EC2 events ([Canceled]: the maintenance did not happen)",
    "not completed yet": "EC2 events not completed yet (scheduled; a later export lists them as [Completed])",
    "no protoPayload.methodName": "log entries without protoPayload.methodName (not audit log entries)",
}


_EC2_KEYS = re.compile(r'"(?:InstanceStatuses|InstanceEventId)"\s*:')
_GCE_KEYS = re.compile(r'"protoPayload"\s*:|"methodName"\s*:\s*"compute\.instances\.')


def _cloud_json(head: Head, keys: re.Pattern) -> bool:
    """JSON (any name but a table's) whose first 64 KiB has the API's own keys: told apart from
    canonical JSON Lines by them."""
    return (
        not head.named(".csv", ".tsv", ".parquet")
        and head.text.lstrip()[:1] in ("{", "[")
        and keys.search(head.text) is not None
    )


def is_ec2_status(head: Head) -> bool:
    return _cloud_json(head, _EC2_KEYS)


def is_gce_audit(head: Head) -> bool:
    return _cloud_json(head, _GCE_KEYS)
