"""Time the projection Monte Carlo: 10 000 runs of a 16 384-instance, 90-day job (run by hand).

    cd /work/wt-projection && /work/main/.venv/bin/python -m bench.projection_bench

Budget (benchmark issue): under 10 s on 2 cores. Record the output in bench/RESULTS.md.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import time

import numpy as np

from pipeline.projection import (
    FailureModel,
    JobSpec,
    days_histogram,
    monte_carlo,
    project,
    renewal_monte_carlo,
)

RUNS = 10_000
INSTANCES = 16_384
GPUS_PER_INSTANCE = 8
FAILURE_FREE_DAYS = 90.0


def _spec(failure: FailureModel) -> JobSpec:
    return JobSpec(
        instances=INSTANCES,
        gpus_per_instance=GPUS_PER_INSTANCE,
        gpu_hours=FAILURE_FREE_DAYS * 24 * INSTANCES * GPUS_PER_INSTANCE,
        price_per_gpu_hour_usd=4.5,
        failure=failure,
        name="bench-16k",
    )


def main() -> None:
    print(f"python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} CPUs")
    for failure in (FailureModel.preset("llama-3.1"), FailureModel.exponential(1e-6, 5e-7, 2e-6)):
        spec = _spec(failure)
        print(
            f"{INSTANCES} instances, {FAILURE_FREE_DAYS:g} failure-free days, {RUNS} runs, "
            f"{failure.rate_per_instance_hour:.3g}/instance-hour, cluster MTBF "
            f"{failure.cluster_mtbf_hours(INSTANCES):.2f} h"
        )
        for mode in spec.recovery:
            for uncertain in (False, True):
                t0 = time.perf_counter()
                mc = monte_carlo(spec, mode, RUNS, seed=0, rate_uncertainty=uncertain)
                dt = time.perf_counter() - t0
                print(
                    f"  monte_carlo {mode:9s} rate_uncertainty={uncertain!s:5s}: {dt:6.3f} s, "
                    f"{mc.mean_interruptions:,.1f} failures/run, P50 {mc.p50_days:,.1f} days"
                )
        t0 = time.perf_counter()
        project(spec, monte_carlo_runs=RUNS, seed=0)
        print(f"  project(), all modes, both MC variants: {time.perf_counter() - t0:.3f} s")
        t0 = time.perf_counter()
        days_histogram(spec, runs=RUNS, seed=0)
        print(f"  days_histogram(): {time.perf_counter() - t0:.3f} s")

    # the fitted Weibull (renewal) model: cost is O(failures), so rates where a 90-day job on
    # 16 384 instances sees hundreds to a few thousand failures per run
    cov = ((0.0025, -0.0004), (-0.0004, 0.0004))  # (log scale, log shape), like a fleet's fit
    for rate in (1e-5, 3e-5):
        for ages in ("stationary", "new"):
            spec = dataclasses.replace(
                _spec(FailureModel.exponential(rate).with_weibull_shape(0.7, cov)), node_ages=ages
            )
            for uncertain in (False, True):
                t0 = time.perf_counter()
                mc = renewal_monte_carlo(spec, "automatic", RUNS, seed=0, parameter_uncertainty=uncertain)
                dt = time.perf_counter() - t0
                print(
                    f"  renewal k=0.7 {rate:.0e}/instance-hour {ages:10s} parameter_uncertainty="
                    f"{uncertain!s:5s}: {dt:6.2f} s, {mc.mean_interruptions:,.0f} failures/run, "
                    f"{RUNS * mc.mean_interruptions / dt / 1e6:.1f} M failures/s, P50 {mc.p50_days:,.1f} days"
                )


if __name__ == "__main__":
    main()
