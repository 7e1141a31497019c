"""Rebuild of ``incidents``: after every ingest the incremental rebuild equals a full rebuild from
all events, and both equal a plain Python statement of the collapse rule on random events."""

from __future__ import annotations

import hashlib
import random
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from pipeline import rebuild, warehouse
from pipeline.ingest import ReaderOptions, ingest_files

SAMPLE = Path(__file__).parents[2] / "data" / "sample"
XID79 = "NVRM: Xid (PCI:0000:18:00): 79, pid=10895, name=python3, GPU has fallen off the bus."


def snapshot(con) -> pl.DataFrame:
    return con.sql("SELECT * FROM incidents ORDER BY ALL").pl()


def full_rebuild(con, window_seconds: float) -> pl.DataFrame:
    """The table a full rebuild gives, without keeping it (so the next step stays incremental)."""
    con.execute("BEGIN TRANSACTION")
    try:
        rebuild.rebuild_incidents(con, window_seconds=window_seconds, full=True)
        return snapshot(con)
    finally:
        con.execute("ROLLBACK")


def shifted(rows: pl.DataFrame, minutes: int) -> pl.DataFrame:
    """The same faults reported again ``minutes`` later (earlier if negative): new events that
    extend, merge or move the start of existing incidents."""
    times = pl.col("timestamp").str.to_datetime(time_zone="UTC") + timedelta(minutes=minutes)
    return rows.with_columns(timestamp=times.dt.strftime("%Y-%m-%dT%H:%M:%SZ"))


def kernel_log(nodes: list[str], times: list[str]) -> str:
    return "".join(f"{t}+00:00 {n} kernel: {XID79}\n" for n, t in zip(nodes, times, strict=True))


@pytest.mark.parametrize("window_seconds", [600.0, 3600.0])
def test_incremental_rebuild_equals_full_rebuild_after_each_ingest(con, write, window_seconds):
    incidents = pl.read_csv(SAMPLE / "incidents.csv", infer_schema=False).with_row_index()
    parts = [incidents.filter(pl.col("index") % 3 == k).drop("index") for k in range(3)]
    node, first = parts[0]["node_id"][0], parts[0]["timestamp"][0].removesuffix("Z")
    steps = [
        ("part0.csv", parts[0], {}),
        # unknown cluster (no --cluster): a node of the inventory, one it never lists, and a fault
        # of ``node`` at its first canonical incident; resolved only once the inventory arrives
        ("kern1.log", kernel_log([node, "ghost-1", node], [first, first, "2026-04-01T00:00:00"]), {}),
        ("part1.csv", pl.concat([parts[1], shifted(parts[0].head(40), 3), shifted(parts[0][40:80], -4)]), {}),
        ("inventory.csv", (SAMPLE / "inventory.csv").read_text(), {}),
        # faults reported again at the same second with another message: ties in time
        (
            "part2.csv",
            pl.concat(
                [
                    parts[2],
                    shifted(parts[1].head(40), 9),
                    parts[1][40:80].with_columns(message=pl.lit("again")),
                ]
            ),
            {},
        ),
        ("kern2.log", kernel_log([node, "ghost-2"], [first, "2026-04-01T00:05:00"]), {"cluster": "c9"}),
    ]
    for name, content, options in steps:
        text = content if isinstance(content, str) else content.write_csv()
        ingest_files(con, [write(name, text)], ReaderOptions(**options), window_seconds=window_seconds)
        incremental = snapshot(con)
        assert incremental.equals(full_rebuild(con, window_seconds)), name
        assert incremental["incident_id"].n_unique() == incremental.height, name
    assert incremental.filter(pl.col("node_id") == "ghost-1")["cluster_id"].to_list() == [
        warehouse.UNKNOWN_CLUSTER
    ]
    resolved = incremental.filter((pl.col("node_id") == node) & pl.col("pci_bus_id").is_not_null())
    assert warehouse.UNKNOWN_CLUSTER not in resolved["cluster_id"].to_list()
    assert incremental["events"].sum() == con.sql("SELECT count(*) FROM events").fetchall()[0][0]


def test_rebuild_is_full_when_the_window_changes(con, write):
    text = "timestamp,cluster_id,node_id,category\n" + "".join(
        f"2026-03-01T00:{m:02d}:00Z,c1,n1,gpu_memory\n" for m in (0, 7, 14)
    )
    ingest_files(con, [write("a.csv", text)], window_seconds=600)
    assert con.sql("SELECT count(*) FROM incidents").fetchall() == [(1,)]
    with warehouse.transaction(con):
        rebuild.rebuild_incidents(con, window_seconds=300)  # no new events: only the window changed
    assert con.sql("SELECT count(*) FROM incidents").fetchall() == [(3,)]


