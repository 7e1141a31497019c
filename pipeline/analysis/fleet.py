"""``analyze``: read the warehouse once, run the transforms and fit the models, and return one
:class:`FleetAnalysis`."""

from __future__ import annotations

import dataclasses
import functools
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

import numpy as np
import polars as pl

from pipeline import models, record_checks, transform, warehouse
from pipeline.analysis.counted import CountedFailures, counted_failure_views
from pipeline.analysis.failures import (
    NodeAnalysis,
    RateAnalysis,
    cluster_mtbf,
    left_out_warning,
    node_evidence,
    outage_exposure,
    read_failures,
    sizes_that_failed,
    trend_tests,
)
from pipeline.analysis.fits import ReliabilityFits
from pipeline.analysis.instance_types import InstanceTypeRates, rates_by_instance_type
from pipeline.analysis.jobs import (
    JobAnalysis,
    job_backtest,
    job_badput,
    job_interruptions,
    read_job_recoveries,
    read_jobs,
)
from pipeline.analysis.options import DEFAULT_OPTIONS, AnalysisOptions, before_window
from pipeline.analysis.repairs import RepairAnalysis, repair_analysis
from pipeline.transform import exposure as exposure_rules

PROJECTED_SIZES = (256, 512, 2048, 16384)
RATE_COLUMNS = ("cluster_id", "node_id", "timestamp_utc", "category", "failure_class", "interrupting")
"""The failures' columns the rate tables, shares, lemons, left-out counts and the counted failures'
views (:func:`counted_failure_views`) read from the match."""
COUNTED_COLUMNS = (*RATE_COLUMNS, "_interval")
"""The match's columns the counted failures' views, operating times and gaps read."""
RATE_TABLES = (
    (["cluster_id"], None),
    ([], None),
    (["failure_class"], None),
    (["cluster_id"], "month"),
    (["size_bucket"], None),
)
"""(by, period) of ``rates_by_cluster``, ``rates_overall``, ``rates_by_category``, ``rates_by_month``
and ``rates_by_size_bucket``."""
MIN_DISTINCT_GAPS = 2  # distinct observed times between failures the fits need


