from __future__ import annotations

import subprocess
import sys

import pytest

from pipeline import warehouse


def test_connect_creates_schema_on_disk(tmp_path) -> None:
    db = tmp_path / "sub" / "w.duckdb"
    con = warehouse.connect(db)
    assert db.exists()
    for name in warehouse.TABLES:
        assert warehouse.table(con, name).height == 0


def test_read_only_needs_existing_file(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="failcast ingest"):
        warehouse.connect(tmp_path / "missing.duckdb", read_only=True)


def test_transaction_rolls_back_on_error(tmp_path) -> None:
    con = warehouse.connect(tmp_path / "w.duckdb")
    with pytest.raises(KeyboardInterrupt), warehouse.transaction(con):
        con.execute("INSERT INTO rejects VALUES (1, 'f', 1, 'x', 'r', now()::TIMESTAMP)")
        raise KeyboardInterrupt
    assert warehouse.table(con, "rejects").height == 0


def test_table_refuses_unknown_names(tmp_path) -> None:
    con = warehouse.connect(tmp_path / "w.duckdb")
    with pytest.raises(ValueError, match="unknown table"):
        warehouse.table(con, "events; DROP TABLE events")


@pytest.mark.parametrize("read_only", [False, True])
def test_no_duckdb_progress_bar_on_stdout(tmp_path, read_only) -> None:
    """DuckDB prints its bar to stdout even into a pipe, which would corrupt `--json` output.
    In a subprocess: under pytest's output capture DuckDB turns the bar off by itself."""
    db = tmp_path / "w.duckdb"
    warehouse.connect(db).close()
    code = (
        "import sys; from pipeline import warehouse\n"
        "con = warehouse.connect(sys.argv[1], read_only=sys.argv[2] == 'True')\n"
        "print(con.sql(\"SELECT current_setting('enable_progress_bar')\").fetchall())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(db), str(read_only)], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[(False,)]"
