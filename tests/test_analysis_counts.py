"""The DuckDB counts of ``failcast rates`` (pipeline/analysis/counts.py) against the Polars
transforms they replace: the same rate tables and left-out counts on hand-made edge cases (a
failure at an interval's end and at the start of the next, a storm longer than the window, ties
at one time, outages from resolutions and from inventory gaps, failures while out for repair, on
unknown nodes, after the window end) and on a simulated fleet with storms added."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from pipeline import analysis, sample, transform, warehouse
from pipeline.analysis.counts import FailureCounts
from tests._fleets import warehouse_frames, write_warehouse
from tests._interruptions import node_interruptions

T0 = datetime(2026, 3, 2)


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def _incidents(rows: list[tuple]) -> pl.DataFrame:
    """(hours, cluster, node, category, class, interrupting, resolved hours or None)."""
    return pl.DataFrame(
        {
            "timestamp_utc": [at(r[0]) for r in rows],
            "cluster_id": [r[1] for r in rows],
            "node_id": [r[2] for r in rows],
            "category": [r[3] for r in rows],
            "failure_class": [r[4] for r in rows],
            "interrupting": [r[5] for r in rows],
            "resolved_at_utc": [None if r[6] is None else at(r[6]) for r in rows],
        },
        schema_overrides={"resolved_at_utc": pl.Datetime("us"), "timestamp_utc": pl.Datetime("us")},
    )


def _inventory(rows: list[tuple]) -> pl.DataFrame:
    """(cluster, node, instance type, GPUs, from hours, to hours or None)."""
    return pl.DataFrame(
        {
            "cluster_id": [r[0] for r in rows],
            "node_id": [r[1] for r in rows],
            "instance_type": [r[2] for r in rows],
            "gpus_per_node": [r[3] for r in rows],
            "in_service_from_utc": [at(r[4]) for r in rows],
            "in_service_to_utc": [None if r[5] is None else at(r[5]) for r in rows],
        },
        schema_overrides={
            "in_service_to_utc": pl.Datetime("us"),
            "in_service_from_utc": pl.Datetime("us"),
            "gpus_per_node": pl.Int32,
        },
    )


EDGE_INVENTORY = [
    ("a", "n1", "p5", 8, 0, 100),  # removed at its failure at 100 h, back at 103 h (inventory end)
    ("a", "n1", "p5", 8, 103, 400),
    ("a", "n1", "p5", 8, 400, None),  # adjacent interval: a failure at 400 h counts in the first
    ("a", "n2", "p5", 8, 0, None),
    ("a", "n3", "p4", 4, 50, 300),
    ("a", "n4", "p5", 8, 0, None),
    ("b", "m1", "cpu", 0, 0, None),  # no GPUs: null per-GPU rates
    ("b", "m2", "p5", 8, 0, 10),  # out of service from 10 h on: its later failures are left out
]
EDGE_INCIDENTS = [
    (5, "a", "n1", "xid", "gpu", True, 8),  # outage 5-8 h from its resolution
    (6, "a", "n1", "nccl", "network", True, None),  # in that outage: out of service
    (100, "a", "n1", "xid", "gpu", True, None),  # at its interval's end: counts
    (400, "a", "n1", "ecc", "memory", True, None),  # at the end of [103, 400] and start of [400, ..)
    # a storm longer than the window: a fault every 20 min for 3 h is several interruptions
    *[(200 + k / 3, "a", "n2", "xid", "gpu", True, 200.5 if k == 2 else None) for k in range(10)],
    # ties at one time and category: input order decides the first row's class
    (250, "a", "n2", "pcie", "host", True, None),
    (250, "a", "n2", "pcie", "gpu", True, None),
    (250.1, "a", "n2", "app", "software", False, None),  # not interrupting: not counted
    (60, "a", "n3", "xid", "gpu", True, 70),
    (60.25, "a", "n3", "nccl", "network", True, 75),  # within the window: one interruption, ends 75 h
    (65, "a", "n3", "xid", "gpu", True, 90),  # joins that outage (out of service), which ends at 90 h
    (80, "a", "n3", "ecc", "memory", True, None),  # inside the outage up to 90 h: out of service
    (299, "a", "n3", "xid", "gpu", True, 310),  # outage past the interval's end
    # an outage to 350 h holds a shorter one (310-312 h): 320 h is still inside the first
    (300, "a", "n4", "xid", "gpu", True, 350),
    (310, "a", "n4", "ecc", "memory", True, 312),
    (320, "a", "n4", "psu", "host", True, None),
    (1, "b", "m1", "psu", "host", True, None),
    (20, "b", "m2", "psu", "host", True, None),  # out of service
    (30, "c", "x9", "xid", "gpu", True, None),  # node not in the inventory
    (900, "a", "n2", "xid", "gpu", True, None),  # after --until (800 h)
]


@pytest.fixture(scope="module")
def edge_con(tmp_path_factory):
    con = write_warehouse(
        tmp_path_factory.mktemp("counts") / "edge.duckdb",
        _incidents(EDGE_INCIDENTS),
        _inventory(EDGE_INVENTORY),
    )
    yield con
    con.close()


@pytest.fixture(scope="module")
def overlap_con(tmp_path_factory):
    """The edge fleet with a second service interval of n2 inside its first (inventory rows that
    overlap: the failure at 270 h goes to the interval that starts first)."""
    inventory = _inventory([*EDGE_INVENTORY, ("a", "n2", "p5", 8, 150, 260)])
    # at 270 h the latest interval to start (150-260 h) has ended, the first holds it
    incidents = _incidents([*EDGE_INCIDENTS, (270, "a", "n2", "xid", "gpu", True, None)])
    con = write_warehouse(tmp_path_factory.mktemp("counts") / "overlap.duckdb", incidents, inventory)
    yield con
    con.close()


@pytest.fixture(scope="module")
def fleet_con(tmp_path_factory):
    """A simulated fleet (repairs, replaced nodes, noise) with storms: bursts of a fault every
    5-25 minutes on random nodes, so runs longer than the window are common."""
    spec = sample.FleetSpec(cluster_sizes=(8, 16, 32), days=60, seed=7)
    incidents, inventory, _ = warehouse_frames(sample.simulate_fleet(spec))
    rng = np.random.default_rng(7)
    bursts = []
    for i, row in enumerate(incidents.filter("interrupting").sample(40, seed=7).iter_rows(named=True)):
        steps = np.cumsum(rng.integers(5, 26, size=rng.integers(2, 30)))
        for minutes in steps:
            bursts.append(row | {"timestamp_utc": row["timestamp_utc"] + timedelta(minutes=int(minutes))})
        bursts[-1] |= {"category": f"burst-{i}", "resolved_at_utc": None}
    incidents = pl.concat([incidents, pl.DataFrame(bursts, schema=incidents.schema)])
    columns = ["timestamp_utc", "cluster_id", "node_id", "category", "failure_class", "interrupting"]
    con = write_warehouse(
        tmp_path_factory.mktemp("counts") / "fleet.duckdb",
        incidents.select(*columns, "resolved_at_utc"),
        inventory.select(
            "cluster_id",
            "node_id",
            "instance_type",
            "gpus_per_node",
            "in_service_from_utc",
            "in_service_to_utc",
        ),
    )
    yield con
    con.close()


def _polars(con, end, window, basis):
    """What the rates view computed from rows before: failures, exposure, their match."""
    failures = analysis.read_failures(con, window_minutes=window)
    inventory = warehouse.table(con, "inventory")
    at_risk, _ = analysis.rate_exposure(
        con, failures, inventory, transform.exposure_intervals(inventory, end), end, basis
    )
    return failures, at_risk, transform.failures_in_service(failures, at_risk, with_interval=True)


GROUPS = [
    ([], None),
    (["cluster_id"], None),
    (["cluster_id", "node_id"], None),
    (["cluster_id", "failure_class"], None),
    (["category"], None),
    (["size_bucket", "instance_type"], None),
    (["cluster_id"], "month"),
    (["node_id", "category"], "week"),
    ([], "day"),
]


@pytest.mark.parametrize("case", ["edge", "overlap", "fleet"])
@pytest.mark.parametrize(("basis", "window"), [("uptime", 30.0), ("calendar", 30.0), ("uptime", 90.0)])
def test_duckdb_counts_are_the_polars_rates(request, case, basis, window):
    con = request.getfixturevalue(f"{case}_con")
    inventory = warehouse.table(con, "inventory")
    end = at(800) if case != "fleet" else transform.observation_end(warehouse.latest_incident(con), inventory)
    failures, at_risk, in_service = _polars(con, end, window, basis)
    counts = FailureCounts(con, end, window_minutes=window, basis=basis)
    for by, period in GROUPS:
        expected = transform.failure_rates(
            failures, at_risk, by=by, period=period, dispersion=1.3, in_service=in_service
        )
        got = counts.rates(by, period=period, dispersion=1.3)
        assert_frame_equal(got, expected, check_exact=False, rel_tol=1e-12, abs_tol=1e-15)
    assert_frame_equal(counts.left_out(), transform.failures_left_out(failures, at_risk, end))
    counts.close()
    assert not con.sql("SELECT * FROM duckdb_tables() WHERE table_name LIKE '_fc_%'").fetchall()


def test_edge_counts_by_hand(edge_con):
    """The edge fleet's counts, worked out by hand: what the comparison above rests on."""
    end = at(800)
    counts = FailureCounts(edge_con, end)
    by_node = {
        (r["cluster_id"], r["node_id"]): r["failures"]
        for r in counts.rates(["cluster_id", "node_id"]).iter_rows(named=True)
    }
    # n1: 5 h, 100 h (interval end), 400 h (end of one interval, start of the next: once);
    # n2: the 3 h storm, windows anchored at 200, 200.67, 201.33, 202, 202.67 h, plus 250 h;
    # n3: 60 h (with 60.25 h), 299 h; m1: 1 h; m2 none
    assert by_node[("a", "n1")] == 3
    assert by_node[("a", "n3")] == 2
    assert by_node[("a", "n4")] == 1
    assert by_node[("b", "m1")] == 1
    assert by_node[("b", "m2")] == 0
    storm = node_interruptions(_incidents([r for r in EDGE_INCIDENTS if r[2] == "n2" and r[0] < 240]))
    assert storm["timestamp_utc"].to_list() == [at(200 + k / 3) for k in (0, 2, 4, 6, 8)]
    assert by_node[("a", "n2")] == storm.height + 1 == 6
    left = dict(counts.left_out().iter_rows())
    assert left == {
        "after the window end (--until)": 1,
        "node has no service interval in the window": 1,
        "node out of service": 6,  # n1 at 6 h, n3 at 65 h and 80 h, n4 at 310 h and 320 h, m2 at 20 h
    }
    # the CPU nodes' per-GPU rate is null, their instance-hours count
    cpu = counts.rates(["instance_type"]).filter(pl.col("instance_type") == "cpu").row(0, named=True)
    assert cpu["failures"] == 1 and cpu["rate_per_gpu_hour"] is None and cpu["exposure_node_hours"] == 800
    counts.close()


