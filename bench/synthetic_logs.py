"""What the kernel-log benches share: a synthetic year-less syslog and the floor's line count
(:mod:`bench.ingest_kernel_log`, :mod:`bench.fleet_bench`, :mod:`bench.extract_bench` import it;
none of them imports another, issue 30: no import circles)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import polars as pl

LINES_SQL = (
    "SELECT count(*) FROM read_csv(?, columns={'line': 'VARCHAR'}, header=false, delim='\\x01', "
    "quote='', escape='', auto_detect=false)"
)
"""The floor of a log reader: DuckDB counting the file's lines."""

CHUNK_LINES = 2_000_000


def synthetic_log(path: Path, lines: int, xid_share: float, gz: bool, seed: int = 1) -> None:
    """Write the log in chunks of ``CHUNK_LINES`` with Polars (no per-line Python), so multi-GB
    logs take seconds per GB and little memory. Times rise through the file like a real syslog."""
    rng = np.random.default_rng(seed)
    span_s = 300 * 86400
    with gzip.open(path, "wb", compresslevel=1) if gz else path.open("wb") as out:
        for first in range(0, lines, CHUNK_LINES):
            n = min(CHUNK_LINES, lines - first)
            lo, hi = first * span_s // lines, (first + n) * span_s // lines
            frame = pl.DataFrame(
                {
                    "s": np.sort(rng.integers(lo, max(hi, lo + 1), size=n)),
                    "node": rng.integers(0, 2048, size=n),
                    "xid": rng.uniform(size=n) < xid_share,
                }
            )
            frame.select(
                pl.format(
                    "{} node-{} kernel: {}",
                    (pl.datetime(2026, 1, 1) + pl.duration(seconds=pl.col("s"))).dt.strftime(
                        "%b %e %H:%M:%S"
                    ),
                    pl.col("node"),
                    pl.when(pl.col("xid"))
                    .then(
                        pl.format(
                            "NVRM: Xid (PCI:0000:18:00): 79, pid={}, GPU has fallen off the bus.", pl.col("s")
                        )
                    )
                    .otherwise(pl.lit("EXT4-fs (nvme0n1p1): re-mounted. Opts: errors=remount-ro")),
                )
            ).write_csv(out, include_header=False, quote_style="never")