@dataclass
class FleetAnalysis:
    """Everything the report shows: the rates and what they count on the whole analysis, the rest
    in typed parts (issue 30) that their consumers take instead of the whole:
    ``fits`` (:class:`ReliabilityFits`: times between failures, fitted families, Kaplan–Meier,
    the laws of MTBF against cluster size), ``nodes`` (:class:`NodeAnalysis`: rates by node, the
    lemon test, the dispersion test of the rate intervals), ``repairs`` (:class:`RepairAnalysis`:
    repair summaries, the repair-time fit and curves) and ``jobs`` (:class:`JobAnalysis`: Slurm
    job rates, backtest, training-job recoveries, badput).

    ``exposure_estimated`` is True when the inventory was inferred from the logs (every rate and
    MTBF then rests on guessed service intervals). Rates, fits, shares and trend tests count
    node interruptions (:func:`pipeline.analysis.counts.node_interruptions`: a node's faults within
    ``interruption_window_minutes`` are one failure, by its root cause; the columns of
    ``FAILURE_COLUMNS`` only); with a window of None the interrupting incidents are counted as
    they are. ``incidents`` is the warehouse's whole table, one row per fault, as a lazy frame
    (:func:`pipeline.warehouse.scan_incidents`: collect what you need while the connection is
    open); nothing in the analysis loads it.
    Every table and plot that shows a count of failures (rates, trend tests, and ``counted``:
    :class:`CountedFailures`, the mean cumulative function, the Duane points and the recorded
    categories behind each class, as aggregates of the matched rows) counts the same ones: the
    interruptions in service on the rate exposure; trend tests and Duane points place them on each
    cluster's calendar service clock (:func:`pipeline.transform.failure_operating_times`).
    Times between failures alone keep the failures during a node's known repair: the fits estimate
    the failure process on the calendar clock, which does not stop for repairs.
    ``failures_left_out`` counts the failures no statistic counts, by reason
    (:func:`pipeline.transform.failures_left_out`: before the window start, after its end, node
    without a service interval, node out of service); :func:`left_out_note` says it in one line.
    ``late_records`` names the clusters whose records seem to start after their service
    (:func:`pipeline.record_checks.late_records`: that time then counts as failure-free exposure).
    ``left_out_warning`` (or None) says when at least as many failures are left out as counted
    (:func:`left_out_warning`); every output shows it first.
    A fleet with no failures in service yet (``has_failures`` False) has exposure, rates (0
    failures, with the one-sided ``rate_upper_bound``) and trend rows but nothing to fit; so has
    a fleet with fewer than ``MIN_DISTINCT_GAPS`` distinct observed times between failures (its
    first failure, say): ``has_fits`` False, ``too_few_gaps`` says why.
    The rate tables carry ``rates.interval_method`` intervals: "overdispersed" (quasi-Poisson widened by
    ``nodes.dispersion_test.dispersion()``) or "exact"; by default "overdispersed" exactly when
    the Pearson test of the non-lemon nodes' counts rejects Poisson at 5% (:func:`node_evidence`).
    Rates divide by the uptime exposure (the outages' downtime removed from the calendar service
    intervals, :func:`pipeline.transform.uptime_intervals`) when ``exposure_basis`` is "uptime",
    else by the calendar one. Gaps and trend tests run on the calendar intervals.
    The result holds aggregates, not rows as long as the history (issue 27): the interruptions,
    the uptime pieces, the outages and the calendar service intervals stay in :func:`analyze`;
    ``instance_type_rates`` holds the rate tables of each instance type's nodes
    (:func:`pipeline.analysis.rates_by_instance_type`, what :func:`pipeline.analysis.size_rates`
    reads for a job on one type). What needs rows reads them again (:func:`service_window`,
    :func:`read_failures`, :func:`rate_exposure`; :func:`outage_exposure` keeps the outages in DuckDB).
    ``options`` are the :class:`AnalysisOptions` it ran with, ``until`` filled in;
    ``before_window`` counts what the window start left out besides failures
    (:func:`pipeline.analysis.options.before_window`).
    """

    observed_until: datetime
    incidents: pl.LazyFrame
    files: pl.DataFrame
    rejects: pl.DataFrame
    exposure_estimated: bool
    interruption_window_minutes: float | None
    failures_left_out: pl.DataFrame
    exposure_basis: str
    counted: CountedFailures
    rates: RateAnalysis
    instance_type_rates: dict[str, InstanceTypeRates]
    fits: ReliabilityFits
    nodes: NodeAnalysis
    repairs: RepairAnalysis
    jobs: JobAnalysis
    late_records: tuple[record_checks.LateRecords, ...] = ()
    left_out_warning: str | None = None
    options: AnalysisOptions = DEFAULT_OPTIONS
    before_window: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def fleet_rate(self) -> models.PoissonRate:
        row = self.rates.overall.row(0, named=True)
        return models.PoissonRate().fit(row["failures"], row["exposure_node_hours"])

    @property
    def has_failures(self) -> bool:
        """True when at least one failure counts (in service, in the window)."""
        return bool(self.rates.overall["failures"].sum())

    @property
    def has_fits(self) -> bool:
        """True when the times between failures were fitted (``node_fits``, ``kaplan_meier``, ...):
        at least ``MIN_DISTINCT_GAPS`` distinct observed gaps."""
        return self.fits.fitted

    @property
    def too_few_gaps(self) -> str:
        """Why nothing was fitted though failures count (empty when fitted or no failure)."""
        if self.has_fits or not self.has_failures:
            return ""
        gaps = self.fits.node_durations.filter("observed")["count"].sum()
        return (
            f"too few times between failures to fit ({gaps} observed gap{'s' if gaps != 1 else ''}, "
            f"at least {MIN_DISTINCT_GAPS} different ones are needed): rates and bounds only"
        )


def _projection(predict, sizes: np.ndarray) -> pl.DataFrame:
    mtbf, low, high = predict(sizes)
    return pl.DataFrame(
        {"instances": sizes, "mtbf_hours": mtbf, "mtbf_ci_low_hours": low, "mtbf_ci_high_hours": high}
    )


def require_inventory(intervals: int) -> None:
    """Rates, fits and the lemon test divide by node-hours in service: without an inventory (its
    ``intervals`` rows) there are none, and a rate of "failures / 0" must stop with the fix, not
    print 0% or crash."""
    if intervals == 0:
        raise ValueError(
            "the warehouse has no inventory: ingest an inventory file (cluster_id, node_id, "
            "instance_type, gpus_per_node, in_service_from, in_service_to), or re-ingest the failures "
            "with --estimate-exposure GPUS_PER_NODE to estimate it from the nodes seen"
        )


