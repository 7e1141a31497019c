"""The ``failcast`` command line: one sub-command per stage, plus ``run`` for schedulers.

Exit codes: 0 success; 2 bad usage or bad input (one line on stderr naming the file and reason);
1 an unexpected error (one line; ``--debug`` shows the traceback).
"""

from __future__ import annotations

import glob
import json
import math
import signal
import sys
import threading
from datetime import date, datetime
from pathlib import Path

import click
import polars as pl

from pipeline import analysis as analysis_mod
from pipeline import config as config_mod
from pipeline import ingest as ingest_mod
from pipeline import report as report_mod
from pipeline import runs as runs_mod
from pipeline import sample as sample_mod
from pipeline import transform, warehouse

EXIT_INPUT = 2
EXIT_UNEXPECTED = 1
EXPECTED_ERRORS = (ingest_mod.InputError, config_mod.ConfigError, ValueError, FileNotFoundError)


def fail(message: str, code: int = EXIT_INPUT) -> None:
    """Stop with one line on stderr: what is wrong and, where possible, how to fix it."""
    click.echo(f"failcast: {message}", err=True)
    sys.exit(code)


def _json_default(value):
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    raise TypeError(f"cannot serialise {type(value).__name__}")


def _finite(value):
    """JSON has no infinity or NaN: an unbounded interval end is written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def echo_json(payload) -> None:
    click.echo(json.dumps(_finite(payload), indent=2, default=_json_default, allow_nan=False))


def _records(frame: pl.DataFrame) -> list[dict]:
    return frame.to_dicts()


def _safe(text: str) -> str:
    """Neutralise terminal control characters in text that came from logs."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


