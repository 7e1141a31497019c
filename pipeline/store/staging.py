"""Staging tables: where a reader keeps what it parsed until the store writes it.

A reader streams its file in batches (Polars frames) into a temporary table of a fixed schema, then
works on it in SQL (times, reasons, content keys) before handing the rows to the store. A batch is
read by SQL as a local variable (a DuckDB replacement scan), so it is freed with the batch; a frame
``con.register``-ed inside the file's transaction would stay alive until the commit.
"""

from __future__ import annotations

import re

import polars as pl

from pipeline.store.files import registered

_NAME = re.compile(r"[a-z][a-z0-9_]*")


def _checked(table: str) -> str:
    """A reader's literal table name, checked, so that it is safe to place in SQL."""
    if not _NAME.fullmatch(table):
        raise ValueError(f"not a staging table name: {table!r}")
    return table


def create(con, table: str, schema: dict[str, pl.DataType]) -> None:
    """An empty temporary ``table`` with the columns of a Polars ``schema`` (replaced if it exists)."""
    with registered(con, "staging_empty", pl.DataFrame(schema=schema)):
        con.execute(f"CREATE OR REPLACE TEMP TABLE {_checked(table)} AS SELECT * FROM staging_empty")  # noqa: S608


def append(con, table: str, batch: pl.DataFrame) -> None:
    """Add ``batch`` (the table's columns, in order) to the temporary ``table``."""
    con.execute(f"INSERT INTO {_checked(table)} SELECT * FROM batch")  # noqa: S608 - a checked name


def drop(con, *tables: str) -> None:
    """Drop the reader's temporary tables once the store has what it needs from them."""
    for table in tables:
        con.execute(f"DROP TABLE {_checked(table)}")  # noqa: S608 - a checked name
