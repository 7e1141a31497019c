"""The report's sections in page order: a chart (or None), the table under it and a note.

Fleet sections come from a :class:`FleetAnalysis` (plus, for the public baselines, any other
analysed fleets passed in); projection sections from a :class:`JobOutlook`.
"""

from __future__ import annotations

from collections.abc import Mapping

import altair as alt
import polars as pl

from pipeline.analysis import (
    FleetAnalysis,
    JobAnalysis,
    NodeAnalysis,
    RateAnalysis,
    ReliabilityFits,
    RepairAnalysis,
    left_out_note,
    size_laws_agreement,
)
from pipeline.report import charts, comparisons, drivers, lemons, recovery, repairs
from pipeline.report.backtest import backtest_section
from pipeline.report.badput import badput_section
from pipeline.report.format import INTERVAL_NAMES, RATE_INTERVAL_SCOPE, interval_name
from pipeline.report.outlook import JobOutlook, checkpoint_chart, monte_carlo_chart, size_sweep_chart
from pipeline.report.planner import planner_section
from pipeline.report.planning import planning_sections
from pipeline.report.reliability import reliability_sections
from pipeline.report.section import Section


def _fits_table(fits: ReliabilityFits) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {
                "family": f,
                "mtbf_hours": m.mtbf_hours_,
                "mtbf_ci_low_hours": m.mtbf_confidence_interval_[0],
                "mtbf_ci_high_hours": m.mtbf_confidence_interval_[1],
                "aic": m.aic_,
            }
            for f, m in fits.node_fits.items()
        ]
    ).sort("aic")


def _scaling_note(analysis: FleetAnalysis) -> str:
    note = (
        f"Points: observed cluster MTBF with the 95% interval of the cluster's rate "
        f"({interval_name(analysis.rates.interval_method)}: the headline table's and the rate table's "
        "figures)."
    )
    for name, model, how in (
        (charts.COUNT_LAW, analysis.fits.scaling, "failure counts per cluster-hour"),
        (charts.AFT_LAW, analysis.fits.size_regression, "cluster-level times between failures"),
    ):
        if model is not None:
            low, high = model.alpha_confidence_interval_
            note += f" {name} fitted on {how}: α = {model.alpha_:.3f} (95% CI {low:.3f}–{high:.3f})."
    if analysis.fits.scaling is not None or analysis.fits.size_regression is not None:
        note += (
            f" Bands: each law's 95% interval, widened by the dispersion of every node's counts "
            f"(φ = {analysis.fits.count_dispersion:.2f}) when above 1."
        )
    agreement = size_laws_agreement(analysis)
    return f"{note} {agreement}" if agreement else note


def _rates_section(rates: RateAnalysis, nodes: NodeAnalysis, failures_left_out: pl.DataFrame) -> Section:
    """Rates per cluster; without failures the exposure and the one-sided upper bound are the news.
    ``nodes``: the dispersion test behind the interval; ``failures_left_out``: what the rates do
    not count, by reason."""
    note = (
        f"{lemons.interval_note(nodes, rates.interval_method)} {RATE_INTERVAL_SCOPE} "
        "Failures count while their node is in service (closed intervals)."
    )
    if not rates.overall["failures"].sum():
        note = (
            "No failures yet: each cluster's rate_upper_bound is the exact 95% one-sided UPPER BOUND "
            "(-ln 0.05 / T = 3.0 / T for T instance-hours), not a measured rate."
        )
    if left_out := left_out_note(failures_left_out):
        note += f" {left_out}."
    return Section(
        "failure-rate-by-cluster",
        "Failure rate by cluster",
        charts.rate_by_cluster_chart(rates),
        rates.by_cluster.select(
            "cluster_id",
            "failures",
            "exposure_node_hours",
            "exposure_gpu_hours",
            "rate_per_node_hour",
            "rate_ci_low",
            "rate_ci_high",
            "rate_upper_bound",
            "rate_per_gpu_hour",
        ),  # fmt: skip
        note=note,
    )


