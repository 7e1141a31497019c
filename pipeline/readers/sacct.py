"""Slurm accounting (``sacct --parsable2`` / ``-P``, or ``-p`` with a trailing ``|``) -> ``jobs``.

Any column order, given by the header line (so export without ``-n/--noheader``). Needed columns:
JobID, State, Start, End, NodeList; used when present: JobName, Cluster, NNodes, ElapsedRaw,
Elapsed. Times are ``YYYY-MM-DDTHH:MM:SS`` in ``timezone`` or epoch seconds
(``SLURM_TIME_FORMAT=%s``); ``Unknown``/``None`` mean not set. Source: sacct(1), "JOB STATE CODES".

Ignored lines (counted, not rejected): blank lines, repeated header lines, job steps
(``123.batch``, ``123.0``: the allocation line carries the job). ``State`` keeps its first word
(``CANCELLED by 51234`` -> CANCELLED); NODE_FAIL and BOOT_FAIL mark the job ``interrupted``: the
infrastructure ended it, the other states are job-level outcomes kept as context.

Hostlists are expanded once per distinct NodeList value (:mod:`.hostlist`), not once per line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from pipeline.readers import hostlist
from pipeline.readers.lines import MAX_DECOMPRESSED_BYTES, read_lines
from pipeline.store import jobs
from pipeline.store.files import (
    FileSummary,
    InputError,
    account_lines,
    register_file,
    registered,
    time_sql,
)

REQUIRED = ("jobid", "state", "start", "end", "nodelist")
OPTIONAL = ("jobname", "cluster", "nnodes", "elapsedraw", "elapsed")
INTERRUPTED_STATES = ("NODE_FAIL", "BOOT_FAIL")

_SCHEMA = {
    "line": pl.Int64,
    "text": pl.String,
    "bad_utf8": pl.Boolean,
    "truncated": pl.Boolean,
    "fields": pl.Int32,
    **{c: pl.String for c in (*REQUIRED, *OPTIONAL)},
    "nodes": pl.List(pl.String),
    "hostlist_error": pl.String,
}


def slurm_time(column: str) -> str:
    """SQL for a Slurm time field as printed by ``slurm_make_time_str`` (src/common/parse_time.c):
    ``%FT%T`` in the session time zone, epoch seconds with ``SLURM_TIME_FORMAT=%s``, or ``Unknown``
    (0 or INFINITE) / ``None`` (NO_VAL), which are NULL. ``column`` must be a trusted SQL name."""
    return f"CASE WHEN {column} IN ('', 'Unknown', 'None') THEN NULL ELSE {time_sql(column)} END"


Header = tuple[str, dict[str, int], int]
"""A ``-P`` export's header line, its lower-case column -> position map and its field count."""


@dataclass(frozen=True)
class PipeExport:
    """How one kind of Slurm ``-P`` (pipe-separated) export is staged: ``what`` names it in
    messages, ``export`` is the command that writes a readable one, ``parse`` turns a block of
    lines into rows of ``schema``, which land in the temp table ``table``."""

    what: str
    export: str
    required: tuple[str, ...]
    table: str
    schema: dict[str, pl.DataType]
    parse: Callable[[pl.DataFrame, Header], pl.DataFrame]


def _pipe_header(path: Path, frame: pl.DataFrame, spec: PipeExport) -> Header:
    """The first non-blank line; its columns must include ``spec.required`` (any order)."""
    first = frame.filter(pl.col("text").str.strip_chars() != "").head(1)
    if first.height == 0:
        raise InputError(f"{path}: no header line; export {spec.what} without -n/--noheader")
    header = first["text"][0]
    names = [n.strip().lower() for n in header.removesuffix("|").split("|")]
    missing = [c for c in spec.required if c not in names]
    if missing:
        raise InputError(
            f"{path}:{first['line'][0]}: {spec.what} header lacks {missing}; export with {spec.export}"
        )
    return header, {n: i for i, n in enumerate(names)}, len(names)


def stage_pipe_export(
    con,
    path: Path,
    spec: PipeExport,
    summary: FileSummary,
    *,
    progress: Callable[[int], None] | None,
    max_decompressed_bytes: int,
    block_bytes: int | None,
) -> Header:
    """Streams ``path`` block by block into the temp table ``spec.table`` (lines counted in
    ``summary.rows_read``) and returns the header; the caller's SQL takes it from there. Shared by
    the sacct and sacctmgr-event readers."""
    with registered(con, "pipe_empty", pl.DataFrame(schema=spec.schema)):
        con.execute(f"CREATE OR REPLACE TEMP TABLE {spec.table} AS SELECT * FROM pipe_empty")  # noqa: S608
    header: Header | None = None
    done = 0
    for batch in read_lines(path, block_bytes, max_decompressed_bytes):
        summary.rows_read += batch.frame.height
        if header is None:
            header = _pipe_header(path, batch.frame, spec)
        # read by SQL as a local variable (replacement scan), freed with the batch; a registered
        # frame would stay alive until the file's transaction commits
        pipe_batch = spec.parse(batch.frame, header)  # noqa: F841
        con.execute(f"INSERT INTO {spec.table} SELECT * FROM pipe_batch")  # noqa: S608 - a PipeExport's literal name
        if progress:
            progress(batch.bytes_done - done)
        done = batch.bytes_done
    if header is None:
        raise InputError(f"{path}: no lines; export {spec.what} with its header line")
    return header


