"""Kubernetes node health (``kubectl get events -A -o json``, ``kubectl get nodes -o json``) -> events.

One format, ``kubernetes``: a file is a v1 ``List`` (``kubectl ... -o json``; ``items`` may mix
Events and Nodes, as ``kubectl get nodes,events -A -o json`` prints them), one Event or Node object,
or JSON Lines of such objects (``jq -c '.items[]'``). Each item is one counted "line": in a List the
``line`` of a reject is the item's 1-based index in ``items``, in JSON Lines the line number; the
raw text of a reject is the item's JSON, cut at :data:`RAW_CHARS` characters.

**Events** (core/v1 ``Event``: involvedObject, message, firstTimestamp, lastTimestamp, count,
eventTime, series; events.k8s.io/v1 ``Event``: regarding, note, deprecatedFirstTimestamp,
deprecatedLastTimestamp, deprecatedCount, eventTime, series). Only events about a Node are read.
A failure is an event of type ``Warning`` (node-problem-detector's KernelOops, TaskHung,
OOMKilling ..., the kubelet's Rebooted, cloud agents' GPU reasons) or a ``NodeNotReady`` (the node
lifecycle controller records it as type Normal). Its time is the first observation (eventTime,
else firstTimestamp / deprecatedFirstTimestamp, else metadata.creationTimestamp); an event seen
more than once (count or series.count > 1) is stored twice, at the first and at the last
observation (series.lastObservedTime, else lastTimestamp / deprecatedLastTimestamp). Category =
the reason verbatim, plus `` Xid N`` when the message names an Xid (or SXid) code the reason does
not, so the central taxonomy classifies it by the Xid catalog; ``xid`` holds the code. A
NodeNotReady is an outage that a later ``NodeReady`` event of the node ends. Ignored (counted):
events about other objects, Normal events (a NodeReady that ends an outage counts as ingested).

**Nodes**: each ``status.conditions`` entry. A problem is ``Ready`` (or any type ending in
``Ready``, as the EKS agent's AcceleratedHardwareReady) whose status is not True, or any other
type whose status is True (node-problem-detector's KernelDeadlock, ReadonlyFilesystem, ...; the
abnormal-true convention), except the kubelet's resource-pressure conditions
(:data:`PRESSURE_CONDITIONS`: a node short of memory or disk because of its pods is not a failed
node). A problem is an open outage starting at lastTransitionTime, category = the condition's
reason (its type when empty), ``attributes`` = {"condition": type}. A snapshot only shows the
current state: when a later snapshot shows the same node and condition healthy (or in a problem
that began later), the stored open outage ends at that condition's lastTransitionTime. Ignored:
nodes with no problem condition that end no stored outage.

Event key: (format, cluster, time, node, condition, category); re-reading an export adds nothing.
``interrupting`` is left to the taxonomy (NULL: the source does not say).

A List is read whole (Python's json): up to :data:`MAX_LIST_BYTES` (decompressed); past it, or
when it is not valid JSON, the file stops with one line (exit 2) that says to convert it to JSON
Lines, which stream in blocks of lines with bad lines rejected one by one.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from pipeline.readers.contract import Head, ReadContext
from pipeline.readers.lines import RAW_CHARS, head_text, is_gzip
from pipeline.store import events, staging
from pipeline.store.files import FileSummary, InputError, account_lines, count
from pipeline.store.taxonomy import category_with_xid
from pipeline.warehouse import UNKNOWN_CLUSTER

MAX_LIST_BYTES = 256 << 20
"""A List larger than this (decompressed) is refused; JSON Lines have no limit."""
PRESSURE_CONDITIONS = frozenset({"MemoryPressure", "DiskPressure", "PIDPressure"})
NOT_READY, READY = "NodeNotReady", "NodeReady"
_FLUSH_ITEMS = 50_000

_NEW = {
    "line": pl.Int64,
    "ts": pl.Datetime("us"),
    "node_id": pl.String,
    "category": pl.String,
    "message": pl.String,
    "xid": pl.Int32,
    "condition": pl.String,
}
_CLOSERS = {"line": pl.Int64, "ts": pl.Datetime("us"), "node_id": pl.String, "outage": pl.String}
_ITEMS = {"line": pl.Int64, "text": pl.String, "reason": pl.String}


@dataclass
class _Parsed:
    """What the items read so far give: new event rows, outage-ending times, accounted items."""

    new: list[tuple] = field(default_factory=list)
    closers: list[tuple] = field(default_factory=list)
    items: list[tuple] = field(default_factory=list)  # (line, raw text of a reject, reason or None)
    ignored: Counter = field(default_factory=Counter)
    repeated: int = 0


def _time(value: object) -> datetime | None:
    """An RFC 3339 Time/MicroTime as naive UTC; None when empty or not a time."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed.astimezone(UTC).replace(tzinfo=None) if parsed.tzinfo else parsed