def test_no_failures_and_no_incidents(tmp_path):
    con = write_warehouse(
        tmp_path / "quiet.duckdb", _incidents([]).head(0), _inventory([("a", "n1", "p5", 8, 0, None)])
    )
    end = at(100)
    counts = FailureCounts(con, end)
    fleet = counts.rates([]).row(0, named=True)
    assert fleet["failures"] == 0 and fleet["exposure_node_hours"] == 100
    assert fleet["rate_upper_bound"] == pytest.approx(-np.log(0.05) / 100)
    assert counts.left_out()["failures"].sum() == 0
    with pytest.raises(ValueError, match="cannot count rates by"):
        counts.rates(["level"])
    counts.close()
    con.close()


def test_lemons_counted_in_duckdb_are_the_polars_test(fleet_con):
    """failcast lemons: the node rates on calendar exposure, one cluster's (--cluster), counted in
    DuckDB, give the lemon test of the rows (node_evidence)."""
    inventory = warehouse.table(fleet_con, "inventory")
    end = transform.observation_end(warehouse.latest_incident(fleet_con), inventory)
    exposure = transform.exposure_intervals(inventory, end)
    for part in (exposure, exposure.filter(pl.col("cluster_id") == exposure["cluster_id"].max())):
        _, expected, _ = analysis.node_evidence(analysis.read_failures(fleet_con), part)
        clusters = None if part is exposure else part["cluster_id"].unique().to_list()
        counts = FailureCounts(fleet_con, end, basis="calendar", clusters=clusters)
        got, _ = analysis.lemon_evidence(counts.rates(["cluster_id", "node_id"]))
        counts.close()
        # bit for bit: the node-hours are summed as failure_rates sums them (transform.exposure_sums)
        assert_frame_equal(got.table_, expected.table_, check_exact=True)
        assert got.dispersion_ == expected.dispersion_


