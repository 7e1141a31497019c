"""What the records say about their own coverage, checked against the inventory.

Two ways a user's exports silently make rates wrong, both found in real exports and named by
``failcast ingest``, a run's log, ``failcast rates`` and the report:

* :class:`LateRecords`: a cluster whose records start long after its service (a ticket export of
  the last months beside a full inventory), so that time counts as failure-free exposure;
* :class:`RespelledNodes`: nodes the data names one way and the inventory another
  (``gpu-001`` in the logs, ``GPU-001.ib.example.net`` in the asset database). failcast matches
  node names exactly, so their failures have no exposure and rates leave them all out.

Readers only: :mod:`pipeline.warehouse` owns the connection and the schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class LateRecords:
    """A cluster whose first interrupting failure comes long after its nodes entered service, by
    more than its later rate makes plausible: the records probably start later than the service
    (a ticket export of the last months beside a full inventory), so that time counts as
    failure-free exposure and the rate is too low."""

    cluster_id: str
    service_start_utc: datetime
    first_failure_utc: datetime
    expected_failures: float  # in the quiet stretch, at the rate after it

    def describe(self) -> str:
        """What the CLI and the report say of it, with the fix."""
        quiet_days = (self.first_failure_utc - self.service_start_utc).total_seconds() / 86400
        return (
            f"{self.cluster_id}: no failure recorded in its first {quiet_days:,.0f} days of service "
            f"({self.service_start_utc:%Y-%m-%d} to {self.first_failure_utc:%Y-%m-%d}), where its rate after "
            f"would expect {self.expected_failures:,.0f}: do the records start later than the inventory? "
            "That time counts as failure-free exposure, so its rates are too low. Ingest the earlier "
            "records, or start the inventory's in_service_from where the records begin"
        )


LATE_RECORDS_EXPECTED = 5.0
"""A quiet stretch at the start with this many failures expected (Poisson: no failure in it has
probability exp(-5) < 0.7%) is named: the records, not the fleet, are the likelier explanation."""

# Per cluster with a real inventory: node-hours in service before its first interrupting failure
# (the quiet stretch) and from it to the last one, which hold n - 1 gaps between failures; expected
# in the stretch = (n - 1) * before / after, the rate between the first and last failure applied to
# the stretch. At least two gaps: one says little about a rate.
_LATE_RECORDS = """
WITH failures AS (
    SELECT cluster_id, min(timestamp_utc) AS first_utc, max(timestamp_utc) AS last_utc, count(*) AS n
    FROM incidents WHERE interrupting GROUP BY cluster_id
), service AS (
    SELECT i.cluster_id, f.first_utc, f.last_utc, f.n, min(i.in_service_from_utc) OVER w AS start_utc,
           greatest(epoch(least(coalesce(i.in_service_to_utc, f.first_utc), f.first_utc))
                    - epoch(i.in_service_from_utc), 0) / 3600 AS before_hours,
           greatest(epoch(least(coalesce(i.in_service_to_utc, f.last_utc), f.last_utc))
                    - epoch(greatest(i.in_service_from_utc, f.first_utc)), 0) / 3600 AS after_hours
    FROM inventory i JOIN failures f USING (cluster_id)
    WHERE NOT i.estimated
    WINDOW w AS (PARTITION BY i.cluster_id)
)
SELECT cluster_id, any_value(start_utc), any_value(first_utc),
       (any_value(n) - 1) * sum(before_hours) / sum(after_hours) AS expected
FROM service
GROUP BY cluster_id
HAVING any_value(n) >= 3 AND sum(after_hours) > 0
   AND (any_value(n) - 1) * sum(before_hours) / sum(after_hours) >= $threshold
ORDER BY cluster_id
"""


def late_records(con) -> tuple[LateRecords, ...]:
    """The clusters whose records seem to start after their service (:class:`LateRecords`)."""
    rows = con.sql(_LATE_RECORDS, params={"threshold": LATE_RECORDS_EXPECTED}).fetchall()
    return tuple(LateRecords(*row) for row in rows)


@dataclass(frozen=True)
class RespelledNodes:
    """Nodes of the incidents or jobs that are not in the inventory by their exact name but are
    under another spelling: the same name once letter case and the DNS domain are set aside
    (``gpu-001`` = ``GPU-001.ib.example.net``), held by exactly one inventory node."""

    pairs: tuple[tuple[str, str], ...]  # (the data's name, the inventory's), sorted by the first

    def __bool__(self) -> bool:
        return bool(self.pairs)

    def describe(self) -> str:
        """What the CLI and the report say of them, with the fix."""
        n = len(self.pairs)
        data, inventory = self.pairs[0]
        return (
            f"{n:,} node{'s' if n != 1 else ''} of the data {'are' if n != 1 else 'is'} in the "
            f"inventory under another spelling ({data!r} is {inventory!r} there; letter case and DNS "
            "domain aside): failcast matches node names exactly, so their failures have no exposure "
            "and rates leave them out. Write node names the same way in the inventory and the other "
            "exports, then ingest them into a new warehouse"
        )


# An inventory name's short form (lower case, up to the first dot) counts only when one inventory
# node has it and it holds a letter: an IP address as a name (10.0.0.1) has no host part to compare.
_RESPELLED_NODES = """
WITH short_names AS (
    SELECT lower(split_part(node_id, '.', 1)) AS short, min(node_id) AS inventory_node_id
    FROM (SELECT DISTINCT node_id FROM inventory WHERE NOT estimated)
    GROUP BY short HAVING count(*) = 1 AND regexp_matches(short, '[a-z]')
), missing AS (
    SELECT DISTINCT node_id FROM (SELECT node_id FROM incidents UNION ALL SELECT unnest(nodes) FROM jobs)
    WHERE node_id NOT IN (SELECT node_id FROM inventory)
)
SELECT m.node_id, s.inventory_node_id
FROM missing m JOIN short_names s ON lower(split_part(m.node_id, '.', 1)) = s.short
ORDER BY m.node_id
"""


def respelled_nodes(con) -> RespelledNodes:
    """The data's nodes that the inventory holds under another spelling (:class:`RespelledNodes`)."""
    return RespelledNodes(tuple(con.sql(_RESPELLED_NODES).fetchall()))
