"""Long node histories in bounded memory (issue 27): an availability-shaped fleet (every
up-interval ends in a failure, the node returns after a repair; 400 intervals per node) through
``failcast rates`` (counted in DuckDB, under a small DuckDB cap; and from rows in Polars, as
``--all-categories`` counts) and ``failcast fit`` (the whole ``analyze`` path), each in a child
process whose peak resident memory must stay under a cap. Matching failures to intervals with a
join on the node and a range filter materialised failures x intervals per node in Polars (10 M
rows here): on main before issue 27 ``fit`` peaked at 1.2 GB and ``rates --all-categories`` at
1.35 GB, both killed at the cap; now 0.36 and 0.30 GB. DuckDB streamed that join (0.3 GB
either way; its cost was CPU), so ``rates`` guards the DuckDB path against a regression rather
than reproducing one.

The cap is enforced, not only measured: a watchdog kills the child once its resident set passes
it, so a regression fails fast instead of filling a shared machine."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pipeline import ingest, warehouse
from tests._fleets import availability_fleet, write_canonical

ROOT = Path(__file__).resolve().parent.parent
NODES, INTERVALS = 60, 400
RSS_CAP_MB = 700
DUCKDB_CAP_MB = 128


def run_capped(args: list[str], *, rss_cap_mb: int, tree: Path = ROOT, env: dict | None = None):
    """Run ``python -m pipeline ARGS`` from ``tree`` in a child killed once its resident set passes
    ``rss_cap_mb``; returns (exit status, peak RSS in MB, stdout, stderr). Exit status -9: killed
    at the cap. Apart from the test so that the same run can be tried on another source tree.

    The peak is the child's ``VmHWM`` (its own high-water mark since exec), read every 10 ms while
    it runs: its ``ru_maxrss`` would not do, Linux carries the forking process's RSS (a pytest
    worker's, hundreds of MB) into it."""
    out, err = (Path(os.environ.get("TMPDIR", "/tmp")) / f"capped-{os.getpid()}.{s}" for s in ("out", "err"))
    peak_kb = 0
    with out.open("w") as stdout, err.open("w") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-m", "pipeline", *args],
            stdout=stdout,
            stderr=stderr,
            cwd=tree,
            env={**os.environ, "PYTHONPATH": str(tree), **(env or {})},
        )

        def watch() -> None:
            nonlocal peak_kb
            status = Path(f"/proc/{child.pid}/status")
            while child.poll() is None:
                try:
                    peak_kb = next(
                        int(line.split()[1]) for line in status.open() if line.startswith("VmHWM:")
                    )
                except (OSError, StopIteration):  # exiting: its memory is gone
                    return
                if peak_kb > rss_cap_mb * 1024:
                    child.kill()
                    return
                time.sleep(0.01)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        code = child.wait()
        watcher.join()
    texts = out.read_text(), err.read_text()
    out.unlink()
    err.unlink()
    return code, peak_kb / 1024, *texts


@pytest.fixture(scope="module")
def long_histories(tmp_path_factory) -> Path:
    """The fleet ingested from its canonical files (40 k inventory rows, 42 k incidents)."""
    folder = tmp_path_factory.mktemp("long")
    paths = write_canonical(folder, *availability_fleet(NODES, INTERVALS, seed=27))
    db = folder / "long.duckdb"
    con = warehouse.connect(db)
    ingest.ingest_files(con, paths)
    con.close()
    return db


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the child's RSS from /proc")
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["rates"], "failures per instance-hour"),  # counted in DuckDB
        (["rates", "--all-categories", "--by", "node_id"], "failures per instance-hour"),  # in Polars
        (["fit", "--json"], '"weibull"'),  # analyze
    ],
)
def test_long_histories_in_bounded_memory(long_histories, args, expected):
    code, peak_mb, stdout, stderr = run_capped(
        [*args, "--db", str(long_histories)],
        rss_cap_mb=RSS_CAP_MB,
        env={warehouse.MEMORY_ENV: str(DUCKDB_CAP_MB)},
    )
    assert code == 0, f"exit {code} at {peak_mb:.0f} MB peak (cap {RSS_CAP_MB} MB): {stderr[-500:]}"
    assert peak_mb < RSS_CAP_MB
    assert expected in stdout.lower()
