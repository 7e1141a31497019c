"""failcast rates: failure rates with their intervals (exact or quasi-Poisson, named in the
output). The options and notes every command of the window shares: :mod:`pipeline.cli.window`."""

from __future__ import annotations

from pathlib import Path

import click
import polars as pl

from pipeline import analysis as analysis_mod
from pipeline import record_checks, transform, warehouse
from pipeline.analysis.counts import FailureCounts
from pipeline.cli.common import echo_json, echo_late_records, main, records, safe_lines
from pipeline.cli.window import (
    by_option,
    echo_jobs_before_window,
    echo_left_out,
    echo_warning,
    exposure_option,
    fdr_option,
    no_failures_line,
    open_checked_window,
    window_command,
)
from pipeline.report.format import (
    RATE_INTERVAL_SCOPE,
    format_value,
    interval_name,
    p_value_text,
    text_table,
)

# --- rates ---------------------------------------------------------------------------------------
RATE_VIEWS = ("rates", "shares", "trend", "jobs")

interval_option = click.option(
    "--interval",
    type=click.Choice(transform.INTERVAL_METHODS),
    default="auto",
    show_default=True,
    help="Rate intervals: exact (Garwood Poisson), overdispersed (quasi-Poisson, widened by the "
    "Pearson dispersion of the non-lemon nodes' counts), auto (overdispersed when the dispersion "
    "test rejects Poisson at 5%, else exact).",
)


def interval_line(check: transform.DispersionTest, method: str) -> str:
    """One line saying which rate interval is shown and why."""
    test = (
        f"Pearson test of node counts against cluster rates: phi = {check.phi:.2f}, "
        f"{p_value_text(check.p_value)}"
        f"{f', {check.nodes_excluded} lemon nodes left out' if check.nodes_excluded else ''}"
    )
    if method == "overdispersed":
        phi = check.dispersion(method)
        return (
            f"95% intervals: quasi-Poisson (overdispersed, widened x{phi**0.5:.2f} = sqrt(phi), phi = "
            f"{phi:.2f} the lemon test's dispersion of the unremarkable nodes); {test}"
        )
    return f"95% intervals: exact Poisson (Garwood); {test}"


RATES_HELP = f"""Failure rates per instance-hour and GPU-hour with 95% intervals (see --interval).

Interrupting failures are node interruptions (see --interruption-window); --all-categories counts
every incident, interrupting or not. Exposure is uptime by default (--exposure); the
``exposure_basis`` column says which.

{RATE_INTERVAL_SCOPE}"""


