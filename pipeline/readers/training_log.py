"""PyTorch training-job logs (NCCL watchdog, torchelastic / torchrun agent) -> ``events``.

Lines read (sources: pytorch/pytorch ``torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp``
``WorkNCCL::checkTimeout`` and ``torch/distributed/elastic/agent/server/api.py``
``_invoke_run`` / ``_rendezvous``; docs/ingest.md cites example lines):

* NCCL watchdog timeout, one per rank, category ``nccl_timeout``::

    [rank1]:[E810 03:04:11.061727749 ProcessGroupNCCL.cpp:683] [Rank 1] Watchdog caught collective
    operation timeout: WorkNCCL(SeqNum=78, OpType=BROADCAST, ..., Timeout(ms)=600000) ran for 600096
    milliseconds before timing out.

* elastic agent worker-group failure, category ``worker_group_failed`` (or ``_unhealthy``)::

    I0501 12:00:00.123000 140 torch/distributed/elastic/agent/server/api.py:700] [default] Worker
    group FAILED. 3/3 attempts left; will restart worker group

* rendezvous completion (the workers start, again after a failure), ``rendezvous_complete``::

    [2024-05-01 12:03:10,456] torch.distributed.elastic.agent.server.api: [INFO] [default]
    Rendezvous complete for workers. Result:

Everything else (training output, the continuation lines of the rendezvous result, tracebacks) is
ignored by design. A relevant line is rejected with the reason when it has no time (the recovery
times need one: Python's default ``INFO:torch...`` format and old ``[E ProcessGroupNCCL.cpp:583]``
lines carry none), an invalid date, a watchdog line without ``ran for N milliseconds`` (cut off),
or undecodable bytes.

Times: an ISO 8601 prefix, optionally in brackets or after a level word (``kubectl logs
--timestamps``, ``ts``, Python logging ``asctime``), or a glog/c10 prefix ``E0810 03:04:11.06``
(month unpadded in c10's own logger: ``E810``) after optional ``[rank1]:`` / ``[default0]:`` tags.
glog prefixes have no year: ``year`` when given, else the file's modification year (the year before
for months after the modification month). Naive times are in the ingest time zone.

The logs do not name the host: ``node`` (``--node``) when given, else ``job:<job_id>``. ``job_id``
is ``job`` (``--job``) or the file name without ``.gz``/``.log``/``.txt``. These events are job
symptoms, not node faults: ``incidents`` (and so rates) leave them out (warehouse.py); they feed
the measured recovery times (:func:`pipeline.transform.job_recoveries`).

Event key: (UTC time, job, node, line text): the same line in another copy of the log is a duplicate.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from pipeline.readers.contract import Head, ReadContext
from pipeline.readers.lines import LINE_SCHEMA
from pipeline.store import staging
from pipeline.store.files import FileSummary, account_lines, count
from pipeline.warehouse import UNKNOWN_CLUSTER
from pipeline.xid import KERNEL_XID

KINDS = ("nccl_timeout", "worker_group_failed", "worker_group_unhealthy", "rendezvous_complete")
"""Categories stored; the first three interrupt the job, ``rendezvous_complete`` is its restart."""

WATCHDOG = "Watchdog caught collective operation timeout"
RENDEZVOUS = "Rendezvous complete for workers"
_WORKER_GROUP = r"\] Worker group (FAILED|UNHEALTHY)\."
_RELEVANT = rf"{WATCHDOG}|{RENDEZVOUS}|{_WORKER_GROUP}"
SNIFF = (
    WATCHDOG,
    RENDEZVOUS,
    "] Worker group FAILED.",
    "] Worker group UNHEALTHY.",
    "torch/distributed/elastic",
    "torch.distributed.elastic",
    "ProcessGroupNCCL",
)
"""Text that marks a file as a training log when the format is detected from its start."""

_ISO = (
    r"^(?:\[|[A-Z]+\s+)?(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2})((?:[.,]\d+)?)"
    r"(Z|[+-]\d{2}:?\d{2})?"
)
_GLOG = r"^(?:\[[^\]]*\]:)*\[?[IWEF](\d{1,2})(\d{2}) (\d{2}:\d{2}:\d{2})((?:\.\d+)?)\s"

_SCHEMA = {
    **LINE_SCHEMA,
    "kind": pl.String,
    "ts_text": pl.String,
    "ran_for_ms": pl.Int64,
}


def default_job_id(path: Path) -> str:
    """The file name without ``.gz`` and a ``.log``/``.txt`` suffix (``job-42.log.gz`` -> ``job-42``)."""
    name = path.name.removesuffix(".gz")
    for suffix in (".log", ".txt", ".out", ".err"):
        name = name.removesuffix(suffix)
    return name


def _glog_year(month: pl.Expr, year: int | None, modified: datetime) -> pl.Expr:
    if year is not None:
        return pl.lit(year)
    return pl.when(month > modified.month).then(modified.year - 1).otherwise(modified.year)


def _parse_batch(frame: pl.DataFrame, year: int | None, modified: datetime) -> pl.DataFrame:
    """The relevant lines of one batch with their kind and time text (NULL when none is found)."""
    rel = frame.filter(pl.col("text").str.contains(_RELEVANT) | pl.col("truncated"))
    iso = pl.col("text").str.extract_groups(_ISO)
    glog = pl.col("text").str.extract_groups(_GLOG)
    parts = rel.with_columns(iso.alias("iso"), glog.alias("glog")).with_columns(
        month=pl.col("glog").struct.field("1").cast(pl.Int32, strict=False)
    )
    frac6 = r"^([.,]\d{1,6})\d*$"  # DuckDB reads microseconds; c10 and kubectl print nanoseconds
    iso_text = pl.concat_str(
        pl.col("iso").struct.field("1"),
        pl.col("iso").struct.field("2").str.replace(frac6, "$1").str.replace(",", ".", literal=True),
        pl.col("iso").struct.field("3").fill_null(""),
    )
    glog_text = pl.format(
        "{}-{}-{} {}{}",
        _glog_year(pl.col("month"), year, modified).cast(pl.String),
        pl.col("month").cast(pl.String).str.zfill(2),
        pl.col("glog").struct.field("2"),
        pl.col("glog").struct.field("3"),
        pl.col("glog").struct.field("4").str.replace(frac6, "$1"),
    )
    text = pl.col("text")
    kind = (
        pl.when(text.str.contains(WATCHDOG, literal=True))
        .then(pl.lit("nccl_timeout"))
        .when(text.str.contains(RENDEZVOUS, literal=True))
        .then(pl.lit("rendezvous_complete"))
        .when(text.str.contains(_WORKER_GROUP))
        .then(pl.concat_str(pl.lit("worker_group_"), text.str.extract(_WORKER_GROUP, 1).str.to_lowercase()))
    )
    return parts.select(
        "line",
        "text",
        "bad_utf8",
        "truncated",
        kind.alias("kind"),
        pl.coalesce(iso_text, glog_text).alias("ts_text"),
        text.str.extract(r" ran for (\d+) milliseconds before timing out", 1)
        .cast(pl.Int64, strict=False)
        .alias("ran_for_ms"),
    ).cast(_SCHEMA)


_STAGE = """
CREATE OR REPLACE TEMP TABLE training_parsed AS
WITH timed AS (
    SELECT *, TRY_CAST(ts_text AS TIMESTAMPTZ) AS ts, trim(text) AS message FROM training_lines
)
SELECT *,
       CASE
         WHEN truncated THEN 'truncated .gz: the compressed stream ends here, the rest of the file is '
                             || 'lost; copy the file again'
         WHEN bad_utf8 THEN 'line is not valid UTF-8 (undecodable bytes shown as U+FFFD); fix the encoding'
         WHEN ts_text IS NULL
           THEN 'no time on the line: the recovery times need one; keep the timestamps '
                || '(kubectl logs --timestamps, ts, torch >= 2.4 log prefix I0501 12:00:00.1)'
         WHEN ts IS NULL THEN 'timestamp ' || ts_text || ' is not a valid date and time'
         WHEN kind = 'nccl_timeout' AND ran_for_ms IS NULL
           THEN 'watchdog line without "ran for N milliseconds before timing out" (cut off?)'
       END AS reason,
       md5(concat_ws(chr(31), CAST(timezone('UTC', ts) AS VARCHAR), $job, $node, message)) AS event_key