def require_service(
    in_service: bool, first: datetime, last: datetime | None, options: AnalysisOptions
) -> None:
    """A window in which no node was in service (``in_service`` False: no service interval is left
    in the resolved window) has no hours to divide by: stop with one line that says where the
    service lies (``first``: the first interval's start; ``last``: the last one's end, None while a
    node is still in service) and which end of the window to move, not a rate "at most inf" or a
    lemon test of 0 nodes."""
    if in_service:
        return
    window = (
        f"in the window ({options.window_text})"
        if options.since
        else f"before the window's end ({options.until:%Y-%m-%d %H:%M} UTC)"
    )
    if options.since is None or first >= options.until:
        where = f"the first one enters service {first:%Y-%m-%d %H:%M}; a later --until"
    elif last is not None and last <= options.since:
        where = f"the last one leaves service {last:%Y-%m-%d %H:%M}; an earlier --since"
    else:
        where = "the window lies between the service intervals; a wider one"
    raise ValueError(f"no node was in service {window}: {where} has instance-hours to rate")


class WindowCheck(NamedTuple):
    """What every command that counts in a window knows before it reads a row
    (:func:`checked_window`)."""

    options: AnalysisOptions
    """With ``until`` filled in (:meth:`AnalysisOptions.resolved`)."""
    exposure_estimated: bool
    """True when the inventory was inferred from the logs (:func:`pipeline.transform.exposure_estimated`)."""


class ServiceWindow(NamedTuple):
    """What every command that counts in a window starts from (:func:`service_window`)."""

    inventory: pl.DataFrame
    """The inventory's columns the exposure reads (:data:`INVENTORY_COLUMNS`)."""
    options: AnalysisOptions
    """With ``until`` filled in (:meth:`AnalysisOptions.resolved`)."""
    exposure: pl.DataFrame
    """The calendar service intervals in the window (:func:`pipeline.transform.exposure_intervals`)."""


INVENTORY_COLUMNS = (*exposure_rules.INTERVAL_COLUMNS, "estimated")
"""The inventory's columns a command reads as rows: the service intervals' and ``estimated``."""
# what the checks and the resolved window's end read of the inventory: aggregates, no rows
_INVENTORY_SPAN = """
SELECT count(*) AS intervals, min(in_service_from_utc) AS first_start,
    CASE WHEN count(*) = count(in_service_to_utc) THEN max(in_service_to_utc) END AS last_end,
    coalesce(bool_or(estimated), false) AS estimated,
    max(in_service_from_utc) AS in_service_from_utc, max(in_service_to_utc) AS in_service_to_utc
FROM inventory
"""


def checked_window(con, options: AnalysisOptions, *, inventory_required: bool = True) -> WindowCheck:
    """The options resolved on the warehouse behind ``con``, after the two checks every rate, fit,
    lemon test, backtest and report needs first: an inventory (:func:`require_inventory`;
    ``inventory_required`` False for repair times, which need none) and some service in the
    window (:func:`require_service`). Aggregates in DuckDB: no inventory row is read (``failcast
    rates`` counts in DuckDB from here, :class:`pipeline.analysis.counts.FailureCounts`)."""
    span = con.sql(_INVENTORY_SPAN).pl()
    intervals, first, last, estimated = span.row(0)[:4]
    if inventory_required:
        require_inventory(intervals)
    options = options.resolved(con, span.select("in_service_from_utc", "in_service_to_utc"))
    if intervals:
        in_service = exposure_rules.has_service(con, options.until, options.since)
        require_service(in_service, first, last, options)
    return WindowCheck(options, bool(estimated))


def service_window(con, options: AnalysisOptions, *, inventory_required: bool = True) -> ServiceWindow:
    """The inventory (:data:`INVENTORY_COLUMNS` only), the options resolved on it and the service
    intervals in their window, after the checks of :func:`checked_window`."""
    options, _ = checked_window(con, options, inventory_required=inventory_required)
    inventory = warehouse.frame(con.sql(f"SELECT {', '.join(INVENTORY_COLUMNS)} FROM inventory"))  # noqa: S608 - literal columns
    exposure = transform.exposure_intervals(inventory, options.until, options.since)
    return ServiceWindow(inventory, options, exposure)


def _duckdb_share(analysis):
    """Run ``analysis`` with DuckDB's cap lowered while it reads (:func:`pipeline.warehouse.reading`):
    its rows live in Polars, and what DuckDB keeps after a read would add to them."""

    @functools.wraps(analysis)
    def reading(con, options: AnalysisOptions = DEFAULT_OPTIONS) -> FleetAnalysis:
        with warehouse.reading(con):
            return analysis(con, options)

    return reading


