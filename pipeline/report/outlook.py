"""The projection part of the report: a :class:`JobOutlook` of frames, and the charts drawn from them.

:func:`job_outlook` is the report's only call into :mod:`pipeline.projection`; it turns a
projection into plain frames with documented columns, so the charts and the page can be built
(and tested) from frames alone:

- ``modes``: mode, status, expected_days, cost_usd, goodput, expected_interruptions, p10_days,
  p50_days, p90_days, checkpoint_interval_hours, optimal_interval_hours, optimal_expected_days (a
  mode that cannot finish: infinite days, interruptions and cost, no Monte Carlo; cost NaN
  without a price)
- ``failure_models``: mode, model ("exponential" / "fitted Weibull model"), mean_days, p10_days,
  p90_days, interruptions (Monte Carlo; the Weibull P10-P90 includes the fit's parameter
  uncertainty when known); ``failure_model_note`` says in words why the two differ
- ``savings``: baseline, mode, days, percent, usd (only between modes that both finish; usd NaN
  without a price)
- ``jobs``: every configured job (this one first) per mode: job, instances, gpus_per_instance,
  gpu_hours_of_work, mode, outcome, expected_days, goodput, expected_interruptions, cost_usd
  (analytic; days, interruptions and cost null where the mode cannot finish), priced;
  ``job_savings``: job, baseline, mode, days, percent, usd (every job's ``savings``)
- ``spares``: per job (with repair times), :func:`pipeline.projection.spare_advice`'s table with
  a ``job`` and a ``note`` column (recommended, the 99% row); ``spares_summary``: job, recommended,
  recommended_low, recommended_high, probability_row, rule, intervals; both on the jobs with only
  their measured detection and restart times (``pool_spec`` for the first: the swap stays
  assumed, the pool builds its replace time on ``mean_repair_hours``), as ``failcast spares``
- ``size_sweep``: instances, mode, status, checkpoint_interval_hours, expected_days, cost_usd,
  goodput, and the same at the interval re-optimised for each size: optimal_interval_hours,
  optimal_status, optimal_expected_days, optimal_cost_usd, optimal_goodput (work held fixed; days
  and costs null where the job cannot finish)
- ``days_histogram``: mode, bin_low_days, bin_high_days, runs (Monte Carlo, shared bin edges)
- ``checkpoint_curve``: mode, checkpoint_interval_hours, expected_days
- ``assumptions``: assumption, value (every input of the projection, as text)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import altair as alt
import numpy as np
import polars as pl

from pipeline import projection as proj
from pipeline.projection.spec import HOURS_PER_DAY
from pipeline.report.charts import WIDTH, mode_color
from pipeline.report.format import usd
from pipeline.report.plans import jobs_frames, spares_frames

CHECKPOINT_GRID_POINTS = 60


@dataclass(frozen=True)
class JobOutlook:
    """A job's projected training time and cost per recovery mode, as frames for the report."""

    job: str
    instances: int
    modes: pl.DataFrame
    savings: pl.DataFrame
    size_sweep: pl.DataFrame
    days_histogram: pl.DataFrame
    checkpoint_curve: pl.DataFrame
    assumptions: pl.DataFrame
    explanation: str = ""
    failure_models: pl.DataFrame | None = None
    failure_model_note: str = ""
    name: str = ""  # the job spec's name (a metric label)
    failure: proj.FailureModel | None = None  # the failure model the projection used
    jobs: pl.DataFrame | None = None
    job_savings: pl.DataFrame | None = None
    spares: pl.DataFrame | None = None
    spares_summary: pl.DataFrame | None = None
    priced: bool = True
    pool_spec: proj.JobSpec | None = None  # the job as its spare pool plans it (the swap assumed)
    mean_repair_hours: float | None = None  # the fleet's MTTR behind the spare tables


def _nan(value: float | None) -> float:
    """A cost for a frame the metrics and tables read: NaN where there is none (no price)."""
    return math.nan if value is None else value


