"""Scheduled batch runs: one lock per warehouse, a manifest row per run, logging, report files.

:func:`run_batch` is what ``failcast run`` does: take the lock, ingest new and grown input files,
rebuild the derived tables, refit, write a dated report, point ``latest.html`` at it and prune old
reports. Operators can trust it because:

* **One run at a time.** ``<warehouse>.lock`` is held with ``fcntl.flock`` for the whole run. The
  kernel releases it when the process dies, so a run killed with SIGKILL never blocks the next
  one; the holder's pid and start time are written inside the file for the "locked by" message,
  and a file still holding them when the lock is free means the last holder did not finish.
* **A manifest.** Every run is a row in the ``runs`` table (status running -> succeeded/failed,
  per-stage seconds and row counts, input files, versions, error). A row left ``running`` by a
  killed process is marked failed by the next run, which holds the lock and so knows it is dead.
* **No half results.** Each input file is ingested in one transaction; the report is written to a
  temporary name and renamed; ``latest.html`` (and ``failcast-report.html``, the README's name)
  only move after every stage succeeded, so a failed run leaves the previous report in place.
"""

from __future__ import annotations

import fcntl
import glob
import json
import logging
import os
import platform
import re
import secrets
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib import metadata
from pathlib import Path
from typing import Any

import click
import duckdb

import pipeline
from pipeline import analysis, ingest, report, warehouse
from pipeline.config import RunConfig

EXIT_LOCKED = 75  # EX_TEMPFAIL from sysexits.h: "try again later"
REPORT_PREFIX = "failcast-report-"
REPORT_ALIASES = ("latest.html", "failcast-report.html")
_DATED_REPORT = re.compile(rf"{REPORT_PREFIX}(\d{{8}}T\d{{6}}Z)\.html")
_STAMP = "%Y%m%dT%H%M%SZ"

LOGGER = logging.getLogger("failcast")


# --- logging ----------------------------------------------------------------------------------
class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, stage, message, fields (for log shippers)."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(
            {
                "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
                "level": record.levelname.lower(),
                "stage": getattr(record, "stage", None),
                "message": record.getMessage(),
                "fields": getattr(record, "fields", {}),
            },
            default=str,
        )


