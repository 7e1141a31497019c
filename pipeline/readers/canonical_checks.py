"""The validation SQL of canonical incidents and inventory rows: parse every field, check it,
and give each bad row one reason (what ``failcast ingest`` stores in ``rejects``); the content key
of an incident. :mod:`.canonical` runs it on each batch, read as ``source`` (a DuckDB replacement
scan of the batch's Arrow table), with ``$time_format`` bound when ``--time-format`` is given.
"""

from __future__ import annotations

from pipeline.store.canonical_events import incident_key_sql
from pipeline.store.files import time_sql, whole_number_sql

# Validation in SQL over the string frame: parse, check, and give each bad row one reason. The
# texts quoted in reasons are not passed on (the staged batch goes to Arrow: 12% less CPU).
# TRY_CAST to TIMESTAMPTZ honours offsets and reads naive times in the session time zone. With
# ``time_format`` the user's format (--time-format, bound as $time_format) is tried first.
_NOT_A_TIME = {False: "is not ISO 8601", True: "matches neither --time-format nor ISO 8601"}


# Optional fields written as "no value" the way exports write it: SQL's NULL, pandas' nan/NaT,
# Python's None, a ticket system's N/A or -. They parse as no number or time, so they are stored
# empty; the reasons leave them out (checked only for rows that did not parse: no cost per row).
_ABSENT = "('null', 'none', 'nan', 'nat', 'n/a', '-')"


def _stage_incidents(time_format: bool) -> str:
    not_a_time = _NOT_A_TIME[time_format]
    return f"""
WITH parsed AS (
    SELECT line,
           trim(timestamp) AS ts_text,
           {time_sql("trim(timestamp)", time_format=time_format)} AS ts,
           nullif(trim(cluster_id), '') AS cluster_id,
           nullif(trim(node_id), '') AS node_id,
           trim(category) AS category,
           nullif(trim(gpu_index), '') AS gpu_text,
           {whole_number_sql("nullif(trim(gpu_index), '')")} AS gpu_index,
           nullif(trim(job_id), '') AS job_id,
           message,
           nullif(trim(resolved_at), '') AS resolved_text,
           {time_sql("nullif(trim(resolved_at), '')", time_format=time_format)} AS resolved_at,
           CAST(attributes AS JSON) AS attributes
    FROM source
)
SELECT * EXCLUDE (ts_text, gpu_text, resolved_text),
       CASE
         WHEN ts_text IS NULL OR ts_text = '' THEN 'timestamp is empty'
         WHEN ts IS NULL OR NOT isfinite(ts) THEN 'timestamp ' || ts_text || ' {not_a_time}'
         WHEN cluster_id IS NULL THEN 'cluster_id is empty'
         WHEN node_id IS NULL THEN 'node_id is empty'
         WHEN category IS NULL OR category = ''
           THEN 'category is empty; write undetermined when the cause is not known'
         WHEN gpu_text IS NOT NULL AND (gpu_index IS NULL OR gpu_index < 0)
              AND lower(gpu_text) NOT IN {_ABSENT}
           THEN 'gpu_index ' || gpu_text || ' is not a non-negative integer'
         WHEN resolved_text IS NOT NULL AND (resolved_at IS NULL OR NOT isfinite(resolved_at))
              AND lower(resolved_text) NOT IN {_ABSENT}
           THEN 'resolved_at ' || resolved_text || ' {not_a_time}'
         WHEN resolved_at < ts THEN 'resolved_at is before timestamp'
       END AS reason,
       {incident_key_sql("make_timestamp(epoch_us(ts))")} AS event_key
FROM parsed
"""  # noqa: S608 - time_sql(), whole_number_sql() and incident_key_sql() of fixed columns


def _stage_inventory(time_format: bool) -> str:
    not_a_time = _NOT_A_TIME[time_format]
    return f"""
WITH parsed AS (
    SELECT line,
           nullif(trim(cluster_id), '') AS cluster_id,
           nullif(trim(node_id), '') AS node_id,
           nullif(trim(instance_type), '') AS instance_type,
           trim(gpus_per_node) AS gpus_text,
           {whole_number_sql("trim(gpus_per_node)")} AS gpus_per_node,
           trim(in_service_from) AS from_text,
           {time_sql("trim(in_service_from)", time_format=time_format)} AS from_ts,
           nullif(trim(in_service_to), '') AS to_text,
           {time_sql("nullif(trim(in_service_to), '')", time_format=time_format)} AS to_ts
    FROM source
)
SELECT * EXCLUDE (gpus_text, from_text, to_text),
       CASE
         WHEN cluster_id IS NULL THEN 'cluster_id is empty'
         WHEN node_id IS NULL THEN 'node_id is empty'
         WHEN instance_type IS NULL THEN 'instance_type is empty'
         WHEN gpus_per_node IS NULL OR gpus_per_node < 0
           THEN 'gpus_per_node ' || coalesce(gpus_text, '(empty)')
                || ' is not a whole number >= 0 (0 for CPU, storage or login nodes)'
         WHEN from_ts IS NULL
           THEN 'in_service_from ' || coalesce(from_text, '(empty)') || ' {not_a_time}'
         WHEN to_text IS NOT NULL AND to_ts IS NULL AND lower(to_text) NOT IN {_ABSENT}
           THEN 'in_service_to ' || to_text || ' {not_a_time}'
         WHEN to_ts < from_ts THEN 'in_service_to is before in_service_from'
       END AS reason
FROM parsed
"""  # noqa: S608 - time_sql() and whole_number_sql() of fixed columns


_STAGES = {
    (kind, time_format): stage(time_format)
    for kind, stage in (("incidents", _stage_incidents), ("inventory", _stage_inventory))
    for time_format in (False, True)
}


def stage_sql(kind: str, *, time_format: bool = False) -> str:
    """The validation SQL of a batch of ``kind`` (incidents, inventory), reading ``source`` (and
    ``$time_format`` with ``time_format``): bench/fleet_bench.py's floor of the guarantees runs it."""
    return _STAGES[kind, time_format]
