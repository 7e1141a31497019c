"""Inventory coverage: estimated exposure when no inventory exists, nodes missing from it."""

from __future__ import annotations

from datetime import datetime

import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.ingest import ReaderOptions, ingest_files, inventory_check

LOG = (
    "2026-03-02T04:26:29Z node-1 kernel: NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.\n"
    "2026-03-05T00:00:00Z node-2 kernel: NVRM: Xid (PCI:0000:18:00): 48, DBE\n"
)
SACCT = "JobID|State|Start|End|NodeList\n7|COMPLETED|2026-03-01T00:00:00|2026-03-03T00:00:00|node-[2-4]\n"
INVENTORY = (
    "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n"
    "c1,node-1,p5.48xlarge,8,2026-03-01T00:00:00Z,\nc1,node-2,p5.48xlarge,8,2026-03-01T00:00:00Z,\n"
)


def test_no_inventory_and_no_estimate_leaves_inventory_empty(con, write):
    ingest_files(con, [write("kern.log", LOG)], ReaderOptions(cluster="c1"))
    check = inventory_check(con)
    assert (check.inventory_rows, check.exposure_estimated) == (0, False)
    assert check.nodes_not_in_inventory == ("node-1", "node-2")


def test_estimated_inventory_from_nodes_seen_until_a_real_one_arrives(con, write, sql):
    ingest_files(
        con,
        [write("kern.log", LOG), write("sacct.txt", SACCT)],
        ReaderOptions(cluster="c1"),
        estimate_exposure=4,
    )
    got = sql(
        "SELECT node_id, gpus_per_node, in_service_from_utc, in_service_to_utc, estimated"
        " FROM inventory ORDER BY 1",
    )
    start = datetime(2026, 3, 1)  # the first observation of the fleet (the job's start)
    assert got == [(f"node-{i}", 4, start, None, True) for i in (1, 2, 3, 4)]
    assert inventory_check(con).exposure_estimated

    # a later run without the option keeps the estimate up to date with new nodes
    ingest_files(con, [write("more.log", LOG.replace("node-2", "node-9"))], ReaderOptions(cluster="c1"))
    assert sql("SELECT count(*), min(gpus_per_node) FROM inventory WHERE estimated") == [(5, 4)]

    ingest_files(con, [write("inventory.csv", INVENTORY)], estimate_exposure=4)
    check = inventory_check(con)
    assert (check.inventory_rows, check.estimated_rows, check.exposure_estimated) == (2, 0, False)
    assert check.nodes_not_in_inventory == ("node-3", "node-4", "node-9")


