"""``ReliabilityFits``: the fitted part of an analysis, what the reliability charts, the scaling
views, ``failcast fit`` and a projected job's failure model take."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from pipeline import models


@dataclass(frozen=True)
class ReliabilityFits:
    """Times between failures and the laws of MTBF against cluster size
    (:func:`pipeline.analysis.analyze` fits them; :class:`pipeline.analysis.FleetAnalysis` ``fits``).

    ``node_durations`` and ``cluster_durations``: the gaps per node and per cluster, rounded and
    aggregated (:func:`pipeline.transform.aggregate_durations`), following ``first_gap`` (see
    :func:`pipeline.transform.times_between_failures`: by default the span from a window's start
    to its first failure is left out, a forward-recurrence time; "keep" when fewer than two gaps
    start at a failure). ``node_fits``: the parametric families fitted to the node gaps (empty when
    fewer than ``MIN_DISTINCT_GAPS`` distinct gaps were observed), ``best_family`` by AIC,
    ``kaplan_meier`` and ``nelson_aalen`` of the node gaps (None unfitted);
    ``cluster_kaplan_meier``: per cluster with a failure, the survival of the time to its next
    failure (what a job on the whole cluster sees). ``count_dispersion``: the Pearson dispersion of
    every node's failure count (1 for Poisson), which widens the laws' intervals. ``scaling``: the
    count law MTBF(N) = MTBF_1 / N^alpha (Poisson regression; None with failures at fewer than two
    sizes) with ``scaling_projection`` over the projected sizes; ``size_regression``: the Weibull
    AFT on log N, the second view (None when it did not converge or sizes are too few), with
    ``size_regression_projection``.
    """

    node_fits: dict[str, models.ParametricTBF]
    best_family: str | None
    kaplan_meier: models.KaplanMeier | None
    nelson_aalen: models.NelsonAalen | None
    node_durations: pl.DataFrame
    cluster_durations: pl.DataFrame
    cluster_kaplan_meier: dict[str, models.KaplanMeier]
    first_gap: str
    count_dispersion: float
    scaling: models.MTBFScaling | None
    scaling_projection: pl.DataFrame
    size_regression: models.WeibullSizeRegression | None
    size_regression_projection: pl.DataFrame

    @property
    def fitted(self) -> bool:
        """True when the node gaps were fitted (``node_fits``, ``kaplan_meier``, ...)."""
        return bool(self.node_fits)
