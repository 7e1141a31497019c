"""Projection results per recovery mode, Monte Carlo summaries, sweeps and the explanation text."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from . import model, renewal
from .spec import HOURS_PER_DAY, JobSpec, RecoveryProfile, SpecError


@dataclass(frozen=True)
class MonteCarloSummary:
    """Percentiles of simulated wall time and cost for one mode; raw days only if asked for."""

    runs: int
    seed: int
    rate_uncertainty: bool
    mean_days: float
    p10_days: float
    p50_days: float
    p90_days: float
    p10_cost_usd: float | None  # None without a price
    p50_cost_usd: float | None
    p90_cost_usd: float | None
    mean_interruptions: float
    days: np.ndarray | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class ModeProjection:
    """Expected outcome of the job under one recovery profile (analytic, plus Monte Carlo).

    A mode that cannot finish (goodput < 1%, :func:`cannot_finish`) has ``status`` saying so and
    infinite days, interruptions and cost (null in JSON, "∞" in tables): its expectation is an
    astronomical number that means only "never"; so are its optimum's when that cannot finish
    either, and what the optimum saves is then None. Costs are None without a price."""

    mode: str
    profile: RecoveryProfile
    expected_days: float
    expected_interruptions: float
    goodput: float  # failure-free compute time / expected wall time (the job's ETTR)
    first_order_ettr: float
    cost_usd: float | None
    young_daly_interval_hours: float
    optimal_interval_hours: float
    optimal_expected_days: float
    optimal_saves_days: float | None
    optimal_saves_usd: float | None
    monte_carlo: MonteCarloSummary | None = None
    monte_carlo_with_rate_uncertainty: MonteCarloSummary | None = None
    note: str = ""
    # the fitted Weibull model, every instance slot a renewal process (pipeline.projection.renewal)
    renewal: MonteCarloSummary | None = None
    renewal_with_parameter_uncertainty: MonteCarloSummary | None = None
    status: str = "finishes"

    @property
    def finishes(self) -> bool:
        return self.status == "finishes"


@dataclass(frozen=True)
class Savings:
    """What ``mode`` saves over ``baseline`` (positive = faster / cheaper); only between modes that
    both finish, ``usd`` None without a price."""

    baseline: str
    mode: str
    days: float
    percent: float
    usd: float | None


@dataclass(frozen=True)
class Projection:
    spec: JobSpec
    work_gpu_hours: float
    failure_free_days: float
    failure_free_cost_usd: float | None
    cluster_rate_per_hour: float
    cluster_mtbf_hours: float
    modes: dict[str, ModeProjection]
    savings: list[Savings]

    @property
    def not_compared(self) -> list[str]:
        """Modes left out of the comparison because they cannot finish (in ``modes`` order)."""
        return [m for m, r in self.modes.items() if not r.finishes] if len(self.modes) > 1 else []

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (infinities become null); raw Monte Carlo days are dropped."""
        spec = dataclasses.asdict(self.spec)
        spec["implied_mfu"] = self.spec.implied_mfu
        out = {
            "spec": spec,
            "work_gpu_hours": self.work_gpu_hours,
            "failure_free_days": self.failure_free_days,
            "failure_free_cost_usd": self.failure_free_cost_usd,
            "cluster_rate_per_hour": self.cluster_rate_per_hour,
            "cluster_mtbf_hours": self.cluster_mtbf_hours,
            "modes": {k: dataclasses.asdict(v) for k, v in self.modes.items()},
            "savings": [dataclasses.asdict(s) for s in self.savings],
        }
        return _jsonable(out)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        # raw Monte Carlo samples (MonteCarloSummary.days) are not part of the JSON form
        return {
            k: _jsonable(v)
            for k, v in value.items()
            if not (k == "days" and (v is None or isinstance(v, np.ndarray)))
        }
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


def _baseline(modes: Sequence[str]) -> str:
    return "manual" if "manual" in modes else modes[0]


def _summary(
    spec: JobSpec, wall: np.ndarray, fails: np.ndarray, seed: int, uncertain: bool, keep_days: bool
) -> MonteCarloSummary:
    days = wall / HOURS_PER_DAY
    p10, p50, p90 = np.percentile(days, [10, 50, 90])
    cost = [spec.cost_usd(float(d) * HOURS_PER_DAY) for d in (p10, p50, p90)]
    return MonteCarloSummary(
        wall.size,
        seed,
        uncertain,
        float(days.mean()),
        float(p10),
        float(p50),
        float(p90),
        *cost,
        float(fails.mean()),
        days if keep_days else None,
    )


