"""Points of the reliability plots people expect: Weibull probability plot, mean cumulative
function of recurrent failures per node, Duane / Crow-AMSAA cumulative plot. Each returns a
bounded number of rows (``max_points``) whatever the fleet's size.

* Weibull probability plot (Meeker & Escobar 1998, *Statistical Methods for Reliability Data*,
  §6.4): Kaplan–Meier plotting positions for right-censored gaps, F_i = 1 − (S(t_i−) + S(t_i)) / 2
  at each time where the estimate drops (the midpoint, so the last point is not at F = 1); plotted
  as y = ln(−ln(1 − F)) against ln t, on which a Weibull S(t) = exp(−(t/λ)^k) is the line
  y = k (ln t − ln λ): the slope is the shape.
* Mean cumulative function (Nelson 2003, *Recurrent Events Data Analysis for Product Repairs,
  Disease Recurrences, and Other Applications*, ch. 4): nodes are the units, age is the time since
  a node's first service start, and a node is at risk at age t while in service, as the
  closed-interval rule says: at its span's end too, where a failure of it counts (a node out for
  repair is not). MCF(t) = Σ_{u ≤ t} d(u) / r(u), d failures and r nodes at risk at age u. Its
  variance is the robust (Lawless & Nadeau 1995, Technometrics 37:158) estimator, valid without
  assuming Poisson failures: Var MCF(t) = Σ_i (Σ_{u ≤ t} δ_i(u) (d_i(u) − d(u)/r(u)) / r(u))²,
  δ_i(u) = 1 while node i is at risk. The band is on the log scale (Nelson 2003, ch. 4; the delta
  method: se(log MCF) = √Var / MCF), MCF exp(∓ z √Var / MCF): positive like the MCF itself (the
  band is drawn at failure ages, where MCF > 0), where MCF ± z √Var went below zero at the first
  failures. For a homogeneous Poisson process MCF(t) = rate x t.
* Duane / Crow-AMSAA (MIL-HDBK-189C 2011): per cluster, cumulative failures against cumulative
  operating node-hours (:func:`pipeline.transform.failure_operating_times`) on log-log axes, with
  the fitted power law N(t) = λ t^β, β the MIL-HDBK-189 MLE and λ = n / T^β (T the cluster's
  observed node-hours), so the line passes through (T, n).
"""

from __future__ import annotations

import numpy as np
import polars as pl
from scipy.stats import norm

from pipeline.transform.keys import key_codes

MAX_POINTS = 300


def _spread(n: int, limit: int) -> np.ndarray:
    """At most ``limit`` evenly spaced indices of ``n`` items, keeping the first and the last."""
    if n <= limit:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, limit).round().astype(int))


def weibull_plot_points(timeline_hours, survival, *, max_points: int = MAX_POINTS) -> pl.DataFrame:
    """Weibull probability plot positions from a Kaplan–Meier estimate (e.g.
    ``KaplanMeier.timeline_hours_``, ``survival_``): one row per time the estimate drops, at most
    ``max_points``, with ``duration_hours``, ``failure_probability`` and ``weibull_y``."""
    t = np.asarray(timeline_hours, float)
    s = np.asarray(survival, float)
    before = np.concatenate([[1.0], s[:-1]])
    drop = (s < before) & (t > 0)
    f = 1 - (before[drop] + s[drop]) / 2
    keep = _spread(int(drop.sum()), max_points)
    return pl.DataFrame({"duration_hours": t[drop][keep], "failure_probability": f[keep]}).with_columns(
        weibull_y=(-(1 - pl.col("failure_probability")).log()).log()
    )


def weibull_plot_line(scale_hours: float, shape: float, hours_low: float, hours_high: float) -> pl.DataFrame:
    """The fitted Weibull on the probability plot: two points of y = k (ln t − ln λ)."""
    t = np.array([hours_low, hours_high], float)
    return pl.DataFrame({"duration_hours": t, "weibull_y": shape * (np.log(t) - np.log(scale_hours))})