# --- the collapse rule in plain Python, against the SQL on small random warehouses ---

NODES = ("n1", "n2", "n3", "n4")
HOME = {"n1": "c1", "n2": "c1", "n3": "c2", "n4": "c2"}
T0 = datetime(2026, 3, 1)


def random_events(rng: random.Random, count: int, file_id: int) -> list[tuple]:
    """Events on a 5-minute grid (ties in time, gaps of exactly the window), a third of unknown
    cluster, GPU by index, by PCI id, by both or neither, NULLs in every optional column."""
    rows = []
    for line in range(count):
        node = rng.choice(NODES)
        cluster = rng.choice([HOME[node], HOME[node], warehouse.UNKNOWN_CLUSTER, "c3"])
        time = T0 + timedelta(minutes=5 * rng.randrange(40))
        resolved = rng.choice([None, time + timedelta(minutes=rng.randrange(1, 90))])
        rows.append(
            (f"{rng.getrandbits(64):016x}", file_id, line, time, cluster, node,
             rng.choice(["gpu_memory", "xid_79"]), rng.random() < 0.5, rng.choice([0, 1, None]),
             rng.choice([None, "j1", "j2"]), rng.choice([None, "m1", "m2", "m3"]), resolved,
             rng.choice([None, 48, 79]), rng.choice([None, "0000:18:00", "0000:3b:00"]))
        )  # fmt: skip
    return rows


def random_inventory(rng: random.Random) -> list[tuple]:
    """Some nodes listed in their home cluster, some also in another one (the smallest wins)."""
    rows = []
    for node in NODES:
        for cluster in {HOME[node], rng.choice(["c0", "c9"])}:
            if rng.random() < 0.5:
                rows.append((cluster, node, "p5", 8, T0, None, 0, len(rows)))
    return rows


def reference_incidents(events: list[tuple], inventory: list[tuple], window_seconds: float) -> list[tuple]:
    """Events of one node, cluster, category and GPU (index, else PCI id) closer than the window
    make one incident (events at the same time ordered by event key)."""
    listed: dict[str, list[str]] = {}
    for cluster, node, *_ in inventory:
        listed.setdefault(node, []).append(cluster)
    faults: dict[tuple, list[tuple]] = {}
    for event in events:
        _, _, _, _, cluster, node, category, _, gpu_index, *_, pci = event
        if cluster == warehouse.UNKNOWN_CLUSTER:
            cluster = min(listed.get(node, [cluster]))
        gpu = str(gpu_index) if gpu_index is not None else pci
        faults.setdefault((cluster, node, category, gpu), []).append(event)
    incidents = []
    for fault, rows in faults.items():
        rows.sort(key=lambda r: (r[3], r[0]))
        runs = [[rows[0]]]
        for previous, row in zip(rows, rows[1:], strict=False):
            if (row[3] - previous[3]).total_seconds() > window_seconds:
                runs.append([])
            runs[-1].append(row)
        incidents += [reference_incident(fault, run) for run in runs]
    return sorted(incidents)


def reference_incident(fault: tuple, run: list[tuple]) -> tuple:
    """One incident row: job, message and xid from its earliest event that has one, the smallest
    PCI id, the latest resolution; the id is an md5 of the fault and the first event time."""
    cluster, node, category, gpu = fault
    known = {column: [r[column] for r in run if r[column] is not None] for column in range(len(run[0]))}
    first = {column: next(iter(values), None) for column, values in known.items()}
    content = "\x1f".join([cluster, node, category, gpu or "", str(run[0][3])])
    incident_id = int.from_bytes(hashlib.md5(content.encode()).digest(), "little") >> 65
    return (incident_id, cluster, node, category, any(known[7]), first[8], run[0][3], run[-1][3],
            max(known[11], default=None), len(run), first[9], first[10], min(known[13], default=None),
            first[12], category, None)  # fmt: skip


# The rebuild finds the events that share an incident through a 64-bit hash of their fault; hashes
# that collide (all faults one hash, or faults of different nodes sharing one) must not change the result.
COLLIDING = ("0", "hash(node_id) % 3")
# The rebuild takes one of two paths by the share of shared events in a sample of nodes: lone events
# first (ordinary fleets), or every event through the exact collapse (Xid storms). Both must give
# the rule's incidents: 0 forces the exact collapse, 2 the lone-first path, None lets the sample choose.
PATHS = (None, 0.0, 2.0)


