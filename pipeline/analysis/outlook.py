"""From a fleet's analysis to the failure model of a job: which rate, which scaling law, and
whether the two scaling laws agree; the fleet's repair curve for the job's spare pool and its
measured recovery times."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from pipeline import models, projection, transform
from pipeline.analysis.failures import sizes_that_failed
from pipeline.analysis.jobs import JobAnalysis
from pipeline.analysis.repairs import RepairAnalysis

if TYPE_CHECKING:
    from pipeline.analysis.fleet import FleetAnalysis


def failure_model_for(
    analysis: FleetAnalysis, instances: int, instance_type: str | None = None
) -> projection.FailureModel:
    """The fleet's rate for a job of ``instances`` (:func:`rate_model_for`) with the node-level
    Weibull fit's shape and the covariance of (log scale, log shape): the projection shows the
    exponential (Poisson at that rate) and the fitted Weibull renewal model side by side."""
    rate = rate_model_for(analysis, instances, instance_type)
    fit = analysis.fits.node_fits.get("weibull")
    if fit is None or fit.shape_ is None:
        return rate
    scale, shape = fit.params_["lambda_"], fit.params_["rho_"]
    jacobian = np.diag([1 / scale, 1 / shape])  # delta method: covariance of the logs
    cov = jacobian @ fit.variance_matrix_ @ jacobian
    log_cov = ((float(cov[0, 0]), float(cov[0, 1])), (float(cov[1, 0]), float(cov[1, 1])))
    return rate.with_weibull_shape(shape, log_cov)


def rate_model_for(
    analysis: FleetAnalysis, instances: int, instance_type: str | None = None
) -> projection.FailureModel:
    """The per-instance failure model of a job on ``instances`` instances of this fleet, for
    :func:`pipeline.projection.project`: :meth:`SizeRates.model` of :func:`size_rates`."""
    return size_rates(analysis, instance_type).model(instances)


@dataclass(frozen=True)
class SizeRates:
    """The evidence a job's failure rate is taken from, for any job size (the report's planner
    embeds it to redraw the rate at another size). :meth:`model` picks the most direct:

    1. the measured rate of the clusters in the job's size bucket (the power of two nearest
       ``instances``: the row of ``rates_by_size_bucket``) with its interval, if they failed
       (``measured``: bucket -> that row);
    2. else the scaling law MTBF(N) = MTBF_1 / N^alpha at N = ``instances``: per-instance rate
       1 / (N MTBF(N)), its interval from the law's 95% interval (wider the further N is from the
       observed sizes), e.g. a 16 384-instance job on a fleet of 32-1 024-instance clusters;
    3. else (one cluster size only: no law) the rate of the whole fleet (``rates_overall``,
       ``total``);
    4. with no failure yet, the fleet's exact one-sided 95% upper bound (-ln 0.05 / T = 3.0 / T for
       T instance-hours, :func:`pipeline.transform.poisson_upper_bound`): a worst case, labelled
       as such in ``source``.

    The rates and the law are the analysis' own (its rate tables and ``scaling``), so the job's
    rate and interval are the figures the report shows beside it, by the analysis' interval method
    (``interval``, named in ``source``).
    """

    label: str  # "fleet", "H100 nodes", with "(exposure estimated)" when it is
    interval: str
    measured: dict[int, dict]
    law: models.MTBFScaling | None
    total: dict

    def model(self, instances: int) -> projection.FailureModel:
        if instances < 1:
            raise ValueError(f"instances must be at least 1, got {instances}")
        bucket = pl.select(transform.size_bucket(pl.lit(instances))).item()
        if bucket in self.measured:
            source = f"{self.label}: measured rate of clusters of ~{bucket} instances ({self.interval})"
            return _rate_model(self.measured[bucket], source)
        if (law := self.law) is not None:
            (mtbf,), (low,), (high,) = law.predict_mtbf_hours([instances])
            source = (
                f"{self.label}: scaling law MTBF(N) = {law.mtbf_one_hours_:.0f} h / N^{law.alpha_:.2f} "
                f"at N = {instances}"
            )
            return projection.FailureModel.exponential(
                1 / (instances * mtbf), 1 / (instances * high), 1 / (instances * low), source
            )
        total = self.total
        if not total["failures"]:
            return projection.FailureModel.exponential(
                total["rate_upper_bound"],
                source=f"{self.label}: no failures yet in {total['exposure_node_hours']:,.0f} "
                "instance-hours; UPPER BOUND (95% one-sided, -ln 0.05 / T), a worst case",
            )
        return _rate_model(total, f"{self.label}: rate ({self.interval})")


def size_rates(analysis: FleetAnalysis, instance_type: str | None = None) -> SizeRates:
    """The fleet's :class:`SizeRates`. ``instance_type`` restricts all of it to nodes of that
    type: the same computation on their failures and hours (the fleet's interval method and
    dispersion, the law refitted on their clusters), from the tables :func:`analyze` made for each
    type (:func:`rates_by_instance_type`)."""
    tables, label = analysis.rates, "fleet"
    if instance_type is not None:
        tables, label = analysis.instance_type_rates.get(instance_type), f"{instance_type} nodes"
        if tables is None:
            known = ", ".join(analysis.instance_type_rates)
            raise ValueError(f"no nodes of instance type {instance_type!r} in the fleet; it has {known}")
    if analysis.exposure_estimated:
        label += " (exposure estimated)"
    measured = {
        int(r["size_bucket"]): r
        for r in tables.by_size_bucket.filter(pl.col("failures") > 0).iter_rows(named=True)
    }
    per_cluster = tables.cluster_mtbf
    law = None
    if sizes_that_failed(per_cluster) >= 2:
        law = (
            analysis.fits.scaling
            if instance_type is None and analysis.fits.scaling is not None
            else models.MTBFScaling().fit(
                per_cluster["instances"],
                per_cluster["failures"],
                per_cluster["exposure_cluster_hours"],
                dispersion=analysis.fits.count_dispersion,
            )
        )
    interval = f"{analysis.rates.interval_method} 95% interval"
    return SizeRates(label, interval, measured, law, tables.overall.row(0, named=True))


def _rate_model(row: dict, source: str) -> projection.FailureModel:
    """An exponential failure model from one row of a rate table: its rate and interval as they are."""
    return projection.FailureModel.exponential(
        row["rate_per_node_hour"], row["rate_ci_low"], row["rate_ci_high"], source
    )


def size_laws_agreement(analysis: FleetAnalysis) -> str:
    """One paragraph on the two size laws: empty unless both are fitted; when their alpha
    intervals do not overlap, that they disagree, the heterogeneity test behind it, and which
    law the projection uses."""
    count, gaps = analysis.fits.scaling, analysis.fits.size_regression
    if count is None or gaps is None:
        return ""
    (a_lo, a_hi), (b_lo, b_hi) = count.alpha_confidence_interval_, gaps.alpha_confidence_interval_
    if a_lo <= b_hi and b_lo <= a_hi:
        return "The two size laws agree (their 95% intervals for alpha overlap)."
    clusters = analysis.rates.cluster_mtbf
    test = models.ClusterHeterogeneity().fit(
        clusters["instances"], clusters["failures"], clusters["exposure_cluster_hours"], count
    )
    if test.df_ > 0:
        verdict = "rejects" if test.p_value_ < 0.05 else "does not reject"
        shown = (
            f"Pearson chi-square of the {clusters.height} clusters' failure counts around the count "
            f"law: {test.statistic_:.1f} on {test.df_} df (dispersion {test.dispersion_:.2f}, "
            f"p {'< 0.001' if test.p_value_ < 0.001 else f'= {test.p_value_:.3f}'}) {verdict} "
            "'clusters differ only by size'"
        )
    else:
        shown = "with only two clusters the heterogeneity test has no degrees of freedom"
    return (
        f"The two size laws disagree: alpha = {count.alpha_:.2f} (95% CI {a_lo:.2f}–{a_hi:.2f}) from "
        f"failure counts vs {gaps.alpha_:.2f} ({b_lo:.2f}–{b_hi:.2f}) from cluster-level gaps. "
        f"Why: clusters differ in more than size (heterogeneity), and the count fit weighs each "
        f"cluster by its exposure while the gap fit weighs it by its number of gaps; {shown}. "
        "The projection uses the count law (Poisson regression) for job sizes without a measured "
        "cluster of that size, and the measured rate where there is one."
    )


def repair_curve(repairs: RepairAnalysis) -> projection.RepairCurve | None:
    """The fleet's Kaplan–Meier repair-time curve (unresolved outages censored) with its mean's
    95% interval, for :func:`pipeline.projection.spare_advice`; None without a completed repair."""
    fit = repairs.times
    if fit is None:
        return None
    return projection.RepairCurve(
        fit.timeline_hours_, fit.survival_, tuple(fit.mean_confidence_interval_), fit.mean_restricted_
    )


def spares_for_job(
    repair: models.RepairTimes,
    instances: int,
    rate_per_instance_hour: float,
    probability: float = projection.SPARE_PROBABILITY,
) -> dict:
    """The 99% row of the job's spare table: the fewest hot spares with which a failure finds one
    free with at least ``probability`` (Engset's formula over N + S nodes at the fleet's rate and
    mean repair time, :class:`pipeline.projection.SparePool`; the MTTR is a lower bound when the
    longest repair is still open, ``mttr_restricted``)."""
    pool = projection.SparePool(instances, rate_per_instance_hour, repair.mean_hours_)
    spares = pool.spares_for(probability)
    return {
        "spares": spares,
        "probability": probability,
        "free_spare_probability": pool.free_spare_probability(spares),
        "mean_in_repair": pool.mean_in_repair(spares),
        "mttr_hours": repair.mean_hours_,
        "mttr_restricted": repair.mean_restricted_,
        "instances": instances,
        "rate_per_instance_hour": rate_per_instance_hour,
    }


def configured_jobs(
    analysis: FleetAnalysis, jobs, recovery: dict, recovery_source: str
) -> tuple[list[projection.JobSpec], dict[str, float] | None]:
    """The jobs of a run's config (``[[job]]`` entries) as specs on this fleet's failure model
    (:func:`failure_model_for`, by each job's size), and what ``recovery_source`` "measured" takes
    from the fleet (:func:`measured_recovery_hours`; empty when nothing was measured; None for
    "assumed"): what ``failcast run`` and ``failcast metrics`` project."""
    specs = [
        projection.job_spec_for_fleet(
            job, fleet_failure=lambda n: failure_model_for(analysis, n), recovery=recovery
        )
        for job in jobs
    ]
    measured = (
        measured_recovery_hours(analysis.repairs, analysis.jobs) if recovery_source == "measured" else None
    )
    return specs, measured


def measured_recovery_hours(repairs: RepairAnalysis, jobs: JobAnalysis) -> dict[str, float]:
    """What the warehouse measured, as ``projection.measured_recovery`` keywords: the mean repair
    time (MTTR) from outages, the mean detection and restart hours from training-job logs. Means,
    not medians: the wall-time model takes the mean cost per failure (expected wall time is linear
    in each failure's downtime), and a median would understate right-skewed restart times."""
    fit = repairs.times
    times = {} if fit is None else {"repair_hours": fit.mean_hours_}
    for row in transform.recovery_hours(jobs.recoveries).iter_rows(named=True):
        if row["measured"]:
            times[f"{row['measure']}_hours"] = row["mean_hours"]
    return times
