"""failcast repairs: outages, downtime, availability and repair times (MTTR, median, p90)."""

from __future__ import annotations

import math
from pathlib import Path

import click

from pipeline import analysis as analysis_mod
from pipeline.cli.common import echo_json, main, records, safe_lines
from pipeline.cli.window import by_option, open_window, window_command
from pipeline.report.format import text_table


def _hours(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if math.isinf(value):
        return "unbounded"
    return f"{value:,.1f} h" if value < 100 else f"{value:,.0f} h"


def _interval(row: dict, point: str, low: str, high: str) -> str:
    if row[point] is None:
        return "n/a (no completed repair)"
    return f"{_hours(row[point])} (95% CI {_hours(row[low])}–{_hours(row[high])})"


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3%}"


def _quantile(name: str) -> tuple[str, str, str]:
    column = f"repair_hours_{name}"
    return column, f"{column}_ci_low", f"{column}_ci_high"


def _verdict(total: dict, left_out: int, before: str | None) -> list[str]:
    lines = [
        f"{total['outages']:,} outages, {total['unresolved']:,} unresolved (right-censored at the window "
        f"end), availability {_percent(total['availability'])}, downtime {total['downtime_hours']:,.0f} "
        "node-hours",
        f"  median repair {_interval(total, *_quantile('p50'))}",
        f"  p90 repair    {_interval(total, *_quantile('p90'))}",
        f"  MTTR (mean)   {_interval(total, 'mttr_hours', 'mttr_ci_low_hours', 'mttr_ci_high_hours')}"
        + (" — restricted to the longest repair seen: a lower bound" if total["mttr_restricted"] else ""),
    ]
    lines += [f"  {note}" for note in analysis_mod.repair_count_notes(total)]
    if total["unknown_end"]:
        lines.append(
            f"  left out of repair times: {total['unknown_end']:,} outages with no recorded end whose node "
            "failed again later (back at an unknown time)"
        )
    if left_out:
        lines.append(f"  left out: {left_out:,} interruptions after the window end (--until)")
    if before:
        lines.append(f"  {before}")
    return lines


@main.command()
@window_command
@by_option("Group key (repeatable): cluster_id, node_id, instance_type, category, failure_class, ...")
def repairs(db: Path, by, interruption_window_minutes: float, since, until, as_json: bool) -> None:
    """Outages and repair: downtime, availability, MTTR and repair-time quantiles per group.

    An outage is an interruption with its end (resolved_at, or the node's return in the
    inventory; a resolved_at equal to the start is a repair of 0 h); unresolved outages are
    right-censored at the window end (Kaplan–Meier). With ``--since``, outages that began before
    it are left out (counted), their downtime still not time at risk."""
    con, (inventory, options, exposure) = open_window(db, inventory_required=False)
    end, since = options.until, options.since
    failures = analysis_mod.read_failures(con, window_minutes=options.interruption_window_minutes)
    uptime, every_outage = analysis_mod.rate_exposure(con, failures, inventory, exposure, end)
    outages = options.in_window(every_outage, "start_utc")
    before = int(every_outage.height - outages.height)
    left_out = int((failures["timestamp_utc"] > end).sum())
    groups = analysis_mod.repair_summary(outages, exposure, uptime, by)
    total = analysis_mod.repair_summary(outages, exposure, uptime).row(0, named=True)
    if as_json:
        echo_json(
            {
                "observed_until": end,
                **({"observed_since": since, "outages_before_window": before} if since else {}),
                "interruptions_after_window": left_out,
                "total": total,
                "groups": records(groups),
            }
        )
        return
    before_note = analysis_mod.before_window_note(since, {"outages": before})
    if not total["outages"]:
        click.echo("no outages: no interrupting failures in the window")
        if before_note:
            click.echo(before_note)
        return
    click.echo("\n".join(_verdict(total, left_out, before_note)))
    if inventory.height == 0:
        click.echo("  availability needs each node's hours in service: ingest an inventory file")
    columns = [*by, "outages", "unresolved", "downtime_hours", "availability", "mttr_hours"]
    table = groups.select(*columns, "repair_hours_p50", "repair_hours_p90")
    click.echo(safe_lines(text_table(table)))
