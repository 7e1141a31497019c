"""The analytic (Daly) and Monte Carlo models of wall time under Poisson cluster failures.

Model (Daly 2006, "A higher order estimate of the optimum checkpoint interval for restart dumps",
FGCS 22): the work of W hours is cut into segments of tau hours of compute followed by a
checkpoint write of delta hours. A failure (Poisson, rate lambda = 1/M for the whole job) loses
the progress of the current segment and costs a recovery of R = detect + replace + restart hours;
a failure during recovery restarts the recovery. Each segment of length s = tau + delta then takes

    E[segment] = M * exp(R/M) * (exp(s/M) - 1)

so T_wall = M e^{R/M} (e^{(tau+delta)/M} - 1) W/tau  (Daly's closed form; below we sum whole
segments plus the final partial one, which equals it when tau divides W). The expected number of
interruptions is lambda * E[T_wall] (Wald). The first-order optimum interval is Young's (1974)
tau* = sqrt(2 delta M); Daly's form has a minimum that does not depend on R.

Monte Carlo uses the renewal-reward structure instead of walking through failures: the failures
before n segments succeed are NegativeBinomial(n, e^{-lambda s}); the lost work of K failed
attempts is a sum of K exponentials truncated to [0, s) (drawn exactly for K <= 32, otherwise
Gamma with the exact mean and variance, i.e. CLT-accurate); recoveries are handled the same way
with s -> R. Cost is O(runs), independent of the number of failures.
"""

from __future__ import annotations

import math

import numpy as np

from .spec import FailureModel, RecoveryProfile, SpecError

_EXACT_MAX = 32
MAX_SLOWDOWN = 1e6  # beyond this the negative-binomial draws overflow; the job is hopeless anyway


def _segments(work_hours: float, profile: RecoveryProfile) -> list[tuple[float, float]]:
    """[(count, segment length incl. checkpoint write)] for the full and final partial segment."""
    tau, delta = profile.checkpoint_interval_hours, profile.checkpoint_write_hours
    n_full = math.floor(work_hours / tau + 1e-9)
    rest = work_hours - n_full * tau
    segs = [(float(n_full), tau + delta)] if n_full else []
    if rest > 1e-9 * tau:
        segs.append((1.0, rest + delta))
    return segs


def expected_wall_hours(work_hours: float, rate_per_hour: float, profile: RecoveryProfile) -> float:
    """Daly's exact expected wall time for exponential failures (see module docstring)."""
    lam, R = rate_per_hour, profile.downtime_hours
    segs = _segments(work_hours, profile)
    if lam == 0:
        return sum(n * s for n, s in segs)
    if lam * (R + max(s for _, s in segs)) > 700:  # exp overflow: the job never finishes
        return math.inf
    return sum(n * math.exp(lam * R) * math.expm1(lam * s) / lam for n, s in segs)


def expected_interruptions(work_hours: float, rate_per_hour: float, profile: RecoveryProfile) -> float:
    """Expected failures during the job, including those that strike during a recovery."""
    return rate_per_hour * expected_wall_hours(work_hours, rate_per_hour, profile)


def young_daly_interval_hours(checkpoint_write_hours: float, mtbf_hours: float) -> float:
    """First-order optimum checkpoint interval sqrt(2 * delta * M) (Young 1974, Daly 2006)."""
    return math.sqrt(2.0 * checkpoint_write_hours * mtbf_hours)


def optimal_interval_hours(work_hours: float, rate_per_hour: float, profile: RecoveryProfile) -> float:
    """Numerical minimiser of the Daly curve over the checkpoint interval (golden section)."""
    if profile.checkpoint_write_hours == 0 or rate_per_hour == 0:
        return profile.checkpoint_interval_hours  # checkpoints are free / useless: keep the user's

    def cost(log_tau: float) -> float:
        # per-unit-work form: smooth in tau (no floor), same minimiser as the segment sum
        tau = math.exp(log_tau)
        s = tau + profile.checkpoint_write_hours
        return math.expm1(rate_per_hour * s) / tau

    lo = math.log(1e-3 * young_daly_interval_hours(profile.checkpoint_write_hours, 1 / rate_per_hour))
    hi = math.log(min(work_hours, 1e3 / rate_per_hour))
    g = (math.sqrt(5) - 1) / 2
    for _ in range(200):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if cost(a) < cost(b):
            hi = b
        else:
            lo = a
    return math.exp((lo + hi) / 2)


def first_order_ettr(rate_per_hour: float, profile: RecoveryProfile) -> float:
    """First-order effective training time ratio, the renewal form used by Kokolis et al. 2024.

    Per tau hours of work the job spends delta writing a checkpoint, and each failure (rate
    lambda = 1 / job MTTF) costs the restart overhead R plus on average half a segment of lost
    work: ETTR = 1 / (1 + delta/tau + lambda (R + (tau + delta)/2)). Valid when lambda*(R+tau) << 1.
    """
    tau, delta = profile.checkpoint_interval_hours, profile.checkpoint_write_hours
    waste = delta / tau + rate_per_hour * (1 + delta / tau) * (profile.downtime_hours + (tau + delta) / 2)
    return 1.0 / (1.0 + waste)