# one node "n" in service from 0 h (to the hours given, or open), failures at the hours given;
# what each rule gives: failures counted, left out (after the window end, out of service), and
# the failures by calendar month (T0 is 2026-03-02: 720 h is 2026-04-01 00:00)
BOUNDARIES = {
    "zero failures": ([(0, None)], [], 0, (0, 0), {}),
    "one failure inside": ([(0, None)], [10], 1, (0, 0), {"2026-03": 1}),
    "at the interval's end": ([(0, 100)], [100], 1, (0, 0), {"2026-03": 1}),
    "just after the interval's end": ([(0, 100)], [100.001], 0, (0, 1), {}),
    "at the interval's start": ([(0, 100)], [0], 1, (0, 0), {"2026-03": 1}),
    "between adjacent intervals: once, in the first": (
        [(0, 100), (100, None)],
        [100],
        1,
        (0, 0),
        {"2026-03": 1},
    ),
    "at the window end": ([(0, None)], [800], 1, (0, 0), {"2026-04": 1}),
    "after the window end": ([(0, None)], [800.5], 0, (1, 0), {}),
    "at a month boundary that ends its interval": ([(0, 720), (720, None)], [720], 1, (0, 0), {"2026-03": 1}),
    "at a month boundary inside an interval": ([(0, None)], [720], 1, (0, 0), {"2026-04": 1}),
}


