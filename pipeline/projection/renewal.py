"""Monte Carlo of a job on N instance slots whose nodes fail as Weibull renewal processes.

The Daly model and :func:`pipeline.projection.model.simulate_wall_hours` treat the job's failures
as Poisson (Drenick's limit). With a fitted Weibull shape k < 1 (infant mortality) the limit is
reached only for the failures of old nodes: a node that replaces a failed one starts a fresh
life and is much more likely than average to fail again soon. Here every slot is simulated as a
renewal process and the job sees their superposition:

- **Node ages at job start** (``node_ages``): ``"stationary"`` — the fleet has been running, each
  slot's time to its first failure is the renewal process's forward-recurrence time, density
  S(t)/mu (Cox 1962, *Renewal Theory*), i.e. (T/scale)^k ~ Gamma(1/k); its CDF is the regularised
  incomplete gamma P(1/k, (t/scale)^k). ``"new"`` — every node is brand new at job start: the first
  failure is a plain Weibull draw (more early failures when k < 1).
- **Replacement**: a failed node is replaced by a fresh one whose life starts ``replace_delay``
  hours later (detect + replace of the recovery profile), so each later gap of that slot is a
  fresh Weibull(k, scale) draw.

Algorithm, per chunk of runs, O(failures) and with no loop over slots:

1. The number of slots whose first failure falls in the horizon H is Binomial(N, F1(H)); their
   times are drawn from F1 truncated to [0, H] — by inverse CDF for new nodes, by rejection from
   Uniform(0, H) with acceptance S(t) (the truncated stationary density is proportional to S) for
   stationary ages.
2. Each failure spawns the next failure of its slot at t + delay + Weibull(k, scale); generations
   are drawn in bulk until none falls before H.
3. The failure times of each run are placed in one padded row and sorted; the job is then walked
   with array operations over the gaps between failures (:func:`wall_hours_from_failures`).

H starts at twice the Daly expected wall time at the same mean rate, then 1.25 x the longest
wall time seen; a chunk with a run unfinished at H is redrawn with 2H (conditioning on finishing
by H, a negligible bias since H is far in the tail). Cost: ~10^7 failures per second and core
(bench/RESULTS.md), so a job with 10^5 failures per run and 10^4 runs is refused (``MAX_EVENTS``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from scipy.special import gamma as gamma_fn
from scipy.special import gammainc

from .model import _segments
from .spec import NODE_AGES, RecoveryProfile, SpecError

CHUNK_EVENTS = 4_000_000  # failures held in memory at once (a few 32 MB arrays)
PILOT_RUNS = 100  # the first chunk, drawn with the generous first horizon
WAVE = 2  # chunks drawn at once, one thread each
MAX_EVENTS = 300_000_000  # beyond this a run of the renewal Monte Carlo takes minutes: refuse


def first_failure_cdf(t, shape: float, scale: float, node_ages: str):
    """P(a slot's first failure <= t) for stationary (forward-recurrence) or brand-new nodes."""
    x = (np.asarray(t, float) / scale) ** shape
    return gammainc(1 / shape, x) if node_ages == "stationary" else -np.expm1(-x)


def _first_failures(n: int, shape: float, scale: float, horizon: float, node_ages: str, rng) -> np.ndarray:
    """``n`` first-failure times drawn from F1 truncated to [0, horizon]."""
    if node_ages == "new":
        cap = first_failure_cdf(horizon, shape, scale, "new")
        return scale * (-np.log1p(-rng.random(n) * cap)) ** (1 / shape)
    out = np.empty(n)
    pending = np.arange(n)
    while pending.size:  # rejection from Uniform(0, H): accept with probability S(t) <= 1
        t = horizon * rng.random(pending.size)
        keep = rng.standard_exponential(pending.size) > (t / scale) ** shape
        out[pending[keep]] = t[keep]
        pending = pending[~keep]
    return out


def _weibull_gaps(n: int, shape: float, scale: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` Weibull(shape, scale) gaps as scale * E^(1/shape), E ~ Exp(1) drawn and powered in
    float32: 3x faster than ``rng.weibull`` (the power dominates), and float32's 6e-8 relative
    error is seconds on a gap of months."""
    gaps = rng.standard_exponential(n, dtype=np.float32)
    gaps **= np.float32(1 / shape)
    out = gaps.astype(np.float64)
    out *= scale
    return out


def failure_times(
    runs: int,
    instances: int,
    shape: float,
    scale: float,
    horizon: float,
    replace_delay: float,
    node_ages: str,
    rng: np.random.Generator,
) -> np.ndarray:
    """Sorted failure times in [0, horizon) of each run's N slots: one row per run, padded with inf."""
    if node_ages not in NODE_AGES:
        raise SpecError(f"node_ages must be one of {', '.join(NODE_AGES)}, got {node_ages!r}")
    counts = rng.binomial(instances, first_failure_cdf(horizon, shape, scale, node_ages), runs)
    run = np.repeat(np.arange(runs), counts)
    t = _first_failures(run.size, shape, scale, horizon, node_ages, rng)
    generations = []  # (run, time, column): each generation is ordered by run
    filled = np.zeros(runs, np.int64)
    while run.size:
        per_run = np.bincount(run, minlength=runs)
        rank = np.arange(run.size) - np.repeat(np.cumsum(per_run) - per_run, per_run)
        generations.append((run, t, filled[run] + rank))
        filled += per_run
        nxt = _weibull_gaps(t.size, shape, scale, rng)
        nxt += t
        nxt += replace_delay
        alive = nxt < horizon
        run, t = run[alive], nxt[alive]
    grid = np.full((runs, int(filled.max(initial=0)) + 1), np.inf)
    for run, t, column in generations:
        grid[run, column] = t
    grid.sort(axis=1)
    return grid


def wall_hours_from_failures(
    times: np.ndarray, work_hours: float, profile: RecoveryProfile
) -> tuple[np.ndarray, np.ndarray]:
    """(wall hours, interruptions) per row of sorted failure times (inf-padded), as in Daly's model.

    Between failure j and j+1 the job first recovers for R hours (none before the first gap; a
    failure during recovery restarts it), then completes floor(useful / s) checkpoint segments of
    s = tau + delta; the progress of an unfinished segment is lost. The run finishes in the first
    gap where the completed segments reach the work (the final partial segment, if tau does not
    divide the work, needs a gap with room for it). A finish after the horizon the failures were
    drawn for is not valid: the caller checks it.
    """
    rows, cols = times.shape  # the last column is always inf: the gap after the last failure
    with np.errstate(invalid="ignore"):  # inf - inf in the padding: NaN, never reached
        useful = np.diff(times, axis=1, prepend=0.0)
    useful -= profile.downtime_hours
    useful[:, 0] += profile.downtime_hours  # no recovery before the first gap
    np.maximum(useful, 0.0, out=useful)
    recovery = np.full(cols, profile.downtime_hours)
    recovery[0] = 0.0
    s = profile.checkpoint_interval_hours + profile.checkpoint_write_hours
    segs = _segments(work_hours, profile)
    n_full = sum(n for n, length in segs if length == s)
    last = next((length for _, length in segs if length != s), None)
    per_gap = np.floor(useful / s)
    done = np.cumsum(per_gap, axis=1)
    r = np.arange(rows)
    j = np.argmax(done >= n_full, axis=1)
    needed = (n_full - np.where(j > 0, done[r, j - 1], 0.0)) * s
    finish = np.where(j > 0, times[r, j - 1], 0.0) + recovery[j] + needed
    fails = j.astype(np.int64)
    if last is not None:
        fits = useful[r, j] - needed >= last
        later = (np.arange(cols)[None, :] > j[:, None]) & (useful >= last)
        k = np.argmax(later, axis=1)
        finish = np.where(fits, finish + last, np.where(k > 0, times[r, k - 1], 0.0) + recovery[k] + last)
        fails = np.where(fits, fails, k)
    return finish, fails


def _chunk(
    work_hours: float,
    instances: int,
    shape: float,
    scale: float,
    runs: int,
    profile: RecoveryProfile,
    node_ages: str,
    horizon: float,
    max_horizon: float,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """(wall hours, interruptions) of ``runs`` runs, failures drawn up to ``horizon``, redrawn with
    twice it while a run is unfinished there."""
    delay = profile.detect_hours + profile.replace_hours
    while True:
        times = failure_times(runs, instances, shape, scale, horizon, delay, node_ages, rng)
        wall, fails = wall_hours_from_failures(times, work_hours, profile)
        if np.all(wall <= horizon):
            return wall, fails
        horizon *= 2
        if horizon > max_horizon:
            raise SpecError("the renewal simulation did not finish: the job cannot finish")


def simulate_wall_hours(
    work_hours: float,
    instances: int,
    shapes: np.ndarray,
    scales: np.ndarray,
    runs: int,
    profile: RecoveryProfile,
    node_ages: str,
    first_horizon_hours: float,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """(wall hours, interruptions) of ``runs`` runs on ``instances`` slots, the runs split evenly
    over the Weibull parameter draws (``shapes[i]``, ``scales[i]``; one pair for fixed parameters).

    Runs are drawn in chunks of about ``CHUNK_EVENTS`` failures, ``WAVE`` chunks at a time on
    threads of their own (NumPy's sorts, draws and array arithmetic release the GIL), each chunk
    with its own generator seeded from ``rng`` in chunk order, so the result does not depend on
    the number of cores. The horizon up to which failures are drawn starts at
    ``first_horizon_hours`` for a first chunk of at most ``PILOT_RUNS`` runs; after each wave it is
    1.25 x the longest wall time seen, and a chunk with a run unfinished at its horizon is redrawn
    with twice it."""
    mean_gap = scales * gamma_fn(1 + 1 / shapes)
    per_hour = instances / float(mean_gap.min())  # failures per run and hour, stationary ages
    if runs * per_hour * first_horizon_hours > MAX_EVENTS:
        raise SpecError(
            f"the renewal simulation would draw ~{per_hour * first_horizon_hours:,.0f} failures per run; "
            "use fewer Monte Carlo runs or instances"
        )
    bounds = np.linspace(0, runs, shapes.size + 1).round().astype(int)
    tasks = []  # (shape, scale, first run, runs): chunks in order, the first a pilot
    for k, lam, lo, hi in zip(shapes, scales, bounds[:-1], bounds[1:], strict=True):
        while lo < hi:
            size = min(hi - lo, max(1, int(CHUNK_EVENTS / max(per_hour * first_horizon_hours, 1.0))))
            size = size if tasks else min(size, PILOT_RUNS)  # a small first chunk sets the horizon
            tasks.append((k, lam, lo, size))
            lo += size
    wall, fails = np.empty(runs), np.empty(runs, np.int64)
    waves = [tasks[:1]] + [tasks[i : i + WAVE] for i in range(1, len(tasks), WAVE)]
    horizon = first_horizon_hours
    with ThreadPoolExecutor(WAVE) as pool:
        for wave in waves:
            seeds = rng.integers(2**63, size=len(wave))

            def draw(task, seed, horizon=horizon):
                k, lam, _, size = task
                most = MAX_EVENTS / (size * per_hour)  # the longest horizon this chunk may draw to
                return _chunk(
                    work_hours, instances, k, lam, size, profile, node_ages, horizon, most,
                    np.random.default_rng(seed),
                )  # fmt: skip

            for (_, _, lo, size), (w, f) in zip(wave, pool.map(draw, wave, seeds), strict=True):
                wall[lo : lo + size], fails[lo : lo + size] = w, f
            end = wave[-1][2] + wave[-1][3]  # chunks fill the runs in order
            horizon = 1.25 * float(wall[:end].max())
    return wall, fails
