"""The ``runs`` table: one row per run, written at the start (status ``running``) and at the end
(``succeeded`` or ``failed`` with the error), with per-stage seconds and row counts, input files,
versions and the config used. A row still ``running`` when the next run holds the lock belongs to a
process that died; :func:`mark_abandoned` marks it failed."""

from __future__ import annotations

import json
import os
import platform
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

import pipeline
from pipeline.runs.log import log


def versions() -> dict[str, str]:
    """Versions that change results: failcast itself, Python and the numeric libraries."""
    found = {"failcast": pipeline.__version__, "python": platform.python_version()}
    for package in ("duckdb", "polars", "lifelines", "numpy", "scipy", "altair"):
        found[package] = metadata.version(package)
    return found


def utc_now() -> datetime:
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
    """Runs newest first, JSON columns decoded; none for a warehouse older than the runs table."""
    if not con.sql("SELECT 1 FROM information_schema.tables WHERE table_name = 'runs'").fetchall():
        return []
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
                utc_now(),
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


def format_run(run: dict[str, Any]) -> str:
    """One line per run for people: id, start, duration, status, files, then error or report."""
    ended = run["ended_at_utc"]
    took = f"{(ended - run['started_at_utc']).total_seconds():.1f} s" if ended else "-"
    ingest = (run["stages"] or {}).get("ingest", {})
    files = f"files new {ingest.get('new', '-')} grown {ingest.get('grown', '-')}"
    tail = run["error"] or run["report_path"] or ""
    started = f"{run['started_at_utc']:%Y-%m-%d %H:%M:%S}Z"
    line = f"{run['run_id']}  {started}  {took:>8}  {run['status']:<9}  {files}  {tail}"
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in line)