def fleet_sections(analysis: FleetAnalysis) -> list[Section]:
    rate_parts = (analysis.rates, analysis.nodes, analysis.failures_left_out)
    if not analysis.has_fits:  # no failure or too few gaps to fit: exposure, rates and bounds only
        return [_rates_section(*rate_parts), _job_section(analysis.jobs), badput_section(analysis.jobs)]
    trends = drivers.trend_table(analysis)
    flat = (trends["crow_verdict"] == "flat").sum()
    return [
        _rates_section(*rate_parts),
        Section(
            "failure-rate-over-time",
            "Failure rate over time",
            charts.rate_over_time_chart(analysis),
            note="Monthly rate per cluster; the band is its 95% interval, "
            f"{interval_name(analysis.rates.interval_method)} as in the rate table.",
        ),
        Section(
            "rate-trends",
            "Is the failure rate rising or falling? Trend tests per cluster",
            drivers.trend_chart(analysis),
            trends,
            note=f"Crow-AMSAA (MIL-HDBK-189) β on the failures' operating times: β = 1 (dashed) is a "
            f"constant rate. Laplace test beside it; verdicts at the 5% level. Flat in {flat} of "
            f"{trends.height} clusters; clusters with fewer than 2 failures are not tested.",
        ),
        Section(
            "root-causes",
            "Root causes of interruptions",
            charts.category_chart(analysis),
            charts.category_table(analysis),
            note=f"Rates with {interval_name(analysis.rates.interval_method)} 95% intervals; shares of all "
            "interruptions. " + charts.recorded_categories_note(analysis),
        ),
        Section(
            "root-causes-by-cluster",
            "Root causes per cluster",
            drivers.category_share_chart(analysis),
            drivers.category_share_table(analysis),
            note="Share of each cluster's interruptions by root cause with exact (Clopper–Pearson) 95% "
            "intervals; a cluster whose interval lies apart from the others has its own problem.",
        ),
        Section(
            "top-nodes",
            "Nodes with the most interruptions",
            drivers.top_nodes_chart(analysis),
            drivers.top_nodes(analysis),
            note=f"The {drivers.TOP_NODES} nodes with the most interrupting failures; the tick is what "
            "the node's cluster rate predicts for its hours in service. A node's rate has the exact Poisson "
            "(Garwood) 95% interval of its own count; whether it fails more than its cluster is the lemon "
            "test's question (below).",
        ),
        Section(
            "lemon-nodes",
            "Lemon nodes: failing more often than the rest of their cluster",
            None,
            lemons.lemon_table(analysis.nodes.lemons) if analysis.nodes.lemons.lemons_.height else None,
            note=lemons.lemon_note(analysis.nodes.lemons),
        ),
        Section(
            "time-between-failures",
            "Time between failures per node: Kaplan–Meier, Nelson–Aalen and fitted models",
            alt.hconcat(charts.survival_chart(analysis.fits), charts.cumulative_hazard_chart(analysis.fits)),
            _fits_table(analysis.fits),
            note=f"Left: Kaplan–Meier with its 95% band; best family by AIC: {analysis.fits.best_family}. "
            "Right: Nelson–Aalen cumulative hazard; the dashed line is the exponential fit (constant "
            "hazard)."
            + "".join(f" {m.mtbf_note_}." for m in analysis.fits.node_fits.values() if m.mtbf_note_),
        ),
        Section(
            "mtbf-vs-cluster-size",
            "Cluster MTBF against cluster size: two views",
            charts.scaling_chart(analysis),
            charts.size_law_table(analysis) if charts.size_laws(analysis.fits).height else None,
            note=_scaling_note(analysis),
        ),
        _job_section(analysis.jobs),
        badput_section(analysis.jobs),
        *reliability_sections(analysis),
        *([backtest] if (backtest := backtest_section(analysis.jobs)) else []),
        *repair_sections(analysis.repairs),
        *recovery_sections(analysis.jobs, analysis.repairs),
    ]


def recovery_sections(jobs: JobAnalysis, repairs: RepairAnalysis) -> list[Section]:
    """Measured against assumed recovery times; without training-job logs a note naming them."""
    title = "Recovery times: measured against assumed"
    if not recovery.has_job_recoveries(jobs):
        return [
            Section(
                "recovery-times",
                title,
                None,
                note="No training-job interruption: detection and restart times stay assumed. Ingest "
                "PyTorch job logs (failcast ingest --format training-log) to measure them.",
            )
        ]
    return [
        Section(
            "recovery-times",
            title,
            None,
            recovery.recovery_table(jobs, repairs),
            note=recovery.recovery_note(jobs),
        )
    ]


def repair_sections(part: RepairAnalysis) -> list[Section]:
    title = "Outages and repair: how long nodes stay down"
    if not repairs.has_repairs(part):
        return [
            Section(
                "repair-times",
                title,
                None,
                note="No outage has an end (no resolved_at, no return in the inventory): repair times, "
                "downtime and availability need them.",
            )
        ]
    return [
        Section(
            "repair-times",
            title,
            repairs.repair_curve_chart(part),
            repairs.availability_table(part),
            note=repairs.repair_note(part),
        ),
        Section(
            "downtime-causes",
            "Top downtime causes",
            None,
            repairs.downtime_causes(part),
            note="Node-hours of known downtime (outage start to end, within the window) by root cause.",
        ),
    ]


