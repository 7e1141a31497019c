"""Analysis: read the warehouse once, run the transforms and fit the models, return one result.

This is the single entry point that the CLI, the report and the notebooks share, so none of them
re-implements the chain warehouse -> transform -> models.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np
import polars as pl

from pipeline import models, transform, warehouse

FAMILIES = ("exponential", "weibull", "lognormal", "loglogistic")
PROJECTED_SIZES = (256, 512, 2048, 16384)


@dataclass
class FleetAnalysis:
    """Everything the report shows, as Polars frames and fitted models."""

    observed_until: datetime
    exposure: pl.DataFrame
    incidents: pl.DataFrame
    rates_overall: pl.DataFrame
    rates_by_cluster: pl.DataFrame
    rates_by_category: pl.DataFrame
    rates_by_month: pl.DataFrame
    node_fits: dict[str, models.ParametricTBF]
    best_family: str
    kaplan_meier: models.KaplanMeier
    cluster_mtbf: pl.DataFrame
    scaling: models.MTBFScaling | None
    scaling_projection: pl.DataFrame
    files: pl.DataFrame
    rejects: pl.DataFrame

    @property
    def fleet_rate(self) -> models.PoissonRate:
        row = self.rates_overall.row(0, named=True)
        return models.PoissonRate().fit(row["failures"], row["exposure_node_hours"])


def cluster_mtbf(rates_by_cluster: pl.DataFrame, exposure: pl.DataFrame) -> pl.DataFrame:
    """Per cluster: instances, failures, cluster-hours observed and cluster MTBF with interval.

    Cluster MTBF = cluster-hours / failures, where cluster-hours = node-hours / instances, so the
    interval is the inverse of the rate interval scaled by instance count.
    """
    sizes = exposure.group_by("cluster_id").agg(pl.col("instances").first(), pl.col("size_bucket").first())
    return (
        rates_by_cluster.join(sizes, on="cluster_id")
        .with_columns(exposure_cluster_hours=pl.col("exposure_node_hours") / pl.col("instances"))
        .with_columns(
            mtbf_hours=pl.col("exposure_cluster_hours") / pl.col("failures"),
            mtbf_ci_low_hours=1 / (pl.col("rate_ci_high") * pl.col("instances")),
            mtbf_ci_high_hours=1 / (pl.col("rate_ci_low") * pl.col("instances")),
        )
        .select(
            "cluster_id",
            "instances",
            "size_bucket",
            "failures",
            "exposure_cluster_hours",
            "mtbf_hours",
            "mtbf_ci_low_hours",
            "mtbf_ci_high_hours",
        )
        .sort("instances")
    )


def analyze(con, *, observed_until: datetime | None = None) -> FleetAnalysis:
    """Run every transform and fit on the warehouse behind ``con``."""
    incidents = warehouse.table(con, "incidents")
    inventory = warehouse.table(con, "inventory")
    if inventory.height == 0:
        raise ValueError(
            "the warehouse has no inventory: ingest an inventory file (cluster_id, "
            "node_id, instance_type, gpus_per_node, in_service_from, in_service_to)"
        )
    end = observed_until or transform.observation_end(incidents, inventory)
    exposure = transform.exposure_intervals(inventory, end)
    by_cluster = transform.failure_rates(incidents, exposure, by=["cluster_id"])

    durations = transform.aggregate_durations(transform.times_between_failures(incidents, exposure))
    args = (durations["duration_hours"], durations["observed"], durations["count"])
    fits = {family: models.ParametricTBF(family).fit(*args) for family in FAMILIES}
    best = min(fits, key=lambda f: fits[f].aic_)

    per_cluster = cluster_mtbf(by_cluster, exposure)
    scaling, projection = None, pl.DataFrame()
    if per_cluster["instances"].n_unique() >= 2:
        scaling = models.MTBFScaling().fit(
            per_cluster["instances"], per_cluster["failures"], per_cluster["exposure_cluster_hours"]
        )
        sizes = np.array(sorted({*PROJECTED_SIZES, *per_cluster["instances"].round().to_list()}))
        mtbf, low, high = scaling.predict_mtbf_hours(sizes)
        projection = pl.DataFrame(
            {"instances": sizes, "mtbf_hours": mtbf, "mtbf_ci_low_hours": low, "mtbf_ci_high_hours": high}
        )

    return FleetAnalysis(
        observed_until=end,
        exposure=exposure,
        incidents=incidents,
        rates_overall=transform.failure_rates(incidents, exposure, by=[]),
        rates_by_cluster=by_cluster,
        rates_by_category=transform.failure_rates(incidents, exposure, by=["category"]),
        rates_by_month=transform.failure_rates(incidents, exposure, by=["cluster_id"], period="month"),
        node_fits=fits,
        best_family=best,
        kaplan_meier=models.KaplanMeier().fit(*args),
        cluster_mtbf=per_cluster,
        scaling=scaling,
        scaling_projection=projection,
        files=warehouse.table(con, "ingested_files"),
        rejects=warehouse.table(con, "rejects"),
    )
