"""Models: reliability estimators in the style of lifelines fitters.

Every model's ``fit(...)`` returns ``self``; fitted values end in ``_``; models never print or plot.
One module per family of statistics, re-exported here so callers write ``models.PoissonRate``:

* :mod:`pipeline.models.survival` — rates, parametric survival of times between failures, MTBF
  scaling with cluster size (formulas and sources in its docstring).
* :mod:`pipeline.models.nonparametric` — Kaplan–Meier survival and Nelson–Aalen cumulative hazard
  of the same times.
* :mod:`pipeline.models.trends` — Laplace and Crow-AMSAA trend tests of a cluster's failure times.
* :mod:`pipeline.models.lemons` — lemon nodes: the per-node test against the rest of the
  cluster (beta-binomial allowing for failures that cluster in time, exact binomial when counts
  are Poisson) with Benjamini–Hochberg false-discovery control.
* :mod:`pipeline.models.backtest` — job interruption predictions against what happened.

Each name loads its module when first used (:mod:`pipeline.lazy`): the lemon test that
``failcast rates`` runs does not import lifelines and pandas, which the survival fits need.
"""

from pipeline.lazy import lazy_package

# name -> the module that defines it
EXPORTS = {
    "JobBacktest": "backtest",
    "ClusterHeterogeneity": "heterogeneity",
    "LemonTest": "lemons",
    "benjamini_hochberg": "lemons",
    "RepairTimes": "repair",
    "FAMILIES": "survival",
    "KaplanMeier": "nonparametric",
    "MTBFScaling": "survival",
    "NelsonAalen": "nonparametric",
    "NotConverged": "survival",
    "ParametricTBF": "survival",
    "PoissonRate": "survival",
    "TREND_VERDICTS": "trends",
    "TrendTest": "trends",
    "WeibullSizeRegression": "survival",
    "best_by_aic": "survival",
    "cluster_mtbf_hours": "survival",
    "fit_families": "survival",
    "interruptions_per_day": "survival",
}
__all__ = sorted(EXPORTS)
lazy_package(__name__, EXPORTS)
