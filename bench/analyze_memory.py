"""Where ``analysis.analyze`` spends its memory: RSS per step, sampled (issue 27).

    python -m bench.analyze_memory WAREHOUSE.duckdb [--min-mb 20]

Runs ``analyze`` once on the warehouse with every function it calls from ``pipeline.analysis``,
``pipeline.transform`` and ``pipeline.models`` wrapped: a thread samples this process's resident
set every 10 ms, and each call records its wall time, the RSS when it returned and the peak RSS
while it ran (nested calls indented). Prints the calls whose peak rose at least ``--min-mb``
above the RSS at their start, then the whole run's peak, what stays resident at the end (the
``FleetAnalysis``) and the frames and arrays in it as long as the data (:func:`row_sized`). RSS,
not Python allocations: Polars, DuckDB and NumPy allocate outside tracemalloc's view.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import os
import threading
import time

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


class Sampler(threading.Thread):
    """The highest RSS seen since the last :meth:`mark`, for every open mark."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peaks: list[float] = []
        self.lock = threading.Lock()

    def run(self) -> None:
        while True:
            now = rss_mb()
            with self.lock:
                self.peaks = [max(p, now) for p in self.peaks]
            time.sleep(0.01)

    def open(self) -> int:
        with self.lock:
            self.peaks.append(rss_mb())
            return len(self.peaks) - 1

    def close(self, index: int) -> float:
        with self.lock:
            peak = max(self.peaks.pop(index), rss_mb())
            self.peaks = [max(p, peak) for p in self.peaks]
            return peak


def instrument(sampler: Sampler, rows: list) -> None:
    """Wrap the public functions and fitters' ``fit`` of the analysis, transform and model modules."""
    from pipeline import analysis, models, transform
    from pipeline.analysis import failures, fleet, jobs, repairs

    depth = [0]

    def wrap(name, fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            start, index, before = time.perf_counter(), sampler.open(), rss_mb()
            rows.append(entry := [depth[0], name, before, 0.0, 0.0, 0.0])
            depth[0] += 1
            try:
                return fn(*args, **kwargs)
            finally:
                depth[0] -= 1
                entry[3:] = [sampler.close(index), rss_mb(), time.perf_counter() - start]

        return call

    for module in (transform, analysis, failures, fleet, jobs, repairs):
        for name, value in list(vars(module).items()):
            if inspect.isfunction(value) and not name.startswith("_") and name != "analyze":
                setattr(module, name, wrap(f"{module.__name__.split('.')[-1]}.{name}", value))
    for name in dir(models):
        value = getattr(models, name)
        if inspect.isclass(value) and hasattr(value, "fit"):
            value.fit = wrap(f"{name}.fit", value.fit)


def row_sized(result, least: int = 10_000) -> str:
    """The frames and arrays of at least ``least`` rows the result still holds (in its parts,
    dicts and fitted models), by path, largest first: what grows with the data (issue 27)."""
    import numpy as np
    import polars as pl

    found, seen = [], set()

    def walk(value, path: str) -> None:
        if id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, pl.DataFrame):
            if value.height >= least:
                found.append((value.estimated_size("mb"), f"{path} {value.height:,} rows"))
        elif isinstance(value, np.ndarray):
            if value.size >= least:
                found.append((value.nbytes / 2**20, f"{path} {value.size:,} values"))
        elif isinstance(value, dict | list | tuple):
            for key, item in value.items() if isinstance(value, dict) else enumerate(value):
                walk(item, f"{path}[{key!r}]")
        elif type(value).__module__.startswith("pipeline.") and hasattr(value, "__dict__"):
            for name, item in vars(value).items():
                walk(item, f"{path}.{name}")

    walk(result, "result")
    found.sort(reverse=True)
    return "; ".join(f"{text} ({mb:.0f} MB)" for mb, text in found) or f"nothing of {least:,} rows or more"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db")
    parser.add_argument("--min-mb", type=float, default=20.0)
    args = parser.parse_args()
    from pipeline import analysis, warehouse

    sampler = Sampler()
    sampler.start()
    rows: list = []
    instrument(sampler, rows)
    start_rss, start = rss_mb(), time.perf_counter()
    index = sampler.open()
    result = analysis.analyze(warehouse.connect(args.db, read_only=True))
    peak = sampler.close(index)
    print(f"{'step':<58} {'s':>6} {'start MB':>9} {'peak MB':>8} {'+peak':>7} {'end MB':>7}")
    for depth, name, before, top, after, seconds in rows:
        if top - before >= args.min_mb:
            label = "  " * depth + name
            print(f"{label:<58} {seconds:6.2f} {before:9.0f} {top:8.0f} {top - before:7.0f} {after:7.0f}")
    print(
        f"analyze: {time.perf_counter() - start:.1f} s, RSS {start_rss:.0f} MB before, peak {peak:.0f} MB, "
        f"{rss_mb():.0f} MB holding the result"
    )
    print(f"row-sized in the result: {row_sized(result)}")


if __name__ == "__main__":
    main()