def mode_card(row: dict) -> tuple[str, str]:
    """(value, note) of a headline card from a ``modes`` row: days and cost, or that the mode
    cannot finish (no astronomical numbers), or days alone without a price."""
    if row.get("status", "finishes") != "finishes" or not math.isfinite(row["expected_days"]):
        return "cannot finish", f"goodput {row['goodput']:.2%} < 1%: never, in this mode"
    spread = (
        f"P10–P90 {row['p10_days']:,.1f}–{row['p90_days']:,.1f} days, " if row["p10_days"] is not None else ""
    )
    cost = row["cost_usd"]
    value = f"{row['expected_days']:,.1f} days" + ("" if math.isnan(cost) else f" · ${cost / 1e6:,.2f}M")
    return value, f"{spread}goodput {row['goodput']:.1%}"


def saving_card(row: dict) -> str:
    """The value of a savings card: days, and dollars with a price."""
    saved = row["usd"]
    return f"{row['days']:,.1f} days" + ("" if math.isnan(saved) else f" · {usd(saved / 1e6, 2, 'M')}")


def job_outlook(
    spec: proj.JobSpec,
    *,
    monte_carlo_runs: int = 10_000,
    seed: int = 0,
    measured: dict[str, float] | None = None,
    repair: proj.RepairCurve | None = None,
    others: Sequence[proj.JobSpec] = (),
) -> JobOutlook:
    """Project ``spec`` and collect what the report draws, as frames. ``measured``: recovery
    times the fleet measured (``pipeline.analysis.measured_recovery_hours``), used in place of the
    profiles' assumptions (:func:`pipeline.projection.measured_recovery`) and marked so.
    ``repair``: the fleet's repair curve, for every job's spare table. ``others``: the other
    configured jobs, projected analytically beside this one in ``jobs`` (and ``spares``)."""
    specs = [spec, *others]
    pool_specs = [proj.with_measured_job_times(s, measured) for s in specs]  # the swap stays assumed
    sources = []
    if measured:
        specs = [proj.with_measured_recovery(s, measured)[0] for s in specs]
        spec, sources = proj.with_measured_recovery(spec, measured)
    result = proj.project(spec, monte_carlo_runs=monte_carlo_runs, seed=seed)
    modes = list(result.modes)
    rows = []
    for m in result.modes.values():
        mc = m.monte_carlo
        rows.append(
            {
                "mode": m.mode,
                "status": m.status,
                "expected_days": m.expected_days,
                "cost_usd": _nan(m.cost_usd),
                "goodput": m.goodput,
                "expected_interruptions": m.expected_interruptions,
                "p10_days": mc.p10_days if mc else None,
                "p50_days": mc.p50_days if mc else None,
                "p90_days": mc.p90_days if mc else None,
                "checkpoint_interval_hours": m.profile.checkpoint_interval_hours,
                "optimal_interval_hours": m.optimal_interval_hours,
                "optimal_expected_days": m.optimal_expected_days,
            }
        )
    savings = pl.DataFrame(
        [dataclasses.asdict(s) | {"usd": _nan(s.usd)} for s in result.savings],
        schema={"baseline": pl.String, "mode": pl.String, "days": pl.Float64, "percent": pl.Float64,
                "usd": pl.Float64},
    )  # fmt: skip
    sweep = proj.sweep_cluster_size(spec)
    size_sweep = pl.concat(
        sweep.select(
            "instances",
            mode=pl.lit(m),
            status=pl.col(f"{m}_status"),
            checkpoint_interval_hours=pl.col(f"{m}_checkpoint_interval_hours"),
            expected_days=pl.col(f"{m}_expected_days"),
            cost_usd=pl.col(f"{m}_cost_usd"),
            goodput=pl.col(f"{m}_goodput"),
            optimal_interval_hours=pl.col(f"{m}_optimal_interval_hours"),
            optimal_status=pl.col(f"{m}_optimal_status"),
            optimal_expected_days=pl.col(f"{m}_optimal_expected_days"),
            optimal_cost_usd=pl.col(f"{m}_optimal_cost_usd"),
            optimal_goodput=pl.col(f"{m}_optimal_goodput"),
        )
        for m in modes
    )
    compare = [
        {"mode": m.mode, "model": name, "mean_days": mc.mean_days, "p10_days": mc.p10_days,
         "p90_days": mc.p90_days, "interruptions": mc.mean_interruptions}
        for m in result.modes.values()
        for name, mc in (
            ("exponential", m.monte_carlo_with_rate_uncertainty or m.monte_carlo),
            ("fitted Weibull model", m.renewal_with_parameter_uncertainty or m.renewal),
        )
        if mc is not None
    ]  # fmt: skip
    differences = [
        f"{m.mode}: {proj.weibull_difference(spec, m)}" for m in result.modes.values() if m.renewal
    ]
    histogram = (
        proj.days_histogram(spec, runs=monte_carlo_runs, seed=seed)
        if monte_carlo_runs > 0
        else pl.DataFrame(schema={"mode": pl.String, "bin_low_days": pl.Float64,
                                  "bin_high_days": pl.Float64, "runs": pl.Int64})
    )  # fmt: skip
    return JobOutlook(
        job=(
            f"{spec.name}: {spec.instances} × {spec.gpus_per_instance} {spec.gpu}, "
            f"{result.work_gpu_hours:,.0f} GPU-hours of work"
        ),
        instances=spec.instances,
        modes=pl.DataFrame(rows),
        savings=savings,
        size_sweep=size_sweep,
        days_histogram=histogram,
        checkpoint_curve=_checkpoint_curve(spec),
        assumptions=_assumptions(spec, result, monte_carlo_runs, seed, sources),
        explanation=proj.explain(result),
        failure_models=pl.DataFrame(compare) if differences else None,
        failure_model_note=" ".join(differences),
        name=spec.name,
        failure=spec.failure,
        priced=spec.price_per_gpu_hour_usd is not None,
        pool_spec=pool_specs[0],
        mean_repair_hours=None if repair is None else repair.mean_hours,
        **jobs_frames(specs, result),
        **spares_frames(pool_specs, repair),
    )