def _parse_batch(frame: pl.DataFrame, header_fields: Header) -> pl.DataFrame:
    header, columns, _ = header_fields
    text = pl.col("text").str.strip_suffix("|") if header.endswith("|") else pl.col("text")
    split = frame.with_columns(parts=text.str.split("|"))
    keep = split.filter(
        pl.col("truncated")
        | (pl.col("text").str.strip_chars() != "")
        & (pl.col("text") != header)
        & ~pl.col("parts")
        .list.get(columns["jobid"], null_on_oob=True)
        .str.contains(".", literal=True)
        .fill_null(False)
    )
    fields = keep.select(
        "line",
        "text",
        "bad_utf8",
        "truncated",
        pl.col("parts").list.len().alias("fields"),
        *[
            (
                pl.col("parts").list.get(columns[c], null_on_oob=True).str.strip_chars()
                if c in columns
                else pl.lit(None, pl.String)
            ).alias(c)
            for c in (*REQUIRED, *OPTIONAL)
        ],
    )
    return fields.join(hostlist.expand_frame(fields["nodelist"]), on="nodelist", how="left").cast(_SCHEMA)


_STAGE = f"""
CREATE OR REPLACE TEMP TABLE jobs_parsed AS
WITH typed AS (
    SELECT *,
           {slurm_time("start")} AS start_ts,
           {slurm_time('"end"')} AS end_ts,
           TRY_CAST(nullif(nnodes, '') AS INTEGER) AS nnodes_int,
           upper(split_part(state, ' ', 1)) AS state_word,
           nullif(cluster, '') AS cluster_name
    FROM jobs_lines
)
SELECT *,
       CASE
         WHEN truncated THEN 'truncated .gz: the compressed stream ends here; copy the file again'
         WHEN bad_utf8 THEN 'line is not valid UTF-8 (undecodable bytes shown as U+FFFD); fix the encoding'
         WHEN fields <> $fields THEN 'expected ' || $fields || ' |-separated fields like the header, found '
                                    || fields
         WHEN jobid IS NULL OR jobid = '' THEN 'JobID is empty'
         WHEN state_word = '' THEN 'State is empty'
         WHEN start_ts IS NULL AND start NOT IN ('', 'Unknown', 'None')
           THEN 'Start ' || start || ' is not a time (ISO 8601 or epoch seconds)'
         WHEN end_ts IS NULL AND "end" NOT IN ('', 'Unknown', 'None')
           THEN 'End ' || "end" || ' is not a time (ISO 8601 or epoch seconds)'
         WHEN end_ts < start_ts THEN 'End is before Start'
         WHEN hostlist_error IS NOT NULL THEN hostlist_error
         WHEN nnodes IS NOT NULL AND nnodes <> '' AND nnodes_int IS NULL
           THEN 'NNodes ' || nnodes || ' is not an integer'
       END AS reason,
       coalesce(cluster_name, $cluster) AS cluster_id,
       coalesce(TRY_CAST(elapsedraw AS DOUBLE) / 3600,
                (coalesce(TRY_CAST(nullif(regexp_extract(elapsed, '^(\\d+)-', 1), '') AS DOUBLE), 0) * 86400
                 + TRY_CAST(regexp_extract(elapsed, '(\\d+):(\\d+):(\\d+)$', 1) AS DOUBLE) * 3600
                 + TRY_CAST(regexp_extract(elapsed, '(\\d+):(\\d+):(\\d+)$', 2) AS DOUBLE) * 60
                 + TRY_CAST(regexp_extract(elapsed, '(\\d+):(\\d+):(\\d+)$', 3) AS DOUBLE)) / 3600,
                epoch(end_ts - start_ts) / 3600) AS elapsed_hours
FROM typed
"""  # noqa: S608 - slurm_time() of fixed column names

# Newest line of a job wins within the file (a later export sees the final state); the store
# replaces stored jobs with it (pipeline.store.jobs).
_UPSERT = """
CREATE OR REPLACE TEMP TABLE jobs_fresh AS
SELECT jobid AS job_id, cluster_id, nullif(jobname, '') AS job_name, state_word AS state,
       timezone('UTC', start_ts) AS start_utc, timezone('UTC', end_ts) AS end_utc, elapsed_hours,
       coalesce(nnodes_int, len(nodes)) AS nnodes, nodes,
       list_contains($interrupted, state_word) AS interrupted, line
FROM jobs_parsed WHERE reason IS NULL
QUALIFY row_number() OVER (PARTITION BY coalesce(cluster_id, ''), jobid ORDER BY line DESC) = 1
"""


_EXPORT = PipeExport(
    what="sacct",
    export="sacct -P -o JobID,JobName,State,Start,End,ElapsedRaw,NNodes,NodeList (header kept)",
    required=REQUIRED,
    table="jobs_lines",
    schema=_SCHEMA,
    parse=_parse_batch,
)


def ingest_sacct(
    con,
    path: Path,
    *,
    sha: str,
    cluster: str | None,
    progress: Callable[[int], None] | None = None,
    max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES,
    block_bytes: int | None = None,
) -> FileSummary:
    """One sacct export; the caller holds the transaction and the session time zone."""
    summary = FileSummary(str(path), "jobs", "sacct")
    file_id = register_file(con, path, sha, "jobs", "sacct")
    summary.file_id = file_id
    header = stage_pipe_export(
        con,
        path,
        _EXPORT,
        summary,
        progress=progress,
        max_decompressed_bytes=max_decompressed_bytes,
        block_bytes=block_bytes,
    )
    con.execute(_STAGE, {"fields": header[2], "cluster": cluster})
    con.execute(_UPSERT, {"interrupted": list(INTERRUPTED_STATES)})
    summary.rows_ingested = jobs.replace_jobs(con, file_id)
    account_lines(con, file_id, path, summary, "jobs_parsed")
    return summary
