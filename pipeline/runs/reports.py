"""Report files of scheduled runs: a dated report per run, stable names pointing at the newest
good one, and retention by count and age."""

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


def publish(report_path: Path) -> list[Path]:
    """Point the stable names at ``report_path``: a hard link (no extra space) renamed into place."""
    published = []
    for alias in REPORT_ALIASES:
        target = report_path.with_name(alias)
        tmp = target.with_name(f".{alias}.tmp")
        tmp.unlink(missing_ok=True)
        try:
            os.link(report_path, tmp)
        except OSError:  # a file system without hard links: copy instead
            tmp.write_bytes(report_path.read_bytes())
        tmp.replace(target)
        published.append(target)
    return published


def prune_reports(out_dir: Path, *, keep: int, keep_days: float | None, now: datetime) -> list[Path]:
    """Delete dated reports beyond the newest ``keep`` or older than ``keep_days``; never the newest."""
    dated = sorted(
        (
            (datetime.strptime(m.group(1), STAMP), p)
            for p in out_dir.iterdir()
            if (m := _DATED_REPORT.fullmatch(p.name))
        ),
        reverse=True,
    )
    cutoff = now - timedelta(days=keep_days) if keep_days is not None else None
    doomed = [p for i, (stamp, p) in enumerate(dated) if i > 0 and (i >= keep or (cutoff and stamp < cutoff))]
    for path in doomed:
        path.unlink()
    return doomed