def _checkpoint_curve(spec: proj.JobSpec) -> pl.DataFrame:
    """Expected days over a log grid of checkpoint intervals around the Young/Daly optimum, from
    the projection's own formula (:func:`pipeline.projection.expected_wall_hours`)."""
    rate = spec.failure.cluster_rate_per_hour(spec.instances)
    frames = []
    for mode, profile in spec.recovery.items():
        # free checkpoints have no optimum (shorter is always better): centre on the configured one
        centre = (
            proj.young_daly_interval_hours(profile.checkpoint_write_hours, 1 / rate)
            or profile.checkpoint_interval_hours
        )
        grid = np.geomspace(centre / 20, centre * 20, CHECKPOINT_GRID_POINTS)
        days = [
            proj.expected_wall_hours(spec.failure_free_hours, rate, profile.with_interval(float(t)))
            / HOURS_PER_DAY
            for t in grid
        ]
        frames.append(pl.DataFrame({"mode": mode, "checkpoint_interval_hours": grid, "expected_days": days}))
    return pl.concat(frames)


def _assumptions(
    spec: proj.JobSpec, result: proj.Projection, runs: int, seed: int, sources: list[dict]
) -> pl.DataFrame:
    """The projection's inputs in words; a recovery time measured by the fleet says so."""
    measured = {(s["mode"], s["time"]) for s in sources if s["measured"]}

    def time(mode: str, name: str, hours: float) -> str:
        return f"{name} {_hours(hours)}{' (measured)' if (mode, name) in measured else ''}"

    f = spec.failure
    rows = [
        ("job", spec.name),
        ("instances × GPUs per instance", f"{spec.instances} × {spec.gpus_per_instance} {spec.gpu}"),
        ("work", f"{result.work_gpu_hours:,.0f} GPU-hours"),
        (
            "price",
            "none given: costs are left out"
            if spec.price_per_gpu_hour_usd is None
            else f"${spec.price_per_gpu_hour_usd:,.2f} per GPU-hour",
        ),
        ("failure model", f"{f.kind}, {f.rate_per_instance_hour:.4%} per instance-hour ({f.source})"),
        ("cluster MTBF", f"{result.cluster_mtbf_hours:,.2f} h"),
        ("Monte Carlo", f"{runs:,} runs, seed {seed}"),
    ]
    for mode, p in spec.recovery.items():
        rows.append(
            (
                f"recovery: {mode}",
                f"{time(mode, 'detect', p.detect_hours)} + {time(mode, 'replace', p.replace_hours)} + "
                f"{time(mode, 'restart', p.restart_hours)}; checkpoint every "
                f"{_hours(p.checkpoint_interval_hours)}, writing takes {_hours(p.checkpoint_write_hours)}",
            )
        )
    return pl.DataFrame(rows, schema=["assumption", "value"], orient="row")