def _text(value: object) -> str:
    return value.strip() if isinstance(value, str) else ""


def _raw(item: object) -> str:
    text = json.dumps(item, ensure_ascii=False)
    return text if len(text) <= RAW_CHARS else text[:RAW_CHARS] + "…"


def _event(item: dict, line: int, out: _Parsed) -> str | None:
    """Rows of one Event; returns the reject reason, or None."""
    new_api = (
        "regarding" in item or "note" in item or _text(item.get("apiVersion")).startswith("events.k8s.io")
    )
    about = item.get("regarding" if new_api else "involvedObject")
    if not isinstance(about, dict) or _text(about.get("kind")) != "Node":
        out.ignored["events about other objects than nodes"] += 1
        return None
    node = _text(about.get("name"))
    reason = _text(item.get("reason"))
    warning = _text(item.get("type")).lower() == "warning"
    if not warning and reason not in (NOT_READY, READY):
        out.ignored["Normal node events"] += 1
        return None
    if not node:
        return "Node event without the node's name (involvedObject.name / regarding.name)"
    if not reason:
        return "Node event without a reason"
    series = item.get("series") if isinstance(item.get("series"), dict) else {}
    first = _time(item.get("eventTime")) or _time(
        item.get("deprecatedFirstTimestamp" if new_api else "firstTimestamp")
    )
    last = _time(series.get("lastObservedTime")) or _time(
        item.get("deprecatedLastTimestamp" if new_api else "lastTimestamp")
    )
    first = first or last or _time((item.get("metadata") or {}).get("creationTimestamp"))
    if first is None:
        return (
            "Node event without a time (eventTime, firstTimestamp, lastTimestamp, series, creationTimestamp)"
        )
    if reason == READY and not warning:
        out.closers.append((line, last or first, node, f"event:{NOT_READY}"))
        return None
    message = _text(item.get("note" if new_api else "message"))
    category, xid = category_with_xid(reason, message)
    seen = series.get("count") or item.get("deprecatedCount" if new_api else "count") or 1
    out.new.append((line, first, node, category, message, xid, None))
    if isinstance(seen, int) and seen > 1 and last is not None and last > first:
        out.new.append((line, last, node, category, f"{message} (seen {seen} times)", xid, None))
        out.repeated += 1
    return None


def _problem(kind: str, status: str) -> bool:
    return status != "True" if kind.endswith("Ready") else status == "True"


def _node(item: dict, line: int, out: _Parsed) -> str | None:
    """Outages and outage ends of one Node's conditions; returns the reject reason, or None."""
    node = _text((item.get("metadata") or {}).get("name"))
    if not node:
        return "Node without metadata.name"
    conditions = (item.get("status") or {}).get("conditions") or []
    if not isinstance(conditions, list):
        return "status.conditions is not a list"
    rows: list[tuple] = []
    closers: list[tuple] = []
    for condition in conditions:
        kind = _text(condition.get("type")) if isinstance(condition, dict) else ""
        if not kind:
            return "a status.conditions entry without a type"
        if kind in PRESSURE_CONDITIONS:
            continue
        status = _text(condition.get("status"))
        since = _time(condition.get("lastTransitionTime"))
        problem = _problem(kind, status)
        if problem and since is None:
            return f"condition {kind}={status} without a lastTransitionTime (when the problem began)"
        if since is None:
            continue
        closers.append((line, since, node, f"condition:{kind}"))
        if problem:
            message = f"{kind}={status}: {_text(condition.get('message'))}".rstrip(": ")
            category, xid = category_with_xid(_text(condition.get("reason")) or kind, message)
            rows.append((line, since, node, category, message, xid, kind))
    out.new.extend(rows)
    out.closers.extend(closers)
    return None


