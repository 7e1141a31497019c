"""Before/after equality of what the statistics commands print: two source trees, one warehouse.

    /work/main/.venv/bin/python -m bench.compare_outputs --before /work/main --after . \
        --db /tmp/x/1m.duckdb [--db ...] [--sample]

Runs each command of :data:`COMMANDS` (``failcast rates`` text and ``--json``, ``--by node_id``,
``--period month``, the other views, ``lemons``, ``repairs``, ``fit --json``) and a dump of every
number ``analysis.analyze`` returns (what the report and ``failcast run`` show) once with
``PYTHONPATH`` at each tree, and compares stdout, stderr and exit code. ``--sample`` adds two
warehouses built in a temporary folder: the bundled sample, and the sample with an extra input
column ``level`` (so ``--by level`` reads attributes); with ``--ingest-each`` each tree builds its
own and reads it (for ingest changes), as ``--db-pair BEFORE AFTER`` does for warehouses each tree
built (bench/ab_warehouse.py leaves them in its ``--out``). Prints one line per command; exits 1 on any
difference beyond a relative 1e-9 in a number (:func:`close`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl

COMMANDS = (
    ["rates"],
    ["rates", "--json"],
    ["rates", "--by", "node_id", "--json"],
    ["rates", "--by", "cluster_id", "--by", "class"],
    ["rates", "--period", "month", "--json"],
    ["rates", "--period", "month"],
    ["rates", "--by", "size_bucket", "--interval", "exact", "--json"],
    ["rates", "--all-categories", "--json"],
    ["rates", "--exposure", "calendar", "--json"],
    ["rates", "--view", "shares", "--json"],
    ["rates", "--view", "trend", "--json"],
    ["rates", "--view", "jobs", "--json"],
    ["rates", "--interruption-window", "0", "--json"],
    ["lemons", "--json"],
    ["lemons"],
    ["lemons", "--interruption-window", "0", "--json"],
    ["repairs", "--json"],
    ["repairs"],
    ["fit", "--json"],
    ["fit"],
    ["fit", "--interruption-window", "0", "--first-gap", "keep", "--json"],
    ["backtest", "--json"],
    ["project", "--instances", "512", "--gpu-hours", "1000000", "--price-per-gpu-hour", "2", "--json"],
    ["spares", "--instances", "512", "--gpu-hours", "1000000", "--price-per-gpu-hour", "2", "--json"],
    ["metrics"],
)

# one interpreter per tree and warehouse: each command through click (exit code, stdout, stderr),
# then every field of analyze()'s result (frames in full but for the times the warehouse was written,
# fitted models' public ``*_`` values)
DRIVER = """
import dataclasses, json, sys
import polars as pl
from click.testing import CliRunner
from pipeline.cli import main
db, commands = sys.argv[1], json.loads(sys.argv[2])
out = []
for command in commands:
    done = CliRunner().invoke(main, [*command, "--db", db])
    out.append([done.exit_code, done.stdout, done.stderr])
from pipeline import analysis, warehouse
result = analysis.analyze(warehouse.connect(db, read_only=True))
def show(value):
    if isinstance(value, pl.DataFrame):  # less when the warehouse was written: not a result
        value = value.drop("ingested_at_utc", "rejected_at_utc", strict=False)
        return [value.columns, [[repr(v) for v in row] for row in value.rows()]]
    if isinstance(value, dict):
        return {k: show(v) for k, v in value.items()}
    if hasattr(value, "__dict__") and not isinstance(value, type):
        return {k: show(v) for k, v in sorted(vars(value).items()) if k.endswith("_")}
    return repr(value)
# options and before_window came with AnalysisOptions (issue 30, h30a): the window itself, not a number
skip = {"incidents", "options", "before_window"}
# what the report, the metrics and a job's rate show of the repairs and the rates by instance type
# (issue 27, h27c), from a tree of either shape: RepairAnalysis' aggregates and instance_type_rates,
# or the outage, interruption and uptime rows they replaced
skip |= {"interruptions", "rate_exposure", "exposure", "instance_type_rates"}
from pipeline.report import repairs as report_repairs
repairs = result.repairs
views = {"repair_total": repairs.total if hasattr(repairs, "total") else repairs.summary().row(0, named=True)}
for by in ("cluster_id", "category"):
    name = f"by_{by.removesuffix('_id')}"
    views[f"repairs_{name}"] = getattr(repairs, name) if hasattr(repairs, name) else repairs.summary([by])
