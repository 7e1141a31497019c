"""Inventory coverage: estimated exposure when no inventory exists, nodes missing from it."""

from __future__ import annotations

from datetime import datetime

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