def _items(ctx: ReadContext) -> Iterator[tuple[int, object, str | None]]:
    """(line, item or its text, error) for each item of a List, an object, or JSON Lines."""
    path = ctx.path
    first = next((ln for ln in head_text(path).lstrip("\ufeff").splitlines() if ln.strip()), "")
    try:
        single = json.loads(first)
    except ValueError:
        single = None
    if isinstance(single, dict) and "items" not in single:  # JSON Lines: one object a line
        for frame in ctx.lines():
            for line, text, bad, cut in frame.iter_rows():
                if cut:
                    yield line, text, "truncated .gz: the compressed stream ends here; copy the file again"
                elif bad:
                    yield line, text, "line is not valid UTF-8; fix the encoding"
                elif text.strip():
                    try:
                        yield line, json.loads(text), None
                    except ValueError as exc:
                        yield line, text, f"not a JSON object ({exc.msg} at column {exc.colno})"
                else:
                    yield line, None, None
        return
    for index, item in enumerate(
        _document(path, min(ctx.options.max_decompressed_bytes, MAX_LIST_BYTES)), start=1
    ):
        yield index, item, None
    ctx.report(path.stat().st_size)


def _document(path: Path, limit: int) -> Iterator[object]:
    try:
        with gzip.open(path, "rb") if is_gzip(path) else path.open("rb") as f:
            data = f.read(limit + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"{path}: cannot read ({exc}); a damaged or truncated .gz? copy it again") from exc
    convert = f"convert it to JSON Lines (jq -c '.items[]' {path.name} > {path.stem}.jsonl), which streams"
    if len(data) > limit:
        raise InputError(f"{path}: a Kubernetes List over {limit >> 20} MB is not read whole; {convert}")
    try:
        doc = json.loads(data.decode("utf-8-sig", errors="replace"))
    except ValueError as exc:
        raise InputError(
            f"{path}:{exc.lineno}: not valid JSON ({exc.msg}, column {exc.colno}); a cut-off kubectl "
            f"export? export it again, or {convert} and bad items are rejected one by one"
        ) from exc
    if isinstance(doc, dict) and isinstance(doc.get("items"), list):
        yield from doc["items"]
    elif isinstance(doc, dict) and doc.get("kind") in ("Event", "Node"):
        yield doc
    else:
        raise InputError(
            f"{path}: not a Kubernetes List of Events or Nodes (no 'items'); "
            "export with kubectl get events -A -o json / kubectl get nodes -o json"
        )


def _parse(item: object, line: int, out: _Parsed) -> str | None:
    if not isinstance(item, dict):
        return "item is not a JSON object"
    kind = item.get("kind")
    if kind is None:  # a List's items always name their kind; tolerate exports that drop it
        kind = "Event" if {"involvedObject", "regarding"} & item.keys() else "Node"
    if kind == "Event":
        return _event(item, line, out)
    if kind == "Node":
        return _node(item, line, out)
    out.ignored[f"{kind} objects"] += 1
    return None


_INSERT = """
INSERT INTO events (event_key, file_id, line, timestamp_utc, cluster_id, node_id, category, interrupting,
                    gpu_index, job_id, message, resolved_at_utc, xid, pci_bus_id, source_format, attributes)
SELECT event_key, $file_id, line, ts, $cluster, node_id, category, NULL,
       NULL, NULL, message, NULL, xid, NULL, $format,
       CASE WHEN condition IS NOT NULL THEN json_object('condition', condition) END
FROM (SELECT *, md5(concat_ws(chr(31), $format, $cluster, CAST(ts AS VARCHAR), node_id,
                              coalesce(condition, ''), category)) AS event_key
      FROM k8s_new) s
WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.event_key = s.event_key)
QUALIFY row_number() OVER (PARTITION BY event_key ORDER BY line, ts) = 1
"""

# Each stored open outage of this cluster ends at the first later time its node shows the
# condition healthy (or a newer problem of it), or at the node's first later NodeReady event: an
# as-of match per node and outage kind, whose cost is a sort of both sides, not open outages x
# closers per node. Closers of one node, kind and time are reduced to their first line first, so
# the match has no ties to break (the line counted as the closer is the earliest one).
_CLOSES = """
CREATE OR REPLACE TEMP TABLE k8s_closes AS
WITH open AS (
    SELECT event_key, node_id, timestamp_utc,
           coalesce('condition:' || json_extract_string(attributes, '$.condition'),
                    'event:' || category) AS outage
    FROM events
    WHERE source_format = $format AND cluster_id = $cluster AND resolved_at_utc IS NULL
), closers AS (
    SELECT node_id, outage, ts, min(line) AS line FROM k8s_closers GROUP BY node_id, outage, ts
)
SELECT e.event_key, c.ts AS resolved, c.line
FROM open e ASOF JOIN closers c
  ON c.node_id = e.node_id AND c.outage = e.outage AND c.ts > e.timestamp_utc
"""


