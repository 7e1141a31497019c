"""Over-dispersion of node failure counts and the interval it calls for.

When node failures cluster (renewal with Weibull shape < 1) counts are over-dispersed and the
exact interval is too narrow; the quasi-Poisson interval (McCullagh & Nelder 1989) takes the
Garwood interval of k / phi failures in T / phi hours, phi the Pearson dispersion of per-node
counts (:func:`dispersion_test`, which can leave lemon nodes out).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
from scipy.stats import chi2

from pipeline.transform.fleet import failure_rates


def count_dispersion(incidents: pl.DataFrame, exposure: pl.DataFrame) -> float:
    """Pearson dispersion of per-node failure counts around each cluster's rate (McCullagh &
    Nelder 1989, 4.5): phi = sum (k - mu)^2 / mu / (nodes - clusters), mu = cluster rate x the
    node's hours, over the nodes with mu > 0 (a node without hours, or in a cluster without a
    failure, fits any phi). 1 for Poisson counts; a node renewal process with Weibull shape < 1 gives
    phi > 1 (clustered failures), shape > 1 phi < 1. Quasi-Poisson intervals scale by sqrt(phi).
    """
    return dispersion_test(failure_rates(incidents, exposure, by=["cluster_id", "node_id"])).phi


INTERVAL_METHODS = ("exact", "overdispersed", "auto")


DISPERSION_TEST_LEVEL = 0.05


@dataclass(frozen=True)
class DispersionTest:
    """Pearson's test of Poisson node counts: X2 = phi x dof ~ chi2(dof) under Poisson.

    ``nodes_excluded`` nodes (lemons, see :mod:`pipeline.models.lemons`) were left out of it.

    ``widening_phi``, when set, is the phi the quasi-Poisson interval widens by instead of the
    Pearson ``phi``: the NB1 dispersion the lemon test estimates from the body of the node
    counts (:class:`pipeline.models.LemonTest`). Why: at Weibull shape 0.7 the lemon test finds
    only a fifth of 5x lemons, the rest stay in Pearson's phi, and the interval over-covered
    (97.9% of the nominal 95% over 1,000 simulated fleets); with the NB1 phi it covers 95.0%,
    and 93.9-95.7% in the other cases of tests/test_lemons.py. Pearson's test still decides
    whether to widen.
    """

    phi: float
    dof: int
    p_value: float
    nodes_excluded: int = 0
    widening_phi: float | None = None

    @property
    def rejects_poisson(self) -> bool:
        return self.p_value < DISPERSION_TEST_LEVEL

    def method(self, choice: str = "auto") -> str:
        """The interval method ``choice`` resolves to: "auto" is "overdispersed" when the test
        rejects Poisson at 5% with phi > 1, else "exact"."""
        if choice not in INTERVAL_METHODS:
            raise ValueError(f"interval must be one of {', '.join(INTERVAL_METHODS)}, not {choice!r}")
        if choice == "auto":
            return "overdispersed" if self.rejects_poisson and self.phi > 1 else "exact"
        return choice

    def dispersion(self, choice: str = "auto") -> float:
        """The phi to pass to :func:`poisson_interval` for ``choice`` (never below 1)."""
        if self.method(choice) != "overdispersed":
            return 1.0
        return max(self.phi if self.widening_phi is None else self.widening_phi, 1.0)


def dispersion_test(nodes: pl.DataFrame, exclude: pl.DataFrame | None = None) -> DispersionTest:
    """Pearson dispersion of per-node counts (:func:`count_dispersion`) and its chi-square test,
    from one row per node (``cluster_id``, ``node_id``, ``failures``, ``exposure_node_hours``).

    ``exclude`` (rows with ``cluster_id``, ``node_id``) leaves nodes out, cluster rates then taken
    over the rest. Why: the fleet rate is a statement about *this* fleet's nodes, so its
    variance is that of their summed counts. A few nodes with their own high rate (lemons) inflate
    phi without making the total any less Poisson; clustering of failures in time (Weibull shape
    < 1) does make it over-dispersed. Pulling the lemons out first leaves phi to measure the latter.
    """
    if exclude is not None and exclude.height:
        nodes = nodes.join(exclude.select("cluster_id", "node_id"), on=["cluster_id", "node_id"], how="anti")
    excluded = 0 if exclude is None else exclude.height
    nodes = nodes.with_columns(
        mu=pl.col("exposure_node_hours")
        * (pl.col("failures").sum() / pl.col("exposure_node_hours").sum()).over("cluster_id")
    ).filter(pl.col("mu") > 0)
    # only nodes with an expected count carry information: one with 0 h, or in a cluster without
    # a failure, fits its mu = 0 exactly whatever phi is, and counting it in the degrees of
    # freedom would pull phi towards 0 (a fleet's new, failure-free cluster hiding clustering)
    dof = nodes.height - nodes["cluster_id"].n_unique()
    if dof <= 0:
        return DispersionTest(1.0, max(dof, 0), 1.0, excluded)
    x2 = float(((nodes["failures"] - nodes["mu"]) ** 2 / nodes["mu"]).sum())
    return DispersionTest(x2 / dof, dof, float(chi2.sf(x2, dof)), excluded)
