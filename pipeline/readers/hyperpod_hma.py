"""SageMaker HyperPod health-monitoring agent (HMA) detections -> ``events``.

HMA watches each GPU/Trainium node (DCGM, nvidia-smi, Xid lines, EC2 platform logs, device count)
and writes its detections to CloudWatch Logs, log group ``/aws/sagemaker/Clusters/<name>/<id>``, one
stream per node named ``SagemakerHealthMonitoringAgent/<instance-group>/<instance-id>``. A detection
is a JSON message with the odd key ``"details: "`` (colon and space) around the node-problem
detector's event, whose message may quote the driver's Xid line::

    {"level":"info","ts":"2024-08-21T18:35:35Z","msg":"NPD caught event: %v","details: ":{"severity":"warn",
     "timestamp":"2024-08-22T20:59:29Z","reason":"XidHardwareFailure","message":"Node condition
     NvidiaErrorReboot is now: True, reason: XidHardwareFailure, message: \\"NVRM: Xid (PCI:0000:b9:00): 71,
     ..."},"HealthMonitoringAgentDetectionEvent":"HealthEvent"}

One format, ``hyperpod-hma``, in three shapes (told apart by the file's first line):

* ``aws logs filter-log-events ... --output json``: ``{"events": [{"logStreamName", "timestamp" (epoch
  ms), "message", "ingestionTime", "eventId"}, ...], "searchedLogStreams": [...]}``, several such
  documents, or JSON Lines of the events (``jq -c '.events[]'``);
* a CloudWatch Logs Insights result exported as CSV, columns ``@timestamp``, ``@message`` and
  optionally ``@logStream``;
* text lines as the console shows them, ``<@timestamp> <message JSON>`` (the timestamp optional).

Mapping: node_id = the instance id, the last part of the stream name, else ``--node`` (the CSV
without ``@logStream`` and text lines name no stream: without ``--node`` the file stops with one
line). Time = ``details.timestamp`` (when the problem was detected), else ``ts`` (when the agent
logged it), else the CloudWatch timestamp; the first of them present must be a time, or the record
is rejected. Category = ``details.reason``, plus `` Xid N`` when only the message names the code
(:func:`~pipeline.store.taxonomy.category_with_xid`), so the Xid catalog classes it; ``xid`` and
``pci_bus_id`` are parsed from the quoted Xid line with :data:`~pipeline.xid.XID_LINE`.
Message = ``details.message``. Attributes: ``condition`` (``NvidiaErrorReboot`` ...), ``severity``,
``instance_group``. ``interrupting``: true when the condition is one on which HyperPod reboots or
replaces the node (:data:`TAKES_NODE_OUT`), else NULL (the taxonomy decides).

Accounting (a record is an event, a CSV row or a line): read = ingested + duplicate + rejected +
ignored. Ignored: blank lines; records whose message does not name
``HealthMonitoringAgentDetectionEvent`` (the agent's other log lines); detections whose condition
is now False (the problem cleared). Rejected, with file, line and reason: a detection that is not
valid JSON, has no details object, no reason or no time, or (JSON shape) no stream and no ``--node``.

Event key: (format, node, UTC time, category, message); the cluster is left out (an instance id is
unique, and the cluster may come from the inventory later), as are CloudWatch's eventId and
ingestionTime, so a later export overlapping the first, in any shape, gives duplicates.
"""

from __future__ import annotations

import bisect
import csv
import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from pipeline.readers.cloud_events import TRUNCATED, item_starts, json_values
from pipeline.readers.contract import Head, ReadContext
from pipeline.readers.lines import RAW_CHARS
from pipeline.store import staging
from pipeline.store.files import FileSummary, InputError, account_lines, count, registered, time_sql
from pipeline.store.taxonomy import category_with_xid
from pipeline.warehouse import UNKNOWN_CLUSTER
from pipeline.xid import XID_LINE

DETECTION = "HealthMonitoringAgentDetectionEvent"
SNIFF = re.compile(
    r'HealthMonitoringAgentDetectionEvent\\?"|"logStreamName"\s*:\s*"SagemakerHealthMonitoringAgent/'
)
"""Content that makes a file ``hyperpod-hma`` whatever its name (the first 64 KiB)."""
TAKES_NODE_OUT = frozenset({"NvidiaErrorReboot", "NvidiaErrorTerminate"})
"""Node conditions on which HyperPod reboots (Reboot) or replaces (Terminate) the node."""

