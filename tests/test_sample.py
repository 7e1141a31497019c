"""The generator is the ground truth for the statistical tests, so it is tested first."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from pipeline.sample import TICKET_NAMES, FleetSpec, simulate_fleet, stationary_renewal_times
from pipeline.store.taxonomy import classify


def _interrupting(fleet) -> pl.DataFrame:
    return fleet.incidents.filter(~pl.col("category").is_in(["application", "gpu_memory_warning"]))


def _node_hours(fleet) -> float:
    inv = fleet.inventory.with_columns(pl.col("in_service_to").fill_null(fleet.spec.end))
    return ((inv["in_service_to"] - inv["in_service_from"]).dt.total_seconds() / 3600).sum()


def test_same_seed_same_fleet() -> None:
    spec = FleetSpec(cluster_sizes=(8, 16), days=10)
    assert simulate_fleet(spec).incidents.equals(simulate_fleet(spec).incidents)
    other = simulate_fleet(FleetSpec(cluster_sizes=(8, 16), days=10, seed=1))
    assert not other.incidents.equals(simulate_fleet(spec).incidents)


@pytest.mark.parametrize("shape", [0.7, 1.0, 1.3])
def test_stationary_renewal_count_matches_rate(shape: float) -> None:
    # E[N(t)] = t / mean for a stationary renewal process, whatever the shape.
    rng = np.random.default_rng(7)
    durations = np.full(20_000, 500.0)
    owner, times = stationary_renewal_times(durations, 100.0, shape, rng)
    expected = durations.sum() / 100.0
    assert abs(owner.size - expected) < 4 * np.sqrt(expected) * (1.5 if shape < 1 else 1.0)
    assert (times >= 0).all() and (times < 500).all()


def test_failure_rate_and_categories() -> None:
    fleet = simulate_fleet(FleetSpec(cluster_sizes=(64, 128), days=60, seed=11))
    failures = _interrupting(fleet).height
    expected = _node_hours(fleet) * fleet.spec.rate_per_node_hour
    assert abs(failures - expected) < 4 * np.sqrt(expected)
    assert set(fleet.incidents["category"].unique()) >= {"gpu_fell_off_bus", "application"}
    # every incident lies inside one of its node's service intervals
    joined = fleet.incidents.join(fleet.inventory, on=["cluster_id", "node_id"]).filter(
        (pl.col("timestamp") >= pl.col("in_service_from"))
        & (pl.col("timestamp") < pl.col("in_service_to").fill_null(fleet.spec.end))
    )
    assert (
        joined.select("timestamp", "node_id").unique().height
        == fleet.incidents.select("timestamp", "node_id").unique().height
    )


@pytest.mark.parametrize(("cls", "name"), list(TICKET_NAMES.items()))
def test_ticket_names_classify_back_to_the_simulated_class(cls, name) -> None:
    """The sample records every 10th incident of some classes under a ticket name; its class-level
    numbers equal the truth's only if the taxonomy maps the name back (a generic "Faulty GPU" is
    gpu_hardware, so the simulated gpu_fell_off_bus goes by a name that says so)."""
    assert classify(name).failure_class is cls


@pytest.mark.parametrize("days", [0.1, 2.0, 5.0])
def test_short_windows_keep_every_interval_inside(days: float) -> None:
    # repairs take 1-10 days and spares arrive 4 h after a retirement: with a short window many
    # would come back after it ends (this used to crash with "lam < 0")
    spec = FleetSpec(cluster_sizes=(64,), days=days, replaced_fraction=0.3, maintenance_fraction=0.3, seed=5)
    fleet = simulate_fleet(spec)
    inv = fleet.inventory.with_columns(end=pl.col("in_service_to").fill_null(spec.end))
    assert (inv["in_service_from"] < inv["end"]).all() and (inv["end"] <= spec.end).all()
    assert inv.filter(pl.col("in_service_to").is_not_null())["node_id"].n_unique() > 30  # both kinds drawn
    assert (fleet.incidents["timestamp"] < spec.end).all()


def test_write_round_trips_canonical_columns(tmp_path) -> None:
    fleet = simulate_fleet(FleetSpec(cluster_sizes=(4,), days=30, seed=3))
    incidents, inventory = fleet.write(tmp_path)
    header = incidents.read_text().splitlines()[0].split(",")
    assert header == [
        "timestamp",
        "cluster_id",
        "node_id",
        "category",
        "gpu_index",
        "job_id",
        "message",
        "resolved_at",
    ]
    assert inventory.read_text().splitlines()[0].startswith("cluster_id,node_id,instance_type")
    assert incidents.read_text().splitlines()[1].split(",")[0].endswith("Z")
