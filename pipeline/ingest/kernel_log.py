"""NVIDIA XID lines in kernel logs (syslog, journalctl, ``dmesg -T``) -> ``events``.

Line forms read (everything else in the log is an ordinary kernel message and counts as ignored):

* ISO 8601 prefix (rsyslog RFC 3339, ``journalctl -o short-iso[-precise]``), offset optional::

    2026-03-02T04:26:29.892511+00:00 node-017 kernel: [361589.124297] NVRM: Xid (PCI:0000:18:00): 79, ...

* classic syslog without a year (``/var/log/syslog``, ``messages``, ``journalctl`` default)::

    Mar  2 04:26:29 node-017 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=10895, name=python3, ...

* ``dmesg -T`` (no hostname in the line: give it with ``node``)::

    [Mon Mar  2 04:26:29 2026] NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.

A line is *relevant* when it contains ``Xid`` (``NVRM: Xid`` or NVSwitch ``SXid``); a relevant line
that cannot be used is rejected with the reason (no date, no code, not UTF-8 ...). The driver's PCI
id (``PCI:`` prefix optional, as on old drivers) identifies the GPU; with a bus order (the PCI bus
number of each gpu_index, identical on every node of one board type) it becomes a gpu_index.

Years for syslog lines: the first dated line is in ``year`` when given; otherwise the last dated
line is in the file's modification year (the year before, if its month is after the modification
month). Going through the file, the year goes up by one whenever the month falls back by six months
or more (Dec -> Jan); a smaller step back is an out-of-order line in the same year. The summary
states the years used, so a wrong guess is visible, never silent.

Event key: (UTC time, node, message) - the cluster is left out because an XID line's cluster may be
resolved later from the inventory; an identical line at the same second is one event.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from pipeline.categories import FailureCategory
from pipeline.ingest import xid as xid_catalog
from pipeline.ingest.common import (
    FileSummary,
    account_lines,
    count,
    register_file,
    registered,
)
from pipeline.ingest.lines import MAX_DECOMPRESSED_BYTES, read_lines
from pipeline.warehouse import UNKNOWN_CLUSTER

MONTHS = {
    m: i
    for i, m in enumerate(
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], start=1
    )
}
_MON = "(?:" + "|".join(MONTHS) + ")"
_ISO = (
    r"^(?<iso_ts>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)"
    r"\s+(?<iso_host>\S+)\s+(?<iso_rest>.*)$"
)
_BSD = (
    rf"^(?<bsd_mon>{_MON})\s+(?<bsd_day>\d{{1,2}})\s+(?<bsd_hms>\d{{2}}:\d{{2}}:\d{{2}})"
    r"\s+(?<bsd_host>\S+)\s+(?<bsd_rest>.*)$"
)
_CTIME = (
    rf"^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)\s+(?<ct_mon>{_MON})\s+(?<ct_day>\d{{1,2}})\s+"
    r"(?<ct_hms>\d{2}:\d{2}:\d{2})\s+(?<ct_year>\d{4})\]\s*(?<ct_rest>.*)$"
)
_MONOTONIC = r"^\[\s*\d+\.\d+\]"
_XID = (
    r"(?<sxid>S?)Xid \((?:PCI:)?(?<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-9A-Fa-f])?\):"
    r"\s*(?<code>\d+)"
)
_KERNEL_PREFIX = r"^(?:kernel:\s*)?(?:\[\s*\d+\.\d+\]\s*)?"

_STAGED_SCHEMA = {
    "line": pl.Int64,
    "text": pl.String,
    "bad_utf8": pl.Boolean,
    "truncated": pl.Boolean,
    "form": pl.String,
    "ts_text": pl.String,
    "month": pl.Int32,
    "day": pl.Int32,
    "hms": pl.String,
    "year": pl.Int32,
    "year_offset": pl.Int32,
    "node_id": pl.String,
    "message": pl.String,
    "xid": pl.Int32,
    "pci_bus_id": pl.String,
    "is_sxid": pl.Boolean,
    "gpu_index": pl.Int32,
}
_STAGED_ARROW = pl.DataFrame(schema=_STAGED_SCHEMA).to_arrow().schema


def _month(expr: pl.Expr) -> pl.Expr:
    return expr.replace_strict(MONTHS, default=None, return_dtype=pl.Int32)


def year_offsets(
    frame: pl.DataFrame, carry: tuple[int | None, int], prefix: str = ""
) -> tuple[pl.Series, tuple[int | None, int]]:
    """New Years passed before each line of a batch (see the module docstring), for lines dated
    ``Mon DD hh:`` after the regex ``prefix``; ``carry`` is (last syslog month, New Years so far)
    from the batches before and is returned updated."""
    last_month, offset = carry
    dated = frame.select(
        # a regex match test and a 3-character lookup: much faster than a regex extract on every line
        month=pl.when(pl.col("text").str.contains(rf"^{prefix}{_MON}\s+\d{{1,2}}\s+\d{{2}}:")).then(
            _month(pl.col("text").str.strip_chars_start("[").str.head(3))
        ),
    ).with_columns(previous=pl.col("month").forward_fill().shift(1).fill_null(pl.lit(last_month, pl.Int32)))
    year_offset = dated.select(
        offset
        + ((pl.col("previous") - pl.col("month") >= 6) & pl.col("month").is_not_null())
        .fill_null(False)
        .cast(pl.Int32)
        .cum_sum()
    ).to_series()
    months = dated["month"].drop_nulls()
    new_carry = (
        months[-1] if months.len() else last_month,
        int(year_offset[-1]) if frame.height else offset,
    )
    return year_offset, new_carry


def _parse_batch(
    frame: pl.DataFrame, carry: tuple[int | None, int], node: str | None, bus_order: Mapping[str, int]
) -> tuple[pl.DataFrame, tuple[int | None, int]]:
    """Relevant lines of one batch, parsed; ``carry`` is (last syslog month, New Years so far)."""
    year_offset, new_carry = year_offsets(frame, carry)
    relevant = frame["text"].str.contains("Xid", literal=True) | frame["truncated"]
    rel = frame.filter(relevant).with_columns(year_offset=year_offset.filter(relevant))
    parts = rel.with_columns(
        pl.col("text").str.extract_groups(_ISO).alias("iso"),
        pl.col("text").str.extract_groups(_BSD).alias("bsd"),
        pl.col("text").str.extract_groups(_CTIME).alias("ct"),
        pl.col("text").str.extract_groups(_XID).alias("x"),
    ).unnest("iso", "bsd", "ct", "x")
    form = (
        pl.when(pl.col("iso_ts").is_not_null())
        .then(pl.lit("iso"))
        .when(pl.col("bsd_mon").is_not_null())
        .then(pl.lit("bsd"))
        .when(pl.col("ct_mon").is_not_null())
        .then(pl.lit("ctime"))
        .when(pl.col("text").str.contains(_MONOTONIC))
        .then(pl.lit("monotonic"))
    )
    rest = pl.coalesce("iso_rest", "bsd_rest", "ct_rest")
    pci = pl.col("pci").str.to_lowercase()
    staged = parts.select(
        "line",
        "text",
        "bad_utf8",
        "truncated",
        form.alias("form"),
        pl.col("iso_ts").str.replace(",", ".", literal=True).alias("ts_text"),
        _month(pl.coalesce("bsd_mon", "ct_mon")).alias("month"),
        pl.coalesce("bsd_day", "ct_day").cast(pl.Int32).alias("day"),
        pl.coalesce("bsd_hms", "ct_hms").alias("hms"),
        pl.col("ct_year").cast(pl.Int32).alias("year"),
        pl.col("year_offset").cast(pl.Int32),
        pl.coalesce("iso_host", "bsd_host", pl.lit(node, pl.String)).alias("node_id"),
        rest.str.replace(_KERNEL_PREFIX, "").str.strip_chars().alias("message"),
        pl.col("code").cast(pl.Int32, strict=False).alias("xid"),
        pci.alias("pci_bus_id"),
        (pl.col("sxid") == "S").alias("is_sxid"),
        pci.str.slice(5, 2)
        .replace_strict(dict(bus_order), default=None, return_dtype=pl.Int32)
        .alias("gpu_index"),
    )
    return staged.cast(_STAGED_SCHEMA), new_carry


_STAGE = """
CREATE OR REPLACE TEMP TABLE xid_parsed AS
WITH shown AS (
    SELECT *,
           CASE form
             WHEN 'iso' THEN ts_text
             WHEN 'bsd' THEN printf('%04d-%02d-%02d %s', $base_year + year_offset, month, day, hms)
             WHEN 'ctime' THEN printf('%04d-%02d-%02d %s', year, month, day, hms)
           END AS ts_shown
    FROM read_parquet($staged_path)
), timed AS (
    SELECT *,
           CASE WHEN form = 'iso' THEN TRY_CAST(ts_shown AS TIMESTAMPTZ)
                ELSE TRY_CAST(TRY_CAST(ts_shown AS TIMESTAMP) AS TIMESTAMPTZ) END AS ts
    FROM shown
)
SELECT t.line, t.text, t.ts, t.node_id, t.message, t.xid, t.pci_bus_id, t.gpu_index,
       CASE
         WHEN truncated THEN 'truncated .gz: the compressed stream ends here, the rest of the file is '
                             || 'lost; copy the file again'
         WHEN bad_utf8 THEN 'line is not valid UTF-8 (undecodable bytes shown as U+FFFD); fix the encoding'
         WHEN form = 'monotonic' THEN 'dmesg time since boot has no date; export with dmesg -T or '
                                      || 'journalctl -k -o short-iso'
         WHEN form IS NULL THEN 'no timestamp and host prefix; expected ISO 8601 '
                                || '(2026-03-02T04:26:29+00:00 host ...) or syslog (Mar  2 04:26:29 host ...)'
         WHEN node_id IS NULL THEN 'dmesg -T line has no hostname; pass --node NAME'
         WHEN ts IS NULL THEN 'timestamp ' || ts_shown || ' is not a valid date and time'
         WHEN t.xid IS NULL THEN 'Xid line without (PCI:dddd:bb:dd): CODE; cannot tell the GPU and the code'
       END AS reason,
       CASE WHEN is_sxid THEN $sxid_category ELSE coalesce(c.category, $unknown_category) END AS category,
       CASE WHEN is_sxid THEN $sxid_interrupting
            ELSE coalesce(c.interrupting, $unknown_interrupting) END AS interrupting,
       md5(concat_ws(chr(31), CAST(timezone('UTC', ts) AS VARCHAR), node_id, message)) AS event_key
