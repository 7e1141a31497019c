"""Simulated fleets as the frames the warehouse would hold (shared by the model tests).

Going through ingest is covered by tests/test_analysis.py; ground-truth loops over hundreds of
seeds build the warehouse frames directly to stay fast.
"""

from __future__ import annotations

from datetime import datetime

import polars as pl

from pipeline import sample, transform
from pipeline.categories import CategoryMap
from pipeline.ingest import taxonomy


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
