"""A/B check for ingest changes: the same inputs ingested by two code trees give the same warehouse.

    /work/main/.venv/bin/python -m bench.ab_warehouse --base /work/main --out /tmp/ab [--fleet DIR ...]

Writes edge-case inputs into ``--out`` (duplicates within a file, across batches and against an
earlier file, rows out of time order, blank lines, CRLF, a quoted newline, a BOM, ``.gz``, JSONL,
Parquet, rejects of every reason, a naive-time file read in another time zone) and the sample
fleet in ``data/sample``; each ``--fleet`` directory adds its ``inventory.csv`` and
``incidents.csv`` (e.g. a bench fleet). Each tree ingests them in a child process
(``PYTHONPATH=tree``) twice: with the default batch size and with batches of 3 rows, so that every
row boundary case crosses batches. Then every table is compared with ``EXCEPT ALL`` both ways
(the columns that record when a row was written are left out) and the printed summaries (counts
and notes) must match; exit status 1 on any difference.
"""

from __future__ import annotations

import argparse
import gzip
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl

ROOT = Path(__file__).resolve().parent.parent
HEADER = "timestamp,cluster_id,node_id,category,gpu_index,job_id,message,resolved_at"
TABLES = ("ingested_files", "events", "incidents", "inventory", "rejects", "jobs")
WHEN = {"ingested_at_utc", "rejected_at_utc"}

_CHILD = """
import sys
from pathlib import Path
from pipeline import warehouse
from pipeline.ingest import ingest_files, parse_category_map
try:  # the canonical reader: pipeline.readers since issue 30, pipeline.ingest before
    from pipeline.readers import canonical
except ImportError:
    from pipeline.ingest import canonical
try:  # a tree from before ReaderOptions takes the time zone as a keyword
    from pipeline.ingest import ReaderOptions
except ImportError:
    ReaderOptions = None
db, batch_rows, groups = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
if batch_rows:
    canonical.ingest_canonical.__kwdefaults__["batch_rows"] = batch_rows
con = warehouse.connect(db)
for group in groups:
    zone, entries, files, *fmt = group.split("|")
    cmap = parse_category_map(entries.split(";") if entries else [])
    paths = [Path(f) for f in files.split(",")]
    named = {"fmt": fmt[0]} if fmt else {}
    options = None if ReaderOptions is None else ReaderOptions(timezone=zone, **named)
    reader = {"timezone": zone} if options is None else {"options": options}
    for s in ingest_files(con, paths, category_map=cmap, **reader):
        print(s.path, s.rows_read, s.rows_ingested, s.rows_duplicate, s.rows_rejected, s.notes)
con.close()
"""


def edge_inputs(out: Path) -> list[str]:
    """Groups of files, one ``ingest_files`` call each, as ``TIMEZONE|CATEGORY MAP|file,file``
    (map entries separated by ``;``), optionally ``|FORMAT`` (else detected)."""
    out.mkdir(parents=True, exist_ok=True)
    categories = ("gpu_memory", "Faulty GPU", "XID 79", "Cosmic Rays")
    rows = [
        f"2026-03-02T04:{i % 60:02d}:00Z,c1,n{i % 7},{categories[i % 4]},{i % 2},j{i},m{i % 60},"
        for i in range(150)
    ]
    shuffled = rows[75:] + rows[:75]  # out of time order: later batches hold earlier times
    bad = [
        "yesterday,c1,n1,gpu_memory,0,j,m,",
        ",c1,n1,gpu_memory,0,j,m,",
        "2026-03-02T04:00:00Z,,n1,gpu_memory,0,j,m,",
        "2026-03-02T04:00:00Z,c1,,gpu_memory,0,j,m,",
        "2026-03-02T04:00:00Z,c1,n1, ,0,j,m,",
        "2026-03-02T04:00:00Z,c1,n1,gpu_memory,x,j,m,",
        "2026-03-02T04:00:00Z,c1,n1,gpu_memory,0,j,m,soon",
        "2026-03-02T04:00:00Z,c1,n1,gpu_memory,0,j,m,2026-03-01T00:00:00Z",
    ]
    body = shuffled[:40] + [""] + bad[:4] + shuffled[40:] + rows[:30] + bad[4:] + [""]
    (out / "a.csv").write_text("\ufeff" + "\r\n".join([HEADER, *body]) + "\r\n")
    quoted = f'2026-03-02T05:00:00Z,c1,n1,gpu_memory,0,j,"two\nlines",\n{rows[3]}\n'
    (out / "b.csv.gz").write_bytes(gzip.compress(f"{HEADER}\n{rows[0]}\n{quoted}{bad[0]}\n".encode()))
    frame = pl.read_csv((out / "a.csv"), infer_schema=False).filter(pl.col("timestamp").is_not_null())
    frame.with_columns(site=pl.lit("x")).write_ndjson(out / "c.jsonl")
    frame.with_columns(message=pl.col("message") + "p").write_parquet(out / "d.parquet")
    (out / "naive.csv").write_text(f"{HEADER}\n2026-03-08 01:30:00,c2,n1,gpu_memory,0,j,m,\n")
    (out / "inventory.csv").write_text(
        "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n"
        + "".join(f"c1,n{i},p5,8,2026-01-01,\n" for i in range(7))
    )
    sample = ROOT / "data" / "sample"
    files = [out / n for n in ("inventory.csv", "a.csv", "b.csv.gz", "c.jsonl", "d.parquet")]
    for name, day in (("e.csv", 9), ("f.csv", 10)):
        (out / name).write_text(
            HEADER + "".join(f"\n2026-03-{day}T00:00:00Z,c1,n1,{c},0,j,m," for c in categories)
        )
    mapped = "UTC|Cosmic Rays=other:noninterrupting;Faulty GPU=gpu_memory|"
    return [
        "UTC||" + ",".join(map(str, files)),
        f"America/Los_Angeles||{out / 'naive.csv'}",
        f"UTC||{sample / 'inventory.csv'},{sample / 'incidents.csv'}",
        f"{mapped}{out / 'e.csv'}",
        f"{mapped}{out / 'f.csv'}",  # the same map again: its rows keep the classes they were stored with
    ]