def _flush(con, out: _Parsed) -> None:
    for table, rows, schema in (
        ("k8s_new", out.new, _NEW),
        ("k8s_closers", out.closers, _CLOSERS),
        ("k8s_items", out.items, _ITEMS),
    ):
        staging.append(con, table, pl.DataFrame(rows, schema=schema, orient="row"))
        rows.clear()


def read(ctx: ReadContext) -> FileSummary:
    """One kubectl events/nodes export; the caller holds the transaction. Every item is counted
    (read = ingested + duplicate + rejected + ignored)."""
    con, cluster = ctx.con, ctx.options.cluster
    summary = ctx.open_file("node_events")
    file_id = summary.file_id
    for table, schema in (("k8s_new", _NEW), ("k8s_closers", _CLOSERS), ("k8s_items", _ITEMS)):
        staging.create(con, table, schema)
    out = _Parsed()
    blank = 0
    for line, item, error in _items(ctx):
        summary.rows_read += 1
        if item is None and error is None:
            blank += 1
            continue
        reason = error or _parse(item, line, out)
        out.items.append((line, (item if isinstance(item, str) else _raw(item)) if reason else None, reason))
        if len(out.items) >= _FLUSH_ITEMS:
            _flush(con, out)
    _flush(con, out)
    cluster_id = cluster or UNKNOWN_CLUSTER
    con.execute(_INSERT, {"file_id": file_id, "cluster": cluster_id, "format": ctx.fmt})
    con.execute(_CLOSES, {"cluster": cluster_id, "format": ctx.fmt})
    events.close_open_events(con, "SELECT event_key, resolved AS resolved_utc, line FROM k8s_closes", file_id)
    summary.rows_ingested = count(
        con,
        "SELECT count(DISTINCT line) FROM (SELECT line FROM events WHERE file_id = ?"
        " UNION ALL SELECT line FROM k8s_closes)",
        [file_id],
    )
    con.execute(
        "CREATE OR REPLACE TEMP VIEW k8s_accounted AS SELECT line, text, reason FROM k8s_items"
        " WHERE reason IS NOT NULL OR line IN (SELECT line FROM k8s_new)"
        " OR line IN (SELECT line FROM k8s_closes)"
    )
    account_lines(con, summary, "k8s_accounted")
    con.execute("DROP VIEW k8s_accounted")
    _notes(con, summary, out, file_id, blank, cluster)
    staging.drop(con, "k8s_closes", "k8s_new", "k8s_closers", "k8s_items")
    return summary


def _notes(con, summary: FileSummary, out: _Parsed, file_id: int, blank: int, cluster: str | None) -> None:
    closed = count(con, "SELECT count(*) FROM k8s_closes")
    if closed:
        summary.notes.append(
            f"{closed} stored open outage(s) ended by a later healthy condition or NodeReady"
        )
    still_open = count(
        con,
        "SELECT count(*) FROM events WHERE file_id = ? AND resolved_at_utc IS NULL"
        " AND (attributes IS NOT NULL OR category = ?)",
        [file_id, NOT_READY],
    )
    if still_open:
        summary.notes.append(
            f"{still_open} outage(s) still open (condition still a problem): node out of service"
        )
    if out.repeated:
        summary.notes.append(
            f"{out.repeated} repeated event(s) (count > 1) stored at first and last occurrence"
        )
    ignored = [f"{n} {why}" for why, n in sorted(out.ignored.items())] + (
        [f"{blank} blank lines"] if blank else []
    )
    healthy = summary.rows_ignored - sum(out.ignored.values()) - blank
    if healthy > 0:
        ignored.append(f"{healthy} healthy nodes or NodeReady events that end no stored outage")
    if ignored:
        summary.notes.append("ignored (not failures): " + ", ".join(ignored))
    if cluster is None:
        summary.notes.append("cluster_id not given (--cluster): taken from the inventory by node name")


_KUBERNETES = re.compile(r'"kind"\s*:\s*"(?:Event|Node)"')
_KUBERNETES_API = re.compile(r'"apiVersion"\s*:\s*"(?:v1|events\.k8s\.io/v1(?:beta1)?)"')


def is_kubernetes(head: Head) -> bool:
    """kubectl -o json of Events or Nodes (a List, one object, or JSON Lines of them): a core/v1 or
    events.k8s.io/v1 apiVersion beside an Event's or a Node's kind, in the first 64 KiB; any name
    but a table's."""
    text = head.text
    return (
        not head.named(".csv", ".tsv", ".parquet")
        and text.lstrip().startswith("{")
        and _KUBERNETES.search(text) is not None
        and _KUBERNETES_API.search(text) is not None
    )