def test_cli_says_loudly_that_exposure_is_estimated(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text(LOG)
    db = str(tmp_path / "w.duckdb")
    result = CliRunner().invoke(main, ["ingest", str(log), "--db", db, "--estimate-exposure", "8"])
    assert result.exit_code == 0, result.output
    assert "WARNING: EXPOSURE IS ESTIMATED" in result.output
    inventory = tmp_path / "inventory.csv"
    inventory.write_text(INVENTORY.replace("node-2", "node-7"))
    result = CliRunner().invoke(main, ["ingest", str(inventory), "--db", db])
    assert "ESTIMATED" not in result.output
    assert "1 node(s) in the data are not in the inventory (node-2)" in result.output


def _failures_at(hours: list[float], node: str = "n1") -> str:
    start = datetime(2026, 1, 1).timestamp()
    rows = [
        f"{datetime.fromtimestamp(start + h * 3600).isoformat()},c1,{node},Xid 79,0,,m{i},\n"
        for i, h in enumerate(hours)
    ]
    return "timestamp,cluster_id,node_id,category,gpu_index,job_id,message,resolved_at\n" + "".join(rows)


SERVICE = (
    "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n"
    "c1,n1,p5,8,2026-01-01T00:00:00,\n"
)


@pytest.mark.parametrize(
    ("hours", "expected"),
    [
        ([100, 110, 120], 10.0),  # 2 gaps in 20 h: 0.1 per hour; 100 quiet hours expect 10
        ([50, 60, 70], 5.0),  # exactly the limit: named
        ([49, 59, 69], None),  # 4.9 expected: a quiet start this long is plausible
        ([20, 30, 40], None),
        ([100, 110], None),  # one gap says little about a rate
        ([0, 10, 20], None),  # failures from the first hour
    ],
)
def test_records_that_start_long_after_service_are_named(con, write, hours, expected):
    ingest_files(con, [write("inv.csv", SERVICE), write("t.csv", _failures_at(hours))])
    late = inventory_check(con).late_records
    if expected is None:
        assert late == ()
        return
    [found] = late
    assert found.cluster_id == "c1" and found.expected_failures == pytest.approx(expected)
    assert (found.first_failure_utc - found.service_start_utc).total_seconds() == hours[0] * 3600


def test_the_quiet_stretch_counts_every_node_in_service_and_only_real_inventory(con, write):
    """A second node in service over the same stretch with no failures doubles the quiet node-hours
    and adds its hours after; an estimated inventory (no real one) is never named."""
    inventory = SERVICE + "c1,n2,p5,8,2026-01-01T00:00:00,2026-01-03T00:00:00\n"  # 48 h, then out
    ingest_files(con, [write("inv.csv", inventory), write("t.csv", _failures_at([100, 110, 120]))])
    [found] = inventory_check(con).late_records
    assert found.expected_failures == pytest.approx(2 * (100 + 48) / 20)

    con.execute("DELETE FROM inventory")
    ingest_files(con, [], estimate_exposure=8)
    assert inventory_check(con).exposure_estimated and inventory_check(con).late_records == ()


def test_cli_warns_of_records_that_start_late(tmp_path):
    (tmp_path / "inv.csv").write_text(SERVICE)
    (tmp_path / "t.csv").write_text(_failures_at([1000, 1010, 1020]))
    args = ["ingest", str(tmp_path / "inv.csv"), str(tmp_path / "t.csv"), "--db", str(tmp_path / "w.duckdb")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "warning: c1: no failure recorded in its first 42 days of service (2026-01-01 to 2026-02-11)" in (
        result.output
    )
    assert "would expect 100: do the records start later than the inventory?" in result.output


INCIDENTS = "timestamp,cluster_id,node_id,category\n"

# node names as the data writes them, as the inventory does, and which pairs are named respelled
RESPELLINGS = [
    (["gpu-001"], ["GPU-001"], [("gpu-001", "GPU-001")]),  # letter case
    (["gpu-001"], ["gpu-001.ib.example.net"], [("gpu-001", "gpu-001.ib.example.net")]),  # domain
    (["gpu-001.cluster.local"], ["GPU-001"], [("gpu-001.cluster.local", "GPU-001")]),  # both, other way
    (["gpu-001"], ["gpu-001"], []),  # the same name: matched, nothing to say
    (["gpu-001"], ["gpu-002.example.net"], []),  # another node
    (["gpu-001"], ["gpu-001.a.example.net", "gpu-001.b.example.net"], []),  # two candidates: no guess
    (["10.0.0.9"], ["10.0.0.1"], []),  # an address has no host name to compare: never matched
    (["10.0.0.9"], ["10.0.0.1", "10.0.0.2"], []),
]


@pytest.mark.parametrize(("data", "inventory", "expected"), RESPELLINGS)
def test_nodes_the_inventory_holds_under_another_spelling_are_named(con, write, data, inventory, expected):
    rows = "".join(f"c1,{node},p5,8,2026-03-01T00:00:00Z,\n" for node in inventory)
    failures = "".join(f"2026-03-02T00:00:00Z,c1,{node},Xid 79\n" for node in data)
    ingest_files(
        con,
        [write("inv.csv", INVENTORY.splitlines(True)[0] + rows), write("t.csv", INCIDENTS + failures)],
    )
    check = inventory_check(con)
    assert check.respelled.pairs == tuple(expected)
    assert bool(check.respelled) == bool(expected)
    if expected:
        assert f"'{expected[0][0]}' is '{expected[0][1]}' there" in check.respelled.describe()


def test_job_nodes_count_and_an_estimated_inventory_is_never_a_spelling(con, write):
    sacct = "JobID|State|Start|End|NodeList\n7|COMPLETED|2026-03-01T00:00:00|2026-03-03T00:00:00|node-[2-3]\n"
    inventory = INVENTORY.splitlines(True)[0] + "c1,NODE-2.example.net,p5,8,2026-03-01T00:00:00Z,\n"
    ingest_files(con, [write("inv.csv", inventory), write("sacct.txt", sacct)], ReaderOptions(cluster="c1"))
    assert inventory_check(con).respelled.pairs == (("node-2", "NODE-2.example.net"),)

    con.execute("DELETE FROM inventory")
    ingest_files(con, [], estimate_exposure=8)
    assert not inventory_check(con).respelled


def test_cli_ingest_names_the_respelled_nodes(tmp_path):
    (tmp_path / "inv.csv").write_text(INVENTORY.replace("node-1", "NODE-1.ib.example.net"))
    (tmp_path / "t.csv").write_text(INCIDENTS + "2026-03-02T00:00:00Z,c1,node-1,Xid 79\n")
    result = CliRunner().invoke(
        main, ["ingest", str(tmp_path / "inv.csv"), str(tmp_path / "t.csv"), "--db", str(tmp_path / "w.db")]
    )
    assert result.exit_code == 0
    assert "1 node(s) in the data are not in the inventory (node-1)" in result.output
    assert "1 node of the data is in the inventory under another spelling ('node-1' is" in result.output