@_duckdb_share
def analyze(con, options: AnalysisOptions = DEFAULT_OPTIONS) -> FleetAnalysis:
    """Run every transform and fit on the warehouse behind ``con``, as ``options`` say
    (:class:`AnalysisOptions`; the result's ``options`` have the window's end filled in).

    Failures are node interruptions: a node's interrupting incidents closer than
    ``interruption_window_minutes`` count once (None: every incident counts). The window
    ``[since, until]`` clips the service intervals; failures before ``since`` and after ``until``
    are left out and counted by reason (``failures_left_out``), and so are outages that began and
    jobs that started before ``since`` (``before_window``).

    Gaps are rounded to a relative grid (``relative_resolution`` 1e-3: each gap at most 0.05% off,
    a minute or a month, see :mod:`pipeline.transform.durations`) and aggregated before fitting,
    which bounds the rows lifelines sees whatever the fleet's size; ``None`` fits the exact
    durations. See bench/RESULTS.md "Fitting" for the speed-up and the shift in estimates.

    ``interval`` ("exact", "overdispersed", "auto") picks the rate intervals (see
    :func:`node_evidence`); ``lemon_fdr`` is the lemon test's false-discovery rate.
    Rates divide by uptime (``exposure_basis`` "uptime": the outages' downtime removed, see
    :func:`rate_exposure`) or by calendar service time ("calendar").
    """
    incidents = warehouse.scan_incidents(con)
    inventory, options, exposure = service_window(con, options)
    end, since, first_gap = options.until, options.since, options.first_gap
    estimated = transform.exposure_estimated(inventory)
    failures = read_failures(con, window_minutes=options.interruption_window_minutes, detail=False)
    # outages of every failure (one that began before the window can still hold a node down in
    # it), kept in DuckDB: the uptime pieces, the repair statistics' groups and the count before
    # the window come back, not the outages' rows
    at_risk, outage_groups, outages_before = outage_exposure(
        failures, inventory, exposure, end, options.exposure_basis, since
    )
    del inventory  # as many rows as the exposure: an availability trace has one per up-interval
    repairs = repair_analysis(outage_groups, exposure, at_risk, options.exposure_basis)  # aggregates only
    del outage_groups
    # Memory (bench/RESULTS.md, issue 27): every row frame below is as long as the failures or the
    # intervals, so each is built from the columns its statistics use, and dropped once they ran.
    # Which failures count, matched to their interval once for every rate:
    with transform.Match(at_risk, failures=failures) as match:
        matched = match.matched()
        left_out = match.left_out(end, since)
    in_service = transform.in_service_rows(
        failures.select(RATE_COLUMNS), at_risk, matched, with_interval=True
    )
    del matched
    by_node, lemons, dispersion_check = node_evidence(
        failures, at_risk, lemon_fdr=options.lemon_fdr, in_service=in_service
    )
    phi = dispersion_check.dispersion(options.interval)

    by_cluster, overall, by_category, by_month, by_size_bucket = (
        transform.failure_rates(
            failures, at_risk, by=by, period=period, dispersion=phi, in_service=in_service
        )
        for by, period in RATE_TABLES
    )
    shares = transform.category_shares(failures, at_risk, by=["cluster_id"], in_service=in_service)
    type_rates = rates_by_instance_type(failures, at_risk, exposure, in_service, phi)  # size_rates by type
    failures = options.in_window(failures)  # those before it are counted in left_out
    # from here on the rows are read by interval number (issue 27): the match's columns the views,
    # trend tests and gaps read, not the rate attributes
    calendar_match = at_risk is exposure
    del at_risk
    in_service = in_service.select(*COUNTED_COLUMNS)
    # trend tests count the failures the rates count (one during a known repair of its node is
    # part of that outage, not a new failure), on the calendar clock
    operating_times = transform.failure_operating_times(failures, exposure, in_service=in_service)
    trends = trend_tests(operating_times, exposure)
    # the failures the rates count, each once, in order: the match's rows, not a second copy
    shown = counted_failure_views(in_service, exposure, operating_times, trends)
    del operating_times

    # the same match on the calendar intervals, for gaps (failures keep coming on the calendar
    # clock while a node is in repair: the renewal process the fits estimate)
    if calendar_match:
        calendar = in_service.select(*transform.INTERVAL_MATCH_COLUMNS)
        del in_service
    else:
        del in_service
        calendar = transform.interval_matches(failures, exposure)
    gaps = transform.times_between_failures(failures, exposure, first_gap=first_gap, in_service=calendar)
    if first_gap == "drop" and gaps["observed"].sum() < 2:
        # at most one node failed twice in one window: too few full gaps to fit two parameters,
        # the first gaps are all there is
        first_gap = "keep"
        gaps = transform.times_between_failures(failures, exposure, first_gap=first_gap, in_service=calendar)
    durations = transform.aggregate_durations(gaps, relative_resolution=options.relative_resolution)
    del gaps
    cluster_durations = transform.aggregate_durations(
        transform.times_between_failures(
            failures, exposure, level="cluster", first_gap=first_gap, in_service=calendar
        ),
        by=["cluster_id", "instances"],
        relative_resolution=options.relative_resolution,
    )
    del calendar
    args = (durations["duration_hours"], durations["observed"], durations["count"])
    # no failure yet, or fewer than two distinct times between failures (a new fleet's first
    # failure): two-parameter fits are degenerate (shape -> infinity) or fail, so nothing is fitted
    fitted = durations.filter("observed")["duration_hours"].n_unique() >= MIN_DISTINCT_GAPS
    fits = models.fit_families(*args) if fitted else {}

    per_cluster = cluster_mtbf(by_cluster, exposure)
    sizes = np.array(sorted({*PROJECTED_SIZES, *per_cluster["instances"].round().to_list()}), dtype=float)
    dispersion = transform.dispersion_test(by_node).phi  # every node: the scaling law's spread
    scaling, projection, regression, regression_projection = None, pl.DataFrame(), None, pl.DataFrame()
    if fitted and sizes_that_failed(per_cluster) >= 2:
        scaling = models.MTBFScaling().fit(
            per_cluster["instances"],
            per_cluster["failures"],
            per_cluster["exposure_cluster_hours"],
            dispersion=dispersion,
        )
        projection = _projection(scaling.predict_mtbf_hours, sizes)
    if cluster_durations.filter("observed")["instances"].n_unique() >= 2:
        with suppress(models.NotConverged):  # the second view only: the count law stands alone
            regression = models.WeibullSizeRegression().fit(
                cluster_durations["instances"],
                cluster_durations["duration_hours"],
                cluster_durations["observed"],
                cluster_durations["count"],
                dispersion=dispersion,
            )
            regression_projection = _projection(regression.predict_mtbf_hours, sizes)

    jobs = job_interruptions(con, by_cluster, since=since)
    all_recoveries = read_job_recoveries(con)
    recoveries = options.in_window(all_recoveries, "detected_utc")
    backtest = job_backtest(con, failures, exposure, since=since)

    return FleetAnalysis(
        observed_until=end,
        incidents=incidents,
        files=warehouse.table(con, "ingested_files"),
        rejects=warehouse.table(con, "rejects"),
        counted=shown,
        exposure_estimated=estimated,
        interruption_window_minutes=options.interruption_window_minutes,
        rates=RateAnalysis(
            overall=overall,
            by_cluster=by_cluster,
            by_category=by_category,
            by_month=by_month,
            by_size_bucket=by_size_bucket,
            category_shares=shares,
            trend_tests=trends,
            cluster_mtbf=per_cluster,
            interval_method=dispersion_check.method(options.interval),
        ),
        fits=ReliabilityFits(
            node_fits=fits,
            best_family=models.best_by_aic(fits) if fitted else None,
            kaplan_meier=models.KaplanMeier().fit(*args) if fitted else None,
            nelson_aalen=models.NelsonAalen().fit(*args) if fitted else None,
            node_durations=durations,
            cluster_durations=cluster_durations,
            cluster_kaplan_meier={
                cluster: models.KaplanMeier().fit(g["duration_hours"], g["observed"], g["count"])
                for (cluster,), g in cluster_durations.group_by("cluster_id")
                if g["observed"].any()
            },
            first_gap=first_gap,
            count_dispersion=dispersion,
            scaling=scaling,
            scaling_projection=projection,
            size_regression=regression,
            size_regression_projection=regression_projection,
        ),
        instance_type_rates=type_rates,
        nodes=NodeAnalysis(by_node, lemons, dispersion_check),
        failures_left_out=left_out,
        exposure_basis=options.exposure_basis,
        repairs=repairs,
        jobs=JobAnalysis(jobs, backtest, recoveries, job_badput(con, failures, recoveries, since=since)),
        late_records=record_checks.late_records(con),
        left_out_warning=left_out_warning(con, left_out, int(overall["failures"].sum())),
        options=options,
        before_window=before_window(since, outages_before, read_jobs(con), all_recoveries),
    )
