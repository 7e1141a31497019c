"""Lemon nodes: nodes that fail more often than the rest of their cluster, with false discoveries
controlled across the fleet.

The test, per node i of cluster c with k_i failures in t_i node-hours, the cluster having K_c
failures in T_c node-hours: H0 "node i fails at the rate of the rest of its cluster" against
"more often". The reference is the rest of the cluster, *without the node itself*: a lemon counted
in its own reference raises the rate it is compared with (a node with half of a small cluster's
failures would hide behind them).

The p-value is the exact conditional test of two Poisson rates (Przyborowski & Wilenski 1940;
Lehmann & Romano, *Testing Statistical Hypotheses*, 4.5): given the K_c failures of the cluster,
k_i ~ Binomial(K_c, t_i / T_c) under H0, so

    p_i = P(X >= k_i),  X ~ Binomial(K_c, t_i / T_c)        (1 when k_i = 0)

Why not the plug-in Poisson tail P(Poisson(mu_i) >= k_i) with mu_i = t_i (K_c - k_i) / (T_c - t_i)?
It treats the rest-of-cluster rate as known: fine for a 500-node cluster (the two agree, the
binomial is the Poisson limit), anti-conservative for a 4-node one, and p = 0 for a node with one
failure whose cluster mates had none. The conditional test is exact at every size and uniformly
most powerful unbiased. ``expected_failures`` = mu_i and ``ratio`` = k_i / mu_i are reported as the
evidence people read.

False discoveries: Benjamini & Hochberg (1995) across every node of the fleet (nodes without
failures and nodes alone in their cluster are hypotheses too, with p = 1): q_(j) = min over
l >= j of m p_(l) / l; a node is a lemon when q <= ``fdr``. BH controls the expected share of
false lemons among the flagged ones at ``fdr`` for independent or positively dependent p-values;
the discrete p-values make it conservative.

``cluster_rate_without_lemons_`` is each cluster's rate once its lemons are pulled, with the exact
Garwood interval: what the cluster would do with them drained.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from scipy.stats import binom

from pipeline.transform import poisson_interval

NODE_COLUMNS = ("cluster_id", "node_id", "failures", "exposure_node_hours")


def benjamini_hochberg(p_values: np.ndarray) -> np.ndarray:
    """BH adjusted p-values (q-values) in the input order."""
    p = np.asarray(p_values, dtype=float)
    m = p.size
    if m == 0:
        return p
    order = np.argsort(p, kind="stable")
    scaled = p[order] * m / np.arange(1, m + 1)
    q = np.minimum.accumulate(scaled[::-1])[::-1].clip(max=1.0)
    out = np.empty(m)
    out[order] = q
    return out


class LemonTest:
    """Per-node exact test of "fails more than the rest of its cluster", BH across nodes.

    ``fit(nodes)`` takes one row per node with ``cluster_id``, ``node_id``, ``failures`` and
    ``exposure_node_hours`` (e.g. :func:`pipeline.transform.failure_rates` by cluster and node).
    Fitted: ``table_`` (every node, most suspicious first), ``lemons_`` (the flagged ones) and
    ``cluster_rate_without_lemons_`` (one row per cluster).
    """

    def __init__(self, fdr: float = 0.05, confidence: float = 0.95) -> None:
        if not 0 < fdr < 1:
            raise ValueError(f"fdr must be between 0 and 1, not {fdr}")
        self.fdr = fdr
        self.confidence = confidence

    def fit(self, nodes: pl.DataFrame) -> LemonTest:
        missing = [c for c in NODE_COLUMNS if c not in nodes.columns]
        if missing:
            raise ValueError(
                f"lemon test needs one row per node with {', '.join(NODE_COLUMNS)}; missing {missing}"
            )
        frame = (
            nodes.select(NODE_COLUMNS)
            .with_columns(pl.col("failures").cast(pl.Int64), pl.col("exposure_node_hours").cast(pl.Float64))
            .with_columns(
                cluster_failures=pl.col("failures").sum().over("cluster_id"),
                cluster_node_hours=pl.col("exposure_node_hours").sum().over("cluster_id"),
            )
        )
        k = frame["failures"].to_numpy()
        t = frame["exposure_node_hours"].to_numpy()
        big_k = frame["cluster_failures"].to_numpy()
        big_t = frame["cluster_node_hours"].to_numpy()
        rest_t = big_t - t
        testable = (k > 0) & (rest_t > 0)
        share = np.divide(t, big_t, out=np.zeros_like(t), where=big_t > 0)
        p = np.where(testable, binom.sf(k - 1, big_k, share), 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            rest_rate = np.where(rest_t > 0, (big_k - k) / rest_t, np.nan)
            expected = rest_rate * t
            ratio = np.where(expected > 0, k / expected, np.where(k > 0, np.inf, np.nan))
        q = benjamini_hochberg(p)
        self.table_ = (
            frame.select("cluster_id", "node_id", "failures", "exposure_node_hours")
            .with_columns(
                rest_of_cluster_rate_per_node_hour=pl.Series(rest_rate),
                expected_failures=pl.Series(expected),
                ratio=pl.Series(ratio),
                p_value=pl.Series(p),
                q_value=pl.Series(q),
                lemon=pl.Series(q <= self.fdr),
            )
            .fill_nan(None)
            .sort(["p_value", "failures", "cluster_id", "node_id"], descending=[False, True, False, False])
        )
        self.lemons_ = self.table_.filter("lemon").drop("lemon")
        self.cluster_rate_without_lemons_ = self._clusters()
        return self

    def _clusters(self) -> pl.DataFrame:
        kept = ~pl.col("lemon")
        clusters = (
            self.table_.group_by("cluster_id")
            .agg(
                nodes=pl.len(),
                lemons=pl.col("lemon").sum().cast(pl.Int64),
                failures=pl.col("failures").sum(),
                exposure_node_hours=pl.col("exposure_node_hours").sum(),
                lemon_failures=pl.col("failures").filter("lemon").sum(),
                failures_without_lemons=pl.col("failures").filter(kept).sum(),
                node_hours_without_lemons=pl.col("exposure_node_hours").filter(kept).sum(),
            )
            .sort("cluster_id")
        )
        low, high = poisson_interval(
            clusters["failures_without_lemons"].to_numpy(),
            clusters["node_hours_without_lemons"].to_numpy(),
            self.confidence,
        )
        return clusters.with_columns(
            rate_per_node_hour=pl.col("failures") / pl.col("exposure_node_hours"),
            rate_without_lemons_per_node_hour=pl.col("failures_without_lemons")
            / pl.col("node_hours_without_lemons"),
            rate_without_lemons_ci_low=pl.Series(low),
            rate_without_lemons_ci_high=pl.Series(high),
        ).fill_nan(None)
