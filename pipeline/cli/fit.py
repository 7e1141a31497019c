"""failcast fit: time-between-failures models, MTBF and its scaling with cluster size."""

from __future__ import annotations

from pathlib import Path

import click

from pipeline import analysis as analysis_mod
from pipeline import transform, warehouse
from pipeline.cli.common import analysis_options, echo_json, echo_late_records, main, records, safe_text
from pipeline.cli.window import echo_before, echo_left_out, echo_warning, no_failures_line, window_command
from pipeline.report.format import format_value, p_value_text


def _tbf_fit(m) -> dict:
    return {
        "params": m.params_,
        "confidence_interval": m.confidence_interval_,
        "mtbf_hours": m.mtbf_hours_,
        "mtbf_ci_hours": m.mtbf_confidence_interval_,
        "mtbf_note": m.mtbf_note_,
        "aic": m.aic_,
        "log_likelihood": m.log_likelihood_,
        "shape": m.shape_,
        "infant_mortality": m.infant_mortality_,
        "hazard_message": m.hazard_message_,
    }


def fit_payload(result: analysis_mod.FleetAnalysis) -> dict:
    """Everything ``failcast fit --json`` prints (the report and notebooks read FleetAnalysis)."""
    regression = result.fits.size_regression
    return {
        "observed_until": result.observed_until,
        **({"observed_since": result.options.since} if result.options.since else {}),
        "first_gap": result.fits.first_gap,
        "interruption_window_minutes": result.interruption_window_minutes,
        "exposure_estimated": result.exposure_estimated,
        "failures": int(result.rates.overall["failures"].sum()),
        "failures_left_out": records(result.failures_left_out),
        "best_family": result.fits.best_family,
        "not_fitted": result.too_few_gaps or None,
        "hazard_message": result.fits.node_fits["weibull"].hazard_message_ if result.has_fits else None,
        "node_time_between_failures": {family: _tbf_fit(m) for family, m in result.fits.node_fits.items()},
        "kaplan_meier_median_hours": result.fits.kaplan_meier.median_hours_ if result.has_fits else None,
        "cluster_mtbf": records(result.rates.cluster_mtbf),
        "scaling": None
        if result.fits.scaling is None
        else {
            "alpha": result.fits.scaling.alpha_,
            "alpha_ci": result.fits.scaling.alpha_confidence_interval_,
            "mtbf_one_instance_hours": result.fits.scaling.mtbf_one_hours_,
            "count_dispersion": result.fits.count_dispersion,
            "projected": records(result.fits.scaling_projection),
        },
        "size_regression": None
        if regression is None
        else {
            "model": "weibull_aft(log_instances)",
            "alpha": regression.alpha_,
            "alpha_ci": regression.alpha_confidence_interval_,
            "shape": regression.shape_,
            "shape_ci": regression.shape_confidence_interval_,
            "count_dispersion": regression.dispersion_,
            "mtbf_one_instance_hours": regression.mtbf_one_hours_,
            "projected": records(result.fits.size_regression_projection),
        },
        "size_laws_agreement": analysis_mod.size_laws_agreement(result) or None,
        "trend_tests": records(result.rates.trend_tests),
        "category_shares": records(result.rates.category_shares),
        "job_interruptions": None
        if result.jobs.interruptions is None
        else records(result.jobs.interruptions),
    }


@main.command()
@window_command
@click.option(
    "--first-gap",
    type=click.Choice(transform.FIRST_GAP_CHOICES),
    default="drop",
    show_default=True,
    help="drop: leave out the span from a window's start to its first failure (it is not a full "
    "gap when logs start on a running node); keep: nodes are observed from installation.",
)
def fit(db: Path, since, until, first_gap: str, interruption_window_minutes: float, as_json: bool) -> None:
    """Fit time-between-failures models and the MTBF scaling law."""
    options = analysis_options(click.get_current_context().params)
    result = analysis_mod.analyze(warehouse.connect(db, read_only=True), options)
    echo_left_out(result.failures_left_out)
    echo_before(result)
    echo_warning(result.left_out_warning, as_json)
    echo_late_records(result.late_records)
    if as_json:
        echo_json(fit_payload(result))
        return
    if not result.has_failures:
        click.echo(f"nothing to fit: {no_failures_line(result.rates.overall)}")
        return
    if not result.has_fits:
        click.echo(f"nothing to fit: {result.too_few_gaps}")
        return
    click.echo(f"best family by AIC: {result.fits.best_family}")
    for family, m in result.fits.node_fits.items():
        low, high = m.mtbf_confidence_interval_
        click.echo(
            f"  {family:12s} node MTBF {format_value('mtbf_hours', m.mtbf_hours_):>10s} h  "
            f"(95% CI {format_value('mtbf_hours', low)}–{format_value('mtbf_hours', high)})"
            f"  AIC {m.aic_:,.1f}" + (f"\n               {m.mtbf_note_}" if m.mtbf_note_ else "")
        )
    click.echo(result.fits.node_fits["weibull"].hazard_message_)
    for name, s in (("counts", result.fits.scaling), ("Weibull AFT", result.fits.size_regression)):
        if s is not None:
            click.echo(
                f"MTBF(N) = {format_value('mtbf_hours', s.mtbf_one_hours_)} h / N^{s.alpha_:.3f} "
                f"(alpha 95% CI {s.alpha_confidence_interval_[0]:.3f}–"
                f"{s.alpha_confidence_interval_[1]:.3f}; {name})"
            )
    agreement = analysis_mod.size_laws_agreement(result)
    if agreement:
        click.echo(agreement)
    for row in result.rates.trend_tests.iter_rows(named=True):
        if row["crow_verdict"] is not None:
            click.echo(
                f"trend {safe_text(row['cluster_id'])}: {row['crow_verdict']} "
                f"(MIL-HDBK-189 beta {row['crow_beta']:.2f}, {p_value_text(row['crow_p_value'])}; "
                f"Laplace {p_value_text(row['laplace_p_value'])})"
            )
