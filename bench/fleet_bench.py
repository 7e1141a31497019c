"""Fleet-scale benchmark: failcast per stage against a bare DuckDB scan and a naive pandas script.

    /work/main/.venv/bin/python -m bench.fleet_bench --scale small|full [--repeats 3]
        [--rows N] [--workdir /tmp/failcast-bench] [--keep] [--only STAGE ...]

Generates (once per workdir and scale) a fleet with the project's renewal generator
(:func:`pipeline.sample.stationary_renewal_times`, vectorised): canonical ``incidents.csv`` and
``inventory.csv`` plus two synthetic syslogs with ~1% Xid lines (:mod:`bench.ingest_kernel_log`),
one 4x the other, so that peak memory of the streaming reader can be compared across sizes.
Every stage runs in its own child process under ``/usr/bin/time`` (peak RSS of that process);
the table shows medians over ``--repeats`` (the baseline, fits and report run once).
See bench/README.md for what each number means.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

from bench.synthetic_logs import LINES_SQL, synthetic_log

# nodes per cluster, days, interrupting and non-interrupting incidents per node-hour, log lines
SCALES = {
    "small": {"clusters": (256, 512, 256), "days": 365, "rate": 0.002, "noise": 0.0038, "log_lines": 500_000},
    "full": {
        "clusters": (4096, 8192, 16384, 16384, 16384, 16384, 8192, 8192, 4096),
        "days": 730,
        "rate": 0.002,
        "noise": 0.0038,
        "log_lines": 25_000_000,
    },
}
START = np.datetime64("2025-01-01T00:00:00", "us")


def rows_scale(rows: int) -> dict:
    """A one-year fleet shaped like ``small`` whose incidents table has about ``rows`` rows: the
    node count follows from the incident rate (interrupting + non-interrupting per node-hour),
    split into clusters of at most 16,384 nodes. The kernel logs stay at the small scale's size
    (bench/ingest_kernel_log.py measures them)."""
    days, rate, noise = 365, 0.002, 0.0038
    nodes = max(math.ceil(rows / (days * 24 * (rate + noise))), 3)
    clusters = [16_384] * (nodes // 16_384) + ([nodes % 16_384] if nodes % 16_384 else [])
    return {"clusters": tuple(clusters), "days": days, "rate": rate, "noise": noise, "log_lines": 500_000}


SLOW_STAGES = ("ingest_canonical", "fits", "report", "naive", "report_command", "run", "run_first")


# --- generation (vectorised; per-line Python would take longer than the benchmark) ---


def _inventory(sizes: tuple[int, ...], days: float, rng: np.random.Generator) -> pl.DataFrame:
    """Like sample.FleetSpec's inventory: 3% of nodes retired mid-window (a spare takes the slot
    4 h later), 2% out for repair for 1-10 days, the rest in service throughout."""
    cluster = np.repeat(np.arange(len(sizes)), sizes)
    index = np.concatenate([np.arange(s) for s in sizes])
    names = pl.DataFrame({"c": cluster, "i": index, "size": np.array(sizes)[cluster]}).select(
        cluster_id=pl.format("c{}", pl.col("c").cast(pl.String).str.zfill(2)),
        node=pl.col("i").cast(pl.String).str.zfill(5),
    )
    u = rng.uniform(size=cluster.size)
    retired, repair = u < 0.03, (u >= 0.03) & (u < 0.05)
    cut_h = np.where(retired, rng.uniform(0.1, 0.9, u.size), rng.uniform(0.1, 0.7, u.size)) * days * 24
    back_h = np.where(retired, cut_h + 4, cut_h + rng.uniform(24, 240, u.size))
    base = names.with_columns(
        node_id=pl.format("{}-n{}", "cluster_id", "node"),
        from_h=pl.lit(0.0),
        to_h=pl.Series(np.where(retired | repair, cut_h, np.nan)).fill_nan(None),
    )
    second = names.filter(pl.Series(retired | repair)).with_columns(
        node_id=pl.format(
            "{}-{}{}",
            "cluster_id",
            pl.when(pl.Series(retired[retired | repair])).then(pl.lit("s")).otherwise(pl.lit("n")),
            "node",
        ),
        from_h=pl.Series(back_h[retired | repair]),
        to_h=pl.lit(None, pl.Float64),
    )
    return pl.concat([base, second]).drop("node")


def _at(hours: np.ndarray) -> np.ndarray:
    """START + hours, whole seconds (NaN -> NaT)."""
    return START + (np.round(hours * 3600) * 1_000_000).astype("timedelta64[us]")


def generate(workdir: Path, scale: str, seed: int = 2026) -> dict[str, Path]:
    """Write the inputs unless they exist; returns their paths (an availability-trace scale has
    only the two tables, :mod:`bench.availability`)."""
    cfg = SCALES[scale]
    out = workdir / scale
    if "intervals_per_node" in cfg:
        from bench import availability

        return availability.generate(out, cfg["rows"], cfg["intervals_per_node"])
    paths = {
        "incidents": out / "incidents.csv",
        "inventory": out / "inventory.csv",
        "log_small": out / "kern-small.log",
        "log": out / "kern.log",
    }
    if all(p.exists() for p in paths.values()):
        return paths
    # imported here: a stage's child must not load pipeline before its clock starts (rates)
    from pipeline import sample

    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    inv = _inventory(cfg["clusters"], cfg["days"], rng)
    end_h = cfg["days"] * 24.0
    durations = (inv["to_h"].fill_null(end_h) - inv["from_h"]).to_numpy()
    owner, hours = sample.stationary_renewal_times(durations, 1 / cfg["rate"], 0.85, rng)
    categories = list(sample.DEFAULT_CATEGORY_MIX)
    weights = np.array([sample.DEFAULT_CATEGORY_MIX[c] for c in categories])
    picked = rng.choice(len(categories), size=owner.size, p=weights / weights.sum())
    noise_owner = np.repeat(np.arange(durations.size), rng.poisson(durations * cfg["noise"]))
    noise_hours = rng.uniform(size=noise_owner.size) * durations[noise_owner]
    noise_cats = np.where(rng.uniform(size=noise_owner.size) < 0.7, "application", "gpu_memory_warning")
    owner = np.concatenate([owner, noise_owner])
    offset_s = np.round(np.concatenate([hours, noise_hours]) * 3600).astype(np.int64)
    category = np.concatenate([np.array([c.value for c in categories])[picked], noise_cats])
    gpu = rng.integers(0, 8, size=owner.size)
    repair_s = np.round(rng.lognormal(np.log(3.0), 0.8, owner.size) * 3600).astype(np.int64)
    start = _at(inv["from_h"].to_numpy())[owner]
    iso = "%Y-%m-%dT%H:%M:%SZ"
    ts = pl.Series(start + (offset_s * 1_000_000).astype("timedelta64[us]"))
    pl.DataFrame(
        {
            "timestamp": ts,
            "cluster_id": inv["cluster_id"].gather(owner),
            "node_id": inv["node_id"].gather(owner),
            "category": category,
            "gpu_index": gpu,
            "resolved_at": ts + pl.Series((repair_s * 1_000_000).astype("timedelta64[us]")),
        }
    ).with_columns(
        job_id=pl.format("job-{}", pl.col("timestamp").dt.epoch("s") // 86400 % 97),
        message=pl.format("{} on GPU {}", "category", "gpu_index"),
    ).sort("timestamp").with_columns(pl.col("timestamp", "resolved_at").dt.strftime(iso)).select(
        "timestamp", "cluster_id", "node_id", "category", "gpu_index", "job_id", "message", "resolved_at"
    ).write_csv(paths["incidents"])
    inv.select(
        "cluster_id",
        "node_id",
        instance_type=pl.lit("p5.48xlarge"),
        gpus_per_node=pl.lit(8),
        in_service_from=pl.Series(_at(inv["from_h"].to_numpy())).dt.strftime(iso),
        in_service_to=pl.Series(_at(inv["to_h"].fill_null(np.nan).to_numpy())).dt.strftime(iso),
    ).write_csv(paths["inventory"])
    synthetic_log(paths["log_small"], cfg["log_lines"] // 4, 0.01, False, seed=seed)
    synthetic_log(paths["log"], cfg["log_lines"], 0.01, False, seed=seed + 1)
    return paths


# --- stages: each runs in a fresh child process (``--stage``) and returns extra facts as JSON ---


def _timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def floor_csv(paths, db: Path) -> dict:
    import duckdb

    rows = sum(
        duckdb.sql("SELECT count(*) FROM read_csv(?)", params=[str(paths[k])]).fetchall()[0][0]
        for k in ("incidents", "inventory")
    )
    return {"rows": rows}


def floor_store(paths, db: Path) -> dict:
    """The least a warehouse must do: parse both files with DuckDB's typed reader and write the rows
    into a fresh DuckDB file (no validation, no keys, no incidents)."""
    import duckdb

    store = db.with_name("floor-store.duckdb")
    _fresh(store)
    con = duckdb.connect(str(store))
    con.execute("CREATE TABLE incidents AS SELECT * FROM read_csv(?)", [str(paths["incidents"])])
    con.execute("CREATE TABLE inventory AS SELECT * FROM read_csv(?)", [str(paths["inventory"])])
    rows = con.sql("SELECT (SELECT count(*) FROM incidents) + (SELECT count(*) FROM inventory)").fetchall()
    con.close()
    _fresh(store)
    return {"rows": rows[0][0]}


_BUDGET_EVENTS = """
CREATE TABLE events AS
SELECT event_key, 1 AS file_id, line, timezone('UTC', ts) AS timestamp_utc, cluster_id, node_id, category,
       true AS interrupting, gpu_index, job_id, message, timezone('UTC', resolved_at) AS resolved_at_utc,
       'canonical' AS source_format, attributes, 'other' AS failure_class
