"""One run at a time per warehouse: ``fcntl.flock`` on ``<warehouse>.lock``.

The kernel releases a flock when its process dies, however it dies, so a run killed with SIGKILL
never blocks the next one. The holder writes its pid, host, run id and start time into the file
for the "locked by" message and truncates it on a clean exit, so a lock file that is free but not
empty means the last holder was killed. DuckDB also locks the database file itself (one writing
process, no readers elsewhere meanwhile); :func:`open_warehouse` reports that as a lock too.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from pipeline import warehouse

EXIT_LOCKED = 75  # EX_TEMPFAIL from sysexits.h: "try again later"


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
        started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        handle.write(json.dumps({**me, "started_at_utc": started}))
        handle.flush()
        yield previous
    finally:
        handle.truncate(0)
        handle.flush()
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def open_warehouse(
    db: Path | str, *, read_only: bool = False, timeout_seconds: float = 0.0, readers: Path | None = None
):
    """:func:`warehouse.connect`, with DuckDB's own file lock (another process has the file open,
    e.g. a DuckDB CLI or notebook session) retried for up to ``timeout_seconds``, then reported as
    :class:`LockedError`; ``readers`` names the snapshot such sessions should open instead."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        try:
            return warehouse.connect(db, read_only=read_only)
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower():
                raise
            if time.monotonic() < deadline:
                time.sleep(min(0.5, max(deadline - time.monotonic(), 0.0)))
                continue
            instead = (
                f"point readers at the snapshot {readers} (rewritten after every run) instead of the "
                "warehouse, or close that session"
                if readers
                else "close it or wait for the run using it to end"
            )
            raise LockedError(
                f"{db}: the warehouse file is open in another process (a DuckDB CLI or notebook session?); "
                f"waited {timeout_seconds:g} s; {instead}. DuckDB says: {str(exc).splitlines()[0]}"
            ) from None