def mean_cumulative_function(
    in_service: pl.DataFrame,
    exposure: pl.DataFrame,
    *,
    max_points: int = MAX_POINTS,
    confidence: float = 0.95,
) -> pl.DataFrame:
    """Nelson's MCF of failures per node over node age with its robust band (module docstring),
    at up to ``max_points`` failure ages: ``age_hours``, ``mcf``, ``ci_low``, ``ci_high``,
    ``nodes_at_risk``. Empty without failures.

    ``in_service``: the failures to count (``cluster_id``, ``node_id``, ``timestamp_utc``), each
    once and each in service on ``exposure``, i.e. already matched to it or to intervals inside it
    (:func:`pipeline.transform.failures_in_service`; ``analyze`` passes the failures the rates
    count, matched to the uptime pieces, which lie inside the calendar intervals). They are not
    matched again: a second match of 5 M failures cost 21.5 CPU-s at 10 M rows (issue 27). A
    failure of a node without exposure, or at an age when no node is in service, raises ValueError
    (it would be dropped, or count with no node at risk); one outside its own node's service while
    others serve is the caller's to rule out."""
    schema = {k: pl.Float64 for k in ("age_hours", "mcf", "ci_low", "ci_high", "nodes_at_risk")}
    # nodes numbered as they first appear in the exposure (``unit``), rows found by that number,
    # not joined on the names: spans and failures carry only the unit and hours (issue 27)
    units, count, (failure_unit,) = key_codes(exposure, ("cluster_id", "node_id"), in_service)
    starts = exposure["start_utc"]
    first = np.full(count, np.iinfo(np.int64).max)
    np.minimum.at(first, units, starts.to_physical().to_numpy())
    first = pl.Series(first).cast(starts.dtype)  # each node's first service start
    spans = _merged_spans(
        pl.DataFrame(
            {
                "unit": units,
                "a": _hours(starts, first.gather(units)),
                "b": _hours(exposure["end_utc"], first.gather(units)),
            }
        )
    )
    known = failure_unit >= 0
    outside = int((~known).sum())  # a node without exposure
    age = _hours(in_service["timestamp_utc"].filter(known), first.gather(failure_unit[known])).to_numpy()
    unit = failure_unit[known].astype(np.int32)
    if age.size == 0 and outside == 0:
        return pl.DataFrame(schema=schema)
    a, b, span_unit = spans["a"].to_numpy(), spans["b"].to_numpy(), spans["unit"].to_numpy().astype(np.int32)
    del spans, units, failure_unit

    # every lookup of a row's age among the failure ages runs on sorted rows (numpy's binary search
    # then walks forward, cache-friendly): 5 M unsorted lookups took 10 of the MCF's 13 s (issue 27)
    ages, where, d = np.unique(age, return_inverse=True, return_counts=True)
    order = np.argsort(a, kind="stable"), np.argsort(b, kind="stable")
    a_sorted, b_sorted = a[order[0]], b[order[1]]
    # closed spans, a node's never touching (merged): the nodes whose span holds the age, the
    # failing node included when it fails as its span ends (the closed-interval rule)
    at_risk = np.searchsorted(a_sorted, ages, side="right") - np.searchsorted(b_sorted, ages, side="left")
    outside += int(d[at_risk < 1].sum())
    if outside:
        raise ValueError(
            f"{outside:,} failure(s) given to the mean cumulative function are not in service on the "
            "exposure: pass failures matched to it (pipeline.transform.failures_in_service)"
        )
    mcf = np.cumsum(d / at_risk)
    c = np.concatenate([[0.0], np.cumsum(d / at_risk**2)])  # c[j]: sum over the first j ages
    del d

    def upto(t, inclusive: bool):  # Σ d/r² over failure ages <= t (or < t), t sorted
        return c[np.searchsorted(ages, t, side="right" if inclusive else "left")]

    c_a, c_b = np.empty_like(a), np.empty_like(b)
    c_a[order[0]], c_b[order[1]] = upto(a_sorted, False), upto(b_sorted, True)
    del order, a_sorted, b_sorted
    own = 1 / at_risk[where]
    del where
    grid = _spread(ages.size, max_points)
    failures_by_age = (age, own, unit)
    spans_by_age = (a, b, c_a, c_b, span_unit)
    variance = _robust_variance(ages[grid], upto(ages[grid], True), failures_by_age, spans_by_age, count)
    factor = np.exp(norm.ppf(0.5 + confidence / 2) * np.sqrt(variance) / mcf[grid])
    return pl.DataFrame(
        {
            "age_hours": ages[grid],
            "mcf": mcf[grid],
            "ci_low": mcf[grid] / factor,
            "ci_high": mcf[grid] * factor,
            "nodes_at_risk": at_risk[grid].astype(float),
        },
        schema=schema,
    )


def _hours(times: pl.Series, since: pl.Series) -> pl.Series:
    """Hours from ``since`` to ``times``, row by row."""
    return (times - since).dt.total_seconds(fractional=True) / 3600


def _merged_spans(spans: pl.DataFrame) -> pl.DataFrame:
    """A node's service spans (``unit``, ``a``, ``b`` in hours of age) with those that touch or
    overlap merged into one: as closed intervals a node's spans then share no instant, so counting
    the spans that hold an age counts each node once (a node is at risk as its span ends, when a
    failure there counts, and not twice where one span ends as the next begins). In (unit, a)
    order; each merged span is its first row's ``unit`` and ``a`` and its rows' largest ``b``."""
    spans = spans.sort("unit", "a")
    new = (pl.col("a") > pl.col("b").cum_max().shift(1).over("unit")).fill_null(True)
    starts = np.flatnonzero(spans.select(new).to_series().to_numpy())
    return pl.DataFrame(
        {
            "unit": spans["unit"].gather(starts),
            "a": spans["a"].gather(starts),
            "b": np.maximum.reduceat(spans["b"].to_numpy(), starts) if starts.size else [],
        },
        schema=spans.schema,
    )