def monte_carlo(
    spec: JobSpec,
    mode: str,
    runs: int = 10_000,
    seed: int = 0,
    rate_uncertainty: bool = False,
    keep_days: bool = False,
) -> MonteCarloSummary:
    """Simulate ``runs`` independent executions of the job under ``mode`` (vectorised, seeded)."""
    if runs < 1:
        raise SpecError(f"monte-carlo runs must be >= 1, got {runs}")
    profile = _profile(spec, mode)
    rng = np.random.default_rng([seed, sorted(spec.recovery).index(mode), int(rate_uncertainty)])
    rates = model.sample_cluster_rates(spec.failure, spec.instances, runs, rng, rate_uncertainty)
    wall, fails = model.simulate_wall_hours(spec.failure_free_hours, rates, profile, rng)
    return _summary(spec, wall, fails, seed, rate_uncertainty, keep_days)


PARAMETER_DRAWS = 200  # Weibull (scale, shape) draws; the runs are split evenly over them


def renewal_monte_carlo(
    spec: JobSpec,
    mode: str,
    runs: int = 10_000,
    seed: int = 0,
    parameter_uncertainty: bool = False,
    keep_days: bool = False,
) -> MonteCarloSummary:
    """Simulate the job on N Weibull renewal slots (``spec.failure`` must be Weibull; node ages
    from ``spec.node_ages``). With ``parameter_uncertainty`` the runs are split over
    ``PARAMETER_DRAWS`` (log scale, log shape) draws from the fit's covariance."""
    f = spec.failure
    if f.kind != "weibull" or f.weibull_shape is None or f.weibull_scale_hours is None:
        raise SpecError("the renewal simulation needs a Weibull failure model (shape and scale)")
    if runs < 1:
        raise SpecError(f"monte-carlo runs must be >= 1, got {runs}")
    if parameter_uncertainty and f.weibull_log_covariance is None:
        raise SpecError("parameter uncertainty needs the Weibull fit's covariance")
    profile = _profile(spec, mode)
    rng = np.random.default_rng([seed, sorted(spec.recovery).index(mode), 2 + int(parameter_uncertainty)])
    centre = np.log([f.weibull_scale_hours, f.weibull_shape])
    if parameter_uncertainty:
        draws = np.exp(rng.multivariate_normal(centre, f.weibull_log_covariance, min(runs, PARAMETER_DRAWS)))
    else:
        draws = np.exp(centre)[None, :]
    work = spec.failure_free_hours
    horizon = 2 * model.expected_wall_hours(work, f.cluster_rate_per_hour(spec.instances), profile)
    wall, fails = renewal.simulate_wall_hours(
        work, spec.instances, draws[:, 1], draws[:, 0], runs, profile, spec.node_ages, horizon, rng
    )
    return _summary(spec, wall, fails, seed, parameter_uncertainty, keep_days)


def days_histogram(spec: JobSpec, runs: int = 10_000, seed: int = 0, bins: int = 40) -> pl.DataFrame:
    """Histogram of simulated wall days per mode on shared bin edges (for the report's chart)."""
    samples = {m: monte_carlo(spec, m, runs, seed, keep_days=True).days for m in spec.recovery}
    pooled = np.concatenate([s for s in samples.values() if s is not None])
    edges = np.histogram_bin_edges(pooled, bins=bins)
    rows = []
    for mode, days in samples.items():
        counts, _ = np.histogram(days, bins=edges)
        rows += [
            (mode, float(lo), float(hi), int(c))
            for lo, hi, c in zip(edges[:-1], edges[1:], counts, strict=True)
        ]
    schema = ["mode", "bin_low_days", "bin_high_days", "runs"]
    return pl.DataFrame(rows, schema=schema, orient="row")


def _profile(spec: JobSpec, mode: str) -> RecoveryProfile:
    if mode not in spec.recovery:
        raise SpecError(f"unknown mode {mode!r}; the spec has {', '.join(spec.recovery)}")
    return spec.recovery[mode]


MIN_GOODPUT = 0.01  # below this the job "cannot finish": no days, costs or simulations are shown


def cannot_finish(goodput: float) -> bool:
    """True when the expected wall time is over 100x the failure-free time (goodput < 1%)."""
    return not goodput >= MIN_GOODPUT