@pytest.mark.parametrize("basis", ["calendar", "uptime"])
@pytest.mark.parametrize("case", list(BOUNDARIES))
def test_one_node_boundaries(tmp_path, case, basis):
    """Table-driven boundaries on one node: the DuckDB counts against the hand-worked answer and
    the Polars transforms (no outage has a recorded end, so uptime is the calendar here)."""
    intervals, hours, counted, (after, outside), by_month = BOUNDARIES[case]
    con = write_warehouse(
        tmp_path / "one.duckdb",
        _incidents([(h, "a", "n", "xid", "gpu", True, None) for h in hours]),
        _inventory([("a", "n", "p5", 8, start, stop) for start, stop in intervals]),
    )
    end = at(800)
    service = [(start, 800 if stop is None else stop) for start, stop in intervals]
    failures, at_risk, in_service = _polars(con, end, 30.0, basis)
    expected = {
        "node": transform.failure_rates(failures, at_risk, by=["node_id"], in_service=in_service),
        "month": transform.failure_rates(failures, at_risk, by=[], period="month", in_service=in_service),
    }
    left_expected = transform.failures_left_out(failures, at_risk, end)
    counts = FailureCounts(con, end, basis=basis)
    node, month = counts.rates(["node_id"]), counts.rates([], period="month")
    assert node["failures"].to_list() == [counted]
    assert node["exposure_node_hours"].item() == pytest.approx(sum(b - a for a, b in service))
    got_months = {f"{p:%Y-%m}": n for p, n in month.select("period", "failures").iter_rows() if n}
    assert got_months == by_month
    assert counts.left_out()["failures"].to_list() == [after, 0, outside]
    assert_frame_equal(node, expected["node"], check_exact=False, rel_tol=1e-12)
    assert_frame_equal(month, expected["month"], check_exact=False, rel_tol=1e-12)
    assert_frame_equal(counts.left_out(), left_expected)
    counts.close()
    con.close()
