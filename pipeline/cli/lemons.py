"""failcast lemons: nodes that fail more often than the rest of their cluster, with the evidence,
and each cluster's rate without them; ``--format hostlist`` prints what a scheduler can drain."""

from __future__ import annotations

from pathlib import Path

import click
import polars as pl

from pipeline import analysis as analysis_mod
from pipeline import transform
from pipeline.analysis.counts import FailureCounts
from pipeline.cli.common import echo_json, main, records, safe_lines
from pipeline.cli.window import exposure_option, fdr_option, open_window, window_command
from pipeline.readers.hostlist import compress, host_order
from pipeline.report.format import text_table
from pipeline.report.lemons import lemon_note, lemon_table


def hostlists(lemons: pl.DataFrame) -> dict[str, str]:
    """One compressed Slurm hostlist of lemon nodes per cluster (each cluster drains its own)."""
    return {
        cluster: compress(sorted(nodes["node_id"], key=host_order))
        for (cluster,), nodes in lemons.sort("cluster_id").group_by("cluster_id", maintain_order=True)
    }


@main.command()
@window_command
@fdr_option
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
def lemons(
    db: Path,
    since,
    until,
    lemon_fdr: float,
    interruption_window_minutes: float,
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
    con, (inventory, options, exposure) = open_window(db)
    end, since, window_minutes = options.until, options.since, options.interruption_window_minutes
    if clusters:
        unknown = sorted(set(clusters) - set(exposure["cluster_id"]))
        if unknown:
            raise ValueError(f"no cluster {', '.join(unknown)} in the inventory within the window")
        exposure = exposure.filter(pl.col("cluster_id").is_in(list(clusters)))
    if window_minutes:
        # counted inside DuckDB, no failure rows in Python (pipeline/analysis/counts.py)
        counts = FailureCounts(
            con,
            end,
            window_minutes=window_minutes,
            basis=exposure_basis,
            observed_since=since,
            clusters=list(clusters) if clusters else None,
        )
        test, _ = analysis_mod.lemon_evidence(counts.rates(["cluster_id", "node_id"]), lemon_fdr=lemon_fdr)
        left_out = counts.left_out() if since else None
        counts.close()
    else:
        failures = analysis_mod.read_failures(con, window_minutes=None)
        at_risk, _ = analysis_mod.rate_exposure(con, failures, inventory, exposure, end, exposure_basis)
        _, test, _ = analysis_mod.node_evidence(failures, at_risk, lemon_fdr=lemon_fdr)
        left_out = (
            transform.failures_left_out(failures, at_risk, end, observed_since=since) if since else None
        )
    if left_out is not None and (note := analysis_mod.left_out_note(left_out)):
        click.echo(f"note: {note}", err=True)  # the window start's count (--since), as rates says it
    if output == "hostlist":
        for expression in hostlists(test.lemons_).values():
            click.echo(safe_lines(expression))
    elif as_json:
        echo_json(
            {
                "observed_until": end,
                **({"observed_since": since} if since else {}),
                "fdr": lemon_fdr,
                "exposure_basis": exposure_basis,
                "nodes_tested": test.table_.height,
                "nodes_without_hours_at_risk": test.untested_,
                "dispersion": test.dispersion_,
                "exposure_estimated": transform.exposure_estimated(inventory),
                "lemons": records(test.lemons_),
                "clusters": records(test.cluster_rate_without_lemons_),
                "hostlists": hostlists(test.lemons_),
            }
        )
    else:
        window = f"from {since:%Y-%m-%d %H:%M} " if since else ""
        click.echo(f"{lemon_note(test)} Observed {window}until {end:%Y-%m-%d %H:%M} UTC.")
        if test.lemons_.height:
            click.echo(safe_lines(text_table(lemon_table(test))))
