"""Where ``failcast report`` and ``failcast run`` spend memory and time above ``analyze`` (issue 27).

    python -m bench.report_memory WAREHOUSE.duckdb [--min-mb 20] [--images] [--out DIR]
    python -m bench.report_memory --run CONFIG.toml [--min-mb 20]

The first form runs ``analyze`` and then ``report.write_report`` (what ``failcast report`` does,
``--images`` adds its PNG and SVG charts), the second ``runs.batch.run_batch`` on a config (the
whole ``failcast run``: lock, ingest, rebuild, analyze, report, snapshot, metrics). Every public
function of the report's, the analysis' and the run's modules is wrapped as in
:mod:`bench.analyze_memory`: a thread samples RSS every 10 ms and each call records its wall and
CPU time, its RSS at the start and end and the peak while it ran (nested calls indented). Prints
the calls whose peak rose at least ``--min-mb`` above their start or that took at least 1 CPU-s,
then the whole peak, the HTML's bytes and the bytes of each chart's embedded Vega-Lite spec
(a spec must not grow with the rows).
"""

from __future__ import annotations

import argparse
import functools
import inspect
import re
import time
from pathlib import Path

from bench.analyze_memory import Sampler, rss_mb

REPORT_MODULES = (
    "pipeline.report.sections",
    "pipeline.report.charts",
    "pipeline.report.reliability",
    "pipeline.report.drivers",
    "pipeline.report.lemons",
    "pipeline.report.repairs",
    "pipeline.report.recovery",
    "pipeline.report.comparisons",
    "pipeline.report.badput",
    "pipeline.report.backtest",
    "pipeline.report.planner",
    "pipeline.report.planning",
    "pipeline.report.outlook",
    "pipeline.report.cards",
    "pipeline.report.page",
    "pipeline.report.metrics",
    "pipeline.runs.batch",
    "pipeline.runs.snapshots",
    "pipeline.runs.reports",
)
WRAPPED_PREFIXES = (
    "pipeline.report",
    "pipeline.runs",
    "pipeline.analysis",
    "pipeline.transform",
    "pipeline.ingest",
)


def instrument(sampler: Sampler, rows: list) -> None:
    """Wrap, in each module's own namespace, every function it calls by name from failcast's
    report, run, analysis, transform and ingest code (one wrapper per function)."""
    import importlib

    from pipeline import analysis, ingest, transform

    depth = [0]
    wrappers: dict = {}

    def wrap(fn):
        if fn in wrappers:
            return wrappers[fn]

        @functools.wraps(fn)
        def call(*args, **kwargs):
            start, cpu, index, before = time.perf_counter(), time.process_time(), sampler.open(), rss_mb()
            rows.append(
                entry := [depth[0], f"{fn.__module__.split('.', 1)[1]}.{fn.__name__}", before, 0, 0, 0, 0]
            )
            depth[0] += 1
            try:
                return fn(*args, **kwargs)
            finally:
                depth[0] -= 1
                entry[3:] = [
                    sampler.close(index),
                    rss_mb(),
                    time.perf_counter() - start,
                    time.process_time() - cpu,
                ]

        wrappers[fn] = wrappers[call] = call
        return call

    def wrap_namespace(namespace) -> None:
        for name, value in list(vars(namespace).items()):
            if (
                inspect.isfunction(value)
                and not name.startswith("__")
                and value.__module__.startswith(WRAPPED_PREFIXES)
            ):
                setattr(namespace, name, wrap(value))

    for module_name in REPORT_MODULES:
        wrap_namespace(importlib.import_module(module_name))
    for namespace in (transform, ingest, analysis):
        wrap_namespace(namespace)


def chart_spec_bytes(html: str) -> dict[str, int]:
    """Bytes of each chart's embedded Vega-Lite spec (``<script type="application/json">``)."""
    pattern = r'<script type="application/json" id="spec-([^"]+)">(.*?)</script>'
    return {slug: len(body.encode()) for slug, body in re.findall(pattern, html, flags=re.S)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db", nargs="?")
    parser.add_argument("--run", type=Path, help="a failcast.toml: time failcast run on it instead")
    parser.add_argument("--out", type=Path, default=Path("/tmp/failcast-report-memory"))
    parser.add_argument("--images", action="store_true")
    parser.add_argument("--min-mb", type=float, default=20.0)
    args = parser.parse_args()
    from pipeline import analysis, report, warehouse

    sampler = Sampler()
    sampler.start()
    rows: list = []
    instrument(sampler, rows)
    start_rss, start, cpu = rss_mb(), time.perf_counter(), time.process_time()
    index = sampler.open()
    if args.run:
        from pipeline.config import load_config
        from pipeline.runs.batch import run_batch

        html = run_batch(load_config(args.run)).report_path
    else:
        result = analysis.analyze(warehouse.connect(args.db, read_only=True))
        html = report.write_report(result, args.out, images=args.images)
    peak = sampler.close(index)
    print(f"{'step':<64} {'s':>6} {'cpu s':>6} {'start MB':>9} {'peak MB':>8} {'+peak':>7} {'end MB':>7}")
    for depth, name, before, top, after, seconds, cpu_s in rows:
        if top - before >= args.min_mb or cpu_s >= 1:
            label = "  " * depth + name
            print(
                f"{label:<64} {seconds:6.2f} {cpu_s:6.2f} {before:9.0f} {top:8.0f} "
                f"{top - before:7.0f} {after:7.0f}"
            )
    text = Path(html).read_text()
    specs = chart_spec_bytes(text)
    print(
        f"total: {time.perf_counter() - start:.1f} s, {time.process_time() - cpu:.1f} CPU-s, RSS "
        f"{start_rss:.0f} MB before, peak {peak:.0f} MB; HTML {len(text.encode()):,} bytes, of which "
        f"{sum(specs.values()):,} chart specs"
    )
    for slug, size in sorted(specs.items(), key=lambda kv: -kv[1]):
        print(f"  spec {slug:<40} {size:>10,} bytes")


if __name__ == "__main__":
    main()
