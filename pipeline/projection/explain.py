"""``explain(projection)``: the formulas and every assumption of a projection, in words."""

from __future__ import annotations

from .results import ModeProjection, Projection
from .spec import GPU_PEAK_BF16_FLOPS, JobSpec


def _fmt_days(days: float) -> str:
    return f"{days:,.1f} days" if days < 1e7 else "never (the job cannot finish)"


def _usd(value: float | None, before: str = ", cost ") -> str:
    """``before`` and the dollars; nothing without a price (or for a job that never finishes)."""
    if value is None or value == float("inf"):
        return ""
    return f"{before}{'-' if round(value) < 0 else ''}${abs(value):,.0f}"  # -$35,196, as the report


def weibull_difference(spec: JobSpec, m: ModeProjection) -> str:
    """One sentence: how and why the fitted Weibull (renewal) figure differs from the exponential."""
    f, fitted, poisson = spec.failure, m.renewal, m.monte_carlo
    if fitted is None or poisson is None or f.weibull_shape is None:
        return ""
    diff = fitted.mean_days / poisson.mean_days - 1
    more = fitted.mean_interruptions / poisson.mean_interruptions - 1
    moves = "longer" if diff > 0.0005 else "shorter" if diff < -0.0005 else "the same to 0.05%"
    if spec.node_ages == "new":
        why = (
            f"every node is new at job start and a Weibull shape {f.weibull_shape:.2f} "
            + ("< 1 fails most often early in life, so the job sees more failures than the fleet's mean rate"
               if f.weibull_shape < 1 else ">= 1 fails less often early in life")
        )  # fmt: skip
    elif f.weibull_shape < 1:
        why = (
            f"same mean rate, but with shape {f.weibull_shape:.2f} < 1 a replaced node often fails again "
            "soon, so failures cluster: more short gaps (each loses little work but costs a full "
            "restart) and longer quiet spells"
        )
    else:
        why = f"same mean rate, but with shape {f.weibull_shape:.2f} >= 1 gaps are more regular than Poisson"
    return (
        f"fitted Weibull model: {fitted.mean_days:,.1f} days vs {poisson.mean_days:,.1f} exponential "
        f"({moves}{f', {diff:+.1%}' if moves in ('longer', 'shorter') else ''}; "
        f"{more:+.1%} interruptions): {why}."
    )


