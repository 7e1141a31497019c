"""Pieces every reader shares: the error type, the per-file summary and the warehouse bookkeeping."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import polars as pl


class InputError(ValueError):
    """Input that cannot be read as a whole; the message names the file (and line) and how to fix it."""


@dataclass
class FileSummary:
    """What happened to one file. Lines add up: read = ingested + duplicate + rejected + ignored.

    ``ignored`` counts lines that carry no fault by design (ordinary kernel messages around the XID
    lines, job steps and repeated headers in sacct output); they are not errors, so not rejects.
    ``attribute_columns``: an incidents file's extra columns, kept as ``attributes``;
    ``ignored_columns``: an inventory file's extra columns (not stored).
    """

    path: str
    kind: str
    format: str
    rows_read: int = 0
    rows_ingested: int = 0
    rows_duplicate: int = 0
    rows_rejected: int = 0
    rows_ignored: int = 0
    skipped: bool = False
    file_id: int | None = None
    ignored_columns: list[str] = field(default_factory=list)
    attribute_columns: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def now_utc() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def register_file(con, path: Path, sha: str, kind: str, fmt: str, size_bytes: int | None = None) -> int:
    """Add the file to ``ingested_files`` (inside the file's transaction) and return its id.
    ``size_bytes``: for a file read from a lake, whose original may not be on this machine."""
    size = Path(path).stat().st_size if size_bytes is None else size_bytes
    return con.sql(
        "INSERT INTO ingested_files (path, sha256, size_bytes, kind, format, rows_read,"
        " rows_ingested, rows_duplicate, rows_rejected, ingested_at_utc)"
        " VALUES (?, ?, ?, ?, ?, 0, 0, 0, 0, ?) RETURNING file_id",
        params=[str(path), sha, size, kind, fmt, now_utc()],
    ).fetchall()[0][0]


def record_counts(con, file_id: int, summary: FileSummary) -> None:
    con.execute(
        "UPDATE ingested_files SET rows_read = ?, rows_ingested = ?, rows_duplicate = ?,"
        " rows_rejected = ? WHERE file_id = ?",
        [summary.rows_read, summary.rows_ingested, summary.rows_duplicate, summary.rows_rejected, file_id],
    )


_IDENTIFIER = re.compile(r"[a-z][a-z0-9_]*")


def account_lines(
    con, summary: FileSummary, parsed: str, *, text: str = "text", reason: str = "reason"
) -> None:
    """Store a line-based file's rejects and complete its counts (``summary.rows_read`` and
    ``rows_ingested`` set). ``parsed`` names the staging table of the lines that carried a record
    (``line``, the raw ``text``, the ``reason``: NULL when accepted; other column names may be
    given); the rest of the lines read were ignored by design; of those that carried one, the ones
    neither rejected nor ingested were duplicates. The rejects go from table to table inside
    DuckDB, so millions of them do not pass through Python memory."""
    if not (_IDENTIFIER.fullmatch(text) and _IDENTIFIER.fullmatch(reason)):
        raise ValueError(f"not column names: {text!r}, {reason!r}")
    lines = f"SELECT line, {text} AS text, {reason} AS reason FROM query_table($parsed)"  # noqa: S608
    con.execute(
        f"INSERT INTO rejects SELECT $file_id, $path, line, text, reason, $now FROM ({lines})"  # noqa: S608
        " WHERE reason IS NOT NULL ORDER BY line",
        {"file_id": summary.file_id, "path": summary.path, "now": now_utc(), "parsed": parsed},
    )
    relevant, rejected = con.sql(
        f"SELECT count(*), count(reason) FROM ({lines})",  # noqa: S608
        params={"parsed": parsed},
    ).fetchall()[0]
    summary.rows_rejected = rejected
    summary.rows_ignored = summary.rows_read - relevant
    summary.rows_duplicate = relevant - rejected - summary.rows_ingested
    record_counts(con, summary.file_id, summary)


def insert_rejects(con, file_id: int | None, path: Path, rejects: pl.DataFrame) -> None:
    """``rejects`` has columns line, raw, reason."""
    with registered(con, "rejects_frame", rejects):
        con.execute(
            "INSERT INTO rejects SELECT $file_id, $path, line, raw, reason, $now FROM rejects_frame",
            {"file_id": file_id, "path": str(path), "now": now_utc()},
        )


@contextmanager
def registered(con, name: str, frame: pl.DataFrame) -> Iterator[None]:
    """A Polars frame visible to SQL as ``name`` for the block. If the block failed, the file's
    transaction is aborted and its rollback drops the view, so unregistering may fail harmlessly.

    Inside a transaction DuckDB keeps a registered frame alive until commit, even after
    ``unregister``: use this for one small frame per file (a catalog, the rejects); per-batch frames
    are read by SQL as local variables instead (a replacement scan), which frees each with its batch."""
    con.register(name, frame)
    try:
        yield
    finally:
        with suppress(duckdb.Error):
            con.unregister(name)


def checked_timezone(con, timezone: str) -> str:
    """A time zone name DuckDB knows; checked against its list so it is safe to place in SET."""
    known = con.sql("SELECT 1 FROM pg_timezone_names() WHERE name = ?", params=[timezone]).fetchall()
    if not known:
        raise InputError(
            f"unknown time zone {timezone!r}; use an IANA name such as UTC or America/Los_Angeles"
        )
    return timezone


def time_sql(column: str, *, time_format: bool = False) -> str:
    """SQL for a time field as exports write it; ``column`` must be a trusted SQL name. ISO 8601
    (naive: the session time zone), with its offset also after a space (``2026-02-01 10:00:00
    +0000``, Python's and Go's default text), or Unix epoch seconds (9-10 digits, a fraction
    allowed) or milliseconds (12-13 digits): monitoring APIs and ticket systems write those. Other
    digit strings (a compact ``20260201``) are not taken for epochs. The plain cast runs first; the
    patterns only see what it refused, so ISO text costs no regular expression. With
    ``time_format`` the user's strptime format (parameter ``$time_format``, see
    :func:`check_time_format`) is tried before all of these: ``01.03.2026`` is day-first only by
    the user's word."""
    if time_format:
        return f"coalesce(CAST(try_strptime({column}, $time_format) AS TIMESTAMPTZ), {time_sql(column)})"
    return (
        f"coalesce(TRY_CAST({column} AS TIMESTAMPTZ), CASE"
        f" WHEN regexp_full_match({column}, '[0-9]{{9,10}}([.][0-9]+)?')"
        f" THEN to_timestamp(CAST({column} AS DOUBLE))"
        f" WHEN regexp_full_match({column}, '[0-9]{{12,13}}')"
        f" THEN to_timestamp(CAST({column} AS DOUBLE) / 1000)"
        f" ELSE TRY_CAST(regexp_replace({column}, ' ([+-][0-9]{{2}}:?[0-9]{{2}})$', '\\1')"
        " AS TIMESTAMPTZ) END)"
    )