def _hours(hours: float) -> str:
    """A recovery or checkpoint time: minutes below an hour (5 min, not 0.0833333 h)."""
    return f"{hours * 60:.3g} min" if hours < 1 else f"{hours:.3g} h"


def size_sweep_chart(size_sweep: pl.DataFrame, job_instances: int) -> alt.VConcatChart:
    """Expected training days and cost against cluster size, one colour per recovery mode: solid at
    the configured checkpoint interval, dashed at the interval re-optimised for each size. Sizes
    where the job cannot finish (goodput < 1%) have no point; the table beside says so."""
    configured = size_sweep["checkpoint_interval_hours"][0]
    intervals = [f"configured ({configured:.3g} h)", "re-optimised per size"]
    data = pl.concat(
        [
            size_sweep.select(
                "instances", "mode", "expected_days", "cost_usd", "goodput",
                interval_hours="checkpoint_interval_hours", interval=pl.lit(intervals[0]),
            ),
            size_sweep.select(
                "instances", "mode", expected_days="optimal_expected_days", cost_usd="optimal_cost_usd",
                goodput="optimal_goodput", interval_hours="optimal_interval_hours",
                interval=pl.lit(intervals[1]),
            ),
        ]
    ).filter(pl.col("expected_days").is_finite())  # fmt: skip
    priced = data["cost_usd"].is_finite().any()
    modes = data["mode"].unique(maintain_order=True).to_list()
    color = alt.Color("mode:N", title="recovery", scale=mode_color(modes))
    dash = alt.StrokeDash(
        "interval:N", title="checkpoint interval", sort=intervals,
        scale=alt.Scale(domain=intervals, range=[[1, 0], [5, 3]]),
    )  # fmt: skip
    x = alt.X("instances:Q", scale=alt.Scale(type="log", nice=False), title="instances in the job")
    tooltip = [
        "mode:N",
        alt.Tooltip("interval:N", title="checkpoint interval"),
        alt.Tooltip("interval_hours:Q", format=",.2f", title="interval (h)"),
        alt.Tooltip("instances:Q", format=",.0f"),
        alt.Tooltip("expected_days:Q", format=",.1f", title="expected days"),
        alt.Tooltip("cost_usd:Q", format="$,.0f", title="cost"),
    ]
    marker = alt.Chart(pl.DataFrame({"instances": [job_instances]})).mark_rule(
        strokeDash=[2, 2], color="#555"
    )

    def panel(field: str, title: str, fmt: str) -> alt.LayerChart:
        line = (
            alt.Chart(data)
            .mark_line(point=True)
            .encode(
                x=x,
                y=alt.Y(f"{field}:Q", scale=alt.Scale(type="log"), title=title, axis=alt.Axis(format=fmt)),
                color=color,
                strokeDash=dash,
                detail="interval:N",
                tooltip=tooltip,
            )
        )
        return (line + marker.encode(x="instances:Q")).properties(width=WIDTH, height=220)

    if not priced:  # no price: days alone
        tooltip.pop()
        return alt.vconcat(panel("expected_days", "expected training days", ",.0f"))
    return alt.vconcat(
        panel("expected_days", "expected training days", ",.0f"),
        panel("cost_usd", "expected cost (USD)", "$,.2s"),
    )


