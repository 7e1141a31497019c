"""Report section "Plan a job": sliders that redraw the configured job's expected days, goodput
and cost (or that it cannot finish) as instances, checkpoint interval, hot spares, recovery times
and price change, with the analytic model of ``failcast spares`` and ``failcast project``.

The page stays one offline file: the planner is a Vega-Lite spec (:mod:`pipeline.report.planner_vega`)
whose parameters are bound to sliders and whose numbers are computed by Vega in the page, exactly
at any setting. It starts at the configured job as its spare pool plans it (the report's "Hot
spares" table: the pool mode's detection and restart, measured when the fleet measured them, the
assumed swap, the fleet's mean repair time, the recommended S), so at those settings it shows that
table's row. The failure rate at N instances is the one ``failcast project`` derives
(:meth:`pipeline.analysis.SizeRates.model`): the measured rate of the fleet's clusters in N's size
bucket (the power of two nearest N), else the count law MTBF(N) = MTBF_1 / N^alpha (per-instance
rate exp(c0 + c1 ln N) / N), else the fleet's rate or its upper bound; a job whose spec gives its
own rate keeps it at every size. Without repair times there is no spare pool: the replace time is
a slider (said in the section).

tests/test_planner.py evaluates the spec with vl-convert against ``failcast project`` and
``failcast spares``; tests/test_report_browser.py moves a slider in Chromium.
"""

from __future__ import annotations

import math

import altair as alt

from pipeline import projection as proj
from pipeline.analysis import FleetAnalysis, SizeRates, size_rates
from pipeline.report.outlook import JobOutlook
from pipeline.report.planner_vega import Control, PlannerSettings, control, number, planner_spec, quote
from pipeline.report.section import Section

SLUG, TITLE = "planner", "Plan a job: days, goodput and cost as you change it"


def rate_law(rates: SizeRates | None, failure: proj.FailureModel, instances: int) -> tuple[str, str]:
    """(rate, source) as Vega expressions of ``datum.N`` and its size bucket ``datum.bucket``: the
    fleet's law when the job's rate is the fleet's (:meth:`SizeRates.model` at the job's size gives
    it), else the job's own rate at every size."""
    fleet = rates.model(instances) if rates is not None else None
    if fleet is None or (fleet.source, fleet.rate_per_instance_hour) != (
        failure.source,
        failure.rate_per_instance_hour,
    ):
        text = f"the job's own rate ({failure.source}), the same per instance at every size"
        return number(failure.rate_per_instance_hour), quote(text)
    assert rates is not None
    if (law := rates.law) is not None:
        c0, c1 = (float(c) for c in law.coef_)
        rate = f"exp({number(c0)} + {number(c1)} * log(datum.N)) / datum.N"
        words = f"{rates.label}: scaling law MTBF(N) = {law.mtbf_one_hours_:.0f} h / N^{law.alpha_:.2f}"
        source = f"{quote(words + ' at N = ')} + datum.N"
    elif rates.total["failures"]:
        rate = number(rates.total["rate_per_node_hour"])
        source = quote(f"{rates.label}: rate ({rates.interval})")
    else:
        rate = number(rates.total["rate_upper_bound"])
        source = quote(f"{rates.label}: no failures yet, UPPER BOUND (95% one-sided): a worst case")
    for bucket, row in sorted(rates.measured.items()):
        test = f"datum.bucket == {bucket}"
        words = quote(f"{rates.label}: measured rate of clusters of ~{bucket} instances ({rates.interval})")
        rate = f"({test} ? {number(row['rate_per_node_hour'])} : {rate})"
        source = f"({test} ? {words} : {source})"
    return rate, source


def _minutes(name: str, label: str, hours: float, high: float = 60) -> Control:
    """A slider in minutes (recovery times are minutes to an hour or so)."""
    return control(name, f"{label} (min)", hours * 60, 1, 0, max(4 * hours * 60, high))


def planner_settings(analysis: FleetAnalysis, outlook: JobOutlook) -> PlannerSettings | None:
    """The planner of ``outlook``'s job, None without one."""
    spec = outlook.pool_spec
    if spec is None:
        return None
    mode, profile = proj.pool_profile(spec)
    n, price = spec.instances, spec.price_per_gpu_hour_usd or 0.0
    step = max(1, 2 ** math.floor(math.log2(n / 32))) if n >= 64 else 1
    tau = profile.checkpoint_interval_hours
    controls = [
        control("instances", "instances in the job", n, step, step, max(4 * n, 64)),
        control("checkpoint_h", "checkpoint every (h)", tau, 0.05, 0.05, max(4 * tau, 4.0)),
        _minutes("detect_min", "detection", profile.detect_hours),
        _minutes("restart_min", "restart and reload", profile.restart_hours),
    ]
    pool = outlook.mean_repair_hours is not None and outlook.spares_summary is not None
    if pool:
        summary = outlook.spares_summary.row(0, named=True)
        spares = summary["recommended"] if summary["recommended"] is not None else summary["probability_row"]
        controls += [
            control("spares", "hot spares", spares, 1, 0, max(3 * spares, summary["probability_row"] + 5)),
            _minutes("swap_min", "swap in a free spare", profile.replace_hours),
            control("repair_x", f"repair time (× fleet mean {outlook.mean_repair_hours:,.1f} h)",
                    1.0, 0.05, 0.05, 4.0),
        ]  # fmt: skip
    else:
        controls.append(_minutes("replace_min", "replace a failed node", profile.replace_hours, 240))
    controls.append(
        control("price", "price per GPU-hour ($; 0: no price)", price, 0.01, 0, max(4 * price, 12))
    )
    rates = size_rates(analysis) if analysis.rates.overall.height else None
    rate, source = rate_law(rates, spec.failure, n)
    return PlannerSettings(
        job=spec.name,
        mode=mode,
        gpus_per_instance=spec.gpus_per_instance,
        work_gpu_hours=spec.work_gpu_hours,
        checkpoint_write_hours=profile.checkpoint_write_hours,
        controls=tuple(controls),
        rate_expr=rate,
        rate_source_expr=source,
        mean_repair_hours=float(outlook.mean_repair_hours) if pool else None,
    )


def planner_note(s: PlannerSettings) -> str:
    model = (
        "the fleet's failure rate at that size, Daly's wall time with checkpoints, and the spare pool "
        "(a failure finds a free spare with Engset's probability, else waits for the earliest repair, "
        "mean repair / (S + 1), and the job stalls until N nodes are up; docs/projection.md, Hot spares)"
        if s.pool
        else "the fleet's failure rate at that size and Daly's wall time with checkpoints; no repair "
        "times (outages with an end), so no spare pool: the replace time is assumed"
    )
    start = (
        "with the recommended hot spares: the row of this report's spare table"
        if s.pool
        else "as in the projection above"
    )
    return (
        f"Starts at {s.job} on the {s.mode} recovery profile {start}. Every number is recomputed in "
        f"the page at any setting (no lookup table) with the model of failcast "
        f"{'spares' if s.pool else 'project'}: {model}. "
        "Expected values; the cost includes the spares; goodput under 1% is reported as cannot "
        "finish. Drag a slider or use the arrow keys."
    )


def planner_section(analysis: FleetAnalysis, outlook: JobOutlook):
    """The planner section (None without a job to plan)."""
    settings = planner_settings(analysis, outlook)
    if settings is None:
        return None
    chart = alt.VConcatChart.from_dict(planner_spec(settings), validate=False)
    return Section(SLUG, TITLE, chart, note=planner_note(settings))
