"""Years of syslog lines, which carry none (``Mar  2 04:26:29 host ...``), for the kernel-log and
slurmctld readers.

The first dated line is in ``year`` when given; otherwise the last dated
line is in the file's modification year (the year before, if its month is after the modification
month). Going through the file, the year goes up by one whenever the month falls back by six months
or more (Dec -> Jan); a smaller step back is an out-of-order line in the same year. The summary
states the years used, so a wrong guess is visible, never silent.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import polars as pl

from pipeline.readers import lines
from pipeline.store.files import FileSummary

MONTHS = {
    m: i
    for i, m in enumerate(
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], start=1
    )
}
MONTH_PATTERN = "(?:" + "|".join(MONTHS) + ")"


def month_number(expr: pl.Expr) -> pl.Expr:
    return expr.replace_strict(MONTHS, default=None, return_dtype=pl.Int32)


_DATED = rf"{MONTH_PATTERN}\s+\d{{1,2}}\s+\d{{2}}:"  # after a line's prefix: a syslog date
_MONTH_HEADS = np.array([int.from_bytes(m.encode(), "big") for m in MONTHS], np.int32)


def month_changes(frame: pl.DataFrame, prefix: str) -> pl.DataFrame:
    """Row ``i`` and ``month`` of each syslog-dated line (``Mon DD hh:`` after the regex ``prefix``)
    whose month name differs from the previous dated line's: the only lines where a New Year can
    pass. A regex match test and a 3-character comparison per line; the month lookup runs on the
    few change points only."""
    text = pl.col("text")
    head = pl.when(text.str.contains(f"^{prefix}{_DATED}")).then(
        (text.str.strip_chars_start("[") if prefix else text).str.head(3)
    )
    dated = frame.select(i=pl.int_range(pl.len(), dtype=pl.Int64), head=head).drop_nulls("head")
    changes = dated.filter(pl.col("head").ne_missing(pl.col("head").shift(1)))
    return changes.select("i", month=month_number(pl.col("head")))


def block_month_changes(block: lines.Block) -> pl.DataFrame:
    """:func:`month_changes` of a block of kernel-log lines without a string per line: lines whose
    first three bytes are a month name are the candidates, and the full regex runs on the lines where
    that name changes only. A candidate that fails the regex is not a dated line; dropping it can
    only change whether the next candidate is a change point, so the change points are found again
    without it until all of them pass (candidates that are not change points may stay: the lines
    around them have their month name, so they change nothing)."""
    heads = block.heads()
    candidates = np.flatnonzero(np.isin(heads, _MONTH_HEADS, kind="table"))
    while True:
        keys = heads[candidates]
        points = candidates[np.concatenate([[True], keys[1:] != keys[:-1]])] if len(keys) else candidates
        dated = block.frame(points)["text"].str.contains(f"^{_DATED}").to_numpy()
        if dated.all():
            break
        candidates = np.setdiff1d(candidates, points[~dated], assume_unique=True)
    order = np.argsort(_MONTH_HEADS)  # month index of each head in ascending order
    month = order[np.searchsorted(_MONTH_HEADS[order], heads[points])] + 1
    return pl.DataFrame({"i": points.astype(np.int64), "month": month.astype(np.int32)})


def year_offsets_at(
    changes: pl.DataFrame, rows: np.ndarray, carry: tuple[int | None, int]
) -> tuple[pl.Series, tuple[int | None, int]]:
    """New Years passed before each of the lines ``rows`` (indexes, ascending) of a batch whose
    month changes are ``changes``; ``carry`` as in :func:`year_offsets`."""
    last_month, offset = carry
    rollover = changes.filter(
        (pl.col("month").shift(1).fill_null(pl.lit(last_month, pl.Int32)) - pl.col("month")) >= 6
    )["i"]
    passed = np.searchsorted(rollover.to_numpy(), rows, side="right") + offset
    new_carry = (changes["month"][-1] if changes.height else last_month, offset + rollover.len())
    return pl.Series("year_offset", passed, dtype=pl.Int32), new_carry


def year_offsets(
    frame: pl.DataFrame, carry: tuple[int | None, int], prefix: str = ""
) -> tuple[pl.Series, tuple[int | None, int]]:
    """New Years passed before each line of a batch (see the module docstring), for lines dated
    ``Mon DD hh:`` after the regex ``prefix``; ``carry`` is (last syslog month, New Years so far)
    from the batches before and is returned updated."""
    return year_offsets_at(month_changes(frame, prefix), np.arange(frame.height), carry)


def syslog_base_year(path: Path, year: int | None, last: tuple[int | None, int], summary: FileSummary) -> int:
    """The year of the first syslog line (see the module docstring) and a note saying so."""
    last_month, rollovers = last
    if year is not None:
        base, source = year, "--year"
    else:
        modified = datetime.fromtimestamp(path.stat().st_mtime, UTC)
        last_year = modified.year if (last_month or 1) <= modified.month else modified.year - 1
        base, source = last_year - rollovers, f"file modified {modified:%Y-%m-%d}; override with --year"
    span = f"{base}" if not rollovers else f"{base}..{base + rollovers} ({rollovers} New Year rollover(s))"
    summary.notes.append(f"syslog times carry no year: read as {span} ({source})")
    return base
