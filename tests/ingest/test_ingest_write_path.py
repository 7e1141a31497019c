"""The canonical reader's write path: whole row groups for the closing checkpoint, and a store step
on a worker thread that fails, or is interrupted, without leaving half a file behind."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from pipeline import warehouse
from pipeline.ingest import ingest_files
from pipeline.readers import canonical
from pipeline.store import canonical_events as canonical_store

ROW_GROUP = 122_880  # DuckDB's default row group size


def _incidents(path: Path, rows: int) -> Path:
    """``rows`` distinct valid incidents, one second apart."""
    second = pl.int_range(rows, eager=True)
    pl.select(
        **{
            "timestamp": (pl.datetime(2026, 1, 1) + pl.duration(seconds=pl.lit(second))).dt.strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            ),
            "cluster_id": pl.lit("c1"),
            "node_id": pl.format("n{}", pl.lit(second) % 500),
            "category": pl.lit("xid_79"),
            "gpu_index": pl.lit(second) % 8,
        }
    ).write_csv(path)
    return path


def _row_groups(con, table: str) -> list[int]:
    return [
        rows
        for (rows,) in con.sql(
            "SELECT max(count) FROM pragma_storage_info(?) WHERE column_id = 0"
            " GROUP BY row_group_id ORDER BY row_group_id",
            params=[table],
        ).fetchall()
    ]


def test_batches_are_appended_on_one_thread_into_whole_row_groups(tmp_path, monkeypatch):
    """On two threads DuckDB's batch insert may leave each thread's last row group of a statement
    partly filled (at 1 M bench rows: 13-15 row groups where 9 hold them; which ones depends on
    the threads' timing, so a small file cannot force it), and the checkpoint at ``close()`` then
    merges them on one core. The reader stores on one DuckDB thread, each batch continuing the
    last row group, and restores the database's thread count after the file."""
    path = _incidents(tmp_path / "incidents.csv", 2 * ROW_GROUP + 7)
    con = warehouse.connect(tmp_path / "w.duckdb")
    con.execute("SET threads = 2")
    insert, threads = canonical_store.insert_new_events, []

    def noting_threads(con, *args):
        threads.append(con.sql("SELECT current_setting('threads')").fetchall()[0][0])
        insert(con, *args)

    monkeypatch.setattr(canonical_store, "insert_new_events", noting_threads)
    with warehouse.transaction(con):
        summary = canonical.ingest_canonical(con, path, sha="a", fmt="csv", batch_rows=100_000)
    assert summary.rows_ingested == 2 * ROW_GROUP + 7 and threads == [1, 1, 1]
    assert _row_groups(con, "events") == [ROW_GROUP, ROW_GROUP, 7]
    assert con.sql("SELECT current_setting('threads')").fetchall() == [(2,)]
    con.execute("CHECKPOINT")
    assert _row_groups(con, "events") == [ROW_GROUP, ROW_GROUP, 7]
    con.close()


@pytest.mark.parametrize("error", [RuntimeError("disk full"), KeyboardInterrupt()], ids=["error", "ctrl-c"])
def test_a_store_step_that_fails_on_its_worker_rolls_the_file_back(tmp_path, monkeypatch, error):
    """The third batch's insert fails on the worker thread: the error comes out of the ingest as it
    is, after the worker is done with the connection, and the file's transaction leaves nothing."""
    path = _incidents(tmp_path / "incidents.csv", 10_000)
    insert, calls = canonical_store.insert_new_events, []

    def failing(*args):
        calls.append(args)
        if len(calls) == 3:
            raise error
        insert(*args)

    monkeypatch.setattr(canonical_store, "insert_new_events", failing)
    monkeypatch.setitem(canonical.ingest_canonical.__kwdefaults__, "batch_rows", 1_000)
    con = warehouse.connect(tmp_path / "w.duckdb")
    threads = con.sql("SELECT current_setting('threads')").fetchall()
    with pytest.raises(type(error)):
        ingest_files(con, [path])
    assert len(calls) == 3
    assert con.sql(
        "SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM ingested_files)"
    ).fetchall() == [(0, 0)]
    assert con.sql("SELECT current_setting('threads')").fetchall() == threads
    monkeypatch.setattr(canonical_store, "insert_new_events", insert)
    [summary] = ingest_files(con, [path])  # the connection still works; the file is stored whole
    assert summary.rows_ingested == 10_000
    con.close()