_CONDITION = re.compile(r"Node condition (?P<condition>\S+) is now: (?P<status>\w+)")
_XID = re.compile(XID_LINE)
_CLOUDWATCH_KEYS = frozenset({"events", "searchedLogStreams", "logStreamName", "eventId", "ingestionTime"})
_CLOUDWATCH_KEY = re.compile(r'\{\s*"(?:events|searchedLogStreams|logStreamName|eventId|ingestionTime)"')
_SCHEMA = {
    "line": pl.Int64,
    "raw": pl.String,
    "problem": pl.String,
    "node_id": pl.String,
    "time_field": pl.String,
    "time_text": pl.String,
    "category": pl.String,
    "message": pl.String,
    "xid": pl.Int32,
    "pci_bus_id": pl.String,
    "interrupting": pl.Boolean,
    "attributes": pl.String,
}

# (line, raw text, stream name, CloudWatch timestamp text, message text) of one record; message
# None: a blank line
_Record = tuple[int, str, str | None, str | None, str | None]


def _text(value: object) -> str | None:
    return None if value is None or value == "" or isinstance(value, dict | list) else str(value)


def _json_events(text: str, starts: list[int]) -> Iterator[_Record]:
    """The events of filter-log-events documents (or JSON Lines of events), each at its line."""
    for start, end, value, error in json_values(text):
        line = bisect.bisect_right(starts, start)
        if error is not None:
            yield line, str(value)[:RAW_CHARS], None, None, error
            continue
        wrapped = isinstance(value, dict) and "events" in value  # an output document, else one event
        events = value["events"] if wrapped else [value]
        if not isinstance(events, list):
            yield line, json.dumps(value)[:RAW_CHARS], None, None, "events is not a list"
            continue
        at = (item_starts(text, start, end, "events", len(events)) if wrapped else None) or []
        for i, event in enumerate(events):
            where = bisect.bisect_right(starts, at[i]) if i < len(at) else line
            raw = json.dumps(event, ensure_ascii=False)[:RAW_CHARS]
            if not isinstance(event, dict) or "message" not in event:
                yield where, raw, None, None, "not a log event (no message)"
            else:
                yield (
                    where,
                    raw,
                    _text(event.get("logStreamName")),
                    _text(event.get("timestamp")),
                    str(event["message"]),
                )


def _csv_rows(text: str) -> Iterator[_Record]:
    reader = csv.DictReader(text.splitlines(keepends=True))
    for row in reader:
        message = row.get("@message")
        raw = ",".join(v for v in row.values() if isinstance(v, str))[:RAW_CHARS]
        yield reader.line_num, raw, row.get("@logStream") or None, row.get("@timestamp") or None, message


def _text_lines(text: str) -> Iterator[_Record]:
    for line, content in enumerate(text.split("\n"), start=1):
        brace = content.find("{")
        prefix = content[:brace].strip() if brace >= 0 else None
        message = content[brace:] if brace >= 0 else content
        yield line, content[:RAW_CHARS], None, prefix or None, message if content.strip() else None


def _detection(message: str, stream: str | None, cw_time: str | None, node: str | None) -> dict | str:
    """The event row of one detection message, or the reason it is rejected (a string starting
    with ``ignored:`` when it carries nothing by design)."""
    if DETECTION not in message:
        return "ignored:records that are not HMA detections"
    try:
        doc = json.loads(message)
    except ValueError as exc:
        return f"detection is not valid JSON ({exc.msg} at column {exc.colno})"
    if not isinstance(doc, dict):
        return "detection is not a JSON object"
    details = next((v for k, v in doc.items() if k.strip().rstrip(":") == "details"), None)
    if not isinstance(details, dict):
        return 'detection without a "details: " object'
    text = _text(details.get("message")) or ""
    condition = _CONDITION.search(text)
    if condition and condition["status"] == "False":
        return "ignored:detections of a condition that cleared (is now: False)"
    reason = _text(details.get("reason"))
    if reason is None:
        return "detection without details.reason"
    instance = stream.rsplit("/", 1)[-1] if stream else node
    if not instance:
        return "no log stream name to take the instance id from; pass --node INSTANCE_ID"
    fields = (("details.timestamp", details.get("timestamp")), ("ts", doc.get("ts")), ("@timestamp", cw_time))
    time_field, time_text = next(((f, _text(v)) for f, v in fields if _text(v)), (None, None))
    if time_text is None:
        return "detection without a time (details.timestamp, ts or the CloudWatch timestamp)"
    xid_line = _XID.search(text)  # the quoted driver line; its code in the form the taxonomy reads
    code = f"{xid_line['sxid']}Xid {xid_line['code']}" if xid_line else text
    category, xid = category_with_xid(reason, code)
    name = condition["condition"] if condition else None
    attributes = {
        key: value
        for key, value in (
            ("condition", name),
            ("severity", _text(details.get("severity"))),
            ("instance_group", stream.split("/")[1] if stream and stream.count("/") == 2 else None),
        )
        if value is not None
    }
    return {
        "node_id": instance,
        "time_field": time_field,
        "time_text": time_text,
        "category": category,
        "message": text or None,
        "xid": xid,
        "pci_bus_id": xid_line["pci"].lower() if xid_line else None,
        "interrupting": True if name in TAKES_NODE_OUT else None,
        "attributes": json.dumps(attributes) if attributes else None,
    }


