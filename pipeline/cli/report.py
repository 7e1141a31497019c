"""failcast report: the self-contained HTML report."""

from __future__ import annotations

from pathlib import Path

import click

from pipeline import analysis as analysis_mod
from pipeline import projection, warehouse
from pipeline import report as report_mod
from pipeline.cli.common import (
    analysis_options,
    db_option,
    main,
    recovery_option,
    window_options,
)
from pipeline.cli.project import required_measured_recovery
from pipeline.report.format import RATE_INTERVAL_SCOPE


# --- report --------------------------------------------------------------------------------------
@main.command(
    help="Write the self-contained HTML report (and a PNG/SVG of each chart). Rate intervals are "
    f"exact Poisson or quasi-Poisson, named where shown. {RATE_INTERVAL_SCOPE}"
)
@db_option
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=Path("reports"),
    show_default=True,
    help="Folder for the report (failcast-report.html) and charts/, or the report's own file name when "
    "it ends in .html (charts/ go beside it).",
)
@window_options
@click.option(
    "--job",
    "job_paths",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="TOML job spec to project (see failcast project); without [failures] the fleet's rate is used. "
    "Repeatable: the first is projected in detail, every one in the configured-jobs and hot-spares "
    "sections.",
)
@recovery_option()
@click.option("--monte-carlo-runs", type=int, default=10_000, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--images/--no-images", default=True, show_default=True, help="Also write charts/<chart>.png and .svg."
)
@click.option(
    "--baseline-db",
    "baseline_dbs",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Another fleet's warehouse (e.g. LANL's, see docs/public-data.md) to show beside the published "
    "GPU fleets in the public-baselines section, labelled by its file name. Repeatable.",
)
def report(
    db: Path,
    out: Path,
    since,
    until,
    job_paths: tuple[Path, ...],
    recovery_source: str,
    monte_carlo_runs: int,
    seed: int,
    images: bool,
    baseline_dbs: tuple[Path, ...],
):
    options = analysis_options(click.get_current_context().params)
    result = analysis_mod.analyze(warehouse.connect(db, read_only=True), options)
    baselines = {p.stem: _baseline(p) for p in baseline_dbs}
    outlook = None
    if job_paths:
        specs = [
            projection.job_spec_for_fleet(
                path, fleet_failure=lambda n: analysis_mod.failure_model_for(result, n)
            )
            for path in job_paths
        ]
        measured = required_measured_recovery(result, db) if recovery_source == "measured" else None
        outlook = report_mod.job_outlook(
            specs[0],
            monte_carlo_runs=monte_carlo_runs,
            seed=seed,
            measured=measured,
            repair=analysis_mod.repair_curve(result.repairs),
            others=specs[1:],
        )
    folder, name = (out.parent, out.name) if out.suffix.lower() in (".html", ".htm") else (out, None)
    if folder.exists() and not folder.is_dir():
        raise click.BadParameter(f"{folder} is a file; name a folder or an .html file", param_hint="--out")
    path = report_mod.write_report(
        result,
        folder,
        name or report_mod.REPORT_FILENAME,
        projection=outlook,
        images=images,
        baselines=baselines,
    )
    click.echo(f"wrote {path}")
    if images:
        click.echo(f"wrote {path.parent / report_mod.CHARTS_DIR}/*.png, *.svg")


def _baseline(path: Path) -> analysis_mod.FleetAnalysis:
    """Another fleet's analysis; its errors name the option and file they came from."""
    try:
        return analysis_mod.analyze(warehouse.connect(path, read_only=True))
    except ValueError as exc:
        raise ValueError(f"--baseline-db {path}: {exc}") from exc