def check_time_format(time_format: str) -> str:
    """``time_format`` if DuckDB's strptime takes it (``%d.%m.%Y %H:%M``, ``%m/%d/%Y %I:%M %p``;
    ``%z`` for an offset), else ValueError saying why."""
    if "%" not in time_format:
        raise ValueError(f"time format {time_format!r} has no strptime code; e.g. '%d.%m.%Y %H:%M'")
    try:
        duckdb.sql("SELECT try_strptime('', $f)", params={"f": time_format}).fetchall()
    except duckdb.Error as exc:
        reason = str(exc).partition("Error: ")[2] or str(exc)
        raise ValueError(f"time format {time_format!r}: {reason}; e.g. '%d.%m.%Y %H:%M'") from None
    return time_format


def whole_number_sql(column: str) -> str:
    """SQL for a whole number written as text, ``8`` or ``8.0`` (a float column of a pandas
    export); NULL for ``8.5``, which DuckDB's own cast would round to 9 (a GPU index 2.5 stored as
    3). ``column`` must be a trusted SQL expression."""
    return (
        f"CASE WHEN TRY_CAST({column} AS DOUBLE) = floor(TRY_CAST({column} AS DOUBLE))"
        f" THEN TRY_CAST({column} AS INTEGER) END"
    )


def count(con, sql: str, params=None) -> int:
    return con.sql(sql, params=params).fetchall()[0][0]
