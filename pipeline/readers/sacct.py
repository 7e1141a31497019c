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

import polars as pl

from pipeline.readers import hostlist
from pipeline.readers.contract import Head, ReadContext
from pipeline.readers.slurm_pipe import (
    PIPE_REASONS,
    Header,
    PipeExport,
    pipe_columns,
    slurm_time,
    stage_pipe_export,
)
from pipeline.store import jobs
from pipeline.store.files import FileSummary, account_lines

REQUIRED = ("jobid", "state", "start", "end", "nodelist")
OPTIONAL = ("jobname", "cluster", "nnodes", "elapsedraw", "elapsed")
INTERRUPTED_STATES = ("NODE_FAIL", "BOOT_FAIL")


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
    return fields.join(hostlist.expand_frame(fields["nodelist"]), on="nodelist", how="left").cast(
        _EXPORT.schema
    )


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
         {PIPE_REASONS}
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
    optional=OPTIONAL,
    table="jobs_lines",
    parse=_parse_batch,
)


def read(ctx: ReadContext) -> FileSummary:
    """One sacct export; the caller holds the transaction and the session time zone."""
    summary = ctx.open_file("jobs")
    header = stage_pipe_export(ctx, _EXPORT, summary)
    ctx.con.execute(_STAGE, {"fields": header[2], "cluster": ctx.options.cluster})
    ctx.con.execute(_UPSERT, {"interrupted": list(INTERRUPTED_STATES)})
    summary.rows_ingested = jobs.replace_jobs(ctx.con, summary.file_id)
    account_lines(ctx.con, summary, "jobs_parsed")
    return summary


def is_sacct(head: Head) -> bool:
    """A ``|``-separated header naming JobID."""
    return "|" in head.first_line and "jobid" in pipe_columns(head.first_line)
