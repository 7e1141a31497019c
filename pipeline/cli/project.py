"""failcast project: training time, goodput and cost of a job under failures (and the job options
and fleet look-ups that ``failcast spares`` shares)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from pipeline import analysis as analysis_mod
from pipeline import warehouse
from pipeline.cli.common import (
    db_option,
    echo_json,
    echo_late_records,
    json_option,
    main,
    records,
    recovery_option,
    safe_text,
)
from pipeline.projection import cannot_finish

NO_PRICE = (
    "no price given: costs are left out (--price-per-gpu-hour USD or [cluster] price_per_gpu_hour_usd "
    "in the job spec adds them)"
)


def required_measured_recovery(fleet: analysis_mod.FleetAnalysis, db: Path) -> dict[str, float]:
    """What ``--recovery measured`` uses (:func:`pipeline.analysis.measured_recovery_hours`); a
    ValueError saying what to ingest when the warehouse measured nothing."""
    measured = analysis_mod.measured_recovery_hours(fleet.repairs, fleet.jobs)
    if not measured:
        raise ValueError(
            f"--recovery measured: no outage in {db} has an end (resolved_at or a return in the "
            "inventory) and no training log has an interruption; use --recovery assumed"
        )
    return measured


_JOB_OPTIONS = (
    click.option(
        "--spec",
        "spec_path",
        type=click.Path(dir_okay=False, path_type=Path),
        help="TOML job spec (see data/jobs/llama3-70b.toml); flags override it.",
    ),
    click.option("--instances", type=int, help="Instances (nodes) in the job."),
    click.option("--gpus-per-instance", type=int, help="GPUs per instance [8]."),
    click.option("--gpu", help="GPU type for the FLOP/s table: H100, H200, A100, B200, MI300X."),
    click.option("--gpu-hours", type=float, help="Failure-free work in GPU-hours."),
    click.option("--params", type=float, help="Model parameters (work = 6 * params * tokens)."),
    click.option("--tokens", type=float, help="Training tokens."),
    click.option("--mfu", type=float, help="Model FLOPs utilisation in (0, 1] (with params/tokens)."),
    click.option(
        "--price-per-gpu-hour",
        "price_per_gpu_hour_usd",
        type=float,
        help="Price in USD per GPU-hour (without one: days, goodput and interruptions, no costs).",
    ),  # fmt: skip
    click.option(
        "--failure-rate",
        help="Failures in % per instance-hour (e.g. 0.05) or a preset: "
        "opt-175b, llama-3.1, mpt-7b, meta-rsc. Default: the warehouse's fleet rate.",
    ),
    click.option(
        "--node-ages",
        type=click.Choice(["stationary", "new"]),
        help="Node ages at job start for the fitted Weibull model: stationary (a running fleet) "
        "or new (every node fresh) [stationary].",
    ),
    recovery_option(),
    db_option,
)


def job_options(command):
    """The options that describe a job (spec, flags, failure rate, recovery source, --db)."""
    for option in reversed(_JOB_OPTIONS):
        command = option(command)
    return command


@dataclass
class Job:
    """A job spec projected on the fleet: the fleet's analysis when one was read, and what it
    measured (``--recovery measured``) with the :func:`pipeline.projection.recovery_sources` rows."""

    spec: object
    fleet: analysis_mod.FleetAnalysis | None
    measured: dict
    sources: list


def resolve_job(db: Path, spec_path, failure_rate, recovery_source: str, spares=None, **flags) -> Job:
    """The job of the options: its spec (the fleet's failure model for its size when none is
    given), the fleet's analysis when the warehouse exists, measured recovery when asked for."""
    from pipeline import projection as proj

    failure = None
    if failure_rate is not None:
        try:
            percent = float(failure_rate)
        except ValueError:
            failure = proj.FailureModel.preset(failure_rate)
        else:
            failure = proj.FailureModel.exponential(percent / 100, source="--failure-rate")
    fleets: list[analysis_mod.FleetAnalysis] = []

    def fleet_analysis(need: str) -> analysis_mod.FleetAnalysis:
        if not fleets:
            if not Path(db).exists():
                raise ValueError(f"{need}: ingest data into {db} or name the warehouse with --db")
            fleets.append(analysis_mod.analyze(warehouse.connect(db, read_only=True)))
        return fleets[0]

    def fleet_failure(instances: int) -> proj.FailureModel:
        """The warehouse's own model for a job of this size (only when no failure model is given)."""
        need = "no failure model: give --failure-rate (e.g. 0.05 or llama-3.1)"
        return analysis_mod.failure_model_for(fleet_analysis(need), instances)

    spec = proj.job_spec_for_fleet(spec_path, fleet_failure=fleet_failure, failure=failure, **flags)
    if recovery_source == "measured" or Path(db).exists():
        fleet_analysis("--recovery measured needs the fleet's repair data or training logs")
    measured, sources = {}, []
    if recovery_source == "measured":
        measured = required_measured_recovery(fleets[0], db)
        spec, sources = proj.with_measured_recovery(spec, measured, spares)
    for fleet in fleets:  # what the fleet's own numbers leave out or count wrongly, before them
        if fleet.left_out_warning:
            click.echo(f"warning: {safe_text(fleet.left_out_warning)}.", err=True)
        echo_late_records(fleet.late_records)
    return Job(spec, fleets[0] if fleets else None, measured, sources)


