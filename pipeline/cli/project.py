"""failcast project: training time, goodput and cost of a job under failures."""

from __future__ import annotations

from pathlib import Path

import click

from pipeline import analysis as analysis_mod
from pipeline import warehouse
from pipeline.cli.common import (
    db_option,
    echo_json,
    json_option,
    main,
    records,
)


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
@click.option("--mode", "modes", multiple=True, help="Recovery mode(s) to show [all].")
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
    modes,
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

    def fleet_failure(instances: int) -> proj.FailureModel:
        """The warehouse's own model for a job of this size (only when no failure model is given)."""
        if not Path(db).exists():
            raise ValueError(
                f"no failure model: give --failure-rate (e.g. 0.05 or llama-3.1) or ingest data into {db}"
            )
        fleet = analysis_mod.analyze(warehouse.connect(db, read_only=True))
        return analysis_mod.failure_model_for(fleet, instances)

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
    )
    spec = proj.job_spec_for_fleet(spec_path, fleet_failure=fleet_failure, **overrides)
    result = proj.project(spec, monte_carlo_runs=monte_carlo_runs, seed=seed, modes=modes or None)
    if as_json:
        payload = result.to_dict()
        payload["sweep_cluster_size"] = records(proj.sweep_cluster_size(spec))
        payload["sweep_failure_rate"] = records(proj.sweep_failure_rate(spec))
        if len(spec.recovery) > 1:
            payload["sensitivity"] = records(proj.sensitivity_table(spec))
        payload["explain"] = proj.explain(result)
        echo_json(payload)
        return
    if explain:
        click.echo(proj.explain(result))
        return
    click.echo(
        f"{spec.name}: {spec.instances} x {spec.gpus_per_instance} {spec.gpu}, "
        f"{result.work_gpu_hours:,.4g} GPU-hours, cluster MTBF {result.cluster_mtbf_hours:,.2f} h, "
        f"failure-free {result.failure_free_days:,.1f} days (${result.failure_free_cost_usd:,.0f})"
    )
    for m in result.modes.values():
        mc = m.monte_carlo
        spread = f"  P10/P50/P90 {mc.p10_days:,.1f}/{mc.p50_days:,.1f}/{mc.p90_days:,.1f} d" if mc else ""
        click.echo(
            f"  {m.mode:10s} {m.expected_days:10,.1f} days  goodput {m.goodput:6.1%}  "
            f"{m.expected_interruptions:8,.0f} interruptions  ${m.cost_usd:,.0f}{spread}"
        )
    for sv in result.savings:
        click.echo(
            f"  {sv.mode} saves {sv.days:,.1f} days ({sv.percent:.1f}%) and ${sv.usd:,.0f} over {sv.baseline}"
        )
