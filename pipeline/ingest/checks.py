"""What an ingest leaves to check: how far the inventory covers the nodes in the data (shown by
``failcast ingest``, the scheduled run's log, ``rates`` and the report)."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline import record_checks


@dataclass(frozen=True)
class InventoryCheck:
    """How far the inventory covers the nodes in the data; ``exposure_estimated`` must be shown
    by every output whose exposure comes from this warehouse when it is true."""

    inventory_rows: int
    estimated_rows: int
    nodes_not_in_inventory: tuple[str, ...]
    late_records: tuple[record_checks.LateRecords, ...] = ()
    respelled: record_checks.RespelledNodes = record_checks.RespelledNodes(())

    @property
    def exposure_estimated(self) -> bool:
        return self.estimated_rows > 0


def inventory_check(con) -> InventoryCheck:
    """Inventory rows (real and estimated), the nodes with incidents or jobs but no inventory row
    (their incidents have no exposure, so rates leave them out), and the clusters whose records
    seem to start after their service and the nodes the inventory holds under another spelling
    (:mod:`pipeline.record_checks`)."""
    real, estimated = con.sql(
        "SELECT count(*) FILTER (WHERE NOT estimated), count(*) FILTER (WHERE estimated) FROM inventory"
    ).fetchall()[0]
    missing = con.sql(
        "SELECT DISTINCT node_id FROM (SELECT node_id FROM incidents UNION ALL"
        " SELECT unnest(nodes) FROM jobs) seen"
        " WHERE node_id NOT IN (SELECT node_id FROM inventory) ORDER BY node_id"
    ).fetchall()
    respelled = record_checks.respelled_nodes(con) if missing and real else record_checks.RespelledNodes(())
    return InventoryCheck(
        real, estimated, tuple(m[0] for m in missing), record_checks.late_records(con), respelled
    )