# --- project -------------------------------------------------------------------------------------
@main.command()
@job_options
@click.option(
    "--sweep", is_flag=True, help="Also print the cluster-size sweep (interval re-optimised per size)."
)
@click.option("--mode", "modes", multiple=True, help="Recovery mode(s) to show [all].")
@click.option(
    "--spares",
    type=click.IntRange(0),
    help="With --recovery measured: hot spares of the automatic mode's pool [the 99% row of "
    "failcast spares].",
)
@click.option("--monte-carlo-runs", type=int, default=10_000, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--explain", is_flag=True, help="Print the formulas and every assumption.")
@json_option
def project(sweep, modes, spares, monte_carlo_runs, seed, explain, as_json, **options) -> None:
    """Training time, goodput and cost of a job under failures, manual vs automatic recovery."""

    from pipeline import projection as proj
    from pipeline.report.format import usd as usd_text

    job = resolve_job(spares=spares, **options)
    spec = job.spec
    repair = job.fleet.repairs.times if job.fleet is not None else None
    pool = (
        None
        if repair is None
        else analysis_mod.spares_for_job(repair, spec.instances, spec.failure.rate_per_instance_hour)
    )
    result = proj.project(spec, monte_carlo_runs=monte_carlo_runs, seed=seed, modes=modes or None)
    if as_json:
        payload = result.to_dict()
        payload["sweep_cluster_size"] = records(proj.sweep_cluster_size(spec))
        payload["sweep_failure_rate"] = records(proj.sweep_failure_rate(spec))
        if len(spec.recovery) > 1:
            payload["sensitivity"] = records(proj.sensitivity_table(spec))
        payload["explain"] = proj.explain(result)
        payload["recovery_source"] = options["recovery_source"]
        payload["not_compared"] = result.not_compared
        if job.measured:
            payload["recovery_measured"] = {"hours": job.measured, "by_mode": job.sources}
        payload["spares"] = pool
        echo_json(payload)
        return
    if explain:
        click.echo(proj.explain(result))
        return
    cost = "" if result.failure_free_cost_usd is None else f" (${result.failure_free_cost_usd:,.0f})"
    click.echo(
        f"{spec.name}: {spec.instances} x {spec.gpus_per_instance} {spec.gpu}, "
        f"{result.work_gpu_hours:,.0f} GPU-hours, cluster MTBF {result.cluster_mtbf_hours:,.2f} h, "
        f"failure-free {result.failure_free_days:,.1f} days{cost}"
    )
    if spec.price_per_gpu_hour_usd is None:
        click.echo(f"  {NO_PRICE}")
    for m in result.modes.values():
        days, goodput, fails = m.expected_days, m.goodput, m.expected_interruptions
        spread = m.monte_carlo_with_rate_uncertainty or m.monte_carlo
        click.echo(_mode_line(m.mode, "exponential", days, goodput, fails, m.cost_usd, spread))
        if m.renewal is not None:
            r, spread = m.renewal, m.renewal_with_parameter_uncertainty or m.renewal
            days, goodput = r.mean_days, result.failure_free_days / r.mean_days
            click.echo(
                _mode_line(m.mode, "fitted Weibull model", days, goodput, r.mean_interruptions,
                           spec.cost_usd(days * 24), spread)
            )  # fmt: skip
            click.echo(f"    {proj.weibull_difference(spec, m)}")
        if m.note and m.finishes:
            click.echo(f"    {m.note}")
    for sv in result.savings:
        usd = "" if sv.usd is None else f" and {usd_text(sv.usd)}"
        click.echo(f"  {sv.mode} saves {sv.days:,.1f} days ({sv.percent:.1f}%){usd} over {sv.baseline}")
    if result.not_compared:
        click.echo(f"  not compared: {', '.join(result.not_compared)} cannot finish (goodput < 1%)")
    if job.measured:
        click.echo("  recovery times (h), assumed -> used; * measured:")
        for mode in spec.recovery:
            click.echo(
                f"    {mode:10s} "
                + "  ".join(
                    f"{r['time']} {r['assumed_hours']:,.2f} -> {r['used_hours']:,.2f}"
                    + ("*" if r["measured"] else "")
                    + (f" (spare pool of {r['spares']})" if r.get("spares") is not None else "")
                    for r in job.sources
                    if r["mode"] == mode
                )
            )
    if pool is not None:
        click.echo(
            f"  hot spares: {pool['spares']} for a failure to find one free with >= "
            f"{pool['probability']:.0%} probability ({pool['mean_in_repair']:,.2f} nodes in repair on "
            f"average at MTTR {pool['mttr_hours']:,.1f} h"
            + (", a lower bound: the longest repair is still open" if pool["mttr_restricted"] else "")
            + "); failcast spares weighs each spare's days and cost"
        )
    if sweep:
        click.echo(sweep_text(proj.sweep_cluster_size(spec), list(result.modes)))


def _mode_line(mode, model, days, goodput, interruptions, cost, mc) -> str:
    """One row: mode, model, expected days, goodput, interruptions, cost and the P10-P90 days."""
    if cannot_finish(goodput):
        return f"  {mode:10s} {model:21s} cannot finish: goodput < 1%"
    spread = f"  P10–P90 {mc.p10_days:,.1f}–{mc.p90_days:,.1f} days" if mc else ""
    usd = "" if cost is None else f"  ${cost:,.0f}"
    return (
        f"  {mode:10s} {model:21s} {days:10,.1f} days  goodput {goodput:6.1%}  "
        f"{interruptions:8,.0f} interruptions{usd}{spread}"
    )


def sweep_text(sweep, modes: list[str]) -> str:
    """The size sweep for people: per mode, days at the configured and the re-optimised interval."""
    lines = ["", "cluster size sweep (same work): expected days at the configured / optimal checkpoint"
             " interval"]  # fmt: skip
    for row in sweep.iter_rows(named=True):
        cells = [f"  {row['instances']:>7,} instances, cluster MTBF {row['cluster_mtbf_hours']:8.2f} h:"]
        for m in modes:
            cells.append(
                f"{m} {_days(row[f'{m}_expected_days'])} at {row[f'{m}_checkpoint_interval_hours']:.2g} h / "
                f"{_days(row[f'{m}_optimal_expected_days'])} at {row[f'{m}_optimal_interval_hours']:.2g} h"
            )
        lines.append("  ".join(cells[:1]) + " " + "; ".join(cells[1:]))
    return "\n".join(lines)


def _days(days: float | None) -> str:
    return "cannot finish (goodput < 1%)" if days is None else f"{days:,.1f} days"
