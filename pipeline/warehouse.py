"""The DuckDB warehouse: the one place that opens the database file and owns its schema.

All times are stored as naive ``TIMESTAMP`` values in UTC (columns end in ``_utc``). Every write
of one input file happens inside one transaction (see :func:`transaction`), so an interrupted
run leaves the warehouse as it was before that file.

The tables, what each row is and their DDL: :mod:`pipeline.warehouse_schema`, which only this
module imports (the schema is applied by :func:`connect`; every other module reads and writes
through a connection from here).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

import duckdb
import polars as pl

from pipeline.warehouse_schema import DDL

DEFAULT_DB_PATH = Path("data/failcast.duckdb")

UNKNOWN_CLUSTER = "unknown"
JOB_SYMPTOMS_FORMAT = "training-log"
"""Events of this source_format are what a job saw (NCCL timeouts, restarts), not node faults: they
stay in ``events`` for the measured recovery times and never become incidents (the node's own
records count the fault; counting the job's view too would count it twice)."""


MEMORY_ENV = "FAILCAST_DUCKDB_MEMORY_MB"
"""Environment variable that caps DuckDB's memory in every connection (see :func:`connect`)."""
DEFAULT_MEMORY_MB = 1024
"""DuckDB's memory cap when :data:`MEMORY_ENV` is unset. A first ingest of 10 M canonical rows
peaks at 1.26 GB under it against 2.83 GB uncapped, for 8% more CPU (bench/RESULTS.md, "Quiet
machine, end of 2026-12-04"): since the rebuild and the classified insert (issue 18) little has
to spill. A nightly job shares its host; 0 lifts the cap (DuckDB then takes up to 80% of RAM)."""


DUCKDB_MAGIC = b"DUCK"  # bytes 8-11 of every DuckDB database file (its storage header)


def _check_duckdb_file(db_path: Path) -> None:
    """One clear error for a path that is not a warehouse (a CSV passed as ``--db`` by mistake, a
    directory, a FIFO), before DuckDB's own message or, for a FIFO, a read that never returns."""
    if db_path.is_dir():
        raise ValueError(f"{db_path}: is a directory; --db takes a DuckDB warehouse file")
    if db_path.exists() and not db_path.is_file():
        raise ValueError(f"{db_path}: not a regular file; --db takes a DuckDB warehouse file")
    if db_path.is_file() and db_path.stat().st_size:
        with db_path.open("rb") as f:
            magic = f.read(12)[8:]
        if magic != DUCKDB_MAGIC:
            raise ValueError(
                f"{db_path}: not a DuckDB warehouse file; an input file is ingested with "
                f"'failcast ingest {db_path} --db WAREHOUSE.duckdb'"
            )


def connect(
    db_path: Path | str = DEFAULT_DB_PATH, *, read_only: bool = False, memory_limit_mb: int | None = None
):
    """Open (creating if needed) the warehouse file with its schema in place.

    ``memory_limit_mb`` (default: environment variable ``FAILCAST_DUCKDB_MEMORY_MB``, else
    :data:`DEFAULT_MEMORY_MB`) caps DuckDB's memory; past it DuckDB spills to ``<warehouse>.tmp``.
    0 means no cap.
    """
    memory_limit_mb = _memory_limit_mb(memory_limit_mb)
    db_path = Path(db_path)
    if read_only and not db_path.exists():
        raise FileNotFoundError(
            f"{db_path}: no warehouse here; run 'failcast ingest ... --db {db_path}' first"
        )
    _check_duckdb_file(db_path)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    return _prepared(duckdb.connect(str(db_path), read_only=read_only), read_only, memory_limit_mb or None)


def _memory_limit_mb(memory_limit_mb: int | None) -> int:
    """The cap in MB (0: none): ``memory_limit_mb``, else :data:`MEMORY_ENV`, else the default."""
    source = "memory_limit_mb"
    if memory_limit_mb is None:
        text = os.environ.get(MEMORY_ENV, "").strip()
        source = f"{MEMORY_ENV}={text!r}"
        memory_limit_mb = (
            int(text) if text.isascii() and text.isdigit() else -1 if text else DEFAULT_MEMORY_MB
        )
    if memory_limit_mb != 0 and memory_limit_mb < 64:
        raise ValueError(f"{source}: expected whole megabytes, at least 64 (e.g. 4096), or 0 for no cap")
    return memory_limit_mb


@contextmanager
def computing(memory_limit_mb: int | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """An empty in-memory DuckDB to run queries on Polars frames (the interval rules of
    :class:`pipeline.transform.Match`), under the warehouse's cap (as :func:`connect`) and
    spilling past it to a temporary directory removed at the end; closed at the end.

    Why: an in-memory DuckDB without a cap takes up to 80% of the machine's memory and cannot
    spill (issue 27: the match of 5 M failures to 5 M intervals beside the analysis' frames)."""
    limit = _memory_limit_mb(memory_limit_mb)
    with tempfile.TemporaryDirectory(prefix="failcast-duckdb-") as spill:
        con = _prepared(duckdb.connect(":memory:"), True, limit or None)
        try:
            con.execute("SET temp_directory = $spill", {"spill": spill})
            yield con
        finally:
            con.close()


def scratch():
    """An empty in-memory warehouse with the schema, one thread: ``failcast extract`` parses each
    input into one of its own on a worker (the workers are the parallelism) and writes what the
    reader stored to the lake."""
    con = _prepared(duckdb.connect(":memory:"), False, None)
    con.execute("SET threads = 1")
    return con


def _prepared(con, read_only: bool, memory_limit_mb: int | None):
    con.execute("SET TimeZone = 'UTC'")
    # DuckDB draws a progress bar on stdout for queries over 2 s, even when stdout is a pipe: it
    # would corrupt `--json` output and cron logs. failcast reports progress itself. In Jupyter
    # without ipywidgets DuckDB refuses the change, and draws no bar there either.
    with suppress(duckdb.InvalidInputException):
        con.execute("SET enable_progress_bar = false")
    if memory_limit_mb is not None:
        con.execute("SET memory_limit = $limit", {"limit": f"{memory_limit_mb}MB"})
    if not read_only:
        con.execute(DDL)
        if _not_null(con, "events", "interrupting"):  # readers may leave it to the taxonomy step
            con.execute("ALTER TABLE events ALTER COLUMN interrupting DROP NOT NULL")
    return con


READ_SHARE = 0.25
"""Share of DuckDB's memory cap that :func:`reading` leaves DuckDB while analyses read rows into
Polars (bench/RESULTS.md, issue 27)."""
_UNITS = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


# while analyses read: DuckDB's allocator hands memory it freed back to the system at once (by
# default it keeps up to 128 MB per thread cache and more for later queries)
_READ_ALLOCATOR = {"allocator_flush_threshold": "4MiB", "allocator_background_threads": True}
_SET = {
    "memory_limit": "SET memory_limit = $value",
    "allocator_flush_threshold": "SET allocator_flush_threshold = $value",
    "allocator_background_threads": "SET allocator_background_threads = $value",
}


@contextmanager
def reading(con, share: float = READ_SHARE) -> Iterator[None]:
    """DuckDB's memory cap lowered to ``share`` of itself (at least 64 MB) while the block runs,
    and the memory its queries free returned to the system, then both restored.

    Why: rows read into Polars live outside DuckDB's cap, and DuckDB keeps what its cap allows
    for itself after a read (the sorted rows, its cache of the table's blocks): reading 3.4 M
    failure rows sorted took 1.09 GB under the default 1 GB cap and 0.61 GB under 256 MB, for the
    same CPU (their sort spills past it). An analysis holds its frames in Polars, so DuckDB's part
    of the same budget is kept small; raising ``FAILCAST_DUCKDB_MEMORY_MB`` raises it too. What a
    query frees stays with DuckDB's allocator unless flushed: after the outages of 0.34 M
    interruptions (bench/RESULTS.md, issue 30) 180 MB of the process's RSS, 35 MB flushed.
    """
    before = {
        name: con.execute("SELECT current_setting($name)", {"name": name}).fetchall()[0][0]
        for name in ("memory_limit", *_READ_ALLOCATOR)
    }
    number, _, unit = before["memory_limit"].partition(" ")
    lowered = max(float(number) * _UNITS.get(unit, 0) * share, 64 * 2**20)
    settings = dict(_READ_ALLOCATOR)
    if _UNITS.get(unit) and lowered < float(number) * _UNITS[unit]:
        settings["memory_limit"] = f"{lowered / 2**20:.0f}MiB"
    for name, value in settings.items():
        con.execute(_SET[name], {"value": value})
    try:
        yield
    finally:
        for name in settings:
            con.execute(_SET[name], {"value": before[name]})


def _not_null(con, table: str, column: str) -> bool:
    return con.sql(
        "SELECT is_nullable = 'NO' FROM information_schema.columns WHERE table_name = ? AND column_name = ?",
        params=[table, column],
    ).fetchall() == [(True,)]


@contextmanager
def serial_appends(con) -> Iterator[duckdb.DuckDBPyConnection]:
    """One DuckDB thread while the block appends to a table in many statements, and a second
    connection (a cursor with ``con``'s time zone) for work on another Python thread meanwhile.

    On several threads each INSERT leaves every thread's last row group partly filled (DuckDB
    PhysicalBatchInsert): a 3 M-row file stored in 250 k-row batches left 38 row groups where 25
    hold it, and the checkpoint that ``close()`` runs then rewrites them (DuckDB's vacuum merges
    partial row groups): 1.5 s on one core. One thread appends each statement's rows where the
    last one stopped, so the checkpoint finds whole row groups. ``threads`` is the database's
    setting, not the connection's, so queries on the cursor run on one thread too: the caller runs
    them beside ``con``'s to keep both cores busy (see :mod:`pipeline.readers.canonical`)."""
    threads = con.sql("SELECT current_setting('threads')").fetchall()[0][0]
    timezone = con.sql("SELECT current_setting('TimeZone')").fetchall()[0][0]
    cursor = con.cursor()
    try:
        cursor.execute("SET TimeZone = $tz", {"tz": timezone})
        con.execute("SET threads = 1")
        yield cursor
    finally:
        cursor.close()
        con.execute("SET threads = $threads", {"threads": threads})


@contextmanager
def transaction(con) -> Iterator[None]:
    """All-or-nothing: commit on success, roll back on any exception (including Ctrl-C)."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


# Nodes seen anywhere (incidents, job node lists) become estimated inventory rows in service from
# the first observation of the whole fleet onwards (open-ended: exposure runs to the observation
# end). Biased: nodes that never appear in any input are missing, so exposure is too low and rates
# too high; with sacct jobs most working nodes appear. Only while no real inventory row exists.
_ESTIMATE_INVENTORY = """
INSERT INTO inventory (cluster_id, node_id, instance_type, gpus_per_node, in_service_from_utc,
                       in_service_to_utc, file_id, line, estimated)
WITH seen AS (
    SELECT cluster_id, node_id, timestamp_utc AS t FROM incidents
    UNION ALL
    SELECT coalesce(cluster_id, $unknown), unnest(nodes), coalesce(start_utc, end_utc) FROM jobs
)
SELECT cluster_id, node_id, 'unknown (estimated)', $gpus, (SELECT min(t) FROM seen), NULL, 0, 0, true
FROM seen
WHERE NOT EXISTS (SELECT 1 FROM inventory WHERE NOT estimated)
GROUP BY cluster_id, node_id
"""


def estimate_inventory(con, *, gpus_per_node: int | None = None) -> int:
    """Refresh the estimated inventory (call inside a transaction after rebuilding incidents).

    Estimated rows are dropped as soon as a real inventory exists. Otherwise they are rebuilt when
    ``gpus_per_node`` is given or estimates already exist (keeping their GPU count). Returns the
    number of estimated rows now in the inventory.
    """
    previous = con.sql("SELECT any_value(gpus_per_node) FROM inventory WHERE estimated").fetchall()[0][0]
    con.execute("DELETE FROM inventory WHERE estimated")
    gpus = gpus_per_node or previous
    if gpus is not None:
        con.execute(_ESTIMATE_INVENTORY, {"gpus": gpus, "unknown": UNKNOWN_CLUSTER})
    return con.sql("SELECT count(*) FROM inventory WHERE estimated").fetchall()[0][0]


FETCH_ROWS = 1 << 18


def frame(relation: duckdb.DuckDBPyRelation) -> pl.DataFrame:
    """The rows of a DuckDB query as one Polars frame, read in record batches of
    :data:`FETCH_ROWS`. Why not ``.pl()``: it builds the whole result as an Arrow table first and
    converts it after, so a large result is held twice at its peak (issue 27: 5 M interruptions
    read peaked 0.9 GB above the 0.4 GB frame); in batches only one batch is held twice."""
    reader = relation.to_arrow_reader(FETCH_ROWS)
    batches = [pl.from_arrow(batch) for batch in reader]
    if not batches:
        return pl.from_arrow(reader.schema.empty_table())
    return pl.concat(batches, rechunk=False) if len(batches) > 1 else batches[0]


def register(con, name: str, frame: pl.DataFrame) -> None:
    """``frame`` as the view ``name`` on ``con``, scanned where it is. Why not ``con.register(name,
    frame)``: it converts the frame to Arrow with every text column copied to Arrow's classic
    strings (issue 27: the 5 M interruptions an analysis registers for its outages, ~0.2 GB more);
    Polars' own string views are read by DuckDB as they are."""
    con.register(name, frame.to_arrow(compat_level=pl.CompatLevel.newest()))


def table(con, name: str) -> pl.DataFrame:
    """A whole warehouse table as a Polars frame (names are checked, never user text in SQL)."""
    if name not in TABLES:
        raise ValueError(f"unknown table {name!r}; known: {', '.join(TABLES)}")
    return frame(con.sql(f"SELECT * FROM {name}"))  # noqa: S608 - name is whitelisted


TABLES = ("ingested_files", "events", "incidents", "inventory", "jobs", "rejects", "runs")


def scan_incidents(con) -> pl.LazyFrame:
    """The ``incidents`` table as a lazy frame: Polars pushes the columns and filters a query
    uses into DuckDB, so reading a few columns of the interrupting incidents of a 10 M-row table
    never loads it whole. Valid while ``con`` is open. A warehouse from before failure classes,
    opened read-only (not upgraded), reads with each category as its class (those categories were
    class names) and no attributes. (DuckDB's lazy Polars scan imports pandas, 0.3-0.6 s: the
    statistics commands read with :func:`read_incidents` and :func:`latest_incident`.)"""
    return con.sql(incidents_query(con)).pl(lazy=True)


def incidents_query(con, *, row: bool = False) -> str:
    """The incidents as ``SELECT *`` would read them today (see :func:`scan_incidents`); ``row`` adds
    ``table_row``, the row's place in the table (its rowid: the order a scan returns)."""
    columns = {c for (c,) in con.sql("SELECT column_name FROM (DESCRIBE incidents)").fetchall()}
    if "failure_class" in columns:
        return "SELECT *, rowid AS table_row FROM incidents" if row else "SELECT * FROM incidents"
    if row:
        return (
            "SELECT *, category AS failure_class, CAST(NULL AS JSON) AS attributes, rowid AS table_row "
            "FROM incidents"
        )
    return "SELECT *, category AS failure_class, CAST(NULL AS JSON) AS attributes FROM incidents"


def read_incidents(con, columns: Sequence[str], *, interrupting_only: bool = False) -> pl.DataFrame:
    """``columns`` of the incidents, only the interrupting ones with ``interrupting_only``, in the
    table's order: what :func:`scan_incidents` gives for that selection and filter, read eagerly
    (one SQL query; names are checked against the table, never user text in SQL)."""
    query = incidents_query(con)
    known = {c for (c,) in con.sql(f"SELECT column_name FROM (DESCRIBE ({query}))").fetchall()}  # noqa: S608
    if unknown := [c for c in columns if c not in known]:
        raise ValueError(f"incidents have no column {unknown[0]!r}")
    select = ", ".join(f'"{c}"' for c in columns)
    where = " WHERE interrupting" if interrupting_only else ""
    return con.sql(f"SELECT {select} FROM ({query}){where}").pl()  # noqa: S608 - names checked


def latest_incident(con) -> pl.DataFrame:
    """One row: the latest ``timestamp_utc`` of the incidents (null without any), for
    :func:`pipeline.transform.observation_end`."""
    return con.sql("SELECT max(timestamp_utc) AS timestamp_utc FROM incidents").pl()


def attribute_keys(con) -> list[str]:
    """The keys of the incidents' ``attributes`` (extra input columns), sorted; [] before there were any."""
    columns = {c for (c,) in con.sql("SELECT column_name FROM (DESCRIBE incidents)").fetchall()}
    if "attributes" not in columns:
        return []
    query = "SELECT DISTINCT unnest(json_keys(attributes)) AS k FROM incidents WHERE attributes IS NOT NULL"
    return sorted(k for (k,) in con.sql(query).fetchall())
