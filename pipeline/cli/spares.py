"""failcast spares: how many hot spares a job should hold, with the days, goodput and cost of each."""

from __future__ import annotations

import click
import polars as pl

from pipeline import analysis as analysis_mod
from pipeline.cli.common import echo_json, json_option, main, records, safe_lines
from pipeline.cli.project import NO_PRICE, job_options, required_measured_recovery, resolve_job


def spares_text(spec, advice, repair_note: str) -> str:
    """The verdict, the rule, the 99% row and the table, for people."""
    from pipeline.report.format import text_table

    pool = advice.pool
    lines = [
        f"{spec.name}: {spec.instances} x {spec.gpus_per_instance} {spec.gpu}, "
        f"{spec.work_gpu_hours:,.0f} GPU-hours; cluster MTBF "
        f"{1 / (spec.instances * pool.rate_per_node_hour):,.2f} h; {repair_note}; swap "
        f"{_hours(pool.swap_hours)}; {advice.mode} recovery profile",
    ]
    if advice.recommended is None:
        lines.append(
            "cannot finish at any number of spares: even with a free spare at every failure the "
            "goodput is under 1%; use fewer instances or faster recovery"
        )
    else:
        spread = (
            f" ({_range(advice.low, advice.high)} over {advice.intervals})"
            if advice.low is not None and advice.high is not None
            else " (no interval: neither the rate nor the repair time has one)"
        )
        lines.append(f"recommended: {advice.recommended} hot spare{'s' * (advice.recommended != 1)}{spread}")
    lines.append(f"rule: {advice.rule}")
    if not advice.priced:
        lines.append(NO_PRICE)
    lines.append(
        f"the {advice.probability:.0%} row: {advice.probability_row} spares (a failure finds a free spare "
        f"with >= {advice.probability:.0%} probability; it replaces the M/G/inf count of before)"
    )
    table = advice.table.with_columns(
        note=pl.when(pl.col("spares") == advice.recommended).then(pl.lit("recommended")).otherwise(pl.lit(""))
        + pl.when(pl.col("spares") == advice.probability_row)
        .then(pl.lit(f" {advice.probability:.0%} row"))
        .otherwise(pl.lit(""))
    )
    drop = [] if advice.priced else ["cost_usd", "spares_cost_usd", "saving_usd"]
    if (table["status"] == "finishes").all():
        drop.append("status")
    lines += ["", text_table(table.drop(drop))]
    return "\n".join(lines)


def _range(low: int, high: int) -> str:
    return f"{low}" if low == high else f"{low} to {high}"


def _hours(hours: float) -> str:
    return f"{hours * 60:.3g} min (assumed)" if hours < 1 else f"{hours:.3g} h (assumed)"


@main.command()
@job_options
@click.option(
    "--swap-hours",
    type=click.FloatRange(0),
    help="Hours to swap a free spare into the job [the automatic profile's replace_hours, 10 min].",
)
@click.option(
    "--mttr-hours",
    type=click.FloatRange(0, min_open=True),
    help="Mean repair time to assume instead of the warehouse's measured repair curve.",
)
@click.option(
    "--min-saving-pct",
    type=click.FloatRange(0, 100, min_open=True, max_open=True),
    default=1.0,
    show_default=True,
    help="Without a price: add a spare while it saves at least this % of the job's days.",
)
@json_option
def spares(swap_hours, mttr_hours, min_saving_pct, as_json, **options) -> None:
    """Hot spares for a job: days, goodput and cost for S = 0, 1, 2, ... spares, and how many to hold.

    \b
    A failure finds a free spare with probability p(S) (Engset's formula over the N + S nodes at
    the fleet's rate and mean repair time), else waits for the earliest repair; see
    docs/projection.md, "Hot spares".
    """
    from pipeline import projection as proj

    source = options.pop("recovery_source")
    job = resolve_job(recovery_source="assumed", **options)
    spec, fleet = job.spec, job.fleet
    if source == "measured":  # detection and restart from job logs; the pool is this command's
        spec = proj.with_measured_job_times(spec, required_measured_recovery(fleet, options["db"]))
    curve = analysis_mod.repair_curve(fleet.repairs) if fleet is not None else None
    if mttr_hours is not None:
        repair, note = mttr_hours, f"MTTR {mttr_hours:,.1f} h (assumed)"
    elif curve is not None:
        low, high = curve.mean_ci_hours
        repair = curve
        note = (
            f"MTTR {curve.mean_hours:,.1f} h (95% CI {low:,.1f}–{high:,.1f}; Kaplan–Meier of the fleet's "
            f"outages{', a lower bound: the longest repair is still open' if curve.restricted else ''})"
        )
    else:
        raise ValueError(
            "no repair times: ingest outages with an end (resolved_at or a return in the inventory) "
            "into --db, or give --mttr-hours"
        )
    advice = proj.spare_advice(spec, repair, swap_hours=swap_hours, min_saving_pct=min_saving_pct)
    if as_json:
        echo_json(
            {
                "job": spec.name,
                "instances": spec.instances,
                "mode": advice.mode,
                "rate_per_instance_hour": advice.pool.rate_per_node_hour,
                "mean_repair_hours": advice.pool.mean_repair_hours,
                "swap_hours": advice.pool.swap_hours,
                "recommended": advice.recommended,
                "recommended_low": advice.low,
                "recommended_high": advice.high,
                "intervals": advice.intervals,
                "probability": advice.probability,
                "probability_row": advice.probability_row,
                "rule": advice.rule,
                "priced": advice.priced,
                "table": records(advice.table),
            }
        )
        return
    click.echo(safe_lines(spares_text(spec, advice, note)))
