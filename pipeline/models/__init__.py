"""Models: reliability estimators in the style of lifelines fitters.

Every model's ``fit(...)`` returns ``self``; fitted values end in ``_``; models never print or plot.
One module per family of statistics, re-exported here so callers write ``models.PoissonRate``:

* :mod:`pipeline.models.survival` — rates, parametric and non-parametric survival of times between
  failures, MTBF scaling with cluster size, trend tests (formulas and sources in its docstring).
* :mod:`pipeline.models.lemons` — lemon nodes: the per-node test against the rest of the
  cluster (beta-binomial allowing for failures that cluster in time, exact binomial when counts
  are Poisson) with Benjamini–Hochberg false-discovery control.
* :mod:`pipeline.models.backtest` — job interruption predictions against what happened.
"""

from pipeline.models.backtest import JobBacktest
from pipeline.models.heterogeneity import ClusterHeterogeneity
from pipeline.models.lemons import LemonTest, benjamini_hochberg
from pipeline.models.repair import RepairTimes, spares_needed
from pipeline.models.survival import (
    FAMILIES,
    TREND_VERDICTS,
    KaplanMeier,
    MTBFScaling,
    NelsonAalen,
    ParametricTBF,
    PoissonRate,
    TrendTest,
    WeibullSizeRegression,
    best_by_aic,
    cluster_mtbf_hours,
    fit_families,
    interruptions_per_day,
)

__all__ = [
    "ClusterHeterogeneity",
    "FAMILIES",
    "TREND_VERDICTS",
    "JobBacktest",
    "KaplanMeier",
    "LemonTest",
    "MTBFScaling",
    "NelsonAalen",
    "ParametricTBF",
    "PoissonRate",
    "RepairTimes",
    "TrendTest",
    "WeibullSizeRegression",
    "benjamini_hochberg",
    "best_by_aic",
    "cluster_mtbf_hours",
    "fit_families",
    "interruptions_per_day",
    "spares_needed",
]
