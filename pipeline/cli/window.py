"""What the commands that count in a window share (rates, lemons, fit, repairs, backtest): their
common options (:func:`window_command`), the window opened on the warehouse (:func:`open_window`)
and the notes that say what the window left out."""

from __future__ import annotations

from pathlib import Path

import click
import polars as pl

from pipeline import analysis as analysis_mod
from pipeline import transform, warehouse
from pipeline.cli.common import analysis_options, db_option, json_option, safe_text, window_options

interruption_window_option = click.option(
    "--interruption-window",
    "interruption_window_minutes",
    type=click.FloatRange(min=0),
    default=transform.INTERRUPTION_WINDOW_MINUTES,
    show_default=True,
    metavar="MINUTES",
    help="A node's interrupting incidents closer than this are one interruption (root cause = the "
    "first); 0 counts every incident.",
)

fdr_option = click.option(
    "--fdr",
    "lemon_fdr",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=analysis_mod.LEMON_FDR,
    show_default=True,
    help="False-discovery rate of the lemon-node test (Benjamini–Hochberg across nodes).",
)
exposure_option = click.option(
    "--exposure",
    "exposure_basis",
    type=click.Choice(transform.EXPOSURE_BASES),
    default="uptime",
    show_default=True,
    help="Hours at risk: uptime (service time minus known repair downtime; MTBF = uptime / "
    "failures) or calendar (all service time). Identical when no outage has an end.",
)


def by_option(keys: str):
    """``--by KEY`` of rates and repairs: repeatable, cluster_id by default; ``keys`` says which."""
    return click.option(
        "--by", "by", multiple=True, default=["cluster_id"], show_default=True, metavar="KEY", help=keys
    )


def window_command(command):
    """The options every command that counts in a window takes, in one place: ``--db``,
    ``--since``/``--until``, ``--interruption-window`` and ``--json``."""
    return db_option(window_options(interruption_window_option(json_option(command))))


def open_window(db: Path, *, inventory_required: bool = True, **overrides):
    """The running command's :class:`pipeline.analysis.AnalysisOptions` (its parameters, with
    ``overrides``) on a read-only connection to ``db``: the connection and its
    :class:`pipeline.analysis.ServiceWindow` (inventory, resolved options, exposure), after the
    checks every rate needs (:func:`pipeline.analysis.service_window`)."""
    options = analysis_options(click.get_current_context().params, **overrides)
    con = warehouse.connect(db, read_only=True)
    return con, analysis_mod.service_window(con, options, inventory_required=inventory_required)


def open_checked_window(db: Path, **overrides):
    """:func:`open_window` without reading a row: the connection and its
    :class:`pipeline.analysis.WindowCheck` (resolved options, estimated exposure), after the same
    checks (:func:`pipeline.analysis.checked_window`). For what counts in DuckDB."""
    options = analysis_options(click.get_current_context().params, **overrides)
    con = warehouse.connect(db, read_only=True)
    return con, analysis_mod.checked_window(con, options)


def echo_jobs_before_window(since, con) -> None:
    """Say how many Slurm jobs started before the window start (``--since``) and are left out."""
    jobs = analysis_mod.read_jobs(con)
    if since is not None and jobs is not None:
        note = analysis_mod.before_window_note(since, {"Slurm jobs": int((jobs["start_utc"] < since).sum())})
        if note:
            click.echo(f"note: {note}", err=True)


def echo_before(result: analysis_mod.FleetAnalysis) -> None:
    """What the window start (``--since``) left out besides failures, on stderr."""
    if note := analysis_mod.before_window_note(result.options.since, result.before_window):
        click.echo(f"note: {note}", err=True)


def echo_left_out(left_out: pl.DataFrame) -> None:
    """The failures no statistic counts, by reason, on stderr (stdout stays the table or JSON)."""
    if note := analysis_mod.left_out_note(left_out):
        click.echo(f"note: {note}", err=True)


def echo_warning(warning: str | None, as_json: bool) -> None:
    """A warning that changes what the numbers mean goes before them: the first line of the text
    output (JSON: stderr, so stdout stays parseable)."""
    if warning:
        click.echo(f"{'warning' if as_json else 'Warning'}: {safe_text(warning)}.", err=as_json)


def no_failures_line(overall: pl.DataFrame) -> str:
    """What a fleet with no failure yet can say: its exposure and the exact one-sided bound."""
    row = overall.row(0, named=True)
    return (
        f"no failures yet in {row['exposure_node_hours']:,.0f} node-hours: the rate is at most "
        f"{row['rate_upper_bound']:.3g} per node-hour (95% one-sided upper bound, -ln(0.05) / T = "
        f"3.0 / T; column rate_upper_bound)"
    )