def _mode(spec: JobSpec, mode: str, runs: int, seed: int) -> ModeProjection:
    profile = _profile(spec, mode)
    work, lam = spec.failure_free_hours, spec.failure.cluster_rate_per_hour(spec.instances)
    wall = model.expected_wall_hours(work, lam, profile)
    best_tau = model.optimal_interval_hours(work, lam, profile)
    best_wall = model.expected_wall_hours(work, lam, profile.with_interval(best_tau))
    mc = mc_unc = fitted = fitted_unc = None
    finishes, best_finishes = not cannot_finish(work / wall), not cannot_finish(work / best_wall)
    note = "" if finishes else "not simulated: the job never finishes (goodput < 1%)"
    if runs > 0 and finishes:
        try:
            mc = monte_carlo(spec, mode, runs, seed)
            if spec.failure.rate_ci_low_per_instance_hour is not None:
                mc_unc = monte_carlo(spec, mode, runs, seed, rate_uncertainty=True)
        except SpecError as exc:
            note = f"not simulated: {exc}"
    if runs > 0 and spec.failure.kind == "weibull" and finishes:
        try:
            fitted = renewal_monte_carlo(spec, mode, runs, seed)
            if spec.failure.weibull_log_covariance is not None:
                fitted_unc = renewal_monte_carlo(spec, mode, runs, seed, parameter_uncertainty=True)
        except SpecError as exc:
            note = (note + "; " if note else "") + f"fitted Weibull model not simulated: {exc}"
    shown = wall if finishes else math.inf  # "never", not an astronomical number
    best_shown = best_wall if best_finishes else math.inf
    saved = (wall - best_wall) if finishes and best_finishes else None
    return ModeProjection(
        mode=mode,
        profile=profile,
        expected_days=shown / HOURS_PER_DAY,
        expected_interruptions=lam * shown,
        goodput=work / wall,
        first_order_ettr=model.first_order_ettr(lam, profile),
        cost_usd=spec.cost_usd(shown),
        young_daly_interval_hours=model.young_daly_interval_hours(profile.checkpoint_write_hours, 1 / lam),
        optimal_interval_hours=best_tau,
        optimal_expected_days=best_shown / HOURS_PER_DAY,
        optimal_saves_days=None if saved is None else saved / HOURS_PER_DAY,
        optimal_saves_usd=None if saved is None else spec.cost_usd(saved),
        monte_carlo=mc,
        monte_carlo_with_rate_uncertainty=mc_unc,
        note=note,
        renewal=fitted,
        renewal_with_parameter_uncertainty=fitted_unc,
        status="finishes" if finishes else CANNOT_FINISH,
    )


def project(
    spec: JobSpec,
    monte_carlo_runs: int = 10_000,
    seed: int = 0,
    modes: Sequence[str] | None = None,
) -> Projection:
    """Project wall time, goodput and cost of ``spec`` per recovery mode, and the savings of each
    mode over the baseline (manual, else the first) where both finish: a mode that cannot finish
    is compared with nothing (``Projection.not_compared``)."""
    names = list(modes) if modes else list(spec.recovery)
    if monte_carlo_runs < 0:
        raise SpecError(f"monte-carlo runs must be >= 0, got {monte_carlo_runs}")
    results = {m: _mode(spec, m, monte_carlo_runs, seed) for m in names}
    base = _baseline(names)
    savings = []
    for m in names:
        b, o = results[base], results[m]
        if m != base and b.finishes and o.finishes:
            days = b.expected_days - o.expected_days
            usd = None if b.cost_usd is None or o.cost_usd is None else b.cost_usd - o.cost_usd
            savings.append(Savings(base, m, days, 100 * days / b.expected_days, usd))
    lam = spec.failure.cluster_rate_per_hour(spec.instances)
    return Projection(
        spec=spec,
        work_gpu_hours=spec.work_gpu_hours,
        failure_free_days=spec.failure_free_hours / HOURS_PER_DAY,
        failure_free_cost_usd=spec.cost_usd(spec.failure_free_hours),
        cluster_rate_per_hour=lam,
        cluster_mtbf_hours=1 / lam,
        modes=results,
        savings=savings,
    )


CANNOT_FINISH = "cannot finish: goodput < 1%"


