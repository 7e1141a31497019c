"""Inventory rows -> ``inventory``: a node's service intervals, keyed by (cluster, node,
in_service_from). A later file may close an interval an earlier one left open, so the newest row for
a key wins. Readers (the canonical files, a lake's inventory parts) stage their valid rows in the
temporary table ``fresh`` (:func:`stage`), then :func:`replace_inventory` stores them."""

from __future__ import annotations

from pipeline.store.files import count

_FRESH = """
CREATE OR REPLACE TEMP TABLE fresh (cluster_id VARCHAR, node_id VARCHAR, instance_type VARCHAR,
    gpus_per_node INTEGER, from_utc TIMESTAMP, to_utc TIMESTAMP, line BIGINT);
"""

# Within the file the last row for a key wins; a row the inventory already holds as it is is left
# alone (it keeps its file and line), any other replaces the stored row for its key.
_UPSERT = """
DELETE FROM fresh WHERE rowid IN (
    SELECT rowid FROM fresh
    QUALIFY row_number() OVER (PARTITION BY cluster_id, node_id, from_utc ORDER BY line DESC) > 1
);
DELETE FROM fresh f USING inventory i
WHERE i.cluster_id = f.cluster_id AND i.node_id = f.node_id
  AND i.in_service_from_utc = f.from_utc AND i.instance_type = f.instance_type
  AND i.gpus_per_node = f.gpus_per_node
  AND i.in_service_to_utc IS NOT DISTINCT FROM f.to_utc;
DELETE FROM inventory i USING fresh f
WHERE i.cluster_id = f.cluster_id AND i.node_id = f.node_id
  AND i.in_service_from_utc = f.from_utc;
INSERT INTO inventory (cluster_id, node_id, instance_type, gpus_per_node, in_service_from_utc,
                       in_service_to_utc, file_id, line)
SELECT cluster_id, node_id, instance_type, gpus_per_node, from_utc, to_utc, $file_id, line
FROM fresh;
"""


def stage(con) -> None:
    """An empty ``fresh`` (cluster_id, node_id, instance_type, gpus_per_node, from_utc, to_utc in
    UTC, line) for the file's valid inventory rows."""
    con.execute(_FRESH)


def replace_inventory(con, file_id: int) -> int:
    """Store the rows staged in ``fresh`` as the file's; returns how many it stored (new or changed)."""
    con.execute(_UPSERT, {"file_id": file_id})
    return count(con, "SELECT count(*) FROM inventory WHERE file_id = ?", [file_id])