db_option = click.option(
    "--db",
    type=click.Path(dir_okay=False, path_type=Path),
    default=warehouse.DEFAULT_DB_PATH,
    show_default=True,
    help="DuckDB warehouse file.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
until_option = click.option(
    "--until",
    "observed_until",
    type=click.DateTime(),
    help="End of the observed window (UTC); default: the latest time in the data.",
)


class FailcastGroup(click.Group):
    """Turns expected errors into one line and exit code 2, anything else into exit code 1."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except EXPECTED_ERRORS as exc:
            fail(_safe(str(exc)))
        except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise
        except Exception as exc:
            if ctx.params.get("debug"):
                raise
            fail(
                f"unexpected error: {type(exc).__name__}: {_safe(str(exc))} "
                "(rerun with --debug for the traceback)",
                EXIT_UNEXPECTED,
            )


@click.group(cls=FailcastGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks of unexpected errors.")
@click.version_option(package_name="failcast")
def main(debug: bool) -> None:
    """failcast: failure rates, MTBF and training-time projections for GPU clusters."""


# --- sample ---------------------------------------------------------------------------------
@main.command()
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=config_mod.SAMPLE_DIR,
    show_default=True,
)
@click.option("--seed", type=int, default=sample_mod.FleetSpec.seed, show_default=True)
@click.option(
    "--rate",
    "rate_pct",
    type=float,
    default=0.05,
    show_default=True,
    help="True interrupting failure rate, % per instance-hour.",
)
@click.option(
    "--shape",
    type=float,
    default=sample_mod.FleetSpec.weibull_shape,
    show_default=True,
    help="Weibull shape of each node's times between failures.",
)
@click.option("--days", type=float, default=sample_mod.FleetSpec.days, show_default=True)
@click.option(
    "--sizes",
    default="32,64,128,256,512,1024",
    show_default=True,
    help="Comma-separated instance counts, one cluster each.",
)
def sample(out: Path, seed: int, rate_pct: float, shape: float, days: float, sizes: str) -> None:
    """Write a simulated fleet (incidents.csv, inventory.csv) with known failure behaviour."""
    try:
        cluster_sizes = tuple(int(s) for s in sizes.split(","))
    except ValueError:
        fail(f"--sizes {sizes!r}: expected comma-separated integers like 32,64,128")
    if rate_pct <= 0 or shape <= 0 or days <= 0 or min(cluster_sizes) < 1:
        fail("--rate, --shape, --days and every --sizes value must be positive")
    spec = sample_mod.FleetSpec(
        cluster_sizes=cluster_sizes,
        days=days,
        rate_per_node_hour=rate_pct / 100,
        weibull_shape=shape,
        seed=seed,
    )
    fleet = sample_mod.simulate_fleet(spec)
    for path in fleet.write(out):
        click.echo(f"wrote {path}")


# --- ingest ---------------------------------------------------------------------------------
INGEST_HELP = """Read incident logs, job accounting and inventory files into the warehouse.

\b
Formats (auto-detected from the name or the first lines, or --format); any may be .gz:
  csv         canonical incidents: timestamp,cluster_id,node_id,category,gpu_index,job_id,message,resolved_at
              2026-03-02T04:26:29Z,c0512,c0512-n0017,gpu_fell_off_bus,3,job-7,"NVRM: Xid ...",
              or inventory: cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to
              c0512,c0512-n0017,p5.48xlarge,8,2026-03-01T00:00:00Z,
  jsonl       {"timestamp": "2026-03-02T04:26:29+00:00", "cluster_id": "c0512", ...}
  parquet     the same columns
  kernel-log  NVIDIA Xid/SXid lines in syslog, journalctl or dmesg -T output, e.g.
              2026-03-02T04:26:29.892511+00:00 node-017 kernel: NVRM: Xid (PCI:0000:18:00): 79, GPU has ...
              Mar  2 04:26:29 node-017 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=10895, name=python3, ...
              [Mon Mar  2 04:26:29 2026] NVRM: Xid (PCI:0000:18:00): 79, ...   (needs --node)
              other kernel messages are counted as ignored; syslog lines have no year: see --year
  sacct       sacct -P (--parsable2) with its header, any column order; needs JobID,State,Start,End,NodeList
              JobID|JobName|State|Start|End|ElapsedRaw|NNodes|NodeList
              881204|pretrain-7b|NODE_FAIL|2024-03-01T10:00:03|2024-03-01T13:12:44|11561|4|gpu-[001-004]

\b
Every line is counted: read = ingested + duplicate + rejected + ignored. Rejected lines are kept in
the rejects table with the reason. Files already ingested (same sha256) are skipped; records already
stored count as duplicates, so a log that grew adds only its new lines.
"""


@main.command(help=INGEST_HELP)
@click.argument("paths", nargs=-1, required=True)
@db_option
@click.option("--format", "fmt", type=click.Choice(ingest_mod.FORMATS))
@click.option(
    "--map",
    "mapping",
    multiple=True,
    metavar="CANONICAL=SOURCE",
    help="Read a differently named column, e.g. --map node_id=hostname (repeatable).",
)
@click.option(
    "--timezone", default="UTC", show_default=True, help="Time zone of timestamps that carry no offset."
)
@click.option(
    "--year",
    type=click.IntRange(1970, 2999),
    help="Year of the first line of year-less syslog files (default: from each file's modification time).",
)
@click.option("--cluster", help="cluster_id for logs that do not name one (default: from the inventory).")
@click.option("--node", help="node_id for log lines without a hostname (dmesg -T output).")
@click.option(
    "--gpu-bus-order",
    default="",
    metavar="BUS,BUS,...",
    help="PCI bus numbers (hex) of gpu_index 0,1,...: XID lines then get a gpu_index, "
    "e.g. 18,2a,3a,5d,9a,ab,ba,db (HGX H100).",
)
@click.option(
    "--window-minutes",
    type=float,
    default=10.0,
    show_default=True,
    help="Events of one node, category and GPU closer than this form one incident.",
)
@click.option(
    "--estimate-exposure",
    type=click.IntRange(min=1),
    metavar="GPUS_PER_NODE",
    help="With no inventory at all, ESTIMATE one from the nodes seen in the data (in service from the "
    "first observation on); every result then says exposure_estimated. A real inventory replaces it.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@json_option
def ingest(
    paths,
    db: Path,
    fmt,
    mapping,
    timezone: str,
    year: int | None,
    cluster: str | None,
    node: str | None,
    gpu_bus_order: str,
    window_minutes: float,
    estimate_exposure: int | None,
    quiet: bool,
    as_json: bool,
) -> None:
    files = _expand(paths)
    column_map = ingest_mod.parse_column_map(mapping)
    bus_order = ingest_mod.parse_bus_order(gpu_bus_order)
    con = warehouse.connect(db)
    show_bar = not quiet and not as_json and sys.stderr.isatty()
    total = sum(f.stat().st_size for f in files if f.is_file())
    with click.progressbar(
        length=total, label=f"ingesting {len(files)} file(s)", file=sys.stderr, hidden=not show_bar
    ) as bar:
        summaries = ingest_mod.ingest_files(
            con,
            files,
            fmt=fmt,
            column_map=column_map,
            timezone=timezone,
            window_seconds=window_minutes * 60,
            year=year,
            cluster=cluster,
            node=node,
            bus_order=bus_order,
            progress=bar.update,
            estimate_exposure=estimate_exposure,
        )
    check = ingest_mod.inventory_check(con)
    if as_json:  # a list of per-file summaries; inventory warnings go to stderr
        echo_json([{**s.to_dict(), "timezone": timezone} for s in summaries])
        _echo_inventory_check(check, err=True)
        return
    click.echo(f"timestamps without an offset read as {timezone}")
    for s in summaries:
        if s.skipped:
            click.echo(f"{_safe(s.path)}: already ingested (same sha256), skipped")
            continue
        click.echo(
            f"{_safe(s.path)}: {s.kind} ({s.format}), read {s.rows_read}, ingested {s.rows_ingested}, "
            f"duplicate {s.rows_duplicate}, rejected {s.rows_rejected}, ignored {s.rows_ignored}"
        )
        if s.ignored_columns:
            click.echo(f"  ignored columns: {_safe(', '.join(s.ignored_columns))}")
        for note in s.notes:
            click.echo(f"  note: {_safe(note)}")
        if s.rows_rejected:
            first = con.sql(
                "SELECT line, reason FROM rejects WHERE file_id = ? ORDER BY line LIMIT 3", params=[s.file_id]
            ).fetchall()
            for line, reason in first:
                click.echo(f"  rejected {_safe(s.path)}:{line}: {_safe(reason)}")
            if s.rows_rejected > len(first):
                click.echo(f"  ... {s.rows_rejected - len(first)} more in the rejects table")
    _echo_inventory_check(check)


def _echo_inventory_check(check: ingest_mod.InventoryCheck, *, err: bool = False) -> None:
    if check.exposure_estimated:
        click.echo(
            f"WARNING: EXPOSURE IS ESTIMATED: no inventory was ingested, so {check.estimated_rows} nodes "
            "seen in the data count as in service from the first observation on; nodes never seen are "
            "missing, so rates are likely too high. Ingest an inventory file to replace the estimate.",
            err=err,
        )
    elif check.inventory_rows == 0:
        click.echo(
            "note: no inventory yet: rates need one; ingest an inventory file, or pass "
            "--estimate-exposure GPUS_PER_NODE to estimate it from the nodes seen",
            err=err,
        )
    elif check.nodes_not_in_inventory:
        names = ", ".join(check.nodes_not_in_inventory[:5])
        click.echo(
            f"warning: {len(check.nodes_not_in_inventory)} node(s) in the data are not in the inventory "
            f"({_safe(names)}{', ...' if len(check.nodes_not_in_inventory) > 5 else ''}): "
            "their incidents have no exposure and are left out of rates",
            err=err,
        )


def _expand(patterns) -> list[Path]:
    files: list[Path] = []
    for pattern in patterns:
        matched = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matched:
            fail(f"{pattern}: no files match")
        files.extend(Path(m) for m in matched)
    return files


# --- rates ----------------------------------------------------------------------------------
RATE_VIEWS = ("rates", "shares", "trend", "jobs")


@main.command()
@db_option
@click.option(
    "--by",
    "by",
    multiple=True,
    default=["cluster_id"],
    show_default=True,
    type=click.Choice([*transform.EXPOSURE_KEYS, "category"]),
    help="Group key (repeatable).",
)
@click.option("--period", type=click.Choice(list(transform.PERIODS)))
@click.option(
    "--all-categories", is_flag=True, help="Count non-interrupting faults too (application XIDs, warnings)."
)
@click.option(
    "--overdispersed",
    is_flag=True,
    help="Quasi-Poisson intervals widened by the node-count dispersion (when nodes' failures "
    "cluster, e.g. Weibull shape < 1, the exact Poisson interval is too narrow).",
)
@click.option(
    "--view",
    type=click.Choice(RATE_VIEWS),
    default="rates",
    show_default=True,
    help="rates: failures / exposure per group; shares: share of interruptions by category per "
    "group; trend: Laplace and MIL-HDBK-189 trend tests per cluster; jobs: Slurm job "
    "interruptions per job-hour by node count against the node rate.",
)
@until_option
@json_option
def rates(
    db: Path, by, period, all_categories: bool, overdispersed: bool, view: str, observed_until, as_json: bool
) -> None:
    """Failure rates per instance-hour and GPU-hour with exact 95% Poisson intervals."""
    con = warehouse.connect(db, read_only=True)
    incidents = warehouse.table(con, "incidents")
    inventory = warehouse.table(con, "inventory")
    end = observed_until or transform.observation_end(incidents, inventory)
    exposure = transform.exposure_intervals(inventory, end)
    if view == "shares":
        frame = transform.category_shares(incidents, exposure, by=[k for k in by if k != "category"])
    elif view == "trend":
        frame = analysis_mod.trend_tests(transform.failure_operating_times(incidents, exposure), exposure)
    elif view == "jobs":
        frame = analysis_mod.job_interruptions(con, transform.failure_rates(incidents, exposure))
        if frame is None:
            raise ValueError(
                "the warehouse has no Slurm jobs on clusters in the inventory; ingest sacct output first"
            )
    else:
        dispersion = max(transform.count_dispersion(incidents, exposure), 1.0) if overdispersed else 1.0
        frame = transform.failure_rates(
            incidents,
            exposure,
            by=list(by),
            period=period,
            interrupting_only=not all_categories,
            dispersion=dispersion,
        ).with_columns(dispersion=pl.lit(dispersion))
    frame = frame.with_columns(exposure_estimated=pl.lit(transform.exposure_estimated(inventory)))
    if as_json:
        echo_json(_records(frame))
    else:
        with pl.Config(
            tbl_rows=100, tbl_cols=30, float_precision=6, tbl_width_chars=240, tbl_hide_column_data_types=True
        ):
            click.echo(frame)


# --- fit ------------------------------------------------------------------------------------
def _tbf_fit(m) -> dict:
    return {
        "params": m.params_,
        "confidence_interval": m.confidence_interval_,
        "mtbf_hours": m.mtbf_hours_,
        "mtbf_ci_hours": m.mtbf_confidence_interval_,
        "aic": m.aic_,
        "log_likelihood": m.log_likelihood_,
        "shape": m.shape_,
        "infant_mortality": m.infant_mortality_,
        "hazard_message": m.hazard_message_,
    }


def fit_payload(result: analysis_mod.FleetAnalysis) -> dict:
    """Everything ``failcast fit --json`` prints (the report and notebooks read FleetAnalysis)."""
    regression = result.size_regression
    return {
        "observed_until": result.observed_until,
        "first_gap": result.first_gap,
        "exposure_estimated": result.exposure_estimated,
        "best_family": result.best_family,
        "hazard_message": result.node_fits["weibull"].hazard_message_,
        "node_time_between_failures": {family: _tbf_fit(m) for family, m in result.node_fits.items()},
        "kaplan_meier_median_hours": result.kaplan_meier.median_hours_,
        "cluster_mtbf": _records(result.cluster_mtbf),
        "scaling": None
        if result.scaling is None
        else {
            "alpha": result.scaling.alpha_,
            "alpha_ci": result.scaling.alpha_confidence_interval_,
            "mtbf_one_instance_hours": result.scaling.mtbf_one_hours_,
            "count_dispersion": result.count_dispersion,
            "projected": _records(result.scaling_projection),
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
            "projected": _records(result.size_regression_projection),
        },
        "trend_tests": _records(result.trend_tests),
        "category_shares": _records(result.category_shares),
        "job_interruptions": None if result.job_interruptions is None else _records(result.job_interruptions),
    }


@main.command()
@db_option
@until_option
@click.option(
    "--first-gap",
    type=click.Choice(transform.FIRST_GAP_CHOICES),
    default="drop",
    show_default=True,
    help="drop: leave out the span from a window's start to its first failure (it is not a full "
    "gap when logs start on a running node); keep: nodes are observed from installation.",
)
@json_option
def fit(db: Path, observed_until, first_gap: str, as_json: bool) -> None:
    """Fit time-between-failures models and the MTBF scaling law."""
    result = analysis_mod.analyze(
        warehouse.connect(db, read_only=True), observed_until=observed_until, first_gap=first_gap
    )
    if as_json:
        echo_json(fit_payload(result))
        return
    click.echo(f"best family by AIC: {result.best_family}")
    for family, m in result.node_fits.items():
        low, high = m.mtbf_confidence_interval_
        click.echo(
            f"  {family:12s} node MTBF {m.mtbf_hours_:10.1f} h  (95% CI {low:.1f}–{high:.1f})"
            f"  AIC {m.aic_:.1f}"
        )
    click.echo(result.node_fits["weibull"].hazard_message_)
    for name, s in (("counts", result.scaling), ("Weibull AFT", result.size_regression)):
        if s is not None:
            click.echo(
                f"MTBF(N) = {s.mtbf_one_hours_:.0f} h / N^{s.alpha_:.3f} "
                f"(alpha 95% CI {s.alpha_confidence_interval_[0]:.3f}–"
                f"{s.alpha_confidence_interval_[1]:.3f}; {name})"
            )
    for row in result.trend_tests.iter_rows(named=True):
        if row["crow_verdict"] is not None:
            click.echo(
                f"trend {_safe(row['cluster_id'])}: {row['crow_verdict']} "
                f"(MIL-HDBK-189 beta {row['crow_beta']:.2f}, p {row['crow_p_value']:.3f}; "
                f"Laplace p {row['laplace_p_value']:.3f})"
            )


# --- project --------------------------------------------------------------------------------
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
    import tomllib

    from pipeline import projection as proj

    failure = None
    if failure_rate is not None:
        try:
            percent = float(failure_rate)
        except ValueError:
            failure = proj.FailureModel.preset(failure_rate)
        else:
            failure = proj.FailureModel.exponential(percent / 100, source="--failure-rate")
    doc = {}
    if spec_path is not None:
        try:
            doc = tomllib.loads(spec_path.read_text(encoding="utf-8"))
        except OSError as exc:
            fail(f"{spec_path}: cannot read job spec ({exc.strerror})")
        except tomllib.TOMLDecodeError as exc:
            fail(f"{spec_path}: invalid TOML ({exc})")
    if failure is None and not doc.get("failures"):
        if not Path(db).exists():
            fail(f"no failure model: give --failure-rate (e.g. 0.05 or llama-3.1) or ingest data into {db}")
        rate = analysis_mod.analyze(warehouse.connect(db, read_only=True)).fleet_rate
        low, high = rate.confidence_interval_
        failure = proj.FailureModel.exponential(
            rate.rate_, low if low > 0 else None, high if low > 0 else None, source=f"warehouse {db}"
        )
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
    try:
        spec = proj.job_spec_from_mapping(doc, **overrides)
    except proj.SpecError as exc:
        fail(f"{spec_path}: {exc}" if spec_path else str(exc))
    result = proj.project(spec, monte_carlo_runs=monte_carlo_runs, seed=seed, modes=modes or None)
    if as_json:
        payload = result.to_dict()
        payload["sweep_cluster_size"] = _records(proj.sweep_cluster_size(spec))
        payload["sweep_failure_rate"] = _records(proj.sweep_failure_rate(spec))
        if len(spec.recovery) > 1:
            payload["sensitivity"] = _records(proj.sensitivity_table(spec))
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


# --- report ---------------------------------------------------------------------------------
@main.command()
@db_option
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path), default=Path("reports"), show_default=True
)
@until_option
@click.option(
    "--job",
    "job_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="TOML job spec to project (see failcast project); without [failures] the fleet's rate is used.",
)
@click.option("--monte-carlo-runs", type=int, default=10_000, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--images/--no-images", default=True, show_default=True, help="Also write charts/<chart>.png and .svg."
)
def report(db: Path, out: Path, observed_until, job_path, monte_carlo_runs: int, seed: int, images: bool):
    """Write the self-contained HTML report (and a PNG/SVG of each chart)."""
    result = analysis_mod.analyze(warehouse.connect(db, read_only=True), observed_until=observed_until)
    outlook = None
    if job_path is not None:
        spec = _report_job_spec(job_path, result.fleet_rate, db)
        outlook = report_mod.job_outlook(spec, monte_carlo_runs=monte_carlo_runs, seed=seed)
    path = report_mod.write_report(result, out, projection=outlook, images=images)
    click.echo(f"wrote {path}")
    if images:
        click.echo(f"wrote {path.parent / report_mod.CHARTS_DIR}/*.png, *.svg")


def _report_job_spec(path: Path, fleet_rate, db: Path):
    """The job spec; a spec without a [failures] table is projected with the warehouse's fleet rate."""
    from pipeline import projection as proj

    return proj.job_spec_for_fleet(
        path,
        fleet_failures=fleet_rate.failures_,
        fleet_instance_hours=fleet_rate.exposure_hours_,
        source=f"fleet rate in {db}",
    )


# --- run ------------------------------------------------------------------------------------
RUN_HELP = """All stages for schedulers: ingest new and grown inputs, rebuild, refit, write a dated report.

\b
Writes reports/failcast-report-YYYYMMDDTHHMMSSZ.html and points latest.html and
failcast-report.html at it only after every stage succeeded; old dated reports are pruned
(retention). Each run is recorded in the warehouse's runs table (see 'failcast runs').
\b
Exit codes: 0 succeeded; 2 bad config or input; 1 unexpected failure; 75 another run holds the
warehouse lock; 130/143 interrupted by SIGINT/SIGTERM (the run is recorded as failed).
"""


@main.command(help=RUN_HELP)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="failcast.toml (see failcast.example.toml); without it the bundled sample in data/sample/.",
)
@click.option("--db", "warehouse", type=click.Path(dir_okay=False), help="Override the config's warehouse.")
@click.option("--out", "report_dir", type=click.Path(file_okay=False), help="Override the report folder.")
@click.option("--timezone", help="Time zone of timestamps without an offset.")
@click.option("--window-minutes", "dedup_window_minutes", type=float, help="Incident collapse window.")
@click.option("--until", "observed_until", type=click.DateTime(), help="End of the observed window (UTC).")
@click.option("--keep-reports", type=click.IntRange(min=1), help="Dated reports to keep (config default 30).")
@click.option(
    "--keep-days",
    type=click.FloatRange(min=0, min_open=True),
    help="Also delete dated reports older than this many days.",
)
@click.option(
    "--lock-timeout",
    "lock_timeout_seconds",
    type=click.FloatRange(min=0),
    help="Seconds to wait for another run's lock before exiting with code 75 (config default 60).",
)
@click.option("--log-format", type=click.Choice(config_mod.LOG_FORMATS), help="Log lines on stderr.")
@click.option(
    "--print-config",
    type=click.Choice(["toml", "json"]),
    is_flag=False,
    flag_value="toml",
    help="Print the merged config (file + flags) and exit.",
)
def run(config_path: Path | None, print_config: str | None, **overrides) -> None:
    cfg = config_mod.load_config(config_path).with_overrides(**overrides)
    if print_config:
        document = cfg.to_document()
        render = config_mod.render_json if print_config == "json" else config_mod.render_toml
        click.echo(render(document), nl=print_config == "json")
        return
    runs_mod.setup_logging(cfg.log_format)
    previous = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminated)
    try:
        result = runs_mod.run_batch(cfg, progress=sys.stderr.isatty() and cfg.log_format == "text")
    except runs_mod.LockedError as exc:
        fail(str(exc), runs_mod.EXIT_LOCKED)
    except KeyboardInterrupt:
        sys.exit(130)
    finally:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, previous)
    click.echo(f"wrote {result.report_path}")


def _terminated(signum, frame) -> None:
    """SIGTERM (systemd stop, a scheduler timeout) unwinds like Ctrl-C: roll back, record, exit."""
    raise SystemExit(128 + signum)


# --- runs -----------------------------------------------------------------------------------
@main.command()
@click.option(
    "--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), help="failcast.toml"
)
@click.option("--db", "db_override", type=click.Path(dir_okay=False), help="Override the config's warehouse.")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@json_option
def runs(config_path: Path | None, db_override: str | None, limit: int, as_json: bool) -> None:
    """List recorded runs, newest first: status, timings, files, report, error."""
    db = config_mod.load_config(config_path).with_overrides(warehouse=db_override).warehouse
    try:
        con = runs_mod.open_warehouse(db, read_only=True)
    except runs_mod.LockedError as exc:
        fail(str(exc), runs_mod.EXIT_LOCKED)
    with con:
        recorded = runs_mod.list_runs(con, limit)
    if as_json:
        echo_json(recorded)
        return
    for run_row in recorded:
        click.echo(runs_mod.format_run(run_row))
    if not recorded:
        click.echo(f"{db}: no runs recorded yet")
