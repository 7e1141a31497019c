"""Loghub's BGL sample (IBM BlueGene/L RAS log, Oliner & Stearley, DSN 2007) -> canonical incidents.

A line is ``<alert-tag> <epoch> <yyyy.mm.dd> <location> <time> <location> RAS <component> <level>
<message>``; ``-`` as the tag marks a non-alert line. Alert lines (the operators' failure labels)
become incidents by tag (:data:`BGL_ALERT_CATEGORIES`); a line that cannot be used goes to the
rejects with its line number and reason: too few fields, an epoch that is not an integer, a location
that names no node (``NULL``, ``UNKNOWN_LOCATION``), or an alert tag that the mapping does not know
(extend the mapping rather than guess). Non-alert lines are counted, not kept.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import polars as pl

from pipeline.categories import FailureCategory
from pipeline.readers import public_data
from pipeline.readers.canonical_source import INVENTORY_COLUMNS
from pipeline.readers.contract import Head, ReadContext
from pipeline.readers.public_data import CanonicalFrames
from pipeline.store.files import FileSummary

BGL_ALERT_CATEGORIES: dict[str, FailureCategory] = {
    "KERNDTLB": FailureCategory.HARDWARE,  # data TLB error interrupt on a compute chip
    "KERNSTOR": FailureCategory.HARDWARE,  # data storage interrupt
    "KERNRTSP": FailureCategory.SOFTWARE,  # rts panic! - stopping execution
    "KERNTERM": FailureCategory.SOFTWARE,  # rts: kernel terminated for reason ...
    "KERNREC": FailureCategory.NETWORK,  # error receiving packet on tree network
    "KERNMNTF": FailureCategory.STORAGE,  # Lustre mount FAILED
    "APPSEV": FailureCategory.NETWORK,  # ciod control stream: link has been severed
    "APPRES": FailureCategory.NETWORK,  # ciod control stream: connection reset by peer
    "APPTO": FailureCategory.NETWORK,  # ciod control stream: connection timed out
    "APPREAD": FailureCategory.NETWORK,  # ciod: failed to read message prefix on control stream
    "APPOUT": FailureCategory.STORAGE,  # ciod: LOGIN chdir(...) failed: Input/output error
    "APPCHILD": FailureCategory.APPLICATION,  # ciod: error creating node map from the user's file
}
_NO_NODE = ("NULL", "UNKNOWN_LOCATION")


def _parse(number: int, text: str) -> tuple[dict | None, str | None]:
    """One line -> (incident, None), (None, reason) for a reject, or (None, None) if not an alert."""
    fields = text.split(maxsplit=9)
    if not fields or fields[0] == "-":
        return None, None
    if len(fields) < 9:
        return (
            None,
            f"alert line has {len(fields)} fields; expected at least 9 (tag epoch date node time ...)",
        )
    tag, epoch, _, node = fields[:4]
    if not re.fullmatch(r"[0-9]{1,12}", epoch):
        return None, f"epoch {epoch!r} is not an integer number of seconds"
    if node in _NO_NODE:
        return None, f"alert {tag} names no node (location {node})"
    if tag not in BGL_ALERT_CATEGORIES:
        return None, f"unknown BGL alert tag {tag}; add it to BGL_ALERT_CATEGORIES"
    return {
        "epoch": int(epoch),
        "node_id": node,
        "category": BGL_ALERT_CATEGORIES[tag].value,
        "message": fields[9] if len(fields) > 9 else "",
        "alert_tag": tag,
        "component": fields[7],
        "level": fields[8],
        "line": number,
    }, None


def read_bgl(path: Path | str, *, cluster_id: str = "bgl") -> CanonicalFrames:
    """Incidents from the alert lines; ``extras["rejects"]`` (line, raw, reason) and
    ``extras["lines"]`` (counts of lines, non-alert lines, incidents and rejects)."""
    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    incidents, rejects, lines = [], [], 0
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        for lines, raw in enumerate(f, start=1):
            text = raw.rstrip("\r\n")
            row, reason = _parse(lines, text)
            if row is not None:
                incidents.append(row)
            elif reason is not None:
                rejects.append({"line": lines, "raw": text, "reason": reason})
    schema = {
        "epoch": pl.Int64,
        "node_id": pl.String,
        "category": pl.String,
        "message": pl.String,
        "alert_tag": pl.String,
        "component": pl.String,
        "level": pl.String,
        "line": pl.Int64,
    }
    frame = pl.DataFrame(incidents, schema=schema).select(
        timestamp=pl.from_epoch("epoch", time_unit="s").dt.replace_time_zone("UTC"),
        cluster_id=pl.lit(cluster_id),
        node_id="node_id",
        category="category",
        gpu_index=pl.lit(None, pl.Int64),
        job_id=pl.lit(None, pl.String),
        message="message",
        resolved_at=pl.lit(None, pl.Datetime("us", "UTC")),
        alert_tag="alert_tag",
        component="component",
        level="level",
        line="line",
    )
    reject_frame = pl.DataFrame(rejects, schema={"line": pl.Int64, "raw": pl.String, "reason": pl.String})
    counts = pl.DataFrame(
        {
            "lines": [lines],
            "non_alert": [lines - frame.height - reject_frame.height],
            "incidents": [frame.height],
            "rejects": [reject_frame.height],
        }
    )
    inventory = pl.DataFrame(
        schema={
            **dict.fromkeys(INVENTORY_COLUMNS, pl.String),
            "gpus_per_node": pl.Int64,
            "in_service_from": pl.Datetime("us", "UTC"),
            "in_service_to": pl.Datetime("us", "UTC"),
        }
    )
    return CanonicalFrames("bgl", frame, inventory, {"rejects": reject_frame, "lines": counts})


_LINE = re.compile(r"\S+ \d+ \d{4}\.\d\d\.\d\d \S+ \d{4}-\d\d-\d\d-\d\d\.\d\d\.\d\d\.\d+ \S+ RAS ")


def is_bgl(head: Head) -> bool:
    """A BGL RAS line first: tag, epoch, date, location, time with microseconds, location, RAS."""
    return _LINE.match(head.first_line) is not None


def read(ctx: ReadContext) -> FileSummary:
    """``failcast ingest --format bgl``: the alert lines' incidents (epoch times: no time zone)."""
    return public_data.ingest(ctx, lambda: (read_bgl(ctx.path), []))