def _sweep_rows(specs: Sequence[JobSpec], key: str, values: Sequence[float]) -> pl.DataFrame:
    """One row per spec. Per mode: the configured checkpoint interval and the one re-optimised for
    that row's cluster MTBF, each with expected days, goodput, cost and a status; days, costs and
    savings are null where the job cannot finish (goodput < 1%), instead of astronomical numbers."""
    rows = []
    for value, spec in zip(values, specs, strict=True):
        p = project(spec, monte_carlo_runs=0)
        row: dict[str, Any] = {
            key: value,
            "gpus": spec.gpus,
            "cluster_mtbf_hours": p.cluster_mtbf_hours,
            "failure_free_days": p.failure_free_days,
        }
        for m, r in p.modes.items():
            best_goodput = p.failure_free_days / r.optimal_expected_days
            hopeless, best_hopeless = cannot_finish(r.goodput), cannot_finish(best_goodput)
            row |= {
                f"{m}_checkpoint_interval_hours": r.profile.checkpoint_interval_hours,
                f"{m}_status": CANNOT_FINISH if hopeless else "finishes",
                f"{m}_expected_days": None if hopeless else r.expected_days,
                f"{m}_goodput": r.goodput,
                f"{m}_cost_usd": None if hopeless else r.cost_usd,
                f"{m}_optimal_interval_hours": r.optimal_interval_hours,
                f"{m}_optimal_status": CANNOT_FINISH if best_hopeless else "finishes",
                f"{m}_optimal_expected_days": None if best_hopeless else r.optimal_expected_days,
                f"{m}_optimal_goodput": best_goodput,
                f"{m}_optimal_cost_usd": None
                if best_hopeless
                else spec.cost_usd(r.optimal_expected_days * HOURS_PER_DAY),
            }
        if len(p.modes) > 1:  # the first mode over the baseline; nothing when either cannot finish
            s = p.savings[0] if p.savings else None
            row |= {
                "savings_days": s and s.days,
                "savings_pct": s and s.percent,
                "savings_usd": s and s.usd,
            }
        rows.append(row)
    frame = pl.DataFrame(rows, infer_schema_length=None)
    return frame.cast({c: pl.Float64 for c, t in frame.schema.items() if t == pl.Null})  # no price: costs


DEFAULT_SWEEP_INSTANCES = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
DEFAULT_SWEEP_RATES = (1e-4, 2e-4, 3e-4, 4e-4, 5e-4, 6e-4, 8e-4, 1e-3)


def sweep_cluster_size(spec: JobSpec, instances: Sequence[int] = DEFAULT_SWEEP_INSTANCES) -> pl.DataFrame:
    """Expected days / goodput / cost per mode and savings over cluster size, work held fixed."""
    specs = [dataclasses.replace(spec, instances=int(n)) for n in instances]
    return _sweep_rows(specs, "instances", list(instances))


def sweep_failure_rate(
    spec: JobSpec, rates_per_instance_hour: Sequence[float] = DEFAULT_SWEEP_RATES
) -> pl.DataFrame:
    """Expected days / goodput / cost per mode and savings over the per-instance failure rate."""
    fm = spec.failure
    specs = [
        dataclasses.replace(spec, failure=type(fm).exponential(r, source="sweep"))
        for r in rates_per_instance_hour
    ]
    return _sweep_rows(specs, "rate_per_instance_hour", list(rates_per_instance_hour))


def sensitivity_table(
    spec: JobSpec,
    baseline_downtime_hours: Sequence[float] = (1.0, 2.0, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0),
    prices_per_gpu_hour_usd: Sequence[float] = (2.0, 3.0, 4.5, 6.0, 8.0),
) -> pl.DataFrame:
    """Savings of the first non-baseline mode as the baseline's downtime and the price vary.

    Downtime is scaled proportionally across detect/replace/restart; hours lost per failure adds
    the mean lost work, half a checkpoint segment.
    """
    names = list(spec.recovery)
    base = _baseline(names)
    other = next((m for m in names if m != base), None)
    if other is None:
        raise SpecError("sensitivity needs two recovery modes (e.g. manual and automatic)")
    b = spec.recovery[base]
    rows = []
    for hours in baseline_downtime_hours:
        f = hours / b.downtime_hours if b.downtime_hours else 0.0
        prof = RecoveryProfile(
            b.detect_hours * f,
            b.replace_hours * f,
            b.restart_hours * f if b.downtime_hours else hours,
            b.checkpoint_interval_hours,
            b.checkpoint_write_hours,
        )
        p = project(
            dataclasses.replace(spec, recovery={base: prof, other: spec.recovery[other]}), monte_carlo_runs=0
        )
        s = p.savings[0] if p.savings else None  # None: a mode cannot finish, nothing to compare
        row: dict[str, Any] = {
            f"{base}_downtime_hours": hours,
            f"{base}_hours_lost_per_failure": hours
            + (b.checkpoint_interval_hours + b.checkpoint_write_hours) / 2,
            "savings_pct": s and s.percent,
            "savings_days": s and s.days,
        }
        for price in prices_per_gpu_hour_usd:
            row[f"savings_musd_at_{price:g}_usd_per_gpu_hour"] = (
                s and s.days * HOURS_PER_DAY * spec.gpus * price / 1e6
            )
        rows.append(row)
    return pl.DataFrame(rows, infer_schema_length=None)