def _job_section(jobs: JobAnalysis) -> Section:
    title = "Job interruptions from Slurm against node rate × nodes"
    if jobs.interruptions is None or jobs.interruptions.height == 0:
        return Section(
            "job-interruptions",
            title,
            None,
            note="No Slurm job records on clusters with an inventory: ingest sacct output "
            "(failcast ingest --format sacct) to compare job interruptions with node failures.",
        )
    return Section(
        "job-interruptions",
        title,
        comparisons.job_interruption_chart(jobs.interruptions),
        jobs.interruptions,
        note="Points: observed interruptions per job-hour by node-count bucket (exact 95% CI). Dashed: "
        "the cluster's node rate × nodes. Above the line, jobs die more often than node failures explain.",
    )


def baseline_section(rates: RateAnalysis, others: Mapping[str, RateAnalysis] | None = None) -> Section:
    table = comparisons.baselines(rates, others)
    return Section(
        "public-baselines",
        "Public baselines: this fleet beside published GPU fleets",
        comparisons.baseline_chart(rates, table),
        # the baselines' columns (datasets.public_baselines) but the chart's and the MTBF's interval
        table.drop("series", "label", "mtbf_ci_low_hours", "mtbf_ci_high_hours").with_columns(
            pl.col("interval").replace(INTERVAL_NAMES)
        ),
        note="Interruptions per instance-hour (one instance = one node), "
        f"{comparisons.baseline_ci_words(table)}; published counts from OPT-175B, MPT-7B and Llama 3.1 "
        "(docs/public-data.md), whose dispersion is not published. This fleet's rows are its rate "
        "table's. MTBF is that of the whole fleet or cluster.",
    )


def projection_sections(outlook: JobOutlook) -> list[Section]:
    return [
        Section(
            "projection-vs-cluster-size",
            "Projected training days and cost against cluster size",
            size_sweep_chart(outlook.size_sweep, outlook.instances),
            outlook.size_sweep.select(
                "instances",
                "mode",
                "checkpoint_interval_hours",
                "status",
                "expected_days",
                "cost_usd",
                "goodput",
                "optimal_interval_hours",
                "optimal_status",
                "optimal_expected_days",
                "optimal_cost_usd",
                "optimal_goodput",
            ),  # fmt: skip
            note=f"Same work, more or fewer instances; dotted rule: the configured {outlook.instances}. "
            "Solid lines: the configured checkpoint interval; dashed: the interval re-optimised for "
            "each size's cluster MTBF. Where the job cannot finish (goodput < 1%) the table says so "
            "and the chart has no point, instead of an astronomical number of days.",
        ),
        Section(
            "monte-carlo-days",
            "Monte Carlo distribution of training days",
            monte_carlo_chart(outlook.days_histogram, outlook.modes),
            outlook.modes.select("mode", "p10_days", "p50_days", "p90_days", "expected_days")
            if outlook.failure_models is None
            else outlook.failure_models,
            note="Dashed rules: P10, P50 and P90 of each mode (exponential failures). "
            + outlook.failure_model_note,
        ),
        Section(
            "checkpoint-interval",
            "Checkpoint interval: expected training days",
            checkpoint_chart(outlook.checkpoint_curve, outlook.modes),
            outlook.modes.select(
                "mode",
                "checkpoint_interval_hours",
                "expected_days",
                "optimal_interval_hours",
                "optimal_expected_days",
            ),  # fmt: skip
            note="Diamond: the optimum interval; open circle: the configured interval.",
        ),
    ]


def _projection_parts(analysis: FleetAnalysis, outlook: JobOutlook) -> list[Section]:
    """The planner first (the question people come with), then the configured job's charts."""
    planner = planner_section(analysis, outlook)
    return ([planner] if planner else []) + projection_sections(outlook) + planning_sections(outlook)


def sections(
    analysis: FleetAnalysis,
    projection: JobOutlook | None = None,
    baselines: Mapping[str, FleetAnalysis] | None = None,
) -> list[Section]:
    """Every section in page order; ``baselines`` adds other analysed fleets (e.g. ``{"LANL":
    ...}``) to the public-baselines section, which always holds the published GPU fleets (and is
    left out while the fleet has no failure: a rate of 0 has no place on its log axis)."""
    return (
        fleet_sections(analysis)
        + (  # no rate to place without a failure
            [baseline_section(analysis.rates, {k: v.rates for k, v in (baselines or {}).items()})]
            if analysis.has_failures
            else []
        )
        + (_projection_parts(analysis, projection) if projection else [])
    )
