"""failcast backtest: were the fleet's own jobs interrupted as often as the failure model said?

Each Slurm job's interruptions are predicted from the failures and exposure observed before it
started (:mod:`pipeline.transform.backtest`) and compared with what happened
(:class:`pipeline.models.JobBacktest`). The verdict comes first, then the detail.
"""

from __future__ import annotations

from pathlib import Path

import click

from pipeline import analysis as analysis_mod
from pipeline import transform
from pipeline.cli.common import echo_json, main, records
from pipeline.cli.window import echo_jobs_before_window, open_window, window_command

_LEFT_OUT = {"no history": "too little failure history before they started", "did not run": "never ran"}


def backtest_payload(result: analysis_mod.JobBacktestResult) -> dict:
    """What ``failcast backtest --json`` prints."""
    fitted = result.backtest
    payload = {
        "min_history_failures": result.min_history_failures,
        "jobs": result.predictions.height,
        "jobs_by_rate_source": transform.rate_source_counts(result.predictions),
        "verdict": None,
    }
    if fitted is None:
        return payload
    return payload | {
        "verdict": fitted.verdict_,
        "headline": fitted.headline,
        "jobs_scored": fitted.jobs_,
        "observed_interruptions": fitted.observed_,
        "expected_interruptions": fitted.expected_,
        "observed_to_expected": fitted.ratio_,
        "observed_to_expected_ci": fitted.ratio_confidence_interval_,
        "coverage_time_to_first_interruption": fitted.coverage_,
        "brier_score": fitted.brier_score_,
        "brier_reference": fitted.brier_reference_,
        "calibration": records(fitted.calibration_),
    }


def _share(value: float | None) -> str:
    return "not observed (no job ran long enough)" if value is None else f"{value:.1%}"


def _echo_text(result: analysis_mod.JobBacktestResult) -> None:
    counts = transform.rate_source_counts(result.predictions)
    fitted = result.backtest
    click.echo(fitted.headline if fitted else "no job could be scored: none had a prediction above zero")
    click.echo(
        f"{result.predictions.height:,} jobs: {counts['cluster']:,} predicted from their cluster's rate, "
        f"{counts['fleet']:,} from the fleet's (cluster with fewer than {result.min_history_failures} "
        "failures before the job)"
    )
    for source, why in _LEFT_OUT.items():
        if counts[source]:
            click.echo(f"  left out: {counts[source]:,} jobs that {why}")
    if fitted is None:
        return
    click.echo("\ncalibration (jobs in bins of predicted interruptions per job-hour):")
    click.echo(
        f"  {'predicted/job-hour':>20}  {'jobs':>7}  {'interrupted':>11}  {'predicted':>9}  "
        f"{'observed (95% CI)':>24}"
    )
    for row in fitted.calibration_.iter_rows(named=True):
        span = f"{row['hazard_low_per_hour']:.2g}–{row['hazard_high_per_hour']:.2g}"
        observed = f"{row['observed_share']:.1%} ({row['observed_ci_low']:.1%}–{row['observed_ci_high']:.1%})"
        click.echo(
            f"  {span:>20}  {row['jobs']:>7,}  {row['interrupted']:>11,}  {row['predicted_share']:>9.1%}  "
            f"{observed:>24}"
        )
    coverage = fitted.coverage_
    click.echo(
        "\ntime to first interruption against its predicted P10–P90: "
        f"before P10 {_share(coverage['before_p10'])} (nominal 10%), "
        f"within {_share(coverage['within_p10_p90'])} (80%), after P90 {_share(coverage['after_p90'])} (10%)"
    )
    click.echo(
        f"Brier score {fitted.brier_score_:.4f} (always forecasting the observed share: "
        f"{fitted.brier_reference_:.4f}; lower is better)"
    )


@main.command()
@window_command
@click.option(
    "--min-history",
    "min_history",
    type=click.IntRange(min=1),
    default=transform.MIN_HISTORY_FAILURES,
    show_default=True,
    metavar="FAILURES",
    help="A job uses its cluster's rate when the cluster had this many failures before it started, "
    "else the fleet's (same minimum), else it is left out.",
)
def backtest(
    db: Path, since, until, min_history: int, interruption_window_minutes: float, as_json: bool
) -> None:
    """Predict each past Slurm job's interruptions from the data before it started and compare
    with what happened: verdict, calibration, coverage, Brier score."""
    con, (_, options, exposure) = open_window(db)
    failures = analysis_mod.read_failures(con, window_minutes=options.interruption_window_minutes)
    failures = options.in_window(failures)  # the history a prediction uses starts at the window's start
    result = analysis_mod.job_backtest(
        con, failures, exposure, min_history_failures=min_history, since=options.since
    )
    echo_jobs_before_window(options.since, con)
    if result is None:
        raise ValueError(
            "the warehouse has no Slurm jobs: ingest sacct output first (failcast ingest --format sacct)"
        )
    if as_json:
        echo_json(backtest_payload(result))
    else:
        _echo_text(result)