FROM timed
"""

_INSERT = """
INSERT INTO events (event_key, file_id, line, timestamp_utc, cluster_id, node_id, category, interrupting,
                    gpu_index, job_id, message, resolved_at_utc, xid, pci_bus_id, source_format)
SELECT event_key, $file_id, line, timezone('UTC', ts), $cluster, $node, kind, kind <> 'rendezvous_complete',
       NULL, $job, message, NULL, NULL, NULL, $format
FROM training_parsed
WHERE line IN (SELECT min(line) FROM training_parsed s
               WHERE reason IS NULL AND NOT EXISTS (SELECT 1 FROM events e WHERE e.event_key = s.event_key)
               GROUP BY event_key)
"""


def read(ctx: ReadContext) -> FileSummary:
    """One training-job log; the caller holds the transaction and the session time zone."""
    con, path, o = ctx.con, ctx.path, ctx.options
    cluster, node, year = o.cluster, o.node, o.year
    summary = ctx.open_file("training_log")
    file_id = summary.file_id
    job_id = o.job or default_job_id(path)
    node_id = node or f"job:{job_id}"
    modified = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    staging.create(con, "training_lines", _SCHEMA)
    glog_lines = 0
    for frame in ctx.lines():
        summary.rows_read += frame.height
        parsed = _parse_batch(frame, year, modified)
        glog_lines += parsed.filter(
            pl.col("ts_text").is_not_null() & ~pl.col("text").str.contains(_ISO)
        ).height
        staging.append(con, "training_lines", parsed)
    con.execute(_STAGE, {"job": job_id, "node": node_id})
    before = count(con, "SELECT count(*) FROM events")
    con.execute(
        _INSERT,
        {
            "file_id": file_id,
            "cluster": cluster or UNKNOWN_CLUSTER,
            "node": node_id,
            "job": job_id,
            "format": ctx.fmt,
        },
    )
    summary.rows_ingested = count(con, "SELECT count(*) FROM events") - before
    account_lines(con, summary, "training_parsed")
    staging.drop(con, "training_parsed", "training_lines")
    summary.notes.append(f"job_id {job_id!r}, node_id {node_id!r}" + ("" if node else " (no --node)"))
    if glog_lines:
        source = "--year" if year is not None else f"file modified {modified:%Y-%m-%d}; override with --year"
        summary.notes.append(f"{glog_lines} glog-style time(s) carry no year: read from {source}")
    return summary


def is_training_log(head: Head) -> bool:
    """NCCL watchdog or torchelastic words, and no kernel Xid line (a node's journal can hold both
    the kernel's and the job's output: a kernel log)."""
    return KERNEL_XID.search(head.text) is None and any(mark in head.text for mark in SNIFF)
