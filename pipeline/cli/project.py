"""failcast project: training time, goodput and cost of a job under failures."""

from __future__ import annotations

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


def required_measured_recovery(fleet: analysis_mod.FleetAnalysis, db: Path) -> dict[str, float]:
    """What ``--recovery measured`` uses (:func:`pipeline.analysis.measured_recovery_hours`); a
    ValueError saying what to ingest when the warehouse measured nothing."""
    measured = analysis_mod.measured_recovery_hours(fleet)
    if not measured:
        raise ValueError(
            f"--recovery measured: no outage in {db} has an end (resolved_at or a return in the "
            "inventory) and no training log has an interruption; use --recovery assumed"
        )
    return measured


# --- project -------------------------------------------------------------------------------------
@main.command()
@click.option(
    "--spec",
    "spec_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="TOML job spec (see data/jobs/llama3-70b.toml); flags override it.",
)
@click.option("--instances", type=int, help="Instances (nodes) in the job.")
@click.option("--gpus-per-instance", type=int, help="GPUs per instance [8].")
@click.option("--gpu", help="GPU type for the FLOP/s table: H100, H200, A100, B200, MI300X.")
@click.option("--gpu-hours", type=float, help="Failure-free work in GPU-hours.")
@click.option("--params", type=float, help="Model parameters (work = 6 * params * tokens).")
@click.option("--tokens", type=float, help="Training tokens.")
@click.option("--mfu", type=float, help="Model FLOPs utilisation in (0, 1] (with params/tokens).")
@click.option("--price-per-gpu-hour", type=float, help="Price in USD per GPU-hour.")
@click.option(
    "--failure-rate",
    help="Failures in % per instance-hour (e.g. 0.05) or a preset: "
    "opt-175b, llama-3.1, mpt-7b, meta-rsc. Default: the warehouse's fleet rate.",
)
@click.option(
    "--node-ages",
    type=click.Choice(["stationary", "new"]),
    help="Node ages at job start for the fitted Weibull model: stationary (a running fleet) "
    "or new (every node fresh) [stationary].",
)
@click.option(
    "--sweep", is_flag=True, help="Also print the cluster-size sweep (interval re-optimised per size)."
)
@click.option("--mode", "modes", multiple=True, help="Recovery mode(s) to show [all].")
@recovery_option()
@click.option("--monte-carlo-runs", type=int, default=10_000, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--explain", is_flag=True, help="Print the formulas and every assumption.")
@json_option
@db_option
def project(
    spec_path,
    instances,
    gpus_per_instance,
    gpu,
    gpu_hours,
    params,
    tokens,
    mfu,
    price_per_gpu_hour,
    failure_rate,
    node_ages,
    sweep,
    modes,
    recovery_source,
    monte_carlo_runs,
    seed,
    explain,
    as_json,
    db,
) -> None:
    """Training time, goodput and cost of a job under failures, manual vs automatic recovery."""

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

    overrides = dict(
        instances=instances,
        gpus_per_instance=gpus_per_instance,
        gpu=gpu,
        gpu_hours=gpu_hours,
        params=params,
        tokens=tokens,
        mfu=mfu,
        price_per_gpu_hour_usd=price_per_gpu_hour,
        failure=failure,
        node_ages=node_ages,
    )
    spec = proj.job_spec_for_fleet(spec_path, fleet_failure=fleet_failure, **overrides)
    repair, measured = None, {}
    if recovery_source == "measured" or Path(db).exists():
        fleet = fleet_analysis("--recovery measured needs the fleet's repair data or training logs")
        repair = fleet.repair_times
    if recovery_source == "measured":
        measured = required_measured_recovery(fleet, db)
        spec, sources = proj.with_measured_recovery(spec, measured)
    spares = (
        None
        if repair is None
        else analysis_mod.spares_for_job(repair, spec.instances, spec.failure.rate_per_instance_hour)
    )
    result = proj.project(spec, monte_carlo_runs=monte_carlo_runs, seed=seed, modes=modes or None)
    for fleet in fleets:  # what the fleet's own numbers leave out or count wrongly, before them
        if fleet.left_out_warning:
            click.echo(f"warning: {safe_text(fleet.left_out_warning)}.", err=True)
        echo_late_records(fleet.late_records)
    if as_json:
        payload = result.to_dict()
        payload["sweep_cluster_size"] = records(proj.sweep_cluster_size(spec))
        payload["sweep_failure_rate"] = records(proj.sweep_failure_rate(spec))
        if len(spec.recovery) > 1:
            payload["sensitivity"] = records(proj.sensitivity_table(spec))
        payload["explain"] = proj.explain(result)
        payload["recovery_source"] = recovery_source
        if measured:
            payload["recovery_measured"] = {"hours": measured, "by_mode": sources}
        payload["spares"] = spares
        echo_json(payload)
        return
    if explain:
        click.echo(proj.explain(result))
        return
    usd_per_day = 24 * spec.gpus * spec.price_per_gpu_hour_usd
    click.echo(
        f"{spec.name}: {spec.instances} x {spec.gpus_per_instance} {spec.gpu}, "
        f"{result.work_gpu_hours:,.0f} GPU-hours, cluster MTBF {result.cluster_mtbf_hours:,.2f} h, "
        f"failure-free {result.failure_free_days:,.1f} days (${result.failure_free_cost_usd:,.0f})"
    )
    for m in result.modes.values():
        days, goodput, fails = m.expected_days, m.goodput, m.expected_interruptions
        spread = m.monte_carlo_with_rate_uncertainty or m.monte_carlo
        click.echo(_mode_line(m.mode, "exponential", days, goodput, fails, m.cost_usd, spread))
        if m.renewal is not None:
            r, spread = m.renewal, m.renewal_with_parameter_uncertainty or m.renewal
            days, goodput = r.mean_days, result.failure_free_days / r.mean_days
            click.echo(
                _mode_line(m.mode, "fitted Weibull model", days, goodput, r.mean_interruptions,
                           days * usd_per_day, spread)
            )  # fmt: skip
            click.echo(f"    {proj.weibull_difference(spec, m)}")
        if m.note:
            click.echo(f"    {m.note}")
    for sv in result.savings:
        click.echo(
            f"  {sv.mode} saves {sv.days:,.1f} days ({sv.percent:.1f}%) and ${sv.usd:,.0f} over {sv.baseline}"
        )
    if measured:
        click.echo("  recovery times (h), assumed -> used; * measured:")
        for mode in spec.recovery:
            click.echo(
                f"    {mode:10s} "
                + "  ".join(
                    f"{r['time']} {r['assumed_hours']:,.2f} -> {r['used_hours']:,.2f}"
                    + ("*" if r["measured"] else "")
                    for r in sources
                    if r["mode"] == mode
                )
            )
    if spares is not None:
        click.echo(
            f"  hot spares: {spares['spares']} for a failure to find one free with >= "
            f"{spares['probability']:.0%} probability ({spares['mean_in_repair']:,.2f} nodes in repair on "
            f"average at MTTR {spares['mttr_hours']:,.1f} h"
            + (", a lower bound: the longest repair is still open)" if spares["mttr_restricted"] else ")")
        )
    if sweep:
        click.echo(sweep_text(proj.sweep_cluster_size(spec), list(result.modes)))


def _mode_line(mode, model, days, goodput, interruptions, cost, mc) -> str:
    """One row: mode, model, expected days, goodput, interruptions, cost and the P10-P90 days."""
    if cannot_finish(goodput):
        return f"  {mode:10s} {model:21s} cannot finish: goodput < 1%"
    spread = f"  P10–P90 {mc.p10_days:,.1f}–{mc.p90_days:,.1f} days" if mc else ""
    return (
        f"  {mode:10s} {model:21s} {days:10,.1f} days  goodput {goodput:6.1%}  "
        f"{interruptions:8,.0f} interruptions  ${cost:,.0f}{spread}"
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
