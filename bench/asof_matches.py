"""The readers' event-to-event matches at growing events per node: as-of (now) against the per-node
join-and-filter they replaced (issue 27).

    python -m bench.asof_matches [--nodes 10] [--per-node 1000 4000 16000] [--old]

slurmctld: each node has ``per-node`` outages (``not responding``) and as many job kills, one every
few minutes, and every kill looks for its nearest outage within PAIR_SECONDS; Kubernetes: each node
has ``per-node`` stored open NodeNotReady outages and as many NodeReady closers. Each query runs
on staged tables in an in-memory DuckDB (the readers' own SQL, the staging tables built in SQL);
the numbers are the query's CPU seconds (this process, DuckDB's threads included) and wall time.
``--old`` also runs the replaced queries (their cost grows with the square of events per node).
"""

from __future__ import annotations

import argparse
import time

import duckdb

from pipeline.readers import kubernetes, slurmctld

OLD_KILLS = """
    SELECT k.line, k.ts, k.node_id, coalesce(o.category, $killed) AS category, k.message,
           'kill|' || k.job_id AS grp, k.job_id
    FROM per_node k LEFT JOIN outages o
      ON o.node_id = k.node_id AND abs(epoch(o.ts) - epoch(k.ts)) <= $pair_seconds
    WHERE k.kind = 'kill'
    QUALIFY row_number() OVER (PARTITION BY k.line, k.node_id
                               ORDER BY abs(epoch(o.ts) - epoch(k.ts)), o.line) = 1
"""
# the old Kubernetes match but for a tie of two closers at the same time: the old arg_min(c.line, c.ts)
# took either line, the earliest is the rule now (the tests use both queries as the oracle)
OLD_CLOSES = """
CREATE OR REPLACE TEMP TABLE k8s_closes AS
SELECT e.event_key, min(c.ts) AS resolved, arg_min(c.line, (c.ts, c.line)) AS line
FROM events e
JOIN k8s_closers c
  ON c.node_id = e.node_id AND c.ts > e.timestamp_utc
 AND c.outage = coalesce('condition:' || json_extract_string(e.attributes, '$.condition'),
                         'event:' || e.category)
WHERE e.source_format = $format AND e.cluster_id = $cluster AND e.resolved_at_utc IS NULL
GROUP BY e.event_key
"""


def old_events_sql() -> str:
    text = slurmctld._EVENTS
    return (
        text[: text.index("), kill_rows AS (")]
        + "), kills AS ("
        + OLD_KILLS
        + text[text.index("), rows AS (") :]
    )


def slurmctld_tables(con, nodes: int, per_node: int) -> None:
    """Per node: an outage every 7 minutes and a kill 3 minutes after each (line order = time)."""
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE slurmctld_parsed AS
        SELECT row_number() OVER () AS line,
               TIMESTAMPTZ '2024-01-01 00:00:00+00' + to_seconds(i * 420 + CASE WHEN kill THEN 180 ELSE 0 END)
                   AS ts,
               CASE WHEN kill THEN 'kill' ELSE 'down' END AS kind, ['gpu-' || n] AS nodes,
               NULL::VARCHAR AS detail, CASE WHEN kill THEN CAST(i AS VARCHAR) END AS job_id,
               'message' AS message, NULL::VARCHAR AS reason
        FROM range({nodes}) a(n), range({per_node}) b(i), (VALUES (false), (true)) c(kill)
    """)  # noqa: S608 - integers


def kubernetes_tables(con, nodes: int, per_node: int) -> None:
    """Per node: an open NodeNotReady every 7 minutes and a NodeReady 3 minutes after each."""
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE events AS
        SELECT 'e' || n || '-' || i AS event_key, 'gpu-' || n AS node_id,
               TIMESTAMP '2024-01-01' + to_seconds(i * 420) AS timestamp_utc, NULL::VARCHAR AS attributes,
               '{kubernetes.NOT_READY}' AS category, 'kubernetes' AS source_format, 'c1' AS cluster_id,
               NULL::TIMESTAMP AS resolved_at_utc
        FROM range({nodes}) a(n), range({per_node}) b(i)
    """)  # noqa: S608 - integers and a constant
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE k8s_closers AS
        SELECT row_number() OVER () AS line, TIMESTAMP '2024-01-01' + to_seconds(i * 420 + 180) AS ts,
               'gpu-' || n AS node_id, 'event:{kubernetes.NOT_READY}' AS outage
        FROM range({nodes}) a(n), range({per_node}) b(i)
    """)  # noqa: S608 - integers and a constant


def timed(con, sql: str, params: dict, table: str) -> tuple[float, float, int]:
    cpu, wall = time.process_time(), time.perf_counter()
    con.execute(sql, params)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return cpu, wall, con.sql(f"SELECT count(*) FROM {table}").fetchall()[0][0]  # noqa: S608


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--per-node", type=int, nargs="+", default=[1000, 4000, 16000])
    parser.add_argument("--old", action="store_true")
    args = parser.parse_args()
    slurm_params = {
        "not_responding": slurmctld.NOT_RESPONDING,
        "killed": slurmctld.KILLED_WITHOUT_CAUSE,
        "pair_seconds": slurmctld.PAIR_SECONDS,
        "format": "slurmctld",
    }
    k8s_params = {"format": "kubernetes", "cluster": "c1"}
    print(f"{'match':<12} {'query':<6} {'per node':>9} {'rows out':>10} {'CPU s':>7} {'wall s':>7}")
    for per_node in args.per_node:
        con = duckdb.connect()
        slurmctld_tables(con, args.nodes, per_node)
        kubernetes_tables(con, args.nodes, per_node)
        runs = [
            ("slurmctld", "as-of", slurmctld._EVENTS, slurm_params, "slurmctld_events"),
            ("kubernetes", "as-of", kubernetes._CLOSES, k8s_params, "k8s_closes"),
        ]
        if args.old:
            runs += [
                ("slurmctld", "old", old_events_sql(), slurm_params, "slurmctld_events"),
                ("kubernetes", "old", OLD_CLOSES, k8s_params, "k8s_closes"),
            ]
        for name, kind, sql, params, table in runs:
            cpu, wall, rows = timed(con, sql, params, table)
            print(f"{name:<12} {kind:<6} {per_node:>9,} {rows:>10,} {cpu:7.2f} {wall:7.2f}")
        con.close()


if __name__ == "__main__":
    main()