def _robust_variance(
    grid_ages: np.ndarray, c_grid: np.ndarray, failures: tuple, spans: tuple, units: int
) -> np.ndarray:
    """Lawless–Nadeau's Var MCF(g) = Σ_i (mine_i(g) − share_i(g))² at each grid age g (``c_grid``:
    C(g), Σ d/r² over failure ages <= g), in one sweep up the grid. mine_i(g): Σ 1/r over node i's
    failures at ages <= g; share_i(g): Σ over its spans [a, b] (closed, never touching:
    :func:`_merged_spans`) of C(g) − C(a−) while a <= g <= b, C(b) − C(a−) once g > b, 0 before.
    Each failure and span end changes its node's sums at one grid point, so the cost is
    failures + spans + grid x nodes, not grid x (failures + spans): the 300 points over every row
    took 46 of ``failcast report``'s 54 CPU-s at 1 M rows (issue 27)."""
    age, own, unit = failures
    a, b, c_a, c_b, span_unit = spans
    n = grid_ages.size

    def at_grid(first_k: np.ndarray) -> list[np.ndarray]:
        """Per grid point k, the rows whose first grid index is k, in their order (row numbers:
        the rows' values are gathered one grid point at a time, never copied whole)."""
        order = np.argsort(first_k, kind="stable").astype(np.int32 if first_k.size < 2**31 else np.int64)
        cuts = np.searchsorted(first_k[order], np.arange(n + 1))
        return [order[cuts[k] : cuts[k + 1]] for k in range(n)]

    # a failure counts from the first grid age >= its age, a span is active from the first >= a,
    # done from the first > b
    fails = at_grid(np.searchsorted(grid_ages, age, side="left"))
    starts = at_grid(np.searchsorted(grid_ages, a, side="left"))
    ends = at_grid(np.searchsorted(grid_ages, b, side="right"))
    mine, active, base = np.zeros(units), np.zeros(units), np.zeros(units)  # share = C(g) active + base
    variance = np.empty(n)
    for k in range(n):
        if fails[k].size:
            mine += np.bincount(unit[fails[k]], weights=own[fails[k]], minlength=units)
        if starts[k].size:
            s_unit = span_unit[starts[k]]
            active += np.bincount(s_unit, minlength=units)
            base -= np.bincount(s_unit, weights=c_a[starts[k]], minlength=units)
        if ends[k].size:
            e_unit = span_unit[ends[k]]
            active -= np.bincount(e_unit, minlength=units)
            base += np.bincount(e_unit, weights=c_b[ends[k]], minlength=units)
        variance[k] = np.sum((mine - (c_grid[k] * active + base)) ** 2)
    return variance


def duane_points(
    operating_times: pl.DataFrame, trend_tests: pl.DataFrame, *, max_points: int = MAX_POINTS
) -> pl.DataFrame:
    """Per cluster with a Crow-AMSAA fit (``trend_tests``: cluster_id, failures, crow_beta,
    observed_node_hours): ``cumulative_failures`` at each failure's ``operating_node_hours``
    (:func:`pipeline.transform.failure_operating_times`) and the power law's
    ``fitted_failures`` there; at most ``max_points`` rows in all."""
    fitted = trend_tests.filter(pl.col("crow_beta").is_not_null()).select(
        "cluster_id", "crow_beta", "failures", "observed_node_hours"
    )
    per_cluster = max(2, max_points // max(fitted.height, 1))
    frames = [
        pl.DataFrame(
            schema={
                "cluster_id": pl.String,
                "operating_node_hours": pl.Float64,
                "cumulative_failures": pl.Float64,
                "fitted_failures": pl.Float64,
            }
        )
    ]
    for cluster, beta, n, total in fitted.iter_rows():
        times = np.sort(
            operating_times.filter(pl.col("cluster_id") == cluster)["operating_node_hours"].to_numpy()
        )
        keep = _spread(times.size, per_cluster)
        t = np.clip(times[keep], 1e-9, None)
        frames.append(
            pl.DataFrame(
                {
                    "cluster_id": [cluster] * keep.size,
                    "operating_node_hours": t,
                    "cumulative_failures": (keep + 1).astype(float),
                    "fitted_failures": n * (t / total) ** beta,
                }
            )
        )
    return pl.concat(frames)