FROM timed t LEFT JOIN xid_catalog c ON c.xid = t.xid AND NOT t.is_sxid
"""

# The first line of each event not yet stored. A GROUP BY rather than a window over all lines:
# DuckDB spills it to disk under a memory cap (the window ran out of memory at 64 MB).
_INSERT = """
INSERT INTO events (event_key, file_id, line, timestamp_utc, cluster_id, node_id, category, interrupting,
                    gpu_index, job_id, message, resolved_at_utc, xid, pci_bus_id, source_format)
SELECT event_key, $file_id, line, timezone('UTC', ts), $cluster, node_id, category, interrupting,
       gpu_index, NULL, message, NULL, xid, pci_bus_id, 'kernel-log'
FROM xid_parsed
WHERE line IN (SELECT min(line) FROM xid_parsed s
               WHERE reason IS NULL AND NOT EXISTS (SELECT 1 FROM events e WHERE e.event_key = s.event_key)
               GROUP BY event_key)
"""


def syslog_base_year(path: Path, year: int | None, last: tuple[int | None, int], summary: FileSummary) -> int:
    """The year of the first syslog line (see the module docstring) and a note saying so."""
    last_month, rollovers = last
    if year is not None:
        base, source = year, "--year"
    else:
        modified = datetime.fromtimestamp(path.stat().st_mtime, UTC)
        last_year = modified.year if (last_month or 1) <= modified.month else modified.year - 1
        base, source = last_year - rollovers, f"file modified {modified:%Y-%m-%d}; override with --year"
    span = f"{base}" if not rollovers else f"{base}..{base + rollovers} ({rollovers} New Year rollover(s))"
    summary.notes.append(f"syslog times carry no year: read as {span} ({source})")
    return base


def _stage_lines(
    path: Path,
    staged_path: Path,
    summary: FileSummary,
    node: str | None,
    bus_order: Mapping[str, int],
    progress: Callable[[int], None] | None,
    max_decompressed_bytes: int,
    block_bytes: int | None,
) -> tuple[tuple[int | None, int], bool, int]:
    """Parse the log batch by batch and append its relevant lines to the Parquet file
    ``staged_path``, so memory holds one batch whatever the size of the log (a frame registered
    in DuckDB would stay alive until the file's transaction commits). Returns the year carry, whether
    any syslog line was dated, and the number of ignored lines with non-UTF-8 bytes."""
    carry: tuple[int | None, int] = (None, 0)
    any_syslog, bad_ignored, done = False, 0, 0
    with pq.ParquetWriter(staged_path, _STAGED_ARROW) as writer:
        for batch in read_lines(path, block_bytes, max_decompressed_bytes):
            summary.rows_read += batch.frame.height
            staged, carry = _parse_batch(batch.frame, carry, node, bus_order)
            any_syslog = any_syslog or carry[0] is not None
            bad_ignored += batch.frame["bad_utf8"].sum() - staged["bad_utf8"].sum()
            if staged.height:
                writer.write_table(staged.to_arrow())
            if progress:
                progress(batch.bytes_done - done)
            done = batch.bytes_done
    return carry, any_syslog, bad_ignored


def ingest_kernel_log(
    con,
    path: Path,
    *,
    sha: str,
    cluster: str | None,
    node: str | None,
    year: int | None,
    bus_order: Mapping[str, int],
    progress: Callable[[int], None] | None = None,
    max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES,
    block_bytes: int | None = None,
) -> FileSummary:
    """One kernel log; the caller holds the transaction and the session time zone. The parsed Xid
    lines wait in a temporary directory, removed at the end (also on error and Ctrl-C)."""
    summary = FileSummary(str(path), "xid_log", "kernel-log")
    file_id = register_file(con, path, sha, "xid_log", "kernel-log")
    summary.file_id = file_id
    with tempfile.TemporaryDirectory(prefix="failcast-xid-") as tmp:
        staged_path = Path(tmp) / "xid_lines.parquet"
        carry, any_syslog, bad_ignored = _stage_lines(
            path, staged_path, summary, node, bus_order, progress, max_decompressed_bytes, block_bytes
        )
        base_year = syslog_base_year(path, year, carry, summary) if any_syslog else 0
        with registered(con, "xid_catalog", xid_catalog.catalog_frame()):
            con.execute(
                _STAGE,
                {
                    "staged_path": str(staged_path),
                    "base_year": base_year,
                    "sxid_category": xid_catalog.SXID_CATEGORY.value,
                    "sxid_interrupting": xid_catalog.SXID_CATEGORY.interrupting,
                    "unknown_category": FailureCategory.UNKNOWN_XID.value,
                    "unknown_interrupting": FailureCategory.UNKNOWN_XID.interrupting,
                },
            )
    before = count(con, "SELECT count(*) FROM events")
    con.execute(_INSERT, {"file_id": file_id, "cluster": cluster or UNKNOWN_CLUSTER})
    summary.rows_ingested = count(con, "SELECT count(*) FROM events") - before
    account_lines(con, file_id, path, summary, "xid_parsed")
    unknown = con.sql(
        "SELECT count(*), list(DISTINCT xid ORDER BY xid) FROM xid_parsed"
        " WHERE reason IS NULL AND category = $c",
        params={"c": FailureCategory.UNKNOWN_XID.value},
    ).fetchall()[0]
    con.execute("DROP TABLE xid_parsed")
    if unknown[0]:
        summary.notes.append(
            f"{unknown[0]} Xid line(s) with codes not in the catalog kept as unknown_xid: {unknown[1]}"
        )
    if bad_ignored:
        summary.notes.append(f"{bad_ignored} ignored (non-Xid) line(s) had non-UTF-8 bytes")
    if cluster is None:
        summary.notes.append("cluster_id not given (--cluster): taken from the inventory by node name")
    return summary
