"""Throughput and peak memory of the kernel-log reader on a synthetic syslog, or on a given log.

    python -m bench.ingest_kernel_log --lines 2000000 [--xid-share 0.01] [--gz]
    python -m bench.ingest_kernel_log --log /tmp/failcast-bench/full/kern.log

Writes a year-less syslog of ordinary kernel messages with a share of Xid lines (storms of 4), or
takes ``--log``, ingests it into a fresh warehouse and prints lines/s, MB/s and peak RSS (memory
must not grow with the file: the reader streams blocks of ``lines.BLOCK_BYTES``) and the CPU time
of the ingest with its parsing threads (MB per CPU-second: the rate per core, which a machine
shared with other jobs does not blur the way it blurs wall-clock MB/s). Then the floor:
DuckDB counting the file's lines, the least any reader must do.
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import tempfile
import time
from pathlib import Path

import duckdb

from bench.synthetic_logs import LINES_SQL, synthetic_log
from pipeline import warehouse
from pipeline.ingest import ReaderOptions, ingest_files


def _cpu_seconds() -> float:
    """CPU time of this process (all its threads, the kernel-log parsing ones too) and of its
    finished children."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=2_000_000)
    parser.add_argument("--xid-share", type=float, default=0.01)
    parser.add_argument("--gz", action="store_true")
    parser.add_argument("--log", type=Path, help="ingest this log instead of a synthetic one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = args.log or Path(tmp) / ("syslog.gz" if args.gz else "syslog")
        if args.log is None:
            # written by a child process so that this process's peak RSS measures the ingest alone
            writer = multiprocessing.get_context("spawn").Process(
                target=synthetic_log, args=(log, args.lines, args.xid_share, args.gz)
            )
            writer.start()
            writer.join()
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        con = warehouse.connect(Path(tmp) / "w.duckdb")
        cpu_before, start = _cpu_seconds(), time.perf_counter()
        [s] = ingest_files(con, [log], ReaderOptions(year=2026, cluster="bench"))
        elapsed, cpu = time.perf_counter() - start, _cpu_seconds() - cpu_before
        rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        con.close()
        size_mb = log.stat().st_size / 1e6
        print(
            f"{s.rows_read} lines ({size_mb:.0f} MB on disk) in {elapsed:.1f} s: "
            f"{s.rows_read / elapsed:,.0f} lines/s, {size_mb / elapsed:.0f} MB/s; "
            f"ingested {s.rows_ingested}, duplicate {s.rows_duplicate}, ignored {s.rows_ignored}; "
            f"peak RSS {rss_before:.0f} MB before, {rss_after:.0f} MB after; "
            f"CPU {cpu:.1f} s with the parsing threads ({size_mb / cpu:.0f} MB per CPU-second)"
        )
        start = time.perf_counter()
        lines = duckdb.sql(LINES_SQL, params=[str(log)]).fetchall()[0][0]
        print(f"floor: DuckDB counts {lines} lines in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
