"""Fitting benchmark: lifelines fits on ~1M raw interval rows vs the same data aggregated to unique
(duration, observed) pairs with counts as weights. Run by hand, not in tests:

    PYTHONPATH=. python bench/fit_bench.py [--rows 1000000] [--family weibull]

Durations are stationary-fleet-like: Weibull(shape 0.85, mean 2000 h) gaps, right-censored by
windows of up to 2880 h (120 days), recorded at 1-second resolution as incident logs are. The
raw and aggregated fits see the same data at each resolution, so their estimates must agree to
1e-6 relative; the coarser grids (``transform.aggregate_durations(resolution_hours=...)``) also
report how far their estimates move from the 1-second ones.
"""

from __future__ import annotations

import argparse
import platform
import time
import warnings

import numpy as np
import polars as pl

from pipeline import models, sample, transform

RESOLUTIONS = {"1 s": None, "1 min": 1 / 60, "6 min": 0.1, "1 h": 1.0}


def durations(rows: int, seed: int = 2026) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    shape, mean = 0.85, 2000.0
    gaps = sample.weibull_scale_hours(mean, shape) * rng.weibull(shape, rows)
    remaining = rng.uniform(0, 2880.0, rows)
    observed = gaps <= remaining
    hours = np.maximum(np.round(np.minimum(gaps, remaining) * 3600), 1) / 3600
    return pl.DataFrame({"duration_hours": hours, "observed": observed})


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--family", default="weibull")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    raw = durations(args.rows)
    print(f"{platform.processor() or platform.machine()}, python {platform.python_version()}")
    print(f"{args.rows} intervals, family {args.family}")
    print(
        "| resolution | unique rows | raw fit s | aggregate s | aggregated fit s | speed-up | "
        "max rel diff raw vs agg | MTBF h | shape | MTBF shift vs 1 s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    reference = None
    for label, step in RESOLUTIONS.items():
        rows = (
            raw
            if step is None
            else raw.with_columns(
                duration_hours=(pl.col("duration_hours") / step).round().clip(lower_bound=1) * step
            )
        )
        agg, t_agg = timed(lambda rows=rows: transform.aggregate_durations(rows))
        fit_agg, t_fit_agg = timed(
            lambda agg=agg: models.ParametricTBF(args.family).fit(
                agg["duration_hours"], agg["observed"], agg["count"]
            )
        )
        fit_raw, t_fit_raw = timed(
            lambda rows=rows: models.ParametricTBF(args.family).fit(rows["duration_hours"], rows["observed"])
        )
        diffs = [abs(fit_agg.params_[k] / v - 1) for k, v in fit_raw.params_.items()]
        diffs.append(abs(fit_agg.mtbf_hours_ / fit_raw.mtbf_hours_ - 1))
        reference = reference or fit_raw.mtbf_hours_
        shape = "" if fit_agg.shape_ is None else f"{fit_agg.shape_:.4f}"
        print(
            f"| {label} | {agg.height} | {t_fit_raw:.2f} | {t_agg:.2f} | {t_fit_agg:.2f} | "
            f"{t_fit_raw / (t_agg + t_fit_agg):.0f}x | {max(diffs):.1e} | {fit_agg.mtbf_hours_:.1f} | "
            f"{shape} | {fit_agg.mtbf_hours_ / reference - 1:+.1e} |"
        )


if __name__ == "__main__":
    main()