if repairs.times is not None:
    views["repair_curves"] = report_repairs.repair_curve_chart(repairs).to_dict()["datasets"]
    views["repair_note"] = report_repairs.repair_note(repairs)
types = warehouse.table(warehouse.connect(db, read_only=True), "inventory")["instance_type"].unique().sort()
for kind in (None, *types):
    for n in (8, 64, 512, 4096, 16384):
        model = analysis.failure_model_for(result, n, instance_type=kind)
        views[f"job_rate {kind} {n}"] = repr(model)
views = {name: show(value) for name, value in views.items()}
# the typed parts (issue 30 item 5) under the flat names they had before: a tree of either shape
parts = {
    "jobs": {"interruptions": "job_interruptions", "backtest": "job_backtest",
             "recoveries": "job_recoveries", "badput": "badput"},
    "repairs": {"times": "repair_times"},
    "nodes": {"rates": "rates_by_node", "lemons": "lemons", "dispersion_test": "dispersion_test"},
    "rates": {
        "overall": "rates_overall", "by_cluster": "rates_by_cluster", "by_category": "rates_by_category",
        "by_month": "rates_by_month", "by_size_bucket": "rates_by_size_bucket",
        "category_shares": "category_shares", "trend_tests": "trend_tests", "cluster_mtbf": "cluster_mtbf",
        "interval_method": "interval_method"},
    "fits": {name: name for name in (
        "node_fits", "best_family", "kaplan_meier", "nelson_aalen", "node_durations", "cluster_durations",
        "cluster_kaplan_meier", "first_gap", "count_dispersion", "scaling", "scaling_projection",
        "size_regression", "size_regression_projection")},
}
# the counted failures as the report draws them (issue 27, h27a): the aggregates of a tree of either
# shape (CountedFailures, or computed from the rows failures_counted, failure_operating_times)
skip |= {"counted", "failures_counted", "failure_operating_times"}
if hasattr(result, "counted"):
    mcf, duane, renamed = result.counted.mcf, result.counted.duane_points, result.counted.renamed_categories
else:
    from pipeline import transform
    mcf = transform.mean_cumulative_function(result.failures_counted, result.exposure)
    duane = transform.duane_points(result.failure_operating_times, result.rates.trend_tests)
    renamed = (result.failures_counted.filter(pl.col("category") != pl.col("failure_class"))
               .group_by("category", "failure_class").agg(failures=pl.len())
               .sort("failures", "category", "failure_class", descending=[True, False, False]))
fields = {"mcf": show(mcf), "duane_points": show(duane), "renamed_categories": show(renamed)}
for f in dataclasses.fields(result):
    value = getattr(result, f.name)
    if f.name in parts:
        fields.update({old: show(getattr(value, new)) for new, old in parts[f.name].items()})
    elif f.name not in skip:
        fields[f.name] = show(value)
out.append([0, json.dumps({**fields, **views}, indent=0, sort_keys=True), ""])
print(json.dumps(out))
"""


def run(tree: Path, args: list[str]) -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=tree)
    return done.returncode, done.stdout, done.stderr


def outputs(tree: Path, db: Path, commands: list[list[str]]) -> list[list]:
    """[exit code, stdout, stderr] of each command, then of the analyze dump, run by ``tree``."""
    code, out, err = run(tree, ["-c", DRIVER, str(db), json.dumps(commands)])
    if code:
        raise SystemExit(f"{tree} on {db}: {err}")
    return json.loads(out.splitlines()[-1])


def sample_inputs(tree: Path, folder: Path) -> dict[str, list[Path]]:
    """The bundled sample of ``tree``, and the sample with an attribute column ``level``."""
    sample = tree.resolve() / "data" / "sample"
    folder.mkdir(parents=True, exist_ok=True)
    incidents = pl.read_csv(sample / "incidents.csv", infer_schema_length=0)
    levels = pl.Series(["critical", "major", "minor"])[pl.int_range(incidents.height, eager=True) % 3]
    with_level = folder / "incidents-level.csv"
    incidents.with_columns(level=levels).write_csv(with_level)
    return {
        "sample": [sample / "inventory.csv", sample / "incidents.csv"],
        "level": [sample / "inventory.csv", with_level],
    }


def sample_warehouses(tree: Path, inputs: dict[str, list[Path]], folder: Path) -> list[Path]:
    """The ``inputs`` ingested by ``tree`` into warehouses in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, files in inputs.items():
        db = folder / f"{name}.duckdb"
        code, _, err = run(tree, ["-m", "pipeline", "ingest", *map(str, files), "--db", str(db), "-q"])
        if code:
            raise SystemExit(f"ingest of {name} failed: {err}")
        out.append(db)
    return out