@main.command(help=RATES_HELP)
@window_command
@by_option(
    f"Group key (repeatable): {', '.join(transform.EXPOSURE_KEYS)}, category (as recorded), class "
    "(failure class), or an extra input column kept as an attribute (e.g. level).",
)
@click.option("--period", type=click.Choice(list(transform.PERIODS)))
@click.option(
    "--all-categories", is_flag=True, help="Count non-interrupting faults too (application XIDs, warnings)."
)
@interval_option
@click.option("--overdispersed", is_flag=True, help="Same as --interval overdispersed.")
@fdr_option
@click.option(
    "--view",
    type=click.Choice(RATE_VIEWS),
    default="rates",
    show_default=True,
    help="rates: failures / exposure per group; shares: share of interruptions by category per "
    "group; trend: Laplace and MIL-HDBK-189 trend tests per cluster; jobs: Slurm job "
    "interruptions per job-hour by node count against the node rate.",
)
@exposure_option
def rates(
    db: Path,
    by,
    period,
    all_categories: bool,
    interval: str,
    overdispersed: bool,
    lemon_fdr: float,
    view: str,
    interruption_window_minutes: float,
    exposure_basis: str,
    since,
    until,
    as_json: bool,
) -> None:
    con, (options, estimated) = open_checked_window(
        db, interval="overdispersed" if overdispersed else interval
    )
    by, attributes = _group_keys(con, by)
    end, since, window_minutes = options.until, options.since, options.interruption_window_minutes
    if view == "rates" and not all_categories and window_minutes and not attributes:
        # counted inside DuckDB: no row of the inventory, the service intervals or the failures in
        # Python, only aggregates (pipeline/analysis/counts.py)
        counts = FailureCounts(
            con, end, window_minutes=window_minutes, basis=exposure_basis, observed_since=since
        )
        _, check = analysis_mod.lemon_evidence(counts.rates(["cluster_id", "node_id"]), lemon_fdr=lemon_fdr)
        method = check.method(options.interval)
        dispersion = check.dispersion(method)
        frame = counts.rates(by, period=period, dispersion=dispersion)
        fleet, overall = counts.rates([], dispersion=dispersion), counts.rates([])
        left_out = counts.left_out()
        counts.close()
    else:
        inventory, _, exposure = analysis_mod.service_window(con, options)
        incidents = analysis_mod.read_failures(
            con,
            interrupting_only=not all_categories,
            window_minutes=None if all_categories else window_minutes,
            attributes=attributes,
        )
        at_risk, _ = analysis_mod.rate_exposure(con, incidents, inventory, exposure, end, exposure_basis)
        # which failures count, matched to their interval once for every rate below
        with transform.Match(at_risk, failures=incidents) as match:
            in_service = transform.in_service_rows(incidents, at_risk, match.matched(), with_interval=True)
            left_out = match.left_out(end, since)
        overall = transform.failure_rates(incidents, at_risk, by=[], in_service=in_service)
        # every view counts the failures the rates count (one during a known repair of its node is
        # part of that outage), as analyze and the report do
        if view == "shares":
            incident_keys = [k for k in by if k not in transform.EXPOSURE_KEYS]
            frame = transform.category_shares(
                incidents,
                at_risk,
                by=[k for k in by if k in transform.EXPOSURE_KEYS],
                key=incident_keys[0] if len(incident_keys) == 1 else "failure_class",
                in_service=in_service,
            )
        elif view == "trend":
            operating = transform.failure_operating_times(incidents, exposure, in_service=in_service)
            frame = analysis_mod.trend_tests(operating, exposure)
        elif view == "jobs":
            rates_by_cluster = transform.failure_rates(incidents, at_risk, in_service=in_service)
            frame = analysis_mod.job_interruptions(con, rates_by_cluster, since=since)
            echo_jobs_before_window(since, con)
            if frame is None:
                raise ValueError(
                    "the warehouse has no Slurm jobs on clusters in the inventory; ingest sacct output first"
                )
        else:
            _, _, check = analysis_mod.node_evidence(
                incidents,
                at_risk,
                lemon_fdr=lemon_fdr,
                interrupting_only=not all_categories,
                in_service=in_service,
            )
            method = check.method(options.interval)
            dispersion = check.dispersion(method)

            def counted(keys: list[str], **options) -> pl.DataFrame:
                return transform.failure_rates(
                    incidents,
                    at_risk,
                    by=keys,
                    interrupting_only=not all_categories,
                    dispersion=dispersion,
                    in_service=in_service,
                    **options,
                )

            frame, fleet = counted(list(by), period=period), counted([])
    if view == "rates":
        frame = frame.with_columns(
            interval=pl.lit(method), dispersion=pl.lit(dispersion), exposure_basis=pl.lit(exposure_basis)
        )
    frame = frame.with_columns(exposure_estimated=pl.lit(estimated))
    echo_left_out(left_out)
    echo_warning(analysis_mod.left_out_warning(con, left_out, int(overall["failures"].sum())), as_json)
    echo_late_records(record_checks.late_records(con))
    if view == "rates" and not frame["failures"].sum():
        click.echo(no_failures_line(overall), err=True)
    if as_json:
        echo_json(records(frame))
        return
    if view == "rates":
        click.echo(rate_verdict(fleet.row(0, named=True), exposure_basis, method))
        click.echo(interval_line(check, method))
        # said once above, not in every row; the per-GPU interval is in --json (the text keeps to
        # the instance-hour one); the rate bound only where a group has no failure
        said = [
            "interval",
            "dispersion",
            "exposure_basis",
            "rate_per_gpu_hour_ci_low",
            "rate_per_gpu_hour_ci_high",
        ]
        if frame["failures"].min():
            said.append("rate_upper_bound")
        frame = frame.drop(said, strict=False)
    if estimated:
        click.echo("exposure estimated from the logs (no inventory): rates rest on guessed service intervals")
    click.echo(safe_lines(text_table(frame.drop("exposure_estimated"))))


def rate_verdict(fleet: dict, exposure_basis: str, method: str) -> str:
    """One line first: the fleet's rate with its interval, the MTBF of one instance, and the counts
    behind them (the unit of the published figures: % per instance-hour)."""
    hours = f"{fleet['exposure_node_hours']:,.0f} instance-hours of {exposure_basis}"
    if not fleet["failures"]:
        bound = format_value("rate_upper_bound", fleet["rate_upper_bound"])
        return f"Fleet: no failures in {hours}; the rate is below {bound} per instance-hour (95%)."
    rate = format_value("rate_per_node_hour", fleet["rate_per_node_hour"])
    low, high = (format_value("rate_per_node_hour", fleet[k]) for k in ("rate_ci_low", "rate_ci_high"))
    mtbf = format_value("mtbf_hours", 1 / fleet["rate_per_node_hour"])
    return (
        f"Fleet: {rate} failures per instance-hour (95% CI {low} to {high}, {interval_name(method)}), "
        "MTBF of one instance "
        f"{mtbf} h: {fleet['failures']:,} failure{'s' if fleet['failures'] != 1 else ''} in {hours}."
    )


def _group_keys(con, by: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """``--by`` keys as columns (``class`` is ``failure_class``) and the attribute keys among them;
    a key that is none of these is a usage error listing the keys this warehouse has."""
    attributes = warehouse.attribute_keys(con)
    builtin = (*transform.EXPOSURE_KEYS, "category", "class")
    unknown = [k for k in by if k not in builtin and k not in attributes]
    if unknown:
        extra = f"; attributes: {', '.join(attributes)}" if attributes else " (no extra input columns stored)"
        raise ValueError(f"--by {unknown[0]!r}: not a group key; use {', '.join(builtin)}{extra}")
    columns = ["failure_class" if k == "class" else k for k in by]
    return columns, [k for k in by if k not in builtin]