def ingest(tree: Path, db: Path, batch_rows: int, groups: list[str]) -> str:
    """The per-file summaries (counts and notes) the tree printed."""
    for path in (db, db.with_name(db.name + ".wal")):
        path.unlink(missing_ok=True)
    env = {"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}
    command = [sys.executable, "-c", _CHILD, str(db), str(batch_rows), *groups]
    return subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout


def differences(a: Path, b: Path) -> dict[str, tuple[int, int, int]]:
    """Per table: rows, rows only in ``a``, rows only in ``b``."""
    con = duckdb.connect()
    con.execute(f"ATTACH '{a}' AS a (READ_ONLY); ATTACH '{b}' AS b (READ_ONLY)")
    found = {}
    for name in TABLES:
        described = con.sql(f"SELECT column_name FROM (DESCRIBE a.{name})").fetchall()  # noqa: S608
        cols = ", ".join(f'"{c}"' for (c,) in described if c not in WHEN)
        query = "SELECT {cols} FROM {x}.{name} EXCEPT ALL SELECT {cols} FROM {y}.{name}"
        a_only, b_only = (query.format(cols=cols, x=x, y=y, name=name) for x, y in ("ab", "ba"))
        only_a, only_b, rows = con.sql(
            f"SELECT (SELECT count(*) FROM ({a_only})), (SELECT count(*) FROM ({b_only})),"  # noqa: S608
            f" (SELECT count(*) FROM a.{name})"
        ).fetchall()[0]
        found[name] = (rows, only_a, only_b)
    con.close()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the other code tree (e.g. /work/main)")
    parser.add_argument("--out", type=Path, required=True, help="folder for the inputs and warehouses")
    parser.add_argument("--fleet", type=Path, nargs="*", default=[], help="folders with a bench fleet")
    parser.add_argument(
        "--fixtures",
        type=Path,
        nargs="*",
        default=[],
        help="folders of inputs in any format (e.g. the ingest tests' fixtures): each one group, its files "
        "in name order, formats detected",
    )
    parser.add_argument(
        "--named", nargs="*", default=[], metavar="FORMAT=PATH", help="an input read with --format FORMAT"
    )
    args = parser.parse_args()
    groups = edge_inputs(args.out / "inputs")
    groups += ["UTC||" + ",".join(str(f) for f in sorted(d.iterdir())) for d in args.fixtures]
    groups += [f"UTC||{path}|{fmt}" for fmt, _, path in (n.partition("=") for n in args.named)]
    groups += [f"UTC||{f / 'inventory.csv'},{f / 'incidents.csv'}" for f in args.fleet]
    same = True
    for batch_rows in (0, 3):
        if batch_rows and args.fleet:  # 3-row batches of a bench fleet would take hours
            groups = groups[: len(groups) - len(args.fleet)]
        dbs = [args.out / f"{side}-{batch_rows}.duckdb" for side in ("this", "base")]
        summaries = [
            ingest(tree, db, batch_rows, groups) for tree, db in zip((ROOT, args.base), dbs, strict=True)
        ]
        same &= summaries[0] == summaries[1]
        print(summaries[0] if summaries[0] == summaries[1] else "summaries differ:\n" + "\n".join(summaries))
        for name, (rows, only_this, only_base) in differences(*dbs).items():
            same &= only_this == only_base == 0
            label = f"batches of {batch_rows} rows" if batch_rows else "default batches"
            print(f"{label}: {name}: {rows} rows, {only_this} only here, {only_base} only in base")
    print("same warehouse" if same else "DIFFERENT")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