_STAGE = f"""
CREATE OR REPLACE TEMP TABLE hma_parsed AS
SELECT *, CASE WHEN problem IS NOT NULL THEN problem
               WHEN ts IS NULL THEN time_field || ' ' || time_text || ' is not a time (ISO 8601 or epoch)'
          END AS reason
FROM (SELECT *, timezone('UTC', {time_sql("time_text")}) AS ts FROM hma_frame) t
"""  # noqa: S608 - time_sql() of a fixed column name

_INSERT = """
INSERT INTO events (event_key, file_id, line, timestamp_utc, cluster_id, node_id, category, interrupting,
                    gpu_index, job_id, message, resolved_at_utc, xid, pci_bus_id, source_format, attributes)
SELECT event_key, $file_id, line, ts, $cluster, node_id, category, interrupting,
       NULL, NULL, message, NULL, xid, pci_bus_id, $format, CAST(attributes AS JSON)
FROM (SELECT *, md5(concat_ws(chr(31), $format, node_id, CAST(ts AS VARCHAR), category,
                              coalesce(message, ''))) AS event_key
      FROM hma_parsed WHERE reason IS NULL) s
WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.event_key = s.event_key)
QUALIFY row_number() OVER (PARTITION BY event_key ORDER BY line) = 1
"""


def _is_cloudwatch_json(first: str) -> bool:
    """Whether a file whose first non-blank line is ``first`` holds filter-log-events JSON (a
    document, pretty-printed or not, or JSON Lines of events) rather than HMA messages."""
    if first.startswith("[") or first == "{":
        return True
    try:
        doc = json.loads(first)
    except ValueError:  # a long document cut by the line's end: judge by its first key
        return _CLOUDWATCH_KEY.match(first) is not None
    return isinstance(doc, dict) and bool(_CLOUDWATCH_KEYS & doc.keys())


def _records(text: str, path: Path, node: str | None) -> Iterator[_Record]:
    """The file's records in the shape its first line shows."""
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if "@message" in first and not first.startswith("{"):
        if "@logStream" not in first and node is None:
            raise InputError(
                f"{path}: the CSV has no @logStream column to name the nodes; pass --node INSTANCE_ID"
            )
        return _csv_rows(text)
    if _is_cloudwatch_json(first):
        starts = [0, *(m.end() for m in re.finditer("\n", text))]
        return _json_events(text, starts)
    if node is None:
        raise InputError(
            f"{path}: HMA text lines do not name their node; pass --node INSTANCE_ID (or export with "
            "aws logs filter-log-events, or an Insights CSV with @logStream)"
        )
    return _text_lines(text)


def read(ctx: ReadContext) -> FileSummary:
    """One export of HMA detections; the caller holds the transaction and the session time zone
    (for naive CloudWatch times). The file is read whole: a fleet's detections are few."""
    con, path, node, cluster = ctx.con, ctx.path, ctx.options.node, ctx.options.cluster
    text, truncated = ctx.text()
    records = _records(text, path, node)
    summary = ctx.open_file("node_events")
    if truncated:
        summary.notes.append(TRUNCATED)
    file_id = summary.file_id
    rows, ignored = [], Counter()
    for line, raw, stream, cw_time, message in records:
        summary.rows_read += 1
        if message is None:
            ignored["blank lines"] += 1
            continue
        row = _detection(message, stream, cw_time, node)
        if isinstance(row, str) and row.startswith("ignored:"):
            ignored[row.removeprefix("ignored:")] += 1
            continue
        fields = {"raw": raw, "problem": row} if isinstance(row, str) else row
        rows.append({**fields, "line": line})
    with registered(con, "hma_frame", pl.DataFrame(rows, schema=_SCHEMA)):
        con.execute(_STAGE)
    con.execute(_INSERT, {"file_id": file_id, "cluster": cluster or UNKNOWN_CLUSTER, "format": ctx.fmt})
    summary.rows_ingested = count(con, "SELECT count(*) FROM events WHERE file_id = ?", [file_id])
    account_lines(con, summary, "hma_parsed", text="raw")
    staging.drop(con, "hma_parsed")
    if ignored:
        summary.notes.append("ignored: " + ", ".join(f"{n} {why}" for why, n in sorted(ignored.items())))
    if cluster is None:
        summary.notes.append("cluster_id not given (--cluster): taken from the inventory by node name")
    return summary


def is_hma(head: Head) -> bool:
    """A file (CSV too) naming HyperPod's detection event or its agent's log stream."""
    return not head.named(".parquet") and SNIFF.search(head.text) is not None
