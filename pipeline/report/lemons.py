"""Lemon nodes in the report: the nodes that fail more often than the rest of their cluster
(:class:`pipeline.models.LemonTest`, carried by the analysis so the CLI and the report agree), and
the note saying which rate intervals the report shows and why."""

from __future__ import annotations

import polars as pl

from pipeline import models
from pipeline.analysis import NodeAnalysis
from pipeline.models.lemons import MIN_EXCESS
from pipeline.report.format import format_value, p_value_text

LEMON_HEADERS = {
    "cluster_id": "Cluster",
    "node_id": "Node",
    "failures": "Failures",
    "exposure_node_hours": "Node-hours in service",
    "expected_failures": "Expected at the rest of the cluster's rate",
    "ratio": "Times expected",
    "p_value": "p (allowing for clustering)",
    "q_value": "q (Benjamini–Hochberg)",
    "cluster_rate": "Cluster rate (% per instance-hour)",
    "cluster_rate_without_lemons": "Without its lemons (% per instance-hour)",
}


def _significant(column: str) -> pl.Expr:
    return pl.col(column).map_elements("{:.2g}".format, return_dtype=pl.String)


def _rate(column: str) -> pl.Expr:
    """A rate per node-hour as the rate tables print it (% per instance-hour, 3 digits)."""
    return pl.col(column).map_elements(
        lambda v: format_value("rate_per_node_hour", v), return_dtype=pl.String
    )


def lemon_table(test: models.LemonTest) -> pl.DataFrame:
    """One row per lemon node, most significant first, with human headers and units: the
    evidence and what its cluster's rate is with and without its lemons (also the text of
    ``failcast lemons``), in the unit and digits of the rate tables, so the cluster's rate reads
    as it does there."""
    clusters = test.cluster_rate_without_lemons_.select(
        "cluster_id",
        cluster_rate=_rate("rate_per_node_hour"),
        cluster_rate_without_lemons=_rate("rate_without_lemons_per_node_hour"),
    )
    return (
        test.lemons_.join(clusters, on="cluster_id", how="left", maintain_order="left")
        .with_columns(
            pl.col("exposure_node_hours").round(0).cast(pl.Int64),
            pl.col("expected_failures", "ratio").round(2),
            _significant("p_value"),
            _significant("q_value"),
        )
        .select(list(LEMON_HEADERS))
        .rename(LEMON_HEADERS)
    )


def clustering_note(test: models.LemonTest) -> str:
    """How the test allowed for failures that cluster in time: the dispersion it used."""
    if test.dispersion_ < 1 + MIN_EXCESS:
        return "Node failure counts look Poisson (dispersion φ = 1): exact binomial test."
    return (
        f"Failures cluster in time (a node that failed tends to fail again soon): node counts vary "
        f"φ = {test.dispersion_:.2f} times as much as Poisson among the unremarkable nodes, and the test "
        "allows for it (beta-binomial), so a burst on a healthy node is not called a lemon."
    )


def lemon_note(test: models.LemonTest) -> str:
    """The verdict: how many lemons at which false-discovery rate, or one line saying none, and
    the dispersion the test allowed for; the nodes it could not test (failures in 0 h at risk)."""
    nodes, fdr = test.table_.height, f"{test.fdr * 100:.3g}%"
    untested = ""
    if test.untested_:
        untested = (
            f" {test.untested_:,} node{'s' if test.untested_ != 1 else ''} with failures but no hours at "
            "risk (failed as service began, down the rest of the window) not tested."
        )
    if test.lemons_.is_empty():
        return (
            f"No lemon nodes: none of {nodes:,} nodes fails more often than the rest of its cluster "
            f"at a {fdr} false-discovery rate. {clustering_note(test)}{untested}"
        )
    flagged = test.lemons_.height
    return (
        f"{flagged:,} of {nodes:,} nodes fail more often than the rest of their cluster: test of each "
        f"node's failures against the rest of its cluster's rate for its hours in service, "
        f"Benjamini–Hochberg at a {fdr} false-discovery rate (about {fdr} of a list like this is "
        f"expected to be false alarms). {clustering_note(test)}{untested} 'failcast lemons --format "
        "hostlist' prints them for draining."
    )


def interval_note(nodes: NodeAnalysis, interval_method: str) -> str:
    """Which rate intervals the report shows (``interval_method``: exact or quasi-Poisson) and the
    test of the nodes behind it."""
    check = nodes.dispersion_test
    test = (
        f"Pearson dispersion of node failure counts φ = {check.phi:.2f} (χ² test of Poisson counts "
        f"{p_value_text(check.p_value)}"
        + (f", {check.nodes_excluded:,} lemon nodes left out" if check.nodes_excluded else "")
        + ")"
    )
    if interval_method == "overdispersed":
        phi = check.dispersion("overdispersed")
        return (
            f"Intervals: quasi-Poisson 95% (overdispersed: widened ×{phi**0.5:.2f} = √φ over the exact "
            f"Poisson interval, φ = {phi:.2f} the dispersion the lemon test allows for among the nodes "
            f"that are not lemons), because failures are more variable than Poisson. {test}."
        )
    return f"Intervals: exact Poisson (Garwood) 95%. {test}."
