"""failcast lemons: nodes that fail more often than the rest of their cluster, with the evidence,
and each cluster's rate without them; ``--format hostlist`` prints what a scheduler can drain."""

from __future__ import annotations

from pathlib import Path

import click
import polars as pl

from pipeline import analysis as analysis_mod
from pipeline import transform, warehouse
from pipeline.analysis.counts import FailureCounts
from pipeline.cli.common import db_option, echo_json, json_option, main, records, safe_lines, until_option
from pipeline.cli.stats import exposure_option, fdr_option, interruption_window_option
from pipeline.ingest.hostlist import compress, host_order
from pipeline.report.format import text_table
from pipeline.report.lemons import lemon_note, lemon_table


def hostlists(lemons: pl.DataFrame) -> dict[str, str]:
    """One compressed Slurm hostlist of lemon nodes per cluster (each cluster drains its own)."""
    return {
        cluster: compress(sorted(nodes["node_id"], key=host_order))
        for (cluster,), nodes in lemons.sort("cluster_id").group_by("cluster_id", maintain_order=True)
    }


@main.command()
@db_option
@until_option
@fdr_option
@interruption_window_option
@exposure_option
@click.option("--cluster", "clusters", multiple=True, help="Only these clusters (repeatable).")
@click.option(
    "--format",
    "output",
    type=click.Choice(["table", "hostlist"]),
    default="table",
    show_default=True,
    help="hostlist: one compressed Slurm hostlist of lemon nodes per cluster per line, nothing when "
    "there are none (scontrol update nodename=HOSTLIST state=drain reason=lemon).",
)
@json_option
def lemons(
    db: Path,
    observed_until,
    fdr: float,
    interruption_window: float,
    exposure_basis: str,
    clusters,
    output,
    as_json,
) -> None:
    """Lemon nodes: each node's test against the rest of its cluster, allowing for failures that
    cluster in time (dispersion of the unremarkable nodes), false discoveries controlled across
    nodes (Benjamini–Hochberg), and the cluster rates without them. Hours at risk as in failcast
    rates and the report (uptime by default, --exposure), so the nodes drained are the ones the
    report names."""
    con = warehouse.connect(db, read_only=True)
    inventory = warehouse.table(con, "inventory")
    end = observed_until or transform.observation_end(warehouse.latest_incident(con), inventory)
    exposure = transform.exposure_intervals(inventory, end)
    if clusters:
        unknown = sorted(set(clusters) - set(exposure["cluster_id"]))
        if unknown:
            raise ValueError(f"no cluster {', '.join(unknown)} in the inventory within the window")
        exposure = exposure.filter(pl.col("cluster_id").is_in(list(clusters)))
    if interruption_window:
        # counted inside DuckDB, no failure rows in Python (pipeline/analysis/counts.py)
        counts = FailureCounts(con, exposure, end, window_minutes=interruption_window, basis=exposure_basis)
        test, _ = analysis_mod.lemon_evidence(counts.rates(["cluster_id", "node_id"]), lemon_fdr=fdr)
        counts.close()
    else:
        failures = analysis_mod.read_failures(con, window_minutes=None)
        at_risk, _ = analysis_mod.rate_exposure(con, failures, inventory, exposure, end, exposure_basis)
        _, test, _ = analysis_mod.node_evidence(failures, at_risk, lemon_fdr=fdr)
    if output == "hostlist":
        for expression in hostlists(test.lemons_).values():
            click.echo(safe_lines(expression))
    elif as_json:
        echo_json(
            {
                "observed_until": end,
                "fdr": fdr,
                "exposure_basis": exposure_basis,
                "nodes_tested": test.table_.height,
                "dispersion": test.dispersion_,
                "exposure_estimated": transform.exposure_estimated(inventory),
                "lemons": records(test.lemons_),
                "clusters": records(test.cluster_rate_without_lemons_),
                "hostlists": hostlists(test.lemons_),
            }
        )
    else:
        click.echo(f"{lemon_note(test)} Observed until {end:%Y-%m-%d %H:%M} UTC.")
        if test.lemons_.height:
            click.echo(safe_lines(text_table(lemon_table(test))))