def _trunc_exp_sum(k: np.ndarray, lam: np.ndarray, cap: float, rng: np.random.Generator) -> np.ndarray:
    """Sum of k[i] iid Exponential(lam[i]) draws truncated to [0, cap), for each run i."""
    k = np.asarray(k, dtype=np.int64)
    a = lam * cap
    # moments of Y = X / cap (density ~ e^{-a y} on [0, 1)); series near a = 0 avoids cancellation
    small = a < 1e-3
    a_safe = np.where(small, 1.0, a)
    mean_y = np.where(small, 0.5 - a / 12, 1 / a_safe - 1 / np.expm1(a_safe))
    var_y = np.where(small, 1 / 12 - a**2 / 720, 1 / a_safe**2 - np.exp(a_safe) / np.expm1(a_safe) ** 2)
    out = np.zeros(k.shape, dtype=float)
    big = k > _EXACT_MAX
    if big.any():
        m, v = mean_y[big] * cap, var_y[big] * cap**2
        out[big] = rng.gamma(k[big] * m * m / v, v / m)
    few = (k > 0) & ~big
    if few.any():
        u = rng.random((int(few.sum()), _EXACT_MAX))
        x = -np.log1p(u * np.expm1(-a[few])[:, None]) / lam[few][:, None]
        x[np.arange(_EXACT_MAX)[None, :] >= k[few][:, None]] = 0.0
        out[few] = x.sum(axis=1)
    return out


def simulate_wall_hours(
    work_hours: float,
    rates_per_hour: np.ndarray,
    profile: RecoveryProfile,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """(wall hours, interruptions) per run; run i sees a Poisson rate ``rates_per_hour[i]``."""
    lam = np.asarray(rates_per_hour, dtype=float)
    R = profile.downtime_hours
    worst = expected_wall_hours(work_hours, float(lam.max()), profile)
    if worst > MAX_SLOWDOWN * work_hours:
        raise SpecError(
            f"expected wall time is {worst / work_hours:.3g}x the failure-free time at the highest "
            f"failure rate drawn; the job never finishes: use fewer instances or faster recovery"
        )
    wall = np.zeros(lam.shape)
    fails = np.zeros(lam.shape, dtype=np.int64)
    for n, s in _segments(work_hours, profile):
        k = rng.negative_binomial(n, np.exp(-lam * s))
        wall += n * s + _trunc_exp_sum(k, lam, s, rng)
        fails += k
    if R > 0:
        # each of the `fails` recoveries must run R hours without a failure
        pos = fails > 0
        k_r = np.zeros_like(fails)
        k_r[pos] = rng.negative_binomial(fails[pos], np.exp(-lam[pos] * R))
        wall += fails * R + _trunc_exp_sum(k_r, lam, R, rng)
        fails += k_r
    return wall, fails


def sample_cluster_rates(
    failure: FailureModel, instances: int, runs: int, rng: np.random.Generator, uncertain: bool
) -> np.ndarray:
    """Cluster rate per run: the point estimate, or lognormal draws spanning the 95% rate CI."""
    rate = failure.cluster_rate_per_hour(instances)
    lo, hi = failure.rate_ci_low_per_instance_hour, failure.rate_ci_high_per_instance_hour
    if not uncertain or lo is None or hi is None:
        return np.full(runs, rate)
    sigma = (math.log(hi) - math.log(lo)) / (2 * 1.959964)
    return rate * np.exp(sigma * rng.standard_normal(runs))


def superposed_failure_times(
    failure: FailureModel,
    instances: int,
    horizon_hours: float,
    rng: np.random.Generator,
    warmup_means: float = 5.0,
) -> np.ndarray:
    """Sorted cluster failure times from N independent per-instance renewal processes.

    Each instance draws its own exponential/Weibull gaps (a failed node is replaced by a fresh
    one); a warm-up of several mean gaps is discarded so instance ages are in equilibrium, as in
    a fleet. Used to check the Poisson (Drenick) approximation, not by the projection itself.
    """
    mean = failure.mean_tbf_hours
    start = warmup_means * mean
    span = start + horizon_hours
    draws = int(math.ceil(span / mean * 3 + 20))
    if failure.kind == "weibull":
        assert failure.weibull_shape is not None and failure.weibull_scale_hours is not None
        gaps = failure.weibull_scale_hours * rng.weibull(failure.weibull_shape, (instances, draws))
    else:
        gaps = rng.exponential(mean, (instances, draws))
    times = np.cumsum(gaps, axis=1)
    if (times[:, -1] < span).any():
        raise RuntimeError("too few draws per instance; raise the draw count")
    keep = times[(times >= start) & (times < span)] - start
    return np.sort(keep)
