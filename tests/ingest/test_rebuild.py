"""Incremental rebuild of ``incidents``: after every ingest it equals a full rebuild from all events."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest

from pipeline import warehouse
from pipeline.ingest import ingest_files

SAMPLE = Path(__file__).parents[2] / "data" / "sample"
XID79 = "NVRM: Xid (PCI:0000:18:00): 79, pid=10895, name=python3, GPU has fallen off the bus."


def snapshot(con) -> pl.DataFrame:
    return con.sql("SELECT * FROM incidents ORDER BY ALL").pl()


def full_rebuild(con, window_seconds: float) -> pl.DataFrame:
    """The table a full rebuild gives, without keeping it (so the next step stays incremental)."""
    con.execute("BEGIN TRANSACTION")
    try:
        warehouse.rebuild_incidents(con, window_seconds=window_seconds, full=True)
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
        ingest_files(con, [write(name, text)], window_seconds=window_seconds, **options)
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
        warehouse.rebuild_incidents(con, window_seconds=300)  # no new events: only the window changed
    assert con.sql("SELECT count(*) FROM incidents").fetchall() == [(3,)]