def explain(projection: Projection) -> str:
    """A plain-text account of how every number in ``projection`` was obtained."""
    p, s = projection, projection.spec
    f = s.failure
    out: list[str] = [f"Projection for job {s.name!r}", ""]
    out.append("WORK")
    if s.gpu_hours is not None:
        out.append(f"- {s.work_gpu_hours:,.0f} GPU-hours of failure-free work, as given.")
    else:
        out.append(
            f"- Training FLOPs = 6 x params x tokens = 6 x {s.params:.4g} x {s.tokens:.4g} = "
            f"{s.training_flops:.3g}; at {s.mfu:.0%} MFU of the {s.gpu} peak "
            f"({GPU_PEAK_BF16_FLOPS[s.gpu.upper()] / 1e12:,.0f} TFLOP/s dense BF16) that is "
            f"{s.work_gpu_hours:,.0f} GPU-hours."
        )
    mfu = s.implied_mfu
    if s.gpu_hours is not None and mfu is not None:
        out.append(
            f"- 6 x P x D = {s.training_flops:.3g} FLOPs at {s.peak_flops_per_gpu / 1e12:,.0f} "
            f"TFLOP/s per {s.gpu} in {s.work_gpu_hours:,.0f} GPU-hours implies {mfu:.0%} MFU. "
            "Published training MFU is usually higher (Llama 3 reports 38-43%), so the "
            "GPU-hours include overheads (evaluation, restarts, stragglers, idle time)."
        )
    priced = (
        f"; cost at ${s.price_per_gpu_hour_usd:.2f} per GPU-hour = ${p.failure_free_cost_usd:,.0f}."
        if s.price_per_gpu_hour_usd is not None
        else ". No price given: costs are left out (days, goodput and interruptions need none)."
    )
    out.append(
        f"- Failure-free wall time = GPU-hours / ({s.instances} instances x "
        f"{s.gpus_per_instance} GPUs) = {_fmt_days(p.failure_free_days)}{priced}"
    )
    out += ["", "FAILURES"]
    if f.kind == "weibull":
        out.append(
            f"- Each instance fails with Weibull gaps (shape {f.weibull_shape:.3g}, scale "
            f"{f.weibull_scale_hours:,.0f} h), mean {f.mean_tbf_hours:,.0f} h between failures; "
            f"source: {f.source}. The exponential figures use a Poisson process at that mean rate; "
            f"the fitted Weibull figures simulate every slot (node ages at start: {s.node_ages})."
        )
    else:
        ci = ""
        if f.rate_ci_low_per_instance_hour is not None:
            ci = (
                f" (95% interval {f.rate_ci_low_per_instance_hour:.3%} to "
                f"{f.rate_ci_high_per_instance_hour:.3%})"
            )
        out.append(f"- {f.rate_per_instance_hour:.4%} failures per instance-hour{ci}; source: {f.source}.")
    out.append(
        "- Instances fail independently and a failed node is replaced, so the job sees the "
        "superposition of N renewal processes; by Drenick's theorem this is close to a Poisson "
        f"process of rate N / mean gap = {p.cluster_rate_per_hour:.4g} per hour, i.e. a cluster "
        f"MTBF M = 1/(N r) = {p.cluster_mtbf_hours:,.2f} hours."
    )
    out += ["", "MODEL (Daly 2006, exponential failures)"]
    out.append(
        "- The work is split into checkpoint intervals tau, each followed by a checkpoint write "
        "delta. A failure loses the progress since the last checkpoint and costs a recovery "
        "R = detect + replace + restart; a failure during recovery restarts the recovery."
    )
    out.append("- Expected wall time T = M exp(R/M) (exp((tau + delta)/M) - 1) x work / tau.")
    out.append("- Expected interruptions = T / M; goodput (ETTR) = failure-free time / T.")
    out.append(
        "- First-order ETTR (the renewal form used by Kokolis et al. 2024): "
        "1 / (1 + delta/tau + (1 + delta/tau)(R + (tau + delta)/2)/M)."
    )
    out.append(
        "- Optimal checkpoint interval: Young/Daly first order sqrt(2 delta M); the value "
        "used is the exact minimiser of T (it does not depend on R)."
    )
    out.append(
        "- Not modelled: failures that do not stop the job, slowdowns/stragglers, correlated "
        "failures of many nodes, and queueing for capacity; prices are flat per GPU-hour and "
        "are paid for the whole wall time including downtime."
    )
    out += ["", "RESULTS PER MODE"]
    for m in p.modes.values():
        pr = m.profile
        out.append(
            f"- {m.mode}: detect {pr.detect_hours:g} h + replace {pr.replace_hours:g} h + "
            f"restart {pr.restart_hours:g} h = R {pr.downtime_hours:.2f} h; checkpoint every "
            f"{pr.checkpoint_interval_hours:g} h, writing takes {pr.checkpoint_write_hours:g} h."
        )
        if not m.finishes:
            out.append(
                f"  analytic: {m.status} ({m.goodput:.2%}): the job never finishes in this mode, so "
                "it has no days or cost and is compared with nothing."
            )
        else:
            out.append(
                f"  analytic: {_fmt_days(m.expected_days)}, {m.expected_interruptions:,.0f} "
                f"interruptions, goodput {m.goodput:.1%} (first-order ETTR "
                f"{m.first_order_ettr:.1%}){_usd(m.cost_usd)}."
            )
        if m.monte_carlo is not None:
            mc = m.monte_carlo
            diff = mc.mean_days / m.expected_days - 1
            costs = (
                f", ${mc.p10_cost_usd:,.0f} / ${mc.p50_cost_usd:,.0f} / ${mc.p90_cost_usd:,.0f}"
                if mc.p10_cost_usd is not None
                else ""
            )
            out.append(
                f"  Monte Carlo ({mc.runs:,} runs, seed {mc.seed}): mean {mc.mean_days:,.1f} days "
                f"({diff:+.2%} vs analytic), P10/P50/P90 {mc.p10_days:,.1f} / {mc.p50_days:,.1f}"
                f" / {mc.p90_days:,.1f} days{costs}."
            )
        if m.monte_carlo_with_rate_uncertainty is not None:
            mu = m.monte_carlo_with_rate_uncertainty
            out.append(
                f"  with the failure-rate uncertainty (lognormal over the 95% interval): "
                f"P10/P50/P90 {mu.p10_days:,.1f} / {mu.p50_days:,.1f} / {mu.p90_days:,.1f} days."
            )
        if m.renewal is not None:
            r = m.renewal
            out.append(
                f"  fitted Weibull model ({r.runs:,} runs, every instance slot a renewal process, "
                f"{s.node_ages} node ages): P10/P50/P90 {r.p10_days:,.1f} / {r.p50_days:,.1f} / "
                f"{r.p90_days:,.1f} days, {r.mean_interruptions:,.0f} interruptions."
            )
            out.append(f"  {weibull_difference(s, m)}")
        if m.renewal_with_parameter_uncertainty is not None:
            ru = m.renewal_with_parameter_uncertainty
            out.append(
                f"  with the Weibull fit's parameter uncertainty (scale and shape drawn from its "
                f"covariance): P10/P50/P90 {ru.p10_days:,.1f} / {ru.p50_days:,.1f} / {ru.p90_days:,.1f} days."
            )
        if m.note:
            out.append(f"  {m.note}")
        saves = (
            f", saving {m.optimal_saves_days:,.1f} days{_usd(m.optimal_saves_usd, ' and ')}"
            if m.optimal_saves_days is not None
            else ""
        )
        out.append(
            f"  optimal checkpoint interval {m.optimal_interval_hours:.2f} h (Young/Daly "
            f"{m.young_daly_interval_hours:.2f} h) would take {_fmt_days(m.optimal_expected_days)}{saves}."
        )
    for sv in p.savings:
        out.append(
            f"- {sv.mode} instead of {sv.baseline} saves {sv.days:,.1f} days ({sv.percent:.1f}%)"
            f"{_usd(sv.usd, ' and ')}."
        )
    if p.not_compared:
        out.append(f"- Not compared: {', '.join(p.not_compared)} cannot finish (goodput < 1%).")
    return "\n".join(out)