class TextFormatter(logging.Formatter):
    """``16:04:21 INFO  ingest     message  key=value``; control characters from logs neutralised."""

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created, UTC).strftime("%H:%M:%SZ")
        fields = " ".join(f"{k}={v}" for k, v in getattr(record, "fields", {}).items())
        text = f"{ts} {record.levelname:<5} {getattr(record, 'stage', '') or '':<10} {record.getMessage()}"
        text = f"{text}  {fields}" if fields else text
        return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def setup_logging(log_format: str = "text") -> None:
    """Log to stderr (stdout stays for data); calling again replaces the handler."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    LOGGER.handlers = [handler]
    LOGGER.setLevel(logging.INFO)
    LOGGER.propagate = False


def log(stage: str, message: str, level: int = logging.INFO, **fields: Any) -> None:
    LOGGER.log(level, message, extra={"stage": stage, "fields": fields})


# --- lock -------------------------------------------------------------------------------------
class LockedError(Exception):
    """Another run holds the warehouse; exit with :data:`EXIT_LOCKED` and try again later."""


def lock_path(db: Path | str) -> Path:
    return Path(f"{db}.lock")


def _holder(text: str) -> dict[str, Any] | None:
    try:
        return json.loads(text) if text.strip() else None
    except json.JSONDecodeError:
        return None


@contextmanager
def warehouse_lock(
    db: Path | str, timeout_seconds: float = 0.0, run_id: str | None = None
) -> Iterator[dict[str, Any] | None]:
    """Hold ``<db>.lock`` exclusively; yields the previous holder's record if it died holding it.

    Waits up to ``timeout_seconds`` for a running holder, then raises :class:`LockedError`.
    While held, the file says who holds it (pid, host, start time, run id).
    """
    path = lock_path(db)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held for the whole run
    deadline = time.monotonic() + timeout_seconds
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                handle.close()
                holder = _holder(path.read_text(encoding="utf-8")) or {}
                who = (
                    f"pid {holder['pid']} (run {holder['run_id']} started {holder['started_at_utc']} "
                    f"on {holder['host']})"
                    if {"pid", "run_id", "started_at_utc", "host"} <= holder.keys()
                    else "a process that has not written its pid yet"
                )
                raise LockedError(
                    f"{db}: locked by {who}; waited {timeout_seconds:g} s. One run at a time per "
                    "warehouse: try again later or raise --lock-timeout"
                ) from None
            time.sleep(min(0.1, max(deadline - time.monotonic(), 0.0)))
    try:
        handle.seek(0)
        previous = _holder(handle.read())
        me = {"pid": os.getpid(), "host": socket.gethostname(), "run_id": run_id}
        handle.truncate(0)
        handle.write(json.dumps({**me, "started_at_utc": _now().isoformat(timespec="seconds") + "Z"}))
        handle.flush()
        yield previous
    finally:
        handle.truncate(0)
        handle.flush()
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def open_warehouse(db: Path | str, *, read_only: bool = False):
    """:func:`warehouse.connect`, with DuckDB's own file lock (another process has the file open,
    e.g. a DuckDB CLI session) reported as :class:`LockedError`."""
    try:
        return warehouse.connect(db, read_only=read_only)
    except duckdb.IOException as exc:
        if "lock" not in str(exc).lower():
            raise
        raise LockedError(
            f"{db}: the warehouse file is open in another process; close it (a DuckDB CLI or notebook "
            f"session?) or wait for the run using it to end. DuckDB says: {str(exc).splitlines()[0]}"
        ) from None


# --- manifest ---------------------------------------------------------------------------------
def versions() -> dict[str, str]:
    """Versions that change results: failcast itself, Python and the numeric libraries."""
    found = {"failcast": pipeline.__version__, "python": platform.python_version()}
    for package in ("duckdb", "polars", "lifelines", "numpy", "scipy", "altair"):
        found[package] = metadata.version(package)
    return found


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def mark_abandoned(con) -> list[str]:
    """Mark runs left ``running`` as failed; call only while holding the lock (so they are dead)."""
    stale = [r[0] for r in con.sql("SELECT run_id FROM runs WHERE status = 'running'").fetchall()]
    if stale:
        con.execute(
            "UPDATE runs SET status = 'failed', error = ? WHERE status = 'running'",
            ["abandoned: the process ended without finishing (killed, or the machine stopped)"],
        )
    return stale


def list_runs(con, limit: int | None = None) -> list[dict[str, Any]]:
    """Runs newest first, JSON columns decoded."""
    decoded = con.sql("SELECT * FROM runs ORDER BY started_at_utc DESC, run_id DESC").pl().to_dicts()
    decoded = decoded[:limit] if limit is not None else decoded
    for row in decoded:
        for key in ("stages", "input_files", "versions", "config"):
            row[key] = json.loads(row[key]) if row[key] is not None else None
    return decoded


@dataclass
class RunRecord:
    """The manifest row of the current run, updated in the ``runs`` table as stages finish."""

    con: Any
    run_id: str
    started_at_utc: datetime
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)
    input_files: list[dict[str, Any]] = field(default_factory=list)
    report_path: str | None = None

    def start(self, config: dict[str, Any]) -> None:
        self.con.execute(
            "INSERT INTO runs (run_id, started_at_utc, status, pid, host, versions, config)"
            " VALUES (?, ?, 'running', ?, ?, ?, ?)",
            [
                self.run_id,
                self.started_at_utc,
                os.getpid(),
                socket.gethostname(),
                json.dumps(versions()),
                json.dumps(config, default=str),
            ],
        )

    @contextmanager
    def stage(self, name: str) -> Iterator[dict[str, Any]]:
        """Time a stage; the yielded dict collects its row counts."""
        counts: dict[str, Any] = {}
        log(name, "started")
        begin = time.perf_counter()
        try:
            yield counts
        finally:
            self.stages[name] = {"seconds": round(time.perf_counter() - begin, 3), **counts}
        log(name, "done", **self.stages[name])

    def finish(self, status: str, error: str | None = None) -> None:
        self.con.execute(
            "UPDATE runs SET ended_at_utc = ?, status = ?, stages = ?, input_files = ?,"
            " report_path = ?, error = ? WHERE run_id = ?",
            [
                _now(),
                status,
                json.dumps(self.stages),
                json.dumps(self.input_files),
                self.report_path,
                error,
                self.run_id,
            ],
        )


def describe(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (SIGINT)"
    if isinstance(exc, SystemExit):
        return f"terminated (exit code {exc.code})"
    return f"{type(exc).__name__}: {exc}"


# --- inputs -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class InputFile:
    path: Path
    fmt: str | None  # None: detect from the name
    status: str  # new | grown | unchanged


def expand_inputs(inputs: dict[str, tuple[str, ...]]) -> tuple[list[tuple[Path, str | None]], list[str]]:
    """(path, format) for every file the globs match, each once, plus the globs that matched none.

    A plain path (no wildcard) that does not exist is kept, so ingest reports it as missing.
    """
    found: dict[Path, str | None] = {}
    unmatched: list[str] = []
    for kind, patterns in inputs.items():
        fmt = None if kind in ("inventory", "auto") else kind
        for pattern in patterns:
            matches = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) else [pattern]
            if not matches:
                unmatched.append(pattern)
            for match in matches:
                found.setdefault(Path(match), fmt)
    return list(found.items()), unmatched


def classify_inputs(con, files: list[tuple[Path, str | None]]) -> list[InputFile]:
    """new / grown (path seen, content changed) / unchanged (same sha256 already ingested)."""
    known = con.sql("SELECT path, sha256 FROM ingested_files").fetchall()
    paths, hashes = {p for p, _ in known}, {s for _, s in known}
    classified = []
    for path, fmt in files:
        if path.is_file() and ingest.sha256_of(path) in hashes:
            status = "unchanged"
        else:
            status = "grown" if str(path) in paths else "new"
        classified.append(InputFile(path, fmt, status))
    return classified


# --- reports ----------------------------------------------------------------------------------
def publish(report_path: Path) -> list[Path]:
    """Point the stable names at ``report_path``: a hard link (no extra space) renamed into place."""
    published = []
    for alias in REPORT_ALIASES:
        target = report_path.with_name(alias)
        tmp = target.with_name(f".{alias}.tmp")
        tmp.unlink(missing_ok=True)
        try:
            os.link(report_path, tmp)
        except OSError:  # a file system without hard links: copy instead
            tmp.write_bytes(report_path.read_bytes())
        tmp.replace(target)
        published.append(target)
    return published


def prune_reports(out_dir: Path, *, keep: int, keep_days: float | None, now: datetime) -> list[Path]:
    """Delete dated reports beyond the newest ``keep`` or older than ``keep_days``; never the newest."""
    dated = sorted(
        (
            (datetime.strptime(m.group(1), _STAMP), p)
            for p in out_dir.iterdir()
            if (m := _DATED_REPORT.fullmatch(p.name))
        ),
        reverse=True,
    )
    cutoff = now - timedelta(days=keep_days) if keep_days is not None else None
    doomed = [p for i, (stamp, p) in enumerate(dated) if i > 0 and (i >= keep or (cutoff and stamp < cutoff))]
    for path in doomed:
        path.unlink()
    return doomed


# --- the run ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunResult:
    run_id: str
    report_path: Path
    stages: dict[str, dict[str, Any]]
    input_files: list[dict[str, Any]]


def run_batch(cfg: RunConfig, *, progress: bool = False) -> RunResult:
    """One scheduled run (see the module docstring). Raises :class:`LockedError` if another holds
    the warehouse; any other failure is recorded in ``runs`` and re-raised."""
    db = Path(cfg.warehouse)
    started = _now()
    run_id = f"{started.strftime(_STAMP)}-{secrets.token_hex(3)}"
    with warehouse_lock(db, cfg.lock_timeout_seconds, run_id) as previous:
        if previous:
            log("lock", "the previous run did not release the lock (killed?)", logging.WARNING, **previous)
        con = open_warehouse(db)
        try:
            for stale in mark_abandoned(con):
                log("lock", "marked an abandoned run as failed", logging.WARNING, run_id=stale)
            record = RunRecord(con, run_id, started)
            record.start(cfg.to_document())
            log("run", "started", run_id=run_id, warehouse=str(db))
            try:
                _stages(con, cfg, record, progress)
            except BaseException as exc:
                record.finish("failed", describe(exc))
                log("run", "failed", logging.ERROR, run_id=run_id, error=describe(exc))
                raise
            record.finish("succeeded")
            log("run", "succeeded", run_id=run_id, report=record.report_path)
        finally:
            con.close()
    return RunResult(run_id, Path(record.report_path or ""), record.stages, record.input_files)


def _stages(con, cfg: RunConfig, record: RunRecord, progress: bool) -> None:
    with record.stage("ingest") as counts:
        files, unmatched = expand_inputs(cfg.inputs)
        for pattern in unmatched:
            log("ingest", "no files match", logging.WARNING, glob=pattern)
        inputs = classify_inputs(con, files)
        changed = [f for f in inputs if f.status != "unchanged"]
        counts.update(
            files=len(inputs),
            **{s: sum(f.status == s for f in inputs) for s in ("new", "grown", "unchanged")},
        )
        record.input_files = [
            {"path": str(f.path), "status": f.status} for f in inputs if f.status == "unchanged"
        ]
        totals = dict.fromkeys(("rows_read", "rows_ingested", "rows_duplicate", "rows_rejected"), 0)
        bar = (
            click.progressbar(changed, label="ingest", file=sys.stderr, item_show_func=_file_name)
            if progress
            else nullcontext(changed)
        )
        with bar as items:
            for item in items:
                (summary,) = ingest.ingest_files(
                    con,
                    [item.path],
                    fmt=item.fmt,
                    column_map=cfg.column_map,
                    timezone=cfg.timezone,
                    window_seconds=cfg.dedup_window_minutes * 60,
                )
                entry = {"status": item.status, **summary.to_dict()}
                record.input_files.append(entry)
                for key in totals:
                    totals[key] += entry[key]
                log(
                    "ingest",
                    "file",
                    logging.DEBUG if progress else logging.INFO,  # the bar shows it on a terminal
                    path=str(item.path),
                    status=item.status,
                    kind=summary.kind,
                    rows_ingested=summary.rows_ingested,
                    rows_rejected=summary.rows_rejected,
                )
        counts.update(totals)
    with record.stage("transform") as counts:
        with warehouse.transaction(con):
            warehouse.rebuild_incidents(con, window_seconds=cfg.dedup_window_minutes * 60)
        for name in ("events", "incidents", "inventory", "rejects"):
            counts[name] = con.sql(f"SELECT count(*) FROM {name}").fetchall()[0][0]  # noqa: S608
    with record.stage("analyze") as counts:
        result = analysis.analyze(con, observed_until=cfg.observed_until)
        counts.update(observed_until=result.observed_until.isoformat(), best_family=result.best_family)
    with record.stage("report") as counts:
        name = f"{REPORT_PREFIX}{record.started_at_utc.strftime(_STAMP)}.html"
        path = report.write_report(result, cfg.report_dir, filename=name)
        counts["bytes"] = path.stat().st_size
        record.report_path = str(path)
    with record.stage("publish") as counts:
        counts["aliases"] = [str(p) for p in publish(path)]
        pruned = prune_reports(path.parent, keep=cfg.keep_reports, keep_days=cfg.keep_days, now=_now())
        counts["pruned"] = len(pruned)


def _file_name(item: InputFile | None) -> str | None:
    return item.path.name if item else None
