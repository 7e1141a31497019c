"""Public baselines: published GPU-fleet interruption rates and other fleets' rates in one frame.

Each published rate is failures / (instances x hours), one instance = one node, so it is the same
quantity as ``rate_per_node_hour`` in :mod:`pipeline.transform`; the exact Poisson (Garwood)
interval comes from the published counts via :func:`pipeline.transform.poisson_interval` (only the
totals are published: nothing to measure their dispersion with). An analysed fleet's rows are its
own figures, not recomputed: rate and interval from ``rates_by_cluster``, MTBF and its interval from
``cluster_mtbf``, the interval by the analysis' method (``interval``: "exact" or "overdispersed"),
so a cluster reads the same here as in its rate table.

* OPT-175B (Zhang et al. 2022, logbook): 35 manual + 70 automatic restarts on 124 nodes (992 A100)
  over 60 days: 105 / (124 x 1440 h) = 0.0588 % per instance-hour.
* MPT-7B (MosaicML 2023): 4 hardware failures on 55 nodes (440 A100) over 9.5 days:
  4 / (55 x 228 h) = 0.0319 %.
* Llama 3.1 (Meta 2024, section 3.3.4): 417 unexpected interruptions on ~2 000 nodes (16 384 H100)
  over 54 days: 417 / (2000 x 1296 h) = 0.0161 %.

Fleet MTBF = exposure node-hours / instances / failures (the mean time between failures of the
whole fleet, the quantity that stops a synchronous job).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import polars as pl

from pipeline.analysis import RateAnalysis
from pipeline.projection import PRESETS
from pipeline.transform import poisson_interval

# Counts and sources come from the projection presets (one place for published numbers); the
# instance counts, needed for fleet MTBF, are those the presets' instance-hours were built from.
PUBLISHED_INSTANCES = {"opt-175b": 124, "mpt-7b": 55, "llama-3.1": 2000}


@dataclass(frozen=True)
class PublishedFleet:
    fleet: str
    source: str
    failures: int
    instances: int
    hours: float


PUBLISHED_GPU_FLEETS = tuple(
    PublishedFleet(name, PRESETS[name][2], int(PRESETS[name][0]), n, PRESETS[name][1] / n)
    for name, n in PUBLISHED_INSTANCES.items()
    if PRESETS[name][3]
)


COLUMNS = (
    "source",
    "fleet",
    "instances",
    "failures",
    "exposure_node_hours",
    "rate_per_node_hour",
    "rate_ci_low",
    "rate_ci_high",
    "interval",
    "mtbf_hours",
    "mtbf_ci_low_hours",
    "mtbf_ci_high_hours",
)


def public_baselines(
    fleets: Mapping[str, RateAnalysis] | None = None, *, confidence: float = 0.95
) -> pl.DataFrame:
    """Published GPU fleets plus every cluster of each given analysis' rates (its
    :class:`pipeline.analysis.RateAnalysis`, e.g. ``{"LANL": ..., "this fleet": ...}``): source,
    fleet, instances, failures, exposure_node_hours,
    rate_per_node_hour with interval, ``interval`` (the method: "exact" for the published counts,
    the analysis' ``interval_method`` for its clusters), and fleet MTBF with interval."""
    published = pl.DataFrame(
        {
            "source": [f.source for f in PUBLISHED_GPU_FLEETS],
            "fleet": [f.fleet for f in PUBLISHED_GPU_FLEETS],
            "instances": [float(f.instances) for f in PUBLISHED_GPU_FLEETS],
            "failures": [f.failures for f in PUBLISHED_GPU_FLEETS],
            "exposure_node_hours": [f.instances * f.hours for f in PUBLISHED_GPU_FLEETS],
        },
        schema_overrides={"failures": pl.Int64},
    )
    low, high = poisson_interval(
        published["failures"].to_numpy(), published["exposure_node_hours"].to_numpy(), confidence
    )
    published = published.with_columns(
        rate_per_node_hour=pl.col("failures") / pl.col("exposure_node_hours"),
        rate_ci_low=pl.Series(low),
        rate_ci_high=pl.Series(high),
        interval=pl.lit("exact"),
    ).with_columns(
        mtbf_hours=1 / (pl.col("rate_per_node_hour") * pl.col("instances")),
        mtbf_ci_low_hours=1 / (pl.col("rate_ci_high") * pl.col("instances")),
        mtbf_ci_high_hours=1 / (pl.col("rate_ci_low") * pl.col("instances")),
    )
    frames = [published.select(COLUMNS)]
    for label, rates in (fleets or {}).items():
        frames.append(
            rates.by_cluster.join(
                rates.cluster_mtbf.select(
                    "cluster_id", "instances", "mtbf_hours", "mtbf_ci_low_hours", "mtbf_ci_high_hours"
                ),
                on="cluster_id",
            )
            .sort("instances")
            .with_columns(
                source=pl.lit(label),
                fleet="cluster_id",
                instances=pl.col("instances").cast(pl.Float64),
                failures=pl.col("failures").cast(pl.Int64),
                interval=pl.lit(rates.interval_method),
            )
            .select(COLUMNS)
        )
    return pl.concat(frames)
