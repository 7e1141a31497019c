from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import pytest

from pipeline import warehouse


@pytest.fixture
def con(tmp_path):
    connection = warehouse.connect(tmp_path / "w.duckdb")
    yield connection
    connection.close()


@pytest.fixture
def write(tmp_path):
    """Write a fixture file: text (str or bytes), optional mtime as an ISO date."""

    def _write(name: str, content: str | bytes, mtime: str | None = None) -> Path:
        path = tmp_path / name
        if isinstance(content, str):
            content = content.encode("utf-8")
        path.write_bytes(content)
        if mtime:
            stamp = datetime.fromisoformat(mtime).timestamp()
            os.utime(path, (stamp, stamp))
        return path

    return _write


@pytest.fixture
def sql(con):
    """Rows of a query on the test warehouse, as tuples."""

    def _rows(query: str, params=None) -> list[tuple]:
        return con.sql(query, params=params).fetchall()

    return _rows
