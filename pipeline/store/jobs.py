"""Scheduler jobs -> ``jobs``: the newest export of a job wins. A reader (sacct, a lake's jobs
parts) stages one row per job in the temporary table ``jobs_fresh`` (the columns of ``jobs`` less
``file_id``, with the line); :func:`replace_jobs` stores them."""

from __future__ import annotations

from pipeline.store.files import count

# Rows identical to a stored one are duplicates (the stored row keeps its file and line); rows that
# differ replace it.
_REPLACE = """
DELETE FROM jobs_fresh f USING jobs j
WHERE j.job_id = f.job_id AND j.cluster_id IS NOT DISTINCT FROM f.cluster_id
  AND j.job_name IS NOT DISTINCT FROM f.job_name AND j.state = f.state
  AND j.start_utc IS NOT DISTINCT FROM f.start_utc AND j.end_utc IS NOT DISTINCT FROM f.end_utc
  AND j.nnodes IS NOT DISTINCT FROM f.nnodes AND j.nodes = f.nodes;
DELETE FROM jobs j USING jobs_fresh f
WHERE j.job_id = f.job_id AND j.cluster_id IS NOT DISTINCT FROM f.cluster_id;
INSERT INTO jobs (job_id, cluster_id, job_name, state, start_utc, end_utc, elapsed_hours, nnodes, nodes,
                  interrupted, file_id, line)
SELECT job_id, cluster_id, job_name, state, start_utc, end_utc, elapsed_hours, nnodes, nodes,
       interrupted, $file_id, line
FROM jobs_fresh;
"""


def replace_jobs(con, file_id: int) -> int:
    """Store the jobs staged in ``jobs_fresh`` as the file's; returns how many it stored."""
    con.execute(_REPLACE, {"file_id": file_id})  # DuckDB binds parameters of the last statement only
    return count(con, "SELECT count(*) FROM jobs WHERE file_id = ?", [file_id])
