"""``CountedFailures``: what the report shows of the failures the rates count, as aggregates
(issue 27): the mean cumulative function, the Duane points and the fleet's own category names
behind each failure class, computed once in :func:`pipeline.analysis.analyze` from the rows it
already matched, so the analysis holds a few hundred rows here instead of every failure (5 M rows
at 10 M availability rows)."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from pipeline import transform


@dataclass(frozen=True)
class CountedFailures:
    """The failures the rates count (in service on the rate exposure), each shown as the statistic
    a chart or note draws, so their totals are the rate table's.

    ``mcf``: Nelson's mean cumulative function of failures per node over node age with its robust
    band (:func:`pipeline.transform.mean_cumulative_function`, at most ``MAX_POINTS`` ages; empty
    without failures). ``duane_points``: per cluster with a Crow-AMSAA fit, cumulative failures
    against operating node-hours and the fitted power law
    (:func:`pipeline.transform.duane_points`, at most ``MAX_POINTS`` rows). ``renamed_categories``:
    ``category``, ``failure_class``, ``failures`` for each recorded category that differs from its
    class (most failures first, then by name): which of the fleet's own names each class groups.
    """

    mcf: pl.DataFrame
    duane_points: pl.DataFrame
    renamed_categories: pl.DataFrame


def counted_failure_views(
    counted: pl.DataFrame,
    exposure: pl.DataFrame,
    operating_times: pl.DataFrame,
    trend_tests: pl.DataFrame,
) -> CountedFailures:
    """The aggregates of :class:`CountedFailures` from ``analyze``'s own rows: ``counted``, the
    failures the rates count as its match to the rate exposure gave them (each once, in order,
    with their ``category`` and ``failure_class``; the uptime pieces lie inside the calendar
    intervals ``exposure``, so the MCF takes them without a second match); ``operating_times``
    and ``trend_tests`` (per cluster, on the calendar service clock) for the Duane points."""
    categories = (
        counted.select("category", "failure_class")
        .filter(pl.col("category") != pl.col("failure_class"))
        .group_by("category", "failure_class")
        .agg(failures=pl.len())
        .sort("failures", "category", "failure_class", descending=[True, False, False])
    )
    return CountedFailures(
        mcf=transform.mean_cumulative_function(counted, exposure),
        duane_points=transform.duane_points(operating_times, trend_tests),
        renamed_categories=categories,
    )
