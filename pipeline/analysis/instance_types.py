"""Rate tables per instance type, made once in :func:`pipeline.analysis.analyze` from its match
(issue 27): what a job's rate on one instance type (:func:`pipeline.analysis.size_rates`) reads
instead of the failure and interval rows, which the analysis does not keep."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from pipeline import transform
from pipeline.analysis.failures import cluster_mtbf


@dataclass(frozen=True)
class InstanceTypeRates:
    """The rate tables of one instance type's nodes that :func:`pipeline.analysis.size_rates` reads, as
    :class:`pipeline.analysis.RateAnalysis` has them for the whole fleet: ``overall`` (one row),
    ``by_size_bucket`` and ``cluster_mtbf`` (:func:`pipeline.analysis.cluster_mtbf`: the clusters
    with nodes of the type, at their whole size)."""

    overall: pl.DataFrame
    by_size_bucket: pl.DataFrame
    cluster_mtbf: pl.DataFrame


def rates_by_instance_type(
    failures: pl.DataFrame,
    at_risk: pl.DataFrame,
    exposure: pl.DataFrame,
    in_service: pl.DataFrame,
    dispersion: float,
) -> dict[str, InstanceTypeRates]:
    """Per instance type of the nodes at risk, the :class:`InstanceTypeRates` of its nodes: each
    table one :func:`pipeline.transform.failure_rates` grouped by ``instance_type`` too, on the
    analysis' match of the failures to the rate exposure (``in_service``: a failure counts for
    the type of the interval it counts in) and its ``dispersion``, then split (a fleet has few
    types). Why here: a job's rate by instance type then needs no failure or interval rows
    (issue 27). ``exposure``: the calendar service intervals, for the clusters' sizes."""
    overall, by_bucket, by_cluster = (
        transform.failure_rates(
            failures, at_risk, by=["instance_type", *by], dispersion=dispersion, in_service=in_service
        )
        for by in ([], ["size_bucket"], ["cluster_id"])
    )

    def of_type(frame: pl.DataFrame, kind: str) -> pl.DataFrame:
        return frame.filter(pl.col("instance_type") == kind).drop("instance_type")

    return {
        kind: InstanceTypeRates(
            overall=of_type(overall, kind),
            by_size_bucket=of_type(by_bucket, kind),
            cluster_mtbf=cluster_mtbf(of_type(by_cluster, kind), exposure),
        )
        for kind in sorted(overall["instance_type"])
    }