CASES = [(seed, None, share) for seed in range(12) for share in PATHS] + [
    (seed, h, share) for seed in range(4) for h in COLLIDING for share in PATHS
]


@pytest.mark.parametrize(("seed", "fault_hash", "storm_share"), CASES)
def test_rebuild_follows_the_collapse_rule_on_random_events(con, monkeypatch, seed, fault_hash, storm_share):
    if fault_hash is not None:
        monkeypatch.setattr(rebuild, "_FAULT_HASH", fault_hash)
    if storm_share is not None:
        monkeypatch.setattr(rebuild, "STORM_SHARE", storm_share)
    rng = random.Random(seed)
    window_seconds = rng.choice([300.0, 600.0, 3600.0])
    events: list[tuple] = []
    inventory = random_inventory(rng)
    for file_id in (1, 2, 3):
        if file_id == 2:  # a new inventory: unknown clusters resolve differently
            inventory = random_inventory(rng)
        batch = random_events(rng, rng.randrange(1, 60), file_id)
        events += batch
        with warehouse.transaction(con):
            con.execute("DELETE FROM inventory")
            con.executemany("INSERT INTO inventory VALUES (?, ?, ?, ?, ?, ?, ?, ?, false)", inventory)
            con.executemany(  # failure_class: the category (these are class names)
                "INSERT INTO events (event_key, file_id, line, timestamp_utc, cluster_id, node_id, category,"
                " interrupting, gpu_index, job_id, message, resolved_at_utc, xid, pci_bus_id, source_format,"
                " failure_class) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'test', ?)",
                [(*row, row[6]) for row in batch],
            )
            rebuild.rebuild_incidents(con, window_seconds=window_seconds)  # incremental after the first
        expected = reference_incidents(events, inventory, window_seconds)
        assert con.sql("SELECT * FROM incidents ORDER BY incident_id").fetchall() == expected, file_id
        assert full_rebuild(con, window_seconds).rows() == expected, file_id
    assert len({incident[0] for incident in expected}) == len(expected)


def test_rebuild_of_the_sample_and_a_storm_follows_the_collapse_rule(con, write):
    """The bundled sample (one event per incident, mostly) and a kernel log of Xid storms (many
    events per incident, some of unknown cluster) give the incidents of the rule in plain Python."""
    storm = kernel_log(
        [f"c0032-n{n:04d}" for n in range(12) for _ in range(9)],
        [f"2026-03-0{1 + n % 3}T0{k // 8 * 5}:{k * 4:02d}:00" for n in range(12) for k in range(9)],
    )
    ingest_files(con, [SAMPLE / "inventory.csv", SAMPLE / "incidents.csv", write("storm.log", storm)])
    events = con.sql(
        "SELECT event_key, file_id, line, timestamp_utc, cluster_id, node_id, category, interrupting,"
        " gpu_index, job_id, message, resolved_at_utc, xid, pci_bus_id FROM events"
    ).fetchall()
    inventory = con.sql("SELECT * FROM inventory").fetchall()
    expected = [row[:14] for row in reference_incidents(events, inventory, 600.0)]
    found = con.sql("SELECT * EXCLUDE (failure_class, attributes) FROM incidents ORDER BY ALL").fetchall()
    assert found == sorted(expected)
    assert sum(row[9] > 1 for row in found) >= 12  # the storms are incidents of several events


def test_the_path_follows_the_share_of_shared_events(con, write, monkeypatch):
    """The sampled share of events with a neighbour of their fault within the window picks the path:
    lone events first on an ordinary fleet, the exact collapse alone on an Xid storm."""
    lone = "".join(f"2026-03-01T00:00:00Z,c1,n{n},gpu_memory\n" for n in range(320))
    storm = "".join(f"2026-03-02T00:0{m}:00Z,c1,n{n},xid_79\n" for n in range(320) for m in (0, 1, 2))
    chosen = []
    real = rebuild._insert_incidents
    monkeypatch.setattr(
        rebuild,
        "_insert_incidents",
        lambda nodes, shortcut: chosen.append(shortcut) or real(nodes, shortcut=shortcut),
    )
    header = "timestamp,cluster_id,node_id,category\n"
    ingest_files(con, [write("lone.csv", header + lone)])
    ingest_files(con, [write("storm.csv", header + storm)])
    assert chosen == [True, False]
    assert con.sql("SELECT count(*), sum(events) FROM incidents").fetchall() == [(640, 1280)]
