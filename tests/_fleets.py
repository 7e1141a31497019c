"""Simulated fleets as the frames the warehouse would hold (shared by the model tests).

Going through ingest is covered by tests/test_analysis.py; ground-truth loops over hundreds of
seeds build the warehouse frames directly to stay fast.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple

import numpy as np
import polars as pl

from pipeline import analysis, sample, transform, warehouse
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


class AnalysisRows(NamedTuple):
    """The row frames an analysis counts from, which :class:`pipeline.analysis.FleetAnalysis`
    holds only as aggregates (issue 27): read here the way ``analyze`` reads them."""

    interruptions: pl.DataFrame
    """The node interruptions in the window (``analysis.read_failures``, ``options.in_window``)."""
    exposure: pl.DataFrame
    """The calendar service intervals in the window."""
    rate_exposure: pl.DataFrame
    """The exposure rates divide by (uptime pieces, or the calendar intervals)."""
    outages: pl.DataFrame
    """The outages that began in the window (the rows of ``RepairAnalysis``)."""


def analysis_rows(con, options: analysis.AnalysisOptions = analysis.DEFAULT_OPTIONS) -> AnalysisRows:
    """The :class:`AnalysisRows` of ``analysis.analyze(con, options)``."""
    inventory, options, exposure = analysis.service_window(con, options)
    failures = analysis.read_failures(con, window_minutes=options.interruption_window_minutes)
    at_risk, outages = analysis.rate_exposure(
        con, failures, inventory, exposure, options.until, options.exposure_basis
    )
    return AnalysisRows(
        options.in_window(failures), exposure, at_risk, options.in_window(outages, "start_utc")
    )


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


def write_warehouse(path, incidents: pl.DataFrame, inventory: pl.DataFrame):
    """A warehouse at ``path`` holding exactly these incidents and inventory rows (warehouse
    columns; no ingest: edge cases are written as they are), opened read-only."""
    con = warehouse.connect(path)
    n = incidents.height
    rows = incidents.with_columns(
        incident_id=pl.int_range(n, dtype=pl.Int64),
        gpu_index=pl.lit(None, pl.Int32),
        last_event_utc=pl.col("timestamp_utc"),
        events=pl.lit(1, pl.Int64),
        job_id=pl.lit(None, pl.String),
        message=pl.lit(None, pl.String),
        pci_bus_id=pl.lit(None, pl.String),
        xid=pl.lit(None, pl.Int32),
        attributes=pl.lit(None, pl.String),
    )
    service = inventory.with_columns(file_id=pl.lit(1, pl.Int64), line=pl.int_range(inventory.height))
    con.register("new_incidents", rows)
    con.register("new_inventory", service)
    con.execute("INSERT INTO incidents BY NAME SELECT * FROM new_incidents")
    con.execute("INSERT INTO inventory BY NAME SELECT * FROM new_inventory")
    con.close()
    return warehouse.connect(path, read_only=True)


AVAILABILITY_START = datetime(2025, 1, 1)


def availability_fleet(
    nodes: int, intervals_per_node: int, *, clusters: int = 4, seed: int = 0
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(incidents, inventory) in the canonical input columns, shaped like a public availability
    trace: each node serves ``intervals_per_node`` up-intervals (exponential, mean 40 h), each
    ended by a failure stamped at the interval's end or up to 20 min before it, then comes back
    after a repair gap (lognormal, median 3 h) that only the inventory records; one failure in 8
    has its own ``resolved_at``, one in 20 happens mid-interval (a failure the node survived), and
    the last interval of one node in 4 stays open. Whole seconds, times in UTC."""
    rng = np.random.default_rng(seed)
    k = intervals_per_node
    up_s = np.maximum(np.round(rng.exponential(40 * 3600, (nodes, k))), 60).astype(np.int64)
    gap_s = np.maximum(np.round(rng.lognormal(np.log(3 * 3600), 0.8, (nodes, k))), 1).astype(np.int64)
    begin_s = np.round(rng.uniform(0, 24 * 3600, (nodes, 1))).astype(np.int64)
    ends = begin_s + np.cumsum(up_s + gap_s, axis=1) - gap_s
    starts = ends - up_s
    node = np.repeat(np.arange(nodes), k)
    node_cluster = np.array([f"a{c:02d}" for c in range(clusters)])[np.arange(nodes) % clusters]
    cluster = node_cluster[node]
    names = np.array([f"{c}-n{n:05d}" for n, c in enumerate(node_cluster)])[node]
    base = np.datetime64(AVAILABILITY_START, "us")

    def at(seconds: np.ndarray) -> pl.Series:
        return pl.Series(base + seconds.astype("timedelta64[s]").astype("timedelta64[us]"))

    failed = np.ones(nodes * k, dtype=bool)
    failed[(np.arange(nodes) * k + k - 1)[rng.uniform(size=nodes) < 0.25]] = False
    inventory = pl.DataFrame(
        {
            "cluster_id": cluster,
            "node_id": names,
            "instance_type": "p5.48xlarge",
            "gpus_per_node": 8,
            "in_service_from": at(starts.ravel()),
            "in_service_to": at(ends.ravel()),
        }
    ).with_columns(in_service_to=pl.when(pl.Series(failed)).then("in_service_to"))
    to = ends.ravel()
    early = np.where(rng.uniform(size=to.size) < 0.5, 0, rng.integers(0, 1200, to.size))
    at_end = ends.ravel() - early
    mid = rng.uniform(size=to.size) < 0.05
    mid_t = starts.ravel() + (rng.uniform(size=to.size) * up_s.ravel() * 0.9).astype(np.int64)
    own = rng.uniform(size=to.size) < 0.125
    resolved = at_end + (rng.uniform(0.5, 2, to.size) * 3600).astype(np.int64)
    categories = np.array(["gpu", "nvlink", "network", "hardware"])[rng.integers(0, 4, to.size)]
    ends_frame = pl.DataFrame(
        {
            "timestamp": at(at_end),
            "cluster_id": cluster,
            "node_id": names,
            "category": categories,
            "resolved_at": at(resolved),
            "_own": own,
        }
    ).filter(pl.Series(failed))
    mid_frame = pl.DataFrame(
        {
            "timestamp": at(mid_t),
            "cluster_id": cluster,
            "node_id": names,
            "category": "gpu",
            "resolved_at": at(mid_t + 1800),
            "_own": True,
        }
    ).filter(pl.Series(mid))
    incidents = (
        pl.concat([ends_frame, mid_frame])
        .with_columns(resolved_at=pl.when("_own").then("resolved_at"))
        .drop("_own")
        .sort("timestamp", "node_id")
    )
    return incidents, inventory


def write_canonical(folder, incidents: pl.DataFrame, inventory: pl.DataFrame) -> list:
    """Write ``incidents.csv`` and ``inventory.csv`` (ISO times with Z) into ``folder``; returns
    the paths, inventory first."""
    iso = "%Y-%m-%dT%H:%M:%SZ"
    paths = [folder / "inventory.csv", folder / "incidents.csv"]
    inventory.with_columns(pl.col(pl.Datetime).dt.strftime(iso)).write_csv(paths[0])
    incidents.with_columns(pl.col(pl.Datetime).dt.strftime(iso)).write_csv(paths[1])
    return paths
