"""The hot-spare pool of a job: how often a failure finds a spare, how long it waits when none is
free, and what each spare is worth in days and dollars.

Model (docs/projection.md, "Hot spares"). A job runs on N instances with S hot spares beside it.
Every one of the N + S nodes fails at the fleet's rate r per node-hour while it is up (in the job,
idle as a spare, or waiting in a stalled job) and is then repaired, in parallel with the others,
for a time G drawn from the fleet's repair-time distribution (Kaplan–Meier, censoring kept), after
which it joins the spare pool. Each node is then an independent alternating renewal process (up
~ Exponential(r), down ~ G), so at a random time K, the number of nodes in repair, is
Binomial(N + S, q) with q = r m / (1 + r m), m = E[G]; it depends on G only through its mean.

- **Free spare.** A failure of one of the job's N nodes interrupts the job only while the job runs
  (K <= S), and those failures come at the rate N r whatever K is, so a failure sees K distributed
  as the binomial truncated to K <= S. It finds no free spare when K = S:

      B(S) = C(N+S, S) beta^S / sum_{k=0..S} C(N+S, k) beta^k,   beta = r m,   p(S) = 1 - B(S)

  which is Engset's formula (Engset 1918) with N + S sources, S servers and offered load beta per
  idle source; like Engset's, it holds for any repair-time distribution with mean m (Cohen 1957).
  As N grows with N r m = A fixed it tends to Erlang's loss formula E_B(S, A) (Erlang 1917,
  insensitive to the service distribution: Sevastyanov 1957). The M/G/inf tail P(Poisson(A) >= S)
  used before (Takács 1962) also counts failures while the job is already stalled, and is the
  upper bound of both.
- **Wait when none is free.** The job needs one of the S + 1 nodes in repair back: the failed one
  (a fresh repair G) or one of the S others, whose remaining repair times are independent with the
  equilibrium density S_G(t) / m (Cox 1962). The wait for the earliest repair end,
  W = min(G, R_1..R_S), has survival P(W > t) = S_G(t) S_e(t)^S, S_e(t) = (1/m) int_t^inf S_G,
  and since S_G = -m S_e':

      E[W(S)] = m / (S + 1)           (for every repair-time distribution; its quantiles are not)

- **Stall.** Other nodes keep failing during that wait, so the job runs again only when K is back
  at S: the first passage of K from S + 1 to S. For the birth-death chain of K (exponential
  repairs: rate k / m out of state k) it is, with pi the binomial above,

      E[T(S)] = P(K >= S + 1) / (pi(S + 1) (S + 1) / m)

  exact for exponential repairs and an approximation for others (simulated lognormal repairs:
  within a few per cent, tests/test_spares.py).
- **Wall time.** Job-node failures come at lambda = N r whenever the job is not stalled; Daly's
  model (:mod:`pipeline.projection.model`) covers the running and recovering time with
  R' = detect + p(S) swap + restart, and each failure adds a stall of mean B(S) E[T(S)] on top, so

      T(S) = T_Daly(R') (1 + lambda B(S) E[T(S)]) = T_Daly(R' + x(S)),  x = ln(1 + lambda B E[T]) / lambda

  (Daly's T grows by the factor e^{lambda x} per hour x of recovery). ``replace_hours`` is
  p(S) swap + x(S), the replace time to put in a recovery profile: about p swap + B E[T] when
  stalls are rare. Interruptions = lambda T(S) (failures of the job's nodes during the job).
- **Cost** of S spares = S x GPUs per node x price x job days; a spare is worth adding while the
  job's cost falls by more than that.

:mod:`pipeline.projection.spares_sim` simulates the node pool and checks p(S), E[W(S)] and E[T(S)]
(tests/test_spares.py).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import polars as pl
from scipy import stats

from . import model
from .results import MIN_GOODPUT
from .spec import HOURS_PER_DAY, JobSpec, RecoveryProfile, SpecError

SPARE_PROBABILITY = 0.99  # "the 99% row": a failure finds a free spare with at least this probability
MIN_SAVING_PCT = 1.0  # without a price: add a spare while it saves at least this % of the job's days
MAX_SPARES = 10_000


@dataclass(frozen=True, eq=False)
class RepairCurve:
    """A repair-time survival curve S_G(t) = P(repair > t) as a step function: ``survival[i]`` on
    [``timeline_hours[i]``, ``timeline_hours[i+1]``), 1 before the first time and 0 from the last
    (the restricted convention of the Kaplan–Meier mean: beyond the longest repair seen nothing is
    known). ``mean_ci_hours`` is the mean's 95% interval; ``restricted``: the longest repair is
    still open, so the mean is a lower bound."""

    timeline_hours: np.ndarray
    survival: np.ndarray
    mean_ci_hours: tuple[float, float] | None = None
    restricted: bool = False

    def __post_init__(self) -> None:
        t, s = np.asarray(self.timeline_hours, float), np.asarray(self.survival, float)
        if t.ndim != 1 or t.shape != s.shape or t.size == 0:
            raise SpecError("a repair curve needs as many survival values as times (at least one)")
        if (
            (np.diff(t) < 0).any()
            or t[0] < 0
            or (np.diff(s) > 1e-12).any()
            or not 0 <= s.min() <= s.max() <= 1
        ):
            raise SpecError(
                "a repair curve needs increasing times >= 0 and a non-increasing survival in [0, 1]"
            )
        object.__setattr__(self, "timeline_hours", t)
        object.__setattr__(self, "survival", s)

    @classmethod
    def from_repairs(cls, hours) -> RepairCurve:
        """The empirical curve of completed repairs (no censoring), for simulations and tests."""
        times, counts = np.unique(np.asarray(hours, float), return_counts=True)
        return cls(times, 1 - np.cumsum(counts) / counts.sum())

    @property
    def mean_hours(self) -> float:
        """Restricted mean: the area under the step function up to the last time."""
        t = self.timeline_hours
        return float(t[0] + np.sum(self.survival[:-1] * np.diff(t)))

    def scaled(self, factor: float) -> RepairCurve:
        """The same shape with every repair time times ``factor`` (its mean times ``factor``)."""
        return RepairCurve(self.timeline_hours * factor, self.survival, None, self.restricted)

    def wait_survival(self, t, spares: int) -> np.ndarray:
        """P(W > t) for the wait of a failure that finds no free spare: S_G(t) S_e(t)^spares."""
        t = np.asarray(t, float)
        times, surv = self.timeline_hours, self.survival
        i = np.searchsorted(times, t, side="right") - 1  # the step t is on (-1: before the first)
        s_g = np.where(i < 0, 1.0, surv[np.maximum(i, 0)])
        s_g = np.where(t >= times[-1], 0.0, s_g)
        # area under S_G from t to the end: the steps after t, plus the rest of t's own step
        steps = np.append(surv[:-1] * np.diff(times), 0.0)
        after = np.append(np.cumsum(steps[::-1])[::-1], 0.0)  # after[j] = area from times[j] on
        own = np.where(i < 0, times[0] - t + after[0], s_g * (times[np.minimum(i + 1, times.size - 1)] - t))
        area = np.where(i < 0, own, own + after[np.minimum(i + 1, times.size)])
        s_e = np.clip(area / self.mean_hours, 0.0, 1.0) if self.mean_hours > 0 else np.zeros_like(t)
        return s_g * s_e**spares

    def wait_quantile_hours(self, q: float, spares: int) -> float:
        """The q-quantile of that wait (first time its survival is <= 1 - q), from the curve."""
        grid = np.unique(np.concatenate([[0.0], self.timeline_hours]))
        if spares > 0:  # S_e is linear between the curve's times: refine so the crossing is close
            grid = np.unique(np.concatenate([grid, np.linspace(0, grid[-1], 2001)]))
        hit = np.flatnonzero(self.wait_survival(grid, spares) <= 1 - q + 1e-12)
        return float(grid[hit[0]]) if hit.size else float(grid[-1])

    def sample(self, size, rng: np.random.Generator) -> np.ndarray:
        """Repair times drawn from the curve (inverse CDF; the mass left at the last time, an open
        repair's, at that time: the restricted convention of the mean)."""
        u = rng.random(size)
        # first index whose survival is <= u: survival is non-increasing, search its negation
        i = np.searchsorted(-self.survival, -u, side="left")
        return self.timeline_hours[np.minimum(i, self.timeline_hours.size - 1)]


@dataclass(frozen=True)
class SparePool:
    """N job nodes and the fleet's rate r and mean repair time m; ``swap_hours`` to bring in a free
    spare. The formulas of the module docstring, per number of spares S."""

    instances: int
    rate_per_node_hour: float
    mean_repair_hours: float
    swap_hours: float = 0.0

    def __post_init__(self) -> None:
        if (
            self.instances < 1
            or self.rate_per_node_hour <= 0
            or self.mean_repair_hours < 0
            or self.swap_hours < 0
        ):
            raise SpecError(
                "a spare pool needs instances >= 1, a positive rate and repair and swap times >= 0"
            )

    @property
    def load(self) -> float:
        """beta = r m: a node's expected failures during one repair time."""
        return self.rate_per_node_hour * self.mean_repair_hours

    def no_spare_probability(self, spares: int) -> float:
        """B(S): Engset's formula with N + S sources and S servers (the truncated binomial)."""
        if self.load == 0:
            return 1.0 if spares == 0 else 0.0
        k = self._binomial(spares)
        return float(math.exp(k.logpmf(spares) - k.logcdf(spares)))

    def free_spare_probability(self, spares: int) -> float:
        return 1.0 - self.no_spare_probability(spares)

    def mean_wait_hours(self, spares: int) -> float:
        """E[W(S)] = m / (S + 1): the mean wait of a failure that finds no free spare."""
        return self.mean_repair_hours / (spares + 1)

    def _binomial(self, spares: int):
        n = self.instances + spares
        return stats.binom(n, self.load / (1 + self.load))

    def mean_stall_hours(self, spares: int) -> float:
        """E[T(S)]: from a failure that finds no spare until the job has N up nodes again."""
        if self.load == 0:
            return 0.0
        k = self._binomial(spares)
        return float(self.mean_repair_hours / (spares + 1) * math.exp(k.logsf(spares) - k.logpmf(spares + 1)))

    def replace_hours(self, spares: int) -> float:
        """The replace time per failure in Daly's model: p(S) swap + ln(1 + lambda B E[T]) / lambda."""
        lam = self.instances * self.rate_per_node_hour
        stall = self.no_spare_probability(spares) * self.mean_stall_hours(spares)
        return self.free_spare_probability(spares) * self.swap_hours + math.log1p(lam * stall) / lam

    def mean_in_repair(self, spares: int) -> float:
        """Mean number of the N + S nodes in repair at a random time: (N + S) q."""
        return (self.instances + spares) * self.load / (1 + self.load)

    def spares_for(self, probability: float = SPARE_PROBABILITY) -> int:
        """Smallest S with p(S) >= ``probability`` (the table's 99% row)."""
        if not 0 < probability < 1:
            raise SpecError("probability must be in (0, 1)")
        s = 0
        while self.free_spare_probability(s) < probability:
            s += 1
            if s > MAX_SPARES:
                raise SpecError(f"more than {MAX_SPARES:,} spares needed: check the rate and repair time")
        return s


def pool_profile(spec: JobSpec, mode: str | None = None) -> tuple[str, RecoveryProfile]:
    """The recovery mode a spare pool serves: ``mode``, else "automatic", else the first one that
    is not "manual" (manual recovery has no pool), else the first."""
    names = list(spec.recovery)
    if mode is None:
        mode = "automatic" if "automatic" in names else next((m for m in names if m != "manual"), names[0])
    if mode not in spec.recovery:
        raise SpecError(f"unknown mode {mode!r}; the spec has {', '.join(names)}")
    return mode, spec.recovery[mode]


def pool_for(spec: JobSpec, mean_repair_hours: float, swap_hours: float | None = None,
             rate_per_node_hour: float | None = None) -> SparePool:  # fmt: skip
    """The spare pool of ``spec``'s job: its instances and failure rate, the fleet's mean repair
    time, and the swap time (default: the pool mode's assumed replace time)."""
    _, profile = pool_profile(spec)
    return SparePool(
        spec.instances,
        spec.failure.rate_per_instance_hour if rate_per_node_hour is None else rate_per_node_hour,
        mean_repair_hours,
        profile.replace_hours if swap_hours is None else swap_hours,
    )


@dataclass(frozen=True)
class SpareAdvice:
    """``failcast spares``: the table per number of spares and what to hold.

    ``table`` columns: spares, free_spare_probability, mean_wait_hours and wait_p90_hours (to the
    earliest repair end when none is free; the P90 from the repair curve, when known),
    mean_stall_hours (until the job runs again), replace_hours (Daly's), status, expected_days,
    goodput, expected_interruptions, cost_usd (job and spares), spares_cost_usd, saving_days and
    saving_usd (of this spare over one fewer); days and costs null where the job cannot finish,
    costs null without a price. ``recommended`` (None: cannot finish at any S), and the same rule
    at the ``low``/``high`` ends of the rate and mean-repair intervals (None: no interval);
    ``probability_row``: the smallest S with p(S) >= ``probability``."""

    mode: str
    pool: SparePool
    table: pl.DataFrame
    recommended: int | None
    low: int | None
    high: int | None
    probability_row: int
    probability: float
    rule: str
    intervals: str
    priced: bool


def _row(spec: JobSpec, pool: SparePool, profile: RecoveryProfile, spares: int) -> dict:
    """Days, goodput, interruptions and costs of the job with ``spares`` hot spares."""
    lam = spec.instances * pool.rate_per_node_hour
    replace = pool.replace_hours(spares)
    wall = model.expected_wall_hours(
        spec.failure_free_hours, lam, dataclasses.replace(profile, replace_hours=replace)
    )
    goodput = spec.failure_free_hours / wall
    finishes = goodput >= MIN_GOODPUT
    price = spec.price_per_gpu_hour_usd
    days = wall / HOURS_PER_DAY if finishes else None
    spare_cost = None if price is None or days is None else spares * spec.gpus_per_instance * price * wall
    return {
        "spares": spares,
        "free_spare_probability": pool.free_spare_probability(spares),
        "mean_wait_hours": pool.mean_wait_hours(spares),
        "mean_stall_hours": pool.mean_stall_hours(spares),
        "replace_hours": replace,
        "status": "finishes" if finishes else "cannot finish: goodput < 1%",
        "expected_days": days,
        "goodput": goodput,
        "expected_interruptions": lam * wall if finishes else None,
        "cost_usd": None if spare_cost is None else spec.gpus * price * wall + spare_cost,
        "spares_cost_usd": spare_cost,
    }


def _stops(rows: list[dict], priced: bool, min_saving_pct: float) -> bool:
    """True when the last row is no better than the one before by the rule (so the one before is
    what to hold)."""
    if len(rows) < 2:
        return False
    before, last = rows[-2], rows[-1]
    if last["expected_days"] is None:  # cannot finish even with one more spare: keep adding
        return False
    if before["expected_days"] is None:
        return False
    if priced:
        return last["cost_usd"] >= before["cost_usd"]
    return before["expected_days"] - last["expected_days"] < min_saving_pct / 100 * before["expected_days"]


def _recommend(
    spec: JobSpec, pool: SparePool, profile: RecoveryProfile, min_saving_pct: float
) -> tuple[list[dict], int | None]:
    """Rows S = 0, 1, ... until one more spare is not worth it by the rule; the S to hold (None:
    the job cannot finish even when every failure finds a spare)."""
    never = _row(spec, dataclasses.replace(pool, mean_repair_hours=0.0), profile, 1)["expected_days"] is None
    rows = [_row(spec, pool, profile, 0)]
    if never:
        return rows, None
    while not _stops(rows, spec.price_per_gpu_hour_usd is not None, min_saving_pct):
        if len(rows) > MAX_SPARES:
            raise SpecError(f"no spare count up to {MAX_SPARES:,} is worth it by the rule; check the inputs")
        rows.append(_row(spec, pool, profile, len(rows)))
    return rows, len(rows) - 2


def _at_rate(spec: JobSpec, rate: float) -> JobSpec:
    """``spec`` with its failure rate set to ``rate`` (an interval's end), no interval left."""
    f = dataclasses.replace(
        spec.failure,
        rate_per_instance_hour=rate,
        rate_ci_low_per_instance_hour=None,
        rate_ci_high_per_instance_hour=None,
    )
    return dataclasses.replace(spec, failure=f)


def spare_advice(
    spec: JobSpec,
    repair: RepairCurve | float,
    *,
    swap_hours: float | None = None,
    mode: str | None = None,
    min_saving_pct: float = MIN_SAVING_PCT,
    probability: float = SPARE_PROBABILITY,
) -> SpareAdvice:
    """The spare table of ``spec``'s job on the recovery ``mode``'s profile (detect, restart,
    checkpoints) with the replace time of the spare pool, the recommended S by the rule (with a
    price: add a spare while it saves more than it costs; without: while it saves at least
    ``min_saving_pct`` of the days) and the recommendation at the ends of the intervals of the
    rate (``spec.failure``'s) and of the mean repair time (``repair.mean_ci_hours``)."""
    if not 0 < min_saving_pct < 100:
        raise SpecError(f"the minimum saving must be a percentage in (0, 100), got {min_saving_pct}")
    curve = repair if isinstance(repair, RepairCurve) else None
    mean = curve.mean_hours if curve is not None else float(repair)
    mode, profile = pool_profile(spec, mode)
    pool = pool_for(spec, mean, swap_hours)
    rows, recommended = _recommend(spec, pool, profile, min_saving_pct)
    s99 = pool.spares_for(probability)
    ends: dict[str, int | None] = {}
    f, ci = spec.failure, curve.mean_ci_hours if curve is not None else None
    have_rate = f.rate_ci_low_per_instance_hour is not None
    for end, rate, repair_hours in (
        ("low", f.rate_ci_low_per_instance_hour, ci[0] if ci else mean),
        ("high", f.rate_ci_high_per_instance_hour, ci[1] if ci else mean),
    ):
        if not have_rate and not ci:
            ends[end] = None
            continue
        spec_end = spec if rate is None else _at_rate(spec, rate)
        ends[end] = _recommend(
            spec_end, pool_for(spec_end, repair_hours, pool.swap_hours), profile, min_saving_pct
        )[1]
    last = max(s for s in (recommended, ends["high"], s99, len(rows) - 1) if s is not None) + 1
    rows += [_row(spec, pool, profile, s) for s in range(len(rows), last + 1)]
    floats = ("expected_days", "expected_interruptions", "cost_usd", "spares_cost_usd")
    table = pl.DataFrame(rows, schema_overrides=dict.fromkeys(floats, pl.Float64))
    if curve is not None:
        table = table.with_columns(
            wait_p90_hours=pl.Series([curve.wait_quantile_hours(0.9, s) for s in table["spares"]])
        )
    else:
        table = table.with_columns(wait_p90_hours=pl.lit(None, pl.Float64))
    table = table.with_columns(
        saving_days=pl.col("expected_days").shift(1) - pl.col("expected_days"),
        saving_usd=pl.col("cost_usd").shift(1) - pl.col("cost_usd"),
    ).select(
        "spares", "free_spare_probability", "mean_wait_hours", "wait_p90_hours", "mean_stall_hours",
        "replace_hours", "status",
        "expected_days", "goodput", "expected_interruptions", "cost_usd", "spares_cost_usd", "saving_days",
        "saving_usd",
    )  # fmt: skip
    priced = spec.price_per_gpu_hour_usd is not None
    rule = (
        f"add a spare while it saves more than it costs (S × {spec.gpus_per_instance} GPUs × "
        f"${spec.price_per_gpu_hour_usd:,.2f} per GPU-hour × the job's days)"
        if priced
        else f"no price: add a spare while it saves at least {min_saving_pct:g}% of the job's days"
    )
    parts = ([] if not have_rate else ["the failure rate's"]) + ([] if not ci else ["the mean repair time's"])
    intervals = f"{' and '.join(parts)} 95% interval{'s' if len(parts) > 1 else ''}" if parts else ""
    return SpareAdvice(mode, pool, table, recommended, ends["low"], ends["high"], s99, probability, rule,
                       intervals, priced)  # fmt: skip
