"""Fitting benchmark: lifelines fits on ~1M raw interval rows vs the same data aggregated to unique
(duration, observed) pairs with counts as weights. Run by hand, not in tests:

    /work/main/.venv/bin/python -m bench.fit_bench [--rows 1000000] [--family weibull]

Durations are stationary-fleet-like: Weibull(shape 0.85, mean 2000 h) gaps, right-censored by
windows of up to 2880 h (120 days), recorded at 1-second resolution as incident logs are. The
raw and aggregated fits see the same data at each resolution, so their estimates must agree to
1e-6 relative; the grids also report how far their estimates move from the 1-second ones. The
absolute grids (1 min, 6 min, 1 h) are for comparison; the relative ones
(``transform.aggregate_durations(relative_resolution=...)``) are what ``analysis.analyze`` uses,
``ANALYSIS_GRID`` its default.
"""

from __future__ import annotations

import argparse
import platform
import time
import warnings

import numpy as np
import polars as pl

from pipeline import analysis, models, sample, transform

ABSOLUTE_HOURS = {"1 min": 1 / 60, "6 min": 0.1, "1 h": 1.0}
RELATIVE = {f"rel {r:.0e}": r for r in (1e-4, 1e-3, 1e-2)}
ANALYSIS_GRID = f"rel {analysis.FIT_RELATIVE_RESOLUTION:.0e}"
RESOLUTIONS = ("1 s", *ABSOLUTE_HOURS, *RELATIVE)


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


def rounded(raw: pl.DataFrame, label: str) -> pl.DataFrame:
    """``raw`` with durations on the grid named ``label`` (one of ``RESOLUTIONS``)."""
    hours = pl.col("duration_hours")
    if label in RELATIVE:
        return raw.with_columns(transform.relative_grid(hours, RELATIVE[label]))
    if label in ABSOLUTE_HOURS:
        step = ABSOLUTE_HOURS[label]
        return raw.with_columns(duration_hours=(hours / step).round().clip(lower_bound=1) * step)
    return raw


def compare(raw: pl.DataFrame, family: str, resolutions=RESOLUTIONS) -> list[dict]:
    """Raw vs aggregated fits of ``raw`` (duration_hours, observed) at each named resolution; the
    aggregation time includes the rounding."""
    results, reference, reference_shape = [], None, None
    for label in resolutions:
        rows = rounded(raw, label)
        agg, t_agg = timed(lambda label=label: transform.aggregate_durations(rounded(raw, label)))
        fit_agg, t_fit_agg = timed(
            lambda agg=agg: models.ParametricTBF(family).fit(
                agg["duration_hours"], agg["observed"], agg["count"]
            )
        )
        fit_raw, t_fit_raw = timed(
            lambda rows=rows: models.ParametricTBF(family).fit(rows["duration_hours"], rows["observed"])
        )
        diffs = [abs(fit_agg.params_[k] / v - 1) for k, v in fit_raw.params_.items()]
        diffs.append(abs(fit_agg.mtbf_hours_ / fit_raw.mtbf_hours_ - 1))
        reference = reference or fit_raw.mtbf_hours_
        reference_shape = reference_shape or fit_raw.shape_
        results.append(
            {
                "resolution": label,
                "unique_rows": agg.height,
                "raw_fit_s": t_fit_raw,
                "aggregate_s": t_agg,
                "aggregated_fit_s": t_fit_agg,
                "speed_up": t_fit_raw / (t_agg + t_fit_agg),
                "max_rel_diff": max(diffs),
                "mtbf_hours": fit_agg.mtbf_hours_,
                "shape": fit_agg.shape_,
                "mtbf_shift": fit_agg.mtbf_hours_ / reference - 1,
                "shape_shift": None if fit_agg.shape_ is None else fit_agg.shape_ / reference_shape - 1,
            }
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--family", default="weibull")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    print(f"{platform.processor() or platform.machine()}, python {platform.python_version()}")
    print(f"{args.rows} intervals, family {args.family}")
    print(
        "| resolution | unique rows | raw fit s | aggregate s | aggregated fit s | speed-up | "
        "max rel diff raw vs agg | MTBF h | shape | MTBF shift vs first | shape shift vs first |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in compare(durations(args.rows), args.family):
        shape = "" if r["shape"] is None else f"{r['shape']:.4f}"
        shape_shift = "" if r["shape_shift"] is None else f"{r['shape_shift']:+.1e}"
        print(
            f"| {r['resolution']} | {r['unique_rows']} | {r['raw_fit_s']:.2f} | {r['aggregate_s']:.2f} | "
            f"{r['aggregated_fit_s']:.2f} | {r['speed_up']:.0f}x | {r['max_rel_diff']:.1e} | "
            f"{r['mtbf_hours']:.1f} | {shape} | {r['mtbf_shift']:+.1e} | {shape_shift} |"
        )


if __name__ == "__main__":
    main()
