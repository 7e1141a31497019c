"""Simulated fleets as the frames the warehouse would hold (shared by the model tests).

Going through ingest is covered by tests/test_analysis.py; ground-truth loops over hundreds of
seeds build the warehouse frames directly to stay fast.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import polars as pl

from pipeline import sample, transform
from pipeline.categories import CategoryMap
from pipeline.store import taxonomy


def warehouse_frames(fleet: sample.Fleet) -> tuple[pl.DataFrame, pl.DataFrame, datetime]:
    """(incidents, inventory, observed_until) with warehouse column names and naive UTC times."""
    naive = pl.col(pl.Datetime).dt.replace_time_zone(None)
    categories = fleet.incidents["category"].unique().sort().to_list()
    classes = taxonomy.classes_frame(categories, CategoryMap()).select(
        "category", "failure_class", "interrupting"
    )
    incidents = (
        fleet.incidents.rename({"timestamp": "timestamp_utc", "resolved_at": "resolved_at_utc"})
        .with_columns(naive)
        .join(classes, on="category", how="left", maintain_order="left")
    )
    inventory = fleet.inventory.rename(
        {"in_service_from": "in_service_from_utc", "in_service_to": "in_service_to_utc"}
    ).with_columns(naive)
    return incidents, inventory, fleet.spec.end.replace(tzinfo=None)


def fleet_exposure(spec: sample.FleetSpec) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Simulate ``spec`` and return (incidents, exposure) ready for the transforms."""
    incidents, inventory, end = warehouse_frames(sample.simulate_fleet(spec))
    return incidents, transform.exposure_intervals(inventory, end)


def simulated_jobs(
    spec: sample.FleetSpec, jobs: int, *, rate_multiplier: float = 1.0, seed: int = 0
) -> pl.DataFrame:
    """Slurm-like job records on ``spec``'s clusters whose interruptions follow the fleet's true
    model times ``rate_multiplier``: a job on n nodes planned for C hours is interrupted at
    T ~ Exponential(rate x multiplier x n) when T < C, and then ends at T (NODE_FAIL)."""
    rng = np.random.default_rng(seed)
    clusters = np.array([f"c{n:04d}" for n in spec.cluster_sizes])
    sizes = np.array(spec.cluster_sizes)
    pick = rng.integers(0, clusters.size, jobs)
    nnodes = np.minimum(2 ** rng.integers(0, 9, jobs), sizes[pick])
    planned = rng.lognormal(np.log(24.0), 1.0, jobs)
    first = rng.exponential(1 / (spec.rate_per_node_hour * rate_multiplier * nnodes))
    elapsed = np.minimum(planned, first)
    start = [spec.start.replace(tzinfo=None) + timedelta(days=d) for d in rng.uniform(0, spec.days - 1, jobs)]
    return pl.DataFrame(
        {
            "cluster_id": clusters[pick],
            "job_id": [str(i) for i in range(jobs)],
            "start_utc": start,
            "elapsed_hours": elapsed,
            "nnodes": nnodes,
            "interrupted": first < planned,
        }
    ).with_columns(
        end_utc=pl.col("start_utc")
        + pl.duration(microseconds=(pl.col("elapsed_hours") * 3.6e9).cast(pl.Int64))
    )