FROM ({staged}) WHERE reason IS NULL
"""
_BUDGET_INCIDENTS = """
CREATE TABLE incidents AS
SELECT hash(event_key) AS incident_id, cluster_id, node_id, category, interrupting, gpu_index, timestamp_utc,
       timestamp_utc AS last_event_utc, resolved_at_utc, 1 AS events, job_id, message
FROM events
"""


def floor_guarantees(paths, db: Path) -> dict:
    """A lower bound on any ingest that keeps failcast's guarantees, in DuckDB alone: the
    incidents file read as text (rejects must quote it), failcast's own validation SQL with its
    reasons and the md5 content key, the valid rows written with their provenance (file, line,
    class), and a second copy as incidents (as if none collapsed). No rejects kept, no duplicate
    checks, no line numbers, no inventory, no incident rule: a real ingest only adds to these.
    Each piece runs into a fresh file, CHECKPOINT included."""
    import resource

    import duckdb

    from pipeline.readers.canonical_checks import stage_sql

    text = "(SELECT 0 AS line, *, NULL AS attributes FROM read_csv($path, all_varchar = true))"
    staged = stage_sql("incidents").replace("FROM source", f"FROM {text}")
    pieces = {
        "typed_floor": ["CREATE TABLE t AS SELECT * FROM read_csv($path)"],
        "validated_keyed": ["CREATE TABLE staged AS " + staged],
        "events": [_BUDGET_EVENTS.format(staged=staged)],
        "events_incidents": [_BUDGET_EVENTS.format(staged=staged), _BUDGET_INCIDENTS],
    }
    store = db.with_name("floor-guarantees.duckdb")
    result = {}
    for name, statements in pieces.items():
        _fresh(store)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu, start = usage.ru_utime + usage.ru_stime, time.perf_counter()
        con = duckdb.connect(str(store))
        con.execute("SET TimeZone = 'UTC'")
        for sql in statements:
            con.execute(sql, {"path": str(paths["incidents"])} if "$path" in sql else None)
        con.execute("CHECKPOINT")
        con.close()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        result[f"{name}_s"] = round(time.perf_counter() - start, 3)
        result[f"{name}_cpu_s"] = round(usage.ru_utime + usage.ru_stime - cpu, 3)
    _fresh(store)
    return result


def _floor_log(path: Path) -> dict:
    import duckdb

    return {"lines": duckdb.sql(LINES_SQL, params=[str(path)]).fetchall()[0][0]}


def _fresh(db: Path) -> None:
    for path in (db, db.with_name(db.name + ".wal")):
        path.unlink(missing_ok=True)


def _cpu() -> float:
    """CPU seconds of this process so far, DuckDB's and Polars' threads included."""
    return time.process_time()


def ingest_canonical(paths, db: Path) -> dict:
    """A first ingest as ``failcast ingest`` runs it, the close included: its checkpoint is paid
    by every CLI ingest (``close_s`` / ``close_cpu_s`` time it alone)."""
    from pipeline import warehouse
    from pipeline.ingest import ingest_files

    _fresh(db)
    con = warehouse.connect(db)
    summaries = ingest_files(con, [paths["inventory"], paths["incidents"]])
    incidents = con.sql("SELECT count(*) FROM incidents").fetchall()[0][0]
    close, close_cpu = time.perf_counter(), _cpu()
    con.close()
    return {
        "rows": sum(s.rows_ingested for s in summaries),
        "incidents": incidents,
        "close_s": time.perf_counter() - close,
        "close_cpu_s": _cpu() - close_cpu,
    }


INCREMENT_NEW, INCREMENT_REPEATED = 100_000, 20_000


def increment(paths) -> Path:
    """A second, small incidents file (written once, next to the inputs): the last
    ``INCREMENT_REPEATED`` rows of incidents.csv again (duplicates) and ``INCREMENT_NEW`` rows of its
    start moved a year on (new: later than everything stored), as a nightly export would bring."""
    out = paths["incidents"].with_name("increment.csv")
    if not out.exists():
        rows = pl.scan_csv(paths["incidents"], infer_schema=False)
        later = rows.head(INCREMENT_NEW).with_columns(
            pl.col(c).str.to_datetime(time_zone="UTC").dt.offset_by("1y").dt.strftime("%Y-%m-%dT%H:%M:%SZ")
            for c in ("timestamp", "resolved_at")
        )
        pl.concat([rows.tail(INCREMENT_REPEATED), later]).collect().write_csv(out)
    return out


def ingest_incremental(paths, db: Path) -> dict:
    """:func:`increment` into a copy of the warehouse ``ingest_canonical`` left (run that stage
    first); times only the ingest and the close (its checkpoint), as the CLI pays them (CPU of
    this process: DuckDB's threads included)."""
    from pipeline import warehouse
    from pipeline.ingest import ingest_files

    copy = db.with_name("incremental.duckdb")
    _fresh(copy)
    shutil.copyfile(db, copy)
    con = warehouse.connect(copy)
    wall, cpu = time.perf_counter(), _cpu()
    [s] = ingest_files(con, [increment(paths)])
    con.close()
    wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    _fresh(copy)
    return {"ingest_s": wall, "ingest_cpu_s": cpu, "rows": s.rows_ingested, "duplicates": s.rows_duplicate}


def _rebuild_alone(source: Path) -> dict:
    """The incident rebuild alone, as a first ingest runs it: on a copy of ``source`` whose
    incidents are deleted and checkpointed away, a full ``rebuild_incidents`` and its commit, each
    timed (wall and CPU of this process)."""
    import resource

    from pipeline import warehouse
    from pipeline.rebuild import rebuild_incidents

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    copy = source.with_name("rebuild.duckdb")
    _fresh(copy)
    shutil.copyfile(source, copy)
    con = warehouse.connect(copy)
    con.execute("DELETE FROM incidents; DELETE FROM incidents_built; CHECKPOINT")
    con.execute("BEGIN TRANSACTION")
    start, start_cpu = time.perf_counter(), cpu()
    rebuild_incidents(con)
    built, built_cpu = time.perf_counter(), cpu()
    con.execute("COMMIT")
    facts = {"rebuild_s": built - start, "rebuild_cpu_s": built_cpu - start_cpu}
    facts |= {"commit_s": time.perf_counter() - built, "commit_cpu_s": cpu() - built_cpu}
    facts["events"] = con.sql("SELECT count(*) FROM events").fetchall()[0][0]
    facts["incidents"] = con.sql("SELECT count(*) FROM incidents").fetchall()[0][0]
    con.close()
    _fresh(copy)
    return facts


def rebuild(paths, db: Path) -> dict:
    """The rebuild of ingest_canonical's warehouse (run that stage first)."""
    return _rebuild_alone(db)


STORM_REPEATS_MIN = (1, 2)
ON_REQUEST = (  # run only when named in --only
    "storm",
    "rebuild_storm",
    "fit",
    "report_command",
    "metrics",
    "run",
    "run_first",
    "floor_asof",
)


def storm(paths, db: Path) -> dict:
    """An Xid-storm warehouse (``storm.duckdb``, next to ingest_canonical's, which it copies): every
    event repeated ``STORM_REPEATS_MIN`` minutes later (new content keys), so nearly every incident
    holds three events; incidents left empty for ``rebuild_storm``. Its own stage, so that the
    rebuild's child does not carry this insert's memory in its peak RSS."""
    from pipeline import warehouse

    out = db.with_name("storm.duckdb")
    _fresh(out)
    shutil.copyfile(db, out)
    con = warehouse.connect(out)
    con.execute(
        "INSERT INTO events SELECT e.* REPLACE (md5(e.event_key || '+' || m) AS event_key,"
        " e.timestamp_utc + to_minutes(m) AS timestamp_utc)"
        " FROM events e, (SELECT unnest($minutes::BIGINT[]) AS m)",
        {"minutes": list(STORM_REPEATS_MIN)},
    )
    con.execute("DELETE FROM incidents; DELETE FROM incidents_built; CHECKPOINT")
    events = con.sql("SELECT count(*) FROM events").fetchall()[0][0]
    con.close()
    return {"events": events}


def rebuild_storm(paths, db: Path) -> dict:
    """The rebuild of the storm warehouse (run ``storm`` first)."""
    return _rebuild_alone(db.with_name("storm.duckdb"))


def _ingest_log(path: Path, db: Path) -> dict:
    from pipeline import warehouse
    from pipeline.ingest import ReaderOptions, ingest_files

    _fresh(db)
    con = warehouse.connect(db)
    [s] = ingest_files(con, [path], ReaderOptions(year=2026, cluster="bench"))
    con.close()
    _fresh(db)
    return {"lines": s.rows_read, "xid_events": s.rows_ingested, "mb": path.stat().st_size / 1e6}


def _exposure(con):
    """What ``analyze`` reads for its fits: the failures (interrupting incidents, five
    columns, collapsed into node interruptions) and the exposure, never the whole table."""
    from pipeline import analysis, transform, warehouse

    inventory = warehouse.table(con, "inventory")
    end = transform.observation_end(warehouse.latest_incident(con), inventory)
    return analysis.read_failures(con), transform.exposure_intervals(inventory, end)


def _command(args: list[str]) -> str:
    """``failcast ARGS`` run in this process through the command line's own entry point, its
    output discarded but its first line returned: the stage's clock starts before ``pipeline`` is
    imported, so it is what a user waits for minus the interpreter's start and NumPy and Polars
    (loaded by this script; ``process_s`` has them)."""
    import contextlib
    import io

    from pipeline.cli import main as failcast

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        failcast(args, standalone_mode=False)
    return out.getvalue().partition("\n")[0]


def rates(paths, db: Path) -> dict:
    """``failcast rates --db DB``; its first line, the fleet verdict, goes into the JSON."""
    return {"verdict": _command(["rates", "--db", str(db)])}


def lemons(paths, db: Path) -> dict:
    """``failcast lemons --db DB``; its first line (nodes tested, lemons found) goes into the JSON."""
    return {"verdict": _command(["lemons", "--db", str(db)])}


def analyze(paths, db: Path) -> dict:
    """``analysis.analyze`` on the warehouse, its imports included (the clock starts before
    ``pipeline`` is imported): what ``failcast fit``, the report and ``failcast run`` compute
    before they print or draw anything."""
    from pipeline import analysis, warehouse

    result = analysis.analyze(warehouse.connect(db, read_only=True))
    counted = int(result.rates.overall["failures"].sum())
    return {
        "failures": counted,
        # every interruption read: counted, or left out with its reason
        "interruptions": counted + int(result.failures_left_out["failures"].sum()),
        "best_family": result.fits.best_family,
    }


def fits(paths, db: Path) -> dict:
    """Node-level gaps from the warehouse; fit_bench's raw-vs-aggregated comparison on them."""
    from bench import fit_bench
    from pipeline import transform, warehouse

    con = warehouse.connect(db, read_only=True)
    failures, exposure = _exposure(con)
    gaps, t_gaps = _timed(lambda: transform.times_between_failures(failures, exposure))
    grids = ("1 min", "6 min", fit_bench.ANALYSIS_GRID)
    rows = fit_bench.compare(gaps.select("duration_hours", "observed"), "weibull", grids)
    return {"gaps": gaps.height, "gaps_s": t_gaps, "resolutions": rows}


def projection(paths, db: Path) -> dict:
    """projection_bench's job (the generated fleet's rate would make it hopeless, see RESULTS.md)."""
    from bench.projection_bench import RUNS, _spec
    from pipeline.projection import FailureModel, project

    result = project(_spec(FailureModel.preset("llama-3.1")), monte_carlo_runs=RUNS)
    return {
        mode: {"analytic_days": m.expected_days, "monte_carlo_mean_days": m.monte_carlo.mean_days}
        for mode, m in result.modes.items()
    }


def report(paths, db: Path) -> dict:
    from pipeline import analysis, warehouse
    from pipeline import report as report_mod

    con = warehouse.connect(db, read_only=True)
    result, t_analyze = _timed(lambda: analysis.analyze(con))
    out = db.parent / "report"
    html, t_write = _timed(lambda: report_mod.write_report(result, out, images=False))
    return {"analyze_s": t_analyze, "write_report_s": t_write, "html_mb": html.stat().st_size / 1e6}


def fit(paths, db: Path) -> dict:
    """``failcast fit --db DB``; its first line goes into the JSON."""
    return {"verdict": _command(["fit", "--db", str(db)])}


def report_command(paths, db: Path) -> dict:
    """``failcast report --db DB --out DIR`` as a user runs it (PNG and SVG charts included)."""
    out = db.parent / "report-command"
    shutil.rmtree(out, ignore_errors=True)
    _command(["report", "--db", str(db), "--out", str(out)])
    return {"html_mb": (out / "failcast-report.html").stat().st_size / 1e6}


def metrics(paths, db: Path) -> dict:
    """``failcast metrics --db DB --out F.prom``."""
    out = db.parent / "failcast.prom"
    _command(["metrics", "--db", str(db), "--out", str(out)])
    return {"prom_kb": out.stat().st_size / 1e3}


def _run(paths, db: Path, *, first: bool) -> dict:
    """``failcast run`` on a config whose inputs are the fleet's two files: on a copy of
    ingest_canonical's warehouse (the nightly run: both files unchanged, skipped; the copy is not
    timed), or with ``first`` on an empty one (everything ingested)."""
    folder = db.parent / "run"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    if not first:
        shutil.copyfile(db, folder / "warehouse.duckdb")
    config = folder / "failcast.toml"
    config.write_text(
        'warehouse = "warehouse.duckdb"\nreport_dir = "reports"\n[inputs]\n'
        f'inventory = ["{paths["inventory"]}"]\ncsv = ["{paths["incidents"]}"]\n'
        f'roots = ["{paths["incidents"].parent}"]\n'
    )
    start, cpu = time.perf_counter(), _cpu()
    _command(["run", "--config", str(config)])
    facts = {"run_s": time.perf_counter() - start, "run_cpu_s": _cpu() - cpu}
    from pipeline import warehouse

    con = warehouse.connect(folder / "warehouse.duckdb", read_only=True)
    [(stages,)] = con.sql("SELECT stages FROM runs ORDER BY started_at_utc DESC LIMIT 1").fetchall()
    con.close()
    seconds = {name: round(s.get("seconds", 0), 2) for name, s in json.loads(stages).items()}
    shutil.rmtree(folder)
    return {**facts, "stage_s": seconds}


def run(paths, db: Path) -> dict:
    return _run(paths, db, first=False)


def run_first(paths, db: Path) -> dict:
    return _run(paths, db, first=True)


def naive(paths, db: Path) -> dict:
    """What a user writes without failcast: pandas, loops over nodes, lifelines on every gap."""
    import pandas as pd
    from lifelines import WeibullFitter

    timings = {}
    t0 = time.perf_counter()
    inc = pd.read_csv(paths["incidents"], parse_dates=["timestamp", "resolved_at"])
    inv = pd.read_csv(paths["inventory"], parse_dates=["in_service_from", "in_service_to"])
    timings["read_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    end = max(inc["timestamp"].max(), inv["in_service_from"].max())
    inc = inc[~inc["category"].isin(["application", "gpu_memory_warning"])]
    exposure_h: dict[str, float] = {}
    windows: dict[str, list] = {}
    for row in inv.itertuples():  # exposure: one loop iteration per inventory row
        stop = end if pd.isna(row.in_service_to) else row.in_service_to
        exposure_h[row.cluster_id] = (
            exposure_h.get(row.cluster_id, 0.0) + (stop - row.in_service_from).total_seconds() / 3600
        )
        windows.setdefault(row.node_id, []).append((row.in_service_from, stop))
    failures = inc.groupby("cluster_id").size()
    rate = {c: failures.get(c, 0) / h for c, h in exposure_h.items()}
    months = inc.groupby([inc["cluster_id"], inc["timestamp"].dt.tz_localize(None).dt.to_period("M")]).size()
    durations, observed = [], []
    for node, group in inc.groupby("node_id"):  # time between failures: loop per node
        times = sorted(group["timestamp"])
        for start, stop in windows.get(node, []):
            inside = [t for t in times if start <= t < stop]
            for a, b in zip(inside, inside[1:], strict=False):
                durations.append((b - a).total_seconds() / 3600)
                observed.append(True)
            if inside:
                durations.append((stop - inside[-1]).total_seconds() / 3600)
                observed.append(False)
    timings["loops_s"] = time.perf_counter() - t0
    d = np.maximum(np.array(durations), 1 / 3600)
    fitter, timings["lifelines_s"] = _timed(lambda: WeibullFitter().fit(d, np.array(observed)))
    mtbf = fitter.lambda_ * math.gamma(1 + 1 / fitter.rho_)
    return {
        **timings,
        "gaps": len(durations),
        "clusters": len(rate),
        "month_rows": len(months),
        "mtbf_hours": mtbf,
        "shape": fitter.rho_,
    }


def floor_log(paths, db):
    return _floor_log(paths["log"])


def floor_log_small(paths, db):
    return _floor_log(paths["log_small"])


def ingest_log(paths, db):
    return _ingest_log(paths["log"], db.with_name("log.duckdb"))


def ingest_log_small(paths, db):
    return _ingest_log(paths["log_small"], db.with_name("log-small.duckdb"))


STAGES = {
    "floor_csv": floor_csv,
    "floor_store": floor_store,
    "floor_guarantees": floor_guarantees,
    "ingest_canonical": ingest_canonical,
    "ingest_incremental": ingest_incremental,
    "rates": rates,
    "lemons": lemons,
    "analyze": analyze,
    "rebuild": rebuild,
    "storm": storm,
    "rebuild_storm": rebuild_storm,
    "floor_log_small": floor_log_small,
    "ingest_log_small": ingest_log_small,
    "floor_log": floor_log,
    "ingest_log": ingest_log,
    "fits": fits,
    "projection": projection,
    "report": report,
    "naive": naive,
    "fit": fit,
    "report_command": report_command,
    "metrics": metrics,
    "run": run,
    "run_first": run_first,
    "floor_asof": None,  # bench/floor_merge_asof.py as its own process (run_stage)
}


# --- the parent: run stages in children, take medians, print the table ---


def run_stage(stage: str, args) -> dict:
    """One child under ``/usr/bin/time``: its own peak RSS (a child forked straight from this big
    process would inherit our high-water mark), its wall time with interpreter start-up, and the
    stage's time measured inside it (imports the stage needs included)."""
    usage = args.workdir / f"usage-{os.getpid()}.txt"  # one per parent: runs may share a workdir
    size = ["--rows", str(args.rows)] if args.rows else ["--scale", args.scale]
    if args.intervals_per_node:
        size += ["--intervals-per-node", str(args.intervals_per_node)]
    cmd = [sys.executable, "-m", "bench.fleet_bench", *size, "--workdir", str(args.workdir), "--stage", stage]
    if stage == "floor_asof":  # the user's script alone in its process: its own imports and RSS
        paths = generate(args.workdir, args.scale)
        script = Path(__file__).with_name("floor_merge_asof.py")
        cmd = [sys.executable, str(script), str(paths["incidents"]), str(paths["inventory"])]
    out = subprocess.run(
        ["/usr/bin/time", "-f", "%M %e %U %S", "-o", str(usage), *cmd],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    ).stdout
    rss_kb, process_s, user_s, system_s = usage.read_text().split()[-4:]
    facts = _floor_rates(out) if stage == "floor_asof" else json.loads(out.splitlines()[-1])
    return {
        "peak_rss_mb": int(rss_kb) / 1024,
        "process_s": float(process_s),
        "cpu_s": float(user_s) + float(system_s),
        **facts,
    }


def _floor_rates(csv_text: str) -> dict:
    """floor_merge_asof.py's output as facts; its wall time is its whole process's."""
    rows = list(csv.DictReader(io.StringIO(csv_text)))
    return {
        "wall_s": None,
        "rates": {r["cluster_id"]: {"failures": int(r["failures"]), "rate": float(r["rate"])} for r in rows},
    }


def rates_agreement(args, floor: dict) -> dict:
    """``failcast rates --json`` (not timed, its own process) against the floor's per-cluster
    rates: the same failure counts and rates equal to a relative 1e-9, or what differs."""
    db = args.workdir / args.scale / "warehouse.duckdb"
    out = subprocess.run(
        [sys.executable, "-m", "pipeline", "rates", "--db", str(db), "--json"],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    ).stdout
    ours = {r["cluster_id"]: r for r in json.loads(out)}
    differ = [
        cluster
        for cluster, f in floor["rates"].items()
        if cluster not in ours
        or ours[cluster]["failures"] != f["failures"]
        or not math.isclose(ours[cluster]["rate_per_node_hour"], f["rate"], rel_tol=1e-9)
    ]
    return {
        "clusters": len(floor["rates"]),
        "agree": not differ and len(ours) == len(floor["rates"]),
        "differ": differ,
    }


def measure(stage: str, args) -> dict:
    repeats = 1 if stage in SLOW_STAGES else args.repeats
    runs = [run_stage(stage, args) for _ in range(repeats)]
    result = dict(runs[-1])
    if stage == "floor_asof":
        for r in runs:
            r["wall_s"] = r["process_s"]
    result["wall_s"] = statistics.median(r["wall_s"] for r in runs)
    result["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
    result["repeats"] = repeats
    print(
        f"  {stage}: {result['wall_s']:.2f} s ({result['process_s']:.1f} s process, "
        f"{result['cpu_s']:.1f} s CPU), "
        f"{result['peak_rss_mb']:.0f} MB"
        + (
            f"; the ingest alone {result['ingest_s']:.2f} s, {result['ingest_cpu_s']:.1f} s CPU"
            if "ingest_s" in result
            else ""
        ),
        file=sys.stderr,
        flush=True,
    )
    return result


def machine() -> str:
    import duckdb
    import lifelines
    import pandas as pd

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    mem = subprocess.run(["free", "-h"], capture_output=True, text=True).stdout.splitlines()[1].split()[1]
    return (
        f"{os.cpu_count()} CPUs ({cpu}), {mem} RAM; Python {platform.python_version()}, "
        f"polars {pl.__version__}, duckdb {duckdb.__version__}, numpy {np.__version__}, "
        f"pandas {pd.__version__}, lifelines {lifelines.__version__}"
    )


def table(r: dict, sizes: dict) -> str:
    from bench import fit_bench

    def row(name, stage_or_wall, rss, floor=None, baseline=None, note=""):
        wall = r[stage_or_wall]["wall_s"] if isinstance(stage_or_wall, str) else stage_or_wall
        ratio = f"{wall / floor:.2f}x" if floor else ""
        vs = f"{baseline / wall:.1f}x" if baseline else ""
        return f"| {name} | {wall:.2f} | {rss:.0f} | {ratio} | {vs} | {note} |"

    n = r["naive"]
    ing_rates = r["ingest_canonical"]["wall_s"] + r["rates"]["wall_s"]
    floor = r["floor_csv"]["wall_s"]
    store = r["floor_store"]["wall_s"]
    best = {x["resolution"]: x for x in r["fits"]["resolutions"]}
    agg = best[fit_bench.ANALYSIS_GRID]
    lines = [
        "| stage | wall s | peak RSS MB | failcast / floor | baseline / failcast | notes |",
        "|---|---|---|---|---|---|",
        row(
            "floor: DuckDB count(*) of incidents.csv + inventory.csv",
            "floor_csv",
            r["floor_csv"]["peak_rss_mb"],
            note=f"{r['floor_csv']['rows']:,} rows, {sizes['csv_mb']:.0f} MB",
        ),
        row(
            "floor: DuckDB typed read_csv of both files written into a DuckDB file",
            "floor_store",
            r["floor_store"]["peak_rss_mb"],
            floor,
            note=f"the least a warehouse must do; failcast ingest + rates = {ing_rates / store:.1f}x this",
        ),
        row(
            "failcast ingest (canonical, incl. incident rebuild)",
            "ingest_canonical",
            r["ingest_canonical"]["peak_rss_mb"],
            floor,
            note=f"{r['ingest_canonical']['incidents']:,} incidents",
        ),
        row(
            "failcast rates (the command in-process, its imports included)",
            "rates",
            r["rates"]["peak_rss_mb"],
            floor,
        ),
        row(
            "failcast lemons (the command in-process, its imports included)",
            "lemons",
            r["lemons"]["peak_rss_mb"],
            floor,
        ),
        row(
            "analysis.analyze (what fit, the report and run compute; imports included)",
            "analyze",
            r["analyze"]["peak_rss_mb"],
            floor,
            note=f"{r['analyze']['interruptions']:,} interruptions",
        ),
        row(
            "**failcast ingest + rates**",
            ing_rates,
            max(r["ingest_canonical"]["peak_rss_mb"], r["rates"]["peak_rss_mb"]),
            floor,
            n["read_s"] + n["loops_s"],
            note="target <= 3x floor",
        ),
        row(
            "naive: pandas read_csv + per-node loops",
            n["read_s"] + n["loops_s"],
            n["peak_rss_mb"],
            note=f"read {n['read_s']:.1f} s, loops {n['loops_s']:.1f} s (1 run)",
        ),
    ]
    for small in ("_small", ""):
        f, g = r[f"floor_log{small}"], r[f"ingest_log{small}"]
        lines += [
            row(
                f"floor: DuckDB count(*) of kernel log as lines ({g['mb']:.0f} MB)",
                f"floor_log{small}",
                f["peak_rss_mb"],
                note=f"{f['lines']:,} lines",
            ),
            row(
                f"failcast ingest kernel log ({g['mb']:.0f} MB)",
                f"ingest_log{small}",
                g["peak_rss_mb"],
                f["wall_s"],
                note=f"{g['xid_events']:,} XID events, {g['mb'] / g['wall_s']:.0f} MB/s",
            ),
        ]
    lines += [
        row(
            "failcast fits: gaps + relative-grid aggregate + Weibull fit",
            r["fits"]["gaps_s"] + agg["aggregate_s"] + agg["aggregated_fit_s"],
            r["fits"]["peak_rss_mb"],
            baseline=n["lifelines_s"],
            note=f"{r['fits']['gaps']:,} gaps -> {agg['unique_rows']:,} rows; same-data raw fit "
            f"{agg['raw_fit_s']:.1f} s ({agg['speed_up']:.0f}x), max rel diff {agg['max_rel_diff']:.1e}",
        ),
        row(
            "naive: lifelines WeibullFitter on every raw gap",
            n["lifelines_s"],
            n["peak_rss_mb"],
            note=f"{n['gaps']:,} gaps (1 run)",
        ),
        row(
            "failcast projection (10 000 MC runs, 16 384 instances, 90 days)",
            "projection",
            r["projection"]["peak_rss_mb"],
            note="target < 10 s",
        ),
        row(
            "failcast report: analyze + write_report",
            "report",
            r["report"]["peak_rss_mb"],
            note=f"analyze {r['report']['analyze_s']:.1f} s, write {r['report']['write_report_s']:.1f} s, "
            f"HTML {r['report']['html_mb']:.2f} MB (target < 5 MB)",
        ),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=SCALES, default="small")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/failcast-bench"))
    parser.add_argument("--stage", choices=STAGES, help=argparse.SUPPRESS)
    parser.add_argument("--only", nargs="*", choices=STAGES, help="run only these stages")
    parser.add_argument("--keep", action="store_true", help="keep the generated data in --workdir")
    parser.add_argument(
        "--rows", type=int, help="size knob: a fleet with about N canonical incident rows (overrides --scale)"
    )
    parser.add_argument(
        "--intervals-per-node",
        type=int,
        metavar="K",
        help="availability-trace shape (bench/availability.py): --rows N rows in N / 2K nodes, K "
        "up-intervals each ending in a failure per node; default N = 598000 (1,300 nodes x 230)",
    )
    args = parser.parse_args()
    if args.intervals_per_node:
        args.rows = args.rows or 598_000
        args.scale = f"avail{args.intervals_per_node}-rows-{args.rows}"
        SCALES[args.scale] = {"rows": args.rows, "intervals_per_node": args.intervals_per_node}
    elif args.rows:
        args.scale = f"rows-{args.rows}"
        SCALES[args.scale] = rows_scale(args.rows)
    if args.stage:
        paths = generate(args.workdir, args.scale)
        facts, elapsed = _timed(
            lambda: STAGES[args.stage](paths, args.workdir / args.scale / "warehouse.duckdb")
        )
        print(json.dumps({"wall_s": elapsed, **facts}))
        return
    print(machine(), file=sys.stderr)
    _, t_gen = _timed(lambda: generate(args.workdir, args.scale))
    paths = generate(args.workdir, args.scale)
    sizes = {"csv_mb": (paths["incidents"].stat().st_size + paths["inventory"].stat().st_size) / 1e6}
    print(
        f"inputs ready in {t_gen:.0f} s: "
        + ", ".join(f"{p.name} {p.stat().st_size / 1e6:.0f} MB" for p in paths.values()),
        file=sys.stderr,
    )
    stages = args.only or [s for s in STAGES if s not in ON_REQUEST]
    if "ingest_incremental" in stages:
        increment(paths)
    results = {s: measure(s, args) for s in stages}
    if "floor_asof" in results and "rates" in results:
        results["rates_agreement"] = rates_agreement(args, results["floor_asof"])
        print(f"  failcast rates against the floor: {results['rates_agreement']}", file=sys.stderr)
    (args.workdir / f"results-{args.scale}.json").write_text(json.dumps(results, indent=1))
    if not args.only:
        print(table(results, sizes))
    if not args.keep:
        shutil.rmtree(args.workdir / args.scale)


if __name__ == "__main__":
    main()
