"""The readers' event-to-event matches are as-of joins (issue 27): a slurmctld kill takes the
category of its node's nearest outage within PAIR_SECONDS, a stored open Kubernetes outage ends at
its node's first later closer. Each equals the per-node join-and-filter it replaced (kept in
bench/asof_matches.py: the oracle) on random small logs dense in ties; table tests pin the
boundaries."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import duckdb
import pytest

from bench.asof_matches import OLD_CLOSES, old_events_sql
from pipeline.ingest import ReaderOptions, ingest_files
from pipeline.readers import kubernetes, slurmctld

# The replaced matches (the oracle) live beside their bench: bench/asof_matches.py.
EVENT_PARAMS = {
    "not_responding": slurmctld.NOT_RESPONDING,
    "killed": slurmctld.KILLED_WITHOUT_CAUSE,
    "pair_seconds": slurmctld.PAIR_SECONDS,
    "format": "slurmctld",
}
T0 = datetime(2024, 5, 1, 12)


def _slurmctld_rows(seed: int) -> list[tuple]:
    """Parsed slurmctld lines of 1-3 nodes: outages and kills on a coarse clock (ties of time and
    distance are common, times exactly PAIR_SECONDS apart too), some a fraction of a second off."""
    rng = random.Random(seed)
    nodes = [f"n{i}" for i in range(rng.randint(1, 3))]
    rows = []
    for line in range(1, rng.randint(1, 30) + 1):
        kind = rng.choice(["down", "reason", "state", "kill", "kill"])
        seconds = rng.choice([0, 1, 300, 600, 900, 1200, 1800]) * rng.randint(0, 3)
        seconds += rng.choice([0, 0, 0, 0.5, 0.000001, -0.000001])
        hosts = (
            rng.sample(nodes, rng.randint(1, len(nodes)))
            if kind == "down"
            else [rng.choice(nodes)] * rng.choice([1, 1, 1, 2])  # a repeated host: one event
        )
        detail = rng.choice(["bad HBM", "Xid 79", None]) if kind in ("reason", "state") else None
        job = str(rng.randint(1, 5)) if kind == "kill" else None
        rows.append((line, T0 + timedelta(seconds=seconds), kind, hosts, detail, job, f"line {line}", None))
    return rows


def _staged(rows: list[tuple]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(
        "CREATE TEMP TABLE slurmctld_parsed (line BIGINT, ts TIMESTAMPTZ, kind VARCHAR, nodes VARCHAR[], "
        "detail VARCHAR, job_id VARCHAR, message VARCHAR, reason VARCHAR)"
    )
    con.executemany("INSERT INTO slurmctld_parsed VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    return con


def _events(con, sql: str) -> list[tuple]:
    con.execute(sql, EVENT_PARAMS)
    return con.sql("SELECT * FROM slurmctld_events ORDER BY ALL").fetchall()


@pytest.mark.parametrize("seed", range(60))
def test_slurmctld_kill_match_equals_the_per_node_join(seed):
    con = _staged(_slurmctld_rows(seed))
    assert _events(con, slurmctld._EVENTS) == _events(con, old_events_sql())


LOG_CASES = [
    # (lines, the kill's category); the kill is always gpu-1's, JobId=9
    (["[2024-05-01T12:00:00] Killing JobId=9 on failed node gpu-1"], slurmctld.KILLED_WITHOUT_CAUSE),
    (  # exactly PAIR_SECONDS before: paired; a microsecond more: not
        [
            "[2024-05-01T11:50:00] update_node: node gpu-1 reason set to: ten minutes",
            "[2024-05-01T12:00:00] Killing JobId=9 on failed node gpu-1",
        ],
        "ten minutes",
    ),
    (
        [
            "[2024-05-01T11:49:59.999999] update_node: node gpu-1 reason set to: too early",
            "[2024-05-01T12:00:00] Killing JobId=9 on failed node gpu-1",
            "[2024-05-01T12:10:00.000001] update_node: node gpu-1 reason set to: too late",
        ],
        slurmctld.KILLED_WITHOUT_CAUSE,
    ),
    (  # exactly PAIR_SECONDS after
        [
            "[2024-05-01T12:00:00] Killing JobId=9 on failed node gpu-1",
            "[2024-05-01T12:10:00] update_node: node gpu-1 reason set to: after",
        ],
        "after",
    ),
    (  # equal distances before and after: the earlier line
        [
            "[2024-05-01T11:55:00] update_node: node gpu-1 reason set to: before",
            "[2024-05-01T12:00:00] Killing JobId=9 on failed node gpu-1",
            "[2024-05-01T12:05:00] update_node: node gpu-1 reason set to: after",
        ],
        "before",
    ),
    (  # equal distances, the later outage logged first (a time zone change): its line wins
        [
            "[2024-05-01T12:05:00] update_node: node gpu-1 reason set to: after",
            "[2024-05-01T11:55:00] update_node: node gpu-1 reason set to: before",
            "[2024-05-01T12:00:00] Killing JobId=9 on failed node gpu-1",
        ],
        "after",
    ),
    (  # several outages of the node, and another node's nearer one: the node's own nearest
        [
            "[2024-05-01T11:51:00] update_node: node gpu-1 reason set to: first",
            "[2024-05-01T11:58:00] update_node: node gpu-1 reason set to: second",
            "[2024-05-01T11:59:59] update_node: node gpu-2 reason set to: other node",
            "[2024-05-01T12:00:00] Killing JobId=9 on failed node gpu-1",
            "[2024-05-01T12:02:30] update_node: node gpu-1 reason set to: third",
            "[2024-05-01T12:09:00] error: Nodes gpu-[1-2] not responding, setting DOWN",
        ],
        "second",
    ),
    (  # two outages at the kill's own time: the first line
        [
            "[2024-05-01T12:00:00] error: Nodes gpu-1 not responding, setting DOWN",
            "[2024-05-01T12:00:00] update_node: node gpu-1 reason set to: same time",
            "[2024-05-01T12:00:00] Killing JobId=9 on failed node gpu-1",
        ],
        slurmctld.NOT_RESPONDING,
    ),
]


@pytest.mark.parametrize(("lines", "category"), LOG_CASES)
def test_slurmctld_kill_takes_its_nearest_outage(con, write, sql, lines, category):
    ingest_files(con, [write("slurmctld.log", "\n".join(lines) + "\n")], ReaderOptions(cluster="c1"))
    assert sql("SELECT category FROM events WHERE job_id = '9'") == [(category,)]


def _k8s_tables(seed: int) -> duckdb.DuckDBPyConnection:
    """Stored events (open and resolved, this cluster and format and others, conditions and
    NodeNotReady) and closers, on a coarse clock so that equal times are common."""
    rng = random.Random(seed)
    con = duckdb.connect()
    con.execute(
        "CREATE TEMP TABLE events (event_key VARCHAR, node_id VARCHAR, timestamp_utc TIMESTAMP, "
        "attributes VARCHAR, category VARCHAR, source_format VARCHAR, cluster_id VARCHAR, "
        "resolved_at_utc TIMESTAMP)"
    )
    con.execute("CREATE TEMP TABLE k8s_closers (line BIGINT, ts TIMESTAMP, node_id VARCHAR, outage VARCHAR)")
    nodes = [f"n{i}" for i in range(rng.randint(1, 3))]

    def when():
        return T0 + timedelta(minutes=rng.randint(0, 12))

    events = []
    for key in range(rng.randint(0, 25)):
        condition = rng.choice([None, "Ready", "KernelDeadlock"])
        events.append(
            (
                f"e{key}",
                rng.choice(nodes),
                when(),
                None if condition is None else f'{{"condition": "{condition}"}}',
                kubernetes.NOT_READY if condition is None else rng.choice(["KernelHasNoDeadlock", "x"]),
                rng.choice(["kubernetes"] * 4 + ["slurmctld"]),
                rng.choice(["c1"] * 4 + ["c2"]),
                None if rng.random() < 0.8 else when(),
            )
        )
    outages = ["condition:Ready", "condition:KernelDeadlock", f"event:{kubernetes.NOT_READY}"]
    closers = [(line, when(), rng.choice(nodes), rng.choice(outages)) for line in range(rng.randint(0, 25))]
    if events:
        con.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)", events)
    if closers:
        con.executemany("INSERT INTO k8s_closers VALUES (?, ?, ?, ?)", closers)
    return con


def _closes(con, sql: str) -> list[tuple]:
    con.execute(sql, {"format": "kubernetes", "cluster": "c1"})
    return con.sql("SELECT * FROM k8s_closes ORDER BY ALL").fetchall()


@pytest.mark.parametrize("seed", range(60))
def test_kubernetes_closer_match_equals_the_per_node_join(seed):
    con = _k8s_tables(seed)
    assert _closes(con, kubernetes._CLOSES) == _closes(con, OLD_CLOSES)


def test_kubernetes_closer_boundaries():
    """A closer at the outage's own time ends nothing (strictly later); of several outages of a
    node each ends at its own first later closer; equal closer times: the first line."""
    con = duckdb.connect()
    con.execute(
        "CREATE TEMP TABLE events AS SELECT * FROM (VALUES "
        "('a', 'n1', TIMESTAMP '2024-05-01 12:00', NULL, 'NodeNotReady', 'kubernetes', 'c1', "
        "NULL::TIMESTAMP),"
        "('b', 'n1', TIMESTAMP '2024-05-01 13:00', NULL, 'NodeNotReady', 'kubernetes', 'c1', NULL),"
        "('c', 'n1', TIMESTAMP '2024-05-01 15:00', NULL, 'NodeNotReady', 'kubernetes', 'c1', NULL),"
        "('d', 'n2', TIMESTAMP '2024-05-01 12:00', '{\"condition\": \"Ready\"}', 'KubeletNotReady', "
        "'kubernetes', 'c1', NULL)"
        ") t(event_key, node_id, timestamp_utc, attributes, category, source_format, cluster_id, "
        "resolved_at_utc)"
    )
    con.execute(
        "CREATE TEMP TABLE k8s_closers AS SELECT * FROM (VALUES "
        "(7, TIMESTAMP '2024-05-01 12:00', 'n1', 'event:NodeNotReady'),"
        "(9, TIMESTAMP '2024-05-01 12:30', 'n1', 'event:NodeNotReady'),"
        "(8, TIMESTAMP '2024-05-01 14:00', 'n1', 'event:NodeNotReady'),"
        "(5, TIMESTAMP '2024-05-01 14:00', 'n1', 'event:NodeNotReady'),"
        "(6, TIMESTAMP '2024-05-01 12:10', 'n2', 'event:NodeNotReady'),"
        "(4, TIMESTAMP '2024-05-01 12:20', 'n2', 'condition:Ready')"
        ") t(line, ts, node_id, outage)"
    )
    assert _closes(con, kubernetes._CLOSES) == [
        ("a", datetime(2024, 5, 1, 12, 30), 9),
        ("b", datetime(2024, 5, 1, 14), 5),
        ("d", datetime(2024, 5, 1, 12, 20), 4),
    ]
