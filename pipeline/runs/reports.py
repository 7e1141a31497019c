"""Report files of scheduled runs: a dated report per run, stable names pointing at the newest
good one, and retention by count and age. :func:`publish` and :func:`prune_dated` serve the
warehouse snapshots too (:mod:`pipeline.runs.snapshots`)."""

from __future__ import annotations

import os
import re
from datetime import datetime, timedelta
from pathlib import Path

REPORT_PREFIX = "failcast-report-"
REPORT_ALIASES = ("latest.html", "failcast-report.html")
STAMP = "%Y%m%dT%H%M%SZ"
_DATED_REPORT = re.compile(rf"{REPORT_PREFIX}(\d{{8}}T\d{{6}}Z)\.html")


def dated_name(started_at_utc: datetime) -> str:
    return f"{REPORT_PREFIX}{started_at_utc.strftime(STAMP)}.html"


def fsync_dir(folder: Path) -> None:
    """Make renames in ``folder`` durable (a crash after rename() may otherwise lose them)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(path: Path, aliases: tuple[str, ...] = REPORT_ALIASES) -> list[Path]:
    """Point the stable names at ``path``: a hard link (no extra space) renamed into place, so a
    reader opening an alias gets the old file or the new one, never a missing or partial one."""
    published = []
    for alias in aliases:
        target = path.with_name(alias)
        tmp = target.with_name(f".{alias}.tmp")
        tmp.unlink(missing_ok=True)
        try:
            os.link(path, tmp)
        except OSError:  # a file system without hard links: copy instead
            tmp.write_bytes(path.read_bytes())
        tmp.replace(target)
        published.append(target)
    fsync_dir(path.parent)
    return published


def prune_dated(
    out_dir: Path,
    pattern: re.Pattern[str],
    *,
    keep: int,
    keep_days: float | None,
    now: datetime,
    aliases: tuple[str, ...] = (),
) -> list[Path]:
    """Delete files whose name matches ``pattern`` (group 1: a :data:`STAMP`) beyond the newest
    ``keep`` or older than ``keep_days``; never the newest, never a file an alias points at."""
    dated = sorted(
        (
            (datetime.strptime(m.group(1), STAMP), p)
            for p in out_dir.iterdir()
            if (m := pattern.fullmatch(p.name))
        ),
        reverse=True,
    )
    pointed = [out_dir / a for a in aliases if (out_dir / a).exists()]
    cutoff = now - timedelta(days=keep_days) if keep_days is not None else None
    doomed = [
        p
        for i, (stamp, p) in enumerate(dated)
        if i > 0 and (i >= keep or (cutoff and stamp < cutoff)) and not any(p.samefile(a) for a in pointed)
    ]
    for path in doomed:
        path.unlink()
    return doomed


def prune_reports(out_dir: Path, *, keep: int, keep_days: float | None, now: datetime) -> list[Path]:
    """Delete dated reports beyond the newest ``keep`` or older than ``keep_days``; never the newest."""
    return prune_dated(
        out_dir, _DATED_REPORT, keep=keep, keep_days=keep_days, now=now, aliases=REPORT_ALIASES
    )
