"""Durations for the fits: a relative (geometric) rounding grid and aggregation to weighted rows.

The fitters take unique (duration, observed) rows with their counts as weights; the weighted fit
is the fit on the rows they came from (same likelihood). Gaps logged to the second are nearly all
unique, so at fleet scale they are first rounded to a *relative* grid, the points

    g_k = FLOOR_HOURS * r^k,   k = 0, 1, 2, ...,   r = 1 + relative_resolution,

each duration d going to the nearest point in log space:

    k = round(ln(max(d, FLOOR_HOURS) / FLOOR_HOURS) / ln r).

Bias bound: for d >= FLOOR_HOURS, |ln(g_k / d)| <= ln(r) / 2, so every duration moves by at most
a factor sqrt(r) - about relative_resolution / 2, 0.05% at 1e-3 - whether it is a minute or a
month. For the exponential the MTBF (total time / failures) then moves by at most that factor too;
for the other families it is no hard bound, but the estimates are scale-equivariant (every
duration times c: scale and MTBF times c, shape unchanged) and the log-space errors are
symmetric, so they mostly cancel (bench/RESULTS.md "Fitting" has the measured shifts).

Row bound: at most 1 + round(ln(max / FLOOR_HOURS) / ln r) points per (group, observed) whatever
the number of gaps: 17 970 for gaps from 1 s to 2 years at r = 1 + 1e-3. An absolute grid of step s
needs max / s points and moves a gap by up to s / 2 at any length, which wrecks short gaps (the
1-minute grid made a 10-s cluster-level gap a minute) while over-resolving long ones; it is not
offered.

Durations below FLOOR_HOURS - zero (two failures logged in the same second) or negative - go to
the floor, as the absolute grid sent them to one step: the fitters need positive durations, and
the logs resolve nothing finer than a second.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import polars as pl

FLOOR_HOURS = 1 / 3600


def relative_grid(hours: pl.Expr, relative_resolution: float) -> pl.Expr:
    """``hours`` rounded to the nearest point of the geometric grid (see module docstring)."""
    if not relative_resolution > 0:
        raise ValueError(f"relative_resolution must be positive, not {relative_resolution!r}")
    log_ratio = math.log1p(relative_resolution)
    k = ((hours.clip(lower_bound=FLOOR_HOURS) / FLOOR_HOURS).log() / log_ratio).round()
    return (k * log_ratio).exp() * FLOOR_HOURS  # keeps the name of ``hours``


def aggregate_durations(
    durations: pl.DataFrame, by: Sequence[str] = (), *, relative_resolution: float | None = None
) -> pl.DataFrame:
    """Unique (duration, observed) pairs with their counts: what the fitters take as weights.

    The fit on these is the fit on the raw rows (same likelihood). With ``relative_resolution``
    the durations are first rounded to the relative grid (:func:`relative_grid`), which bounds
    the number of rows for very large inputs; None keeps them exact.
    """
    if relative_resolution is not None:
        durations = durations.with_columns(
            duration_hours=relative_grid(pl.col("duration_hours"), relative_resolution)
        )
    return (
        durations.group_by([*by, "duration_hours", "observed"])
        .agg(count=pl.len())
        .sort([*by, "duration_hours", "observed"])
    )
