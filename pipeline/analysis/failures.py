"""Failures and their exposure, read from the warehouse, and the per-cluster and per-node
evidence built on them (MTBF per cluster, trend tests, lemons and dispersion)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

import polars as pl

from pipeline import models, record_checks, transform, warehouse
from pipeline.analysis import counts, downtime
from pipeline.analysis.options import LEMON_FDR

FAILURE_COLUMNS = (
    "cluster_id",
    "node_id",
    "timestamp_utc",
    "category",
    "failure_class",
    "interrupting",
    "resolved_at_utc",
)


def read_failures(
    con,
    *,
    interrupting_only: bool = True,
    window_minutes: float | None = transform.INTERRUPTION_WINDOW_MINUTES,
    attributes: Sequence[str] = (),
    detail: bool = True,
) -> pl.DataFrame:
    """The failures that rates, gaps, shares and trends count, read from the warehouse behind
    ``con`` with only the columns they use (``FAILURE_COLUMNS``, plus one column per key of
    ``attributes``: the incidents' extra input columns, text, null where absent) and only
    interrupting incidents (all with ``interrupting_only`` False), collapsed into node
    interruptions unless ``window_minutes`` is None: a node's interrupting incidents within
    ``window_minutes`` of an interruption's first one are that interruption, with its first
    incident's columns plus ``categories``, ``faults`` and ``last_fault_utc`` (``detail`` False:
    without them; :func:`pipeline.analysis.counts.node_interruptions`, the one implementation of
    the rule).

    Why the window: one node failure often logs several faults within minutes (XID 79, then the
    NCCL watchdog's timeout; a machine check, then the link going down). The warehouse collapses
    repeats of one fault (category and GPU); counting the different faults of one failure as
    separate failures inflates rates and adds near-zero gaps that push the Weibull shape down. The
    default 30 minutes is PyTorch's common NCCL watchdog timeout, the longest usual delay from a
    fault to its consequence; two independent failures of one node that close are rare (at a
    2 000 h MTBF and shape 0.85, about 1 gap in 1 000). The window is anchored at the first fault,
    not chained from fault to fault, so a run of echoes cannot swallow a later independent failure.

    Why in DuckDB: the whole incidents table of a 10 M-incident fleet takes GBs in Polars
    (messages, ids); the selection, filter, sort and collapse run inside DuckDB, within its memory
    cap, and Polars receives one row per interruption.
    """
    if window_minutes is None:
        columns = [*FAILURE_COLUMNS, *(["attributes"] if attributes else [])]
        frame = warehouse.read_incidents(con, columns, interrupting_only=interrupting_only)
        return _with_attributes(frame, attributes)
    frame = counts.node_interruptions(con, window_minutes=window_minutes, detail=detail or bool(attributes))
    frame = _with_attributes(frame if attributes else frame.drop("attributes", strict=False), attributes)
    details = ("categories", "faults", "last_fault_utc") if detail else ()
    return frame.select(*FAILURE_COLUMNS, *attributes, *details)


def _with_attributes(frame: pl.DataFrame, attributes: Sequence[str]) -> pl.DataFrame:
    """``frame`` with its JSON ``attributes`` column replaced by one text column per key."""
    if not attributes:
        return frame
    parsed = pl.col("attributes").str.json_decode(pl.Struct({k: pl.String for k in attributes}))
    return frame.with_columns(parsed.struct.field(*attributes)).drop("attributes")


def rate_exposure(
    con,
    failures: pl.DataFrame,
    inventory: pl.DataFrame,
    exposure: pl.DataFrame,
    observed_until: datetime,
    basis: str = "uptime",
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(exposure that rates divide by, outages): the outages of ``failures``
    (:func:`pipeline.analysis.downtime.outages`, on the connection ``con``), and the calendar
    ``exposure`` with their downtime removed for ``basis`` "uptime" (MTBF = uptime / failures),
    ``exposure`` itself for "calendar". ``exposure`` itself too when no recorded downtime falls
    inside a service interval (no outage has a recorded end, or, as in an availability trace, a
    node is out of service while it is down): callers then match failures to one set of
    intervals, not two equal ones (:func:`pipeline.analysis.analyze`; at 5 M intervals each match
    holds ~0.5 GB)."""
    _check_basis(basis)
    outages = downtime.outages(con, failures, inventory, observed_until)
    if basis == "calendar":
        return exposure, outages
    return transform.uptime_intervals(exposure, outages), outages


def _check_basis(basis: str) -> None:
    if basis not in transform.EXPOSURE_BASES:
        raise ValueError(
            f"unknown exposure basis {basis!r}; use one of {', '.join(transform.EXPOSURE_BASES)}"
        )


class OutageExposure(NamedTuple):
    """What :func:`outage_exposure` returns: the exposure rates divide by, and what the repair
    statistics read of the outages instead of their rows."""

    at_risk: pl.DataFrame
    """As :func:`rate_exposure`'s first (``exposure`` itself when nothing was removed)."""
    repair_groups: dict[tuple[str, ...], pl.DataFrame]
    """The outages that began in the window, grouped for each repair summary
    (:func:`pipeline.analysis.downtime.repair_groups`): what :func:`pipeline.analysis.repair_analysis`
    takes."""
    outages_before_window: int
    """How many outages began before the window start (0 without one)."""


def outage_exposure(
    failures: pl.DataFrame,
    inventory: pl.DataFrame,
    exposure: pl.DataFrame,
    observed_until: datetime,
    basis: str = "uptime",
    observed_since: datetime | None = None,
) -> OutageExposure:
    """:func:`rate_exposure` for ``analyze``, in one DuckDB pass: the outages of ``failures`` stay
    a table in one in-memory DuckDB (:func:`pipeline.warehouse.computing`, its cap lowered as
    :func:`pipeline.warehouse.reading` does), where the uptime pieces are cut from their windows
    (:func:`pipeline.transform.uptime_intervals`) and the repair statistics' groups and the count
    before the window are taken (:func:`pipeline.analysis.downtime.repair_groups`). The same rules
    (:data:`pipeline.analysis.downtime.OUTAGES`, :data:`pipeline.transform.matching.UPTIME_PIECES`)
    on the same rows give the same exposure and statistics as :func:`rate_exposure`'s.

    Why: at 10 M availability rows the outages are 5 M rows; read back into Polars with their
    columns and copied into a second DuckDB for the pieces they took +2.1 GB (issue 27). Only the
    pieces (when they differ from the intervals) and the groups come back now."""
    _check_basis(basis)
    # the categories travel through the outages' sorts as numbers (a byte each, not a string),
    # named again in the groups
    categories = failures["category"].unique().drop_nulls().sort()
    code = pl.col("category").cast(pl.Enum(categories)).to_physical().alias("_category")
    columns = failures.select("cluster_id", "node_id", "timestamp_utc", "resolved_at_utc", code)
    with (
        warehouse.computing() as con,
        warehouse.reading(con),
        downtime.outage_table(con, columns, inventory, observed_until, columns=["_category"]),
    ):
        at_risk = (
            exposure
            if basis == "calendar"
            else transform.uptime_intervals(exposure, downtime.OUTAGE_TABLE, con, downtime.OUTAGE_NODES)
        )
        groups, before = downtime.repair_groups(con, observed_since)
    by_category = groups[("category",)]
    groups[("category",)] = by_category.select(
        categories.gather(by_category["_category"]).alias("category"), pl.exclude("_category")
    )
    return OutageExposure(at_risk, groups, before)


def left_out_note(left_out: pl.DataFrame) -> str | None:
    """One line saying how many failures the statistics leave out and why, or None when none
    are (``left_out`` from :func:`pipeline.transform.failures_left_out`)."""
    parts = [f"{n:,} {reason}" for reason, n in left_out.select("reason", "failures").iter_rows() if n]
    if not parts:
        return None
    total = int(left_out["failures"].sum())
    return (
        f"{total:,} failure{'s' if total != 1 else ''} left out of rates and fits (no exposure behind "
        f"them): {'; '.join(parts)}"
    )


def left_out_warning(con, left_out: pl.DataFrame, counted: int) -> str | None:
    """A warning for the top of every output, or None: when at least as many failures are left
    out as counted for reasons the user did not choose (a node not in the inventory, a node out of
    service), the statistics stand on the smaller part of the data (an inventory that misses the
    data's nodes or ends early), and a rate of 0 would read as a healthy fleet. What the window
    (``--since``, ``--until``) leaves out was chosen: it is said in the left-out note
    (:func:`left_out_note`), not warned of. It names the nodes the inventory holds under another
    spelling when nodes without a service interval are the cause
    (:func:`pipeline.record_checks.respelled_nodes`, read only then: a scan of every incident).
    ``left_out`` from :func:`pipeline.transform.failures_left_out`."""
    lost = left_out.filter(~pl.col("reason").is_in(transform.CHOSEN_REASONS))
    left = int(lost["failures"].sum())
    if not left or left < counted:
        return None
    reasons = "; ".join(f"{n:,} {r}" for r, n in lost.select("reason", "failures").iter_rows() if n)
    text = (
        f"{left:,} of {left + counted:,} failures ({left / (left + counted):.0%}) are left out of every "
        f"rate and fit ({reasons})"
    )
    unmatched = lost.filter(pl.col("reason") == transform.LEFT_OUT_REASONS[1])["failures"].sum()
    if unmatched and (respelled := record_checks.respelled_nodes(con)):
        text += f". {respelled.describe()}"
    return text


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


TREND_SCHEMA = {
    "cluster_id": pl.String,
    "failures": pl.Int64,
    "observed_node_hours": pl.Float64,
    "laplace_statistic": pl.Float64,
    "laplace_p_value": pl.Float64,
    "laplace_verdict": pl.String,
    "crow_beta": pl.Float64,
    "crow_beta_ci_low": pl.Float64,
    "crow_beta_ci_high": pl.Float64,
    "crow_statistic": pl.Float64,
    "crow_p_value": pl.Float64,
    "crow_verdict": pl.String,
}


def sizes_that_failed(per_cluster: pl.DataFrame) -> int:
    """Distinct cluster sizes with at least one failure: the count law MTBF(N) = MTBF_1 / N^alpha
    needs two. With failures at one size only, a size without any separates the data and the
    Poisson fit's slope runs off to infinity (a singular information matrix)."""
    return per_cluster.filter(pl.col("failures") > 0)["instances"].n_unique()


def trend_tests(operating_times: pl.DataFrame, exposure: pl.DataFrame) -> pl.DataFrame:
    """One row per cluster: Laplace and MIL-HDBK-189 tests on its failures' operating times
    (:func:`pipeline.transform.failure_operating_times`); nulls where it had fewer than 2."""
    totals = exposure.group_by("cluster_id").agg(observed_node_hours=pl.col("node_hours").sum())
    rows = []
    for cluster, total in totals.sort("cluster_id").iter_rows():
        # a failure at the window end sits at the total, not past it by a float rounding
        times = operating_times.filter(pl.col("cluster_id") == cluster)["operating_node_hours"].clip(
            upper_bound=total
        )
        row = dict.fromkeys(TREND_SCHEMA) | {
            "cluster_id": cluster,
            "failures": times.len(),
            "observed_node_hours": total,
        }
        if times.len() >= 2:
            t = models.TrendTest().fit(times.to_numpy(), total)
            row |= {
                "laplace_statistic": t.laplace_statistic_,
                "laplace_p_value": t.laplace_p_value_,
                "laplace_verdict": t.laplace_verdict_,
                "crow_beta": t.crow_beta_,
                "crow_beta_ci_low": t.crow_beta_confidence_interval_[0],
                "crow_beta_ci_high": t.crow_beta_confidence_interval_[1],
                "crow_statistic": t.crow_statistic_,
                "crow_p_value": t.crow_p_value_,
                "crow_verdict": t.crow_verdict_,
            }
        rows.append(row)
    return pl.DataFrame(rows, schema=TREND_SCHEMA, orient="row")


@dataclasses.dataclass(frozen=True)
class RateAnalysis:
    """The rate part of an analysis (:class:`pipeline.analysis.FleetAnalysis` ``rates``), what the
    rate charts and tables, the public baselines, the headline and a projected job's failure model
    take: failures per instance-hour and GPU-hour with their intervals (``interval_method``:
    "exact" or "overdispersed") overall, by cluster, failure class, month (per cluster) and size
    bucket; the failure classes' shares per cluster (exact binomial intervals), the trend tests per
    cluster (:func:`trend_tests`) and the cluster MTBF per size (:func:`cluster_mtbf`)."""

    overall: pl.DataFrame
    by_cluster: pl.DataFrame
    by_category: pl.DataFrame
    by_month: pl.DataFrame
    by_size_bucket: pl.DataFrame
    category_shares: pl.DataFrame
    trend_tests: pl.DataFrame
    cluster_mtbf: pl.DataFrame
    interval_method: str


@dataclasses.dataclass(frozen=True)
class NodeAnalysis:
    """The node part of an analysis (:class:`pipeline.analysis.FleetAnalysis` ``nodes``), what the
    lemon and top-node sections take: the rates by node (``rates``: one row per node, exact
    intervals), the lemon test on them (``lemons``: :class:`pipeline.models.LemonTest`) and the
    dispersion test of the nodes that are not lemons, which decides the rate intervals
    (``dispersion_test``: :func:`interval_check`)."""

    rates: pl.DataFrame
    lemons: models.LemonTest
    dispersion_test: transform.DispersionTest


def node_evidence(
    failures: pl.DataFrame,
    exposure: pl.DataFrame,
    *,
    lemon_fdr: float = LEMON_FDR,
    interrupting_only: bool = True,
    in_service: pl.DataFrame | None = None,
) -> tuple[pl.DataFrame, models.LemonTest, transform.DispersionTest]:
    """Rates by node (exact intervals), the lemon test on them, and the dispersion test that
    decides the rate intervals (:func:`interval_check`). ``in_service`` as in
    :func:`pipeline.transform.failure_rates`."""
    nodes = transform.failure_rates(
        failures,
        exposure,
        by=["cluster_id", "node_id"],
        interrupting_only=interrupting_only,
        in_service=in_service,
    )
    return nodes, *lemon_evidence(nodes, lemon_fdr=lemon_fdr)


def lemon_evidence(
    nodes: pl.DataFrame, *, lemon_fdr: float = LEMON_FDR
) -> tuple[models.LemonTest, transform.DispersionTest]:
    """The lemon test on rates by node (one row per cluster and node, e.g. counted in DuckDB by
    :class:`pipeline.analysis.counts.FailureCounts`) and the dispersion test it decides
    (:func:`interval_check`)."""
    lemons = models.LemonTest(fdr=lemon_fdr).fit(nodes)
    return lemons, interval_check(nodes, lemons)


def interval_check(nodes: pl.DataFrame, lemons: models.LemonTest) -> transform.DispersionTest:
    """The Pearson dispersion test of the nodes that are not lemons, which decides the rate
    intervals (:meth:`pipeline.transform.DispersionTest.method`), with the lemon test's phi to
    widen them by.

    Why the lemons are left out of the dispersion test: the fleet rate is expected failures /
    exposure of *these* nodes, lemons included; a few nodes with their own rate make phi large
    without making the fleet's total count any less Poisson, so quasi-Poisson intervals from
    every node over-cover (measured on simulated fleets with 5% lemons at 5-10x: 100% coverage
    of the nominal 95%). Failures that cluster in time (Weibull shape < 1) remain in the
    non-lemon nodes' phi, and the test decides on them. The interval then widens by the lemon
    test's NB1 phi (``widening_phi``), which the lemons it misses do not inflate: 93.9-95.7%
    coverage over 1,000 fleets per case, with or without lemons, Weibull shape 0.7-1
    (tests/test_lemons.py).
    """
    check = transform.dispersion_test(nodes, exclude=lemons.lemons_)
    return dataclasses.replace(check, widening_phi=lemons.dispersion_)
