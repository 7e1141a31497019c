"""Exposure summed exactly (pipeline/transform/exposure.py): node-hours and GPU-hours are integer
microseconds added up and turned into hours once per group, so Polars (transform.exposure_sums)
and its SQL twin (exposure.sums_query, what ``failcast rates`` runs in DuckDB) give the same hours
to the last bit in any row order, and the service intervals of ``exposure_intervals`` (the SQL
rule on a frame) are the warehouse's (the same rule in FailureCounts)."""

from __future__ import annotations

from datetime import datetime, timedelta
from fractions import Fraction

import duckdb
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from pipeline import transform, warehouse
from pipeline.analysis.counts import FailureCounts
from pipeline.transform import exposure as exposure_rules
from tests._fleets import write_warehouse

T0 = datetime(2026, 2, 27, 13, 0)
SCHEMA = {
    "cluster_id": pl.String,
    "node_id": pl.String,
    "instance_type": pl.String,
    "gpus_per_node": pl.Int32,
    "in_service_from_utc": pl.Datetime("us"),
    "in_service_to_utc": pl.Datetime("us"),
}
KEYS = [[], ["cluster_id"], ["cluster_id", "node_id"], ["instance_type", "size_bucket"]]


def _inventory(rows) -> pl.DataFrame:
    """rows: (cluster, node, gpus, start in µs after T0, length in µs or None: open)."""
    return pl.DataFrame(
        [
            (
                c,
                n,
                "cpu" if g == 0 else "p5",
                g,
                T0 + timedelta(microseconds=a),
                None if d is None else T0 + timedelta(microseconds=a + d),
            )
            for c, n, g, a, d in rows
        ],
        schema=SCHEMA,
        orient="row",
    )


@st.composite
def inventories(draw):
    """Up to 30 intervals of 6 nodes in 2 clusters, at any microsecond over ~70 days, some open,
    some touching or overlapping, CPU nodes (0 GPUs) beside GPU ones."""
    day = 86_400_000_000
    rows = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["a", "b"]),
                st.sampled_from(["n1", "n2", "n3"]),
                st.sampled_from([0, 4, 8]),
                st.integers(0, 60 * day),
                st.one_of(st.none(), st.integers(0, 20 * day)),
            ),
            min_size=1,
            max_size=30,
        )
    )
    return _inventory([(c, f"{c}-{n}", g, a, d) for c, n, g, a, d in rows])


def _sql_sums(exposure: pl.DataFrame, keys: list[str], period: str | None) -> pl.DataFrame:
    con = duckdb.connect()
    con.register("pieces", exposure)
    try:
        return con.sql(exposure_rules.sums_query("SELECT * FROM pieces", keys, period)).pl()
    finally:
        con.close()


def _sorted(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    return frame.sort(keys) if keys else frame


@settings(max_examples=60, deadline=None)
@given(
    inventory=inventories(), seed=st.integers(0, 2**16), period=st.sampled_from([None, *transform.PERIODS])
)
def test_polars_and_sql_sums_are_equal_in_any_order(inventory, seed, period):
    end = T0 + timedelta(days=75)
    exposure = transform.exposure_intervals(inventory, end)
    shuffled = transform.exposure_intervals(inventory.sample(fraction=1.0, shuffle=True, seed=seed), end)
    for keys in KEYS:
        by = [*keys, "period"] if period else keys
        polars = _sorted(transform.exposure_sums(exposure, keys, period=period), by)
        # bit for bit: the same integer sums, the same operations to hours
        assert_frame_equal(_sorted(_sql_sums(exposure, keys, period), by), polars, check_exact=True)
        for frame in (shuffled, exposure.reverse()):
            assert_frame_equal(
                _sorted(transform.exposure_sums(frame, keys, period=period), by), polars, check_exact=True
            )
            assert_frame_equal(_sorted(_sql_sums(frame, keys, period), by), polars, check_exact=True)


@settings(max_examples=40, deadline=None)
@given(inventory=inventories())
def test_sums_are_the_exact_hours(inventory):
    """Each group's hours are its exact sum of microseconds over 3.6e9, within one rounding of
    the whole hours and one of the remainder (2 ulp); GPU-hours are the node-hours times GPUs."""
    end = T0 + timedelta(days=75)
    exposure = transform.exposure_intervals(inventory, end)
    sums = transform.exposure_sums(exposure, ["cluster_id", "node_id"])
    for row in sums.iter_rows(named=True):
        rows = exposure.filter(cluster_id=row["cluster_id"], node_id=row["node_id"])
        micros = [
            (e - s) // timedelta(microseconds=1)
            for s, e in zip(rows["start_utc"], rows["end_utc"], strict=True)
        ]
        exact = Fraction(sum(micros), 3_600_000_000)
        gpus = Fraction(sum(m * g for m, g in zip(micros, rows["gpus_per_node"], strict=True)), 3_600_000_000)
        assert row["exposure_node_hours"] == pytest.approx(float(exact), rel=4e-16, abs=1e-300)
        assert row["exposure_gpu_hours"] == pytest.approx(float(gpus), rel=4e-16, abs=1e-300)


def test_sums_do_not_overflow_64_bits():
    """Past 2^63 microseconds in a group (292,000 node-years; a GPU fleet gets there 8x sooner in
    GPU-hours) the sums stay exact: Int128 in Polars, HUGEINT in DuckDB."""
    year = 365 * 86_400_000_000
    inventory = _inventory([("a", f"n{i}", 8, 0, 7_000 * year) for i in range(60)])
    exposure = transform.exposure_intervals(inventory, T0 + timedelta(microseconds=7_000 * year))
    polars = transform.exposure_sums(exposure, [])
    micros = 60 * 7_000 * year  # 1.3e19 > 2^63
    assert micros > 2**63
    assert polars["exposure_node_hours"].item() == float(Fraction(micros, 3_600_000_000))
    assert polars["exposure_gpu_hours"].item() == float(Fraction(8 * micros, 3_600_000_000))
    assert_frame_equal(_sql_sums(exposure, [], None), polars, check_exact=True)


def test_intervals_of_the_frame_are_the_warehouse_rule(tmp_path):
    """exposure_intervals (the SQL rule on a frame) and the rule on a warehouse's inventory
    (FailureCounts' table) give the same intervals, numbered in the inventory's order."""
    inventory = _inventory(
        [("a", "a-n1", 8, 0, 10**10), ("a", "a-n2", 8, 5 * 10**9, None), ("b", "b-n1", 0, 0, 10**9)]
    )
    incidents = pl.DataFrame(
        schema={
            "timestamp_utc": pl.Datetime("us"),
            "cluster_id": pl.String,
            "node_id": pl.String,
            "category": pl.String,
            "failure_class": pl.String,
            "interrupting": pl.Boolean,
            "resolved_at_utc": pl.Datetime("us"),
        }
    )
    con = write_warehouse(tmp_path / "w.duckdb", incidents, inventory)
    end, since = T0 + timedelta(hours=2), T0 + timedelta(minutes=30)
    counts = FailureCounts(con, end, observed_since=since, basis="calendar")
    table = warehouse.frame(con.sql("SELECT * EXCLUDE (_interval) FROM _fc_exposure ORDER BY _interval"))
    counts.close()
    con.close()
    assert_frame_equal(table, transform.exposure_intervals(inventory, end, since), check_exact=True)