def monte_carlo_chart(days_histogram: pl.DataFrame, modes: pl.DataFrame) -> alt.LayerChart:
    """Distribution of simulated training days per mode, with each mode's P10/P50/P90 as rules."""
    names = modes["mode"].to_list()
    color = alt.Color("mode:N", title="recovery", scale=mode_color(names))
    bars = (
        alt.Chart(days_histogram.select("mode", "bin_low_days", "bin_high_days", "runs"))
        .mark_rect(opacity=0.6)
        .encode(
            x=alt.X("bin_low_days:Q", title="training days (Monte Carlo)", scale=alt.Scale(zero=False)),
            x2="bin_high_days:Q",
            y=alt.Y("runs:Q", title="simulated runs", stack=None),
            color=color,
            tooltip=[
                "mode:N",
                alt.Tooltip("bin_low_days:Q", format=",.1f", title="from day"),
                alt.Tooltip("bin_high_days:Q", format=",.1f", title="to day"),
                "runs:Q",
            ],
        )
    )
    quantiles = modes.select("mode", "p10_days", "p50_days", "p90_days").unpivot(
        index="mode", variable_name="percentile", value_name="days"
    )
    rules = (
        alt.Chart(quantiles.drop_nulls())
        .mark_rule(strokeDash=[4, 2])
        .encode(
            x="days:Q",
            color=color,
            tooltip=["mode:N", "percentile:N", alt.Tooltip("days:Q", format=",.1f")],
        )
    )
    return (bars + rules).properties(width=WIDTH, height=240)


def _checkpoint_tooltip(interval: str, days: str) -> list:
    """A point of the checkpoint chart: its mode, interval and expected days, titled as it is."""
    return [
        "mode:N",
        alt.Tooltip("checkpoint_interval_hours:Q", format=",.2f", title=interval),
        alt.Tooltip("expected_days:Q", format=",.2f", title=days),
    ]


def checkpoint_chart(checkpoint_curve: pl.DataFrame, modes: pl.DataFrame) -> alt.LayerChart:
    """Expected days against the checkpoint interval per mode; the optimum and the configured value."""
    names = modes["mode"].to_list()
    color = alt.Color("mode:N", title="recovery", scale=mode_color(names))
    x = alt.X(
        "checkpoint_interval_hours:Q",
        scale=alt.Scale(type="log", nice=False),
        title="checkpoint interval (h)",
    )
    curve = (
        alt.Chart(
            checkpoint_curve.select("mode", "checkpoint_interval_hours", "expected_days").filter(
                pl.col("expected_days").is_finite()
            )
        )
        .mark_line()
        .encode(
            x=x,
            y=alt.Y("expected_days:Q", title="expected training days", scale=alt.Scale(zero=False)),
            color=color,
            tooltip=_checkpoint_tooltip("interval (h)", "expected days"),
        )
    )

    def points(frame: pl.DataFrame, tooltip: list, **mark) -> alt.Chart:
        return (
            alt.Chart(frame)
            .mark_point(**mark)
            .encode(x="checkpoint_interval_hours:Q", y="expected_days:Q", color=color, tooltip=tooltip)
        )

    optimum = points(
        modes.select(
            "mode",
            checkpoint_interval_hours=pl.col("optimal_interval_hours"),
            expected_days=pl.col("optimal_expected_days"),
        ),
        _checkpoint_tooltip("optimal interval (h)", "expected days at optimum"),
        shape="diamond",
        size=120,
        filled=True,
    )
    configured = points(
        modes.select("mode", "checkpoint_interval_hours", "expected_days"),
        _checkpoint_tooltip("configured interval (h)", "expected days"),
        shape="circle",
        size=80,
        filled=False,
        strokeWidth=2,
    )
    return (curve + optimum + configured).properties(width=WIDTH, height=260)