FLOAT = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?")
TOLERANCE = 1e-9


def close(before: list, after: list) -> bool:
    """The same text with every decimal number within ``TOLERANCE`` (relative). Polars'
    multi-threaded group-by sums floats in an order that can change from run to run (main's own
    ``rates --view trend`` differs in the 16th digit between two runs; an interval's end computed
    from such a sum in the 12th), so the last bits are not a difference."""
    return all(_close(str(x), str(y)) for x, y in zip(before, after, strict=True))


def _close(before: str, after: str) -> bool:
    numbers = FLOAT.findall(before), FLOAT.findall(after)
    if FLOAT.split(before) != FLOAT.split(after) or len(numbers[0]) != len(numbers[1]):
        return False
    return all(math.isclose(float(x), float(y), rel_tol=TOLERANCE) for x, y in zip(*numbers, strict=True))


def largest_difference(before: list, after: list) -> float:
    """The largest relative difference between the numbers of two outputs that are :func:`close`."""
    pairs = [
        (float(x), float(y))
        for b, a in zip(before, after, strict=True)
        for x, y in zip(FLOAT.findall(str(b)), FLOAT.findall(str(a)), strict=True)
    ]
    return max((abs(x - y) / max(abs(x), abs(y)) for x, y in pairs if x != y), default=0.0)


def first_difference(before: str, after: str) -> str:
    for i, (x, y) in enumerate(zip(before.splitlines(), after.splitlines(), strict=False)):
        if not _close(x, y):
            return f"line {i}: before {x[:200]!r}, after {y[:200]!r}"
    return f"lengths {len(before)} and {len(after)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--db", type=Path, action="append", default=[])
    parser.add_argument(
        "--db-pair",
        type=Path,
        nargs=2,
        action="append",
        default=[],
        metavar=("BEFORE_DB", "AFTER_DB"),
        help="warehouses each tree built from the same inputs (bench/ab_warehouse.py): each reads its own",
    )
    parser.add_argument("--sample", action="store_true")
    parser.add_argument(
        "--ingest-each",
        action="store_true",
        help="with --sample: each tree ingests the sample and reads its own warehouse (ingest changes)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pairs = [(db, db) for db in args.db] + [tuple(pair) for pair in args.db_pair]
        if args.sample:
            inputs = sample_inputs(args.before, Path(tmp))
            built = sample_warehouses(args.before, inputs, Path(tmp) / "before")
            after = sample_warehouses(args.after, inputs, Path(tmp) / "after") if args.ingest_each else built
            pairs = [*zip(built, after, strict=True), *pairs]
        failed = 0
        for db, db_after in pairs:
            commands = [list(c) for c in COMMANDS]
            if db.name.startswith("level"):
                commands.append(["rates", "--by", "level", "--json"])
            before = outputs(args.before.resolve(), db, commands)
            after = outputs(args.after.resolve(), db_after, commands)
            for command, b, a in zip([*commands, ["analyze (every field)"]], before, after, strict=True):
                verdict = "same" if b == a else "DIFFERENT"
                if b != a and close(b, a):
                    largest = largest_difference(b, a)
                    verdict = f"same within {TOLERANCE:g} (largest relative difference {largest:.1e})"
                failed += verdict == "DIFFERENT"
                print(f"{verdict}  {db.name}: {' '.join(command)} (exit {b[0]})")
                for label, x, y in zip(("exit", "stdout", "stderr"), b, a, strict=True):
                    if x != y:
                        print(f"    {label} differs: {first_difference(str(x), str(y))}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
