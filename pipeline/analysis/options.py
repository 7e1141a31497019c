"""``AnalysisOptions``: how the warehouse is analysed, one frozen value.

The window (``since``, ``until``), the interruption window, the exposure basis, the rate interval,
the lemon test's FDR and the fits' first gap and rounding travel together from the CLI
(:func:`pipeline.cli.common.analysis_options`) or the run's config
(:meth:`pipeline.config.RunConfig.analysis_options`) to :func:`pipeline.analysis.analyze` and every
command that counts in a window, as :class:`pipeline.ingest.ReaderOptions` does for reading. A new
option is one field here, not a keyword threaded through every layer.

The window is closed, ``[since, until]``: a failure at ``since`` or at ``until`` counts. Service
intervals are clipped to it (:func:`pipeline.transform.exposure_intervals`); failures before
``since`` and after ``until`` are left out and counted by reason
(:func:`pipeline.transform.failures_left_out`), and so are outages that began and Slurm jobs that
started before ``since`` (:func:`before_window`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime

import polars as pl

from pipeline import transform, warehouse

LEMON_FDR = 0.05
FIT_RELATIVE_RESOLUTION = 1e-3


def _text(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M:%S}"


@dataclass(frozen=True)
class AnalysisOptions:
    """What :func:`pipeline.analysis.analyze` and the window's commands take.

    ``since``/``until``: the observed window (UTC, naive); ``until`` None is the latest time in
    the data, ``since`` None the start of every service interval (no lower bound).
    ``interruption_window_minutes``: a node's interrupting incidents closer than this are one
    failure (None or 0: every incident counts). ``first_gap``, ``relative_resolution``: the fits'
    first gap and rounding (:func:`pipeline.transform.times_between_failures`,
    :func:`pipeline.transform.aggregate_durations`). ``interval``: the rate intervals ("exact",
    "overdispersed", "auto"). ``lemon_fdr``: the lemon test's false-discovery rate.
    ``exposure_basis``: rates divide by "uptime" or "calendar" service time.
    """

    since: datetime | None = None
    until: datetime | None = None
    interruption_window_minutes: float | None = transform.INTERRUPTION_WINDOW_MINUTES
    first_gap: str = "drop"
    relative_resolution: float | None = FIT_RELATIVE_RESOLUTION
    interval: str = "auto"
    lemon_fdr: float = LEMON_FDR
    exposure_basis: str = "uptime"

    def __post_init__(self) -> None:
        if not self.interruption_window_minutes:  # 0 counts every incident, as None does
            object.__setattr__(self, "interruption_window_minutes", None)
        if self.exposure_basis not in transform.EXPOSURE_BASES:
            raise ValueError(
                f"unknown exposure basis {self.exposure_basis!r}; use one of "
                f"{', '.join(transform.EXPOSURE_BASES)}"
            )
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise ValueError(
                f"--since {_text(self.since)} is not before --until {_text(self.until)}: the window is "
                "empty; give a window start earlier than its end"
            )

    def resolved(self, con, inventory: pl.DataFrame) -> AnalysisOptions:
        """These options with ``until`` set: as given, else the latest time the warehouse behind
        ``con`` mentions (:func:`pipeline.transform.observation_end`; of ``inventory`` it reads
        the maxima of ``in_service_from_utc`` and ``in_service_to_utc``, so a frame of those will
        do). A ``since`` at or after that end leaves an empty window: a ValueError naming both
        (exit 2 in the CLI)."""
        if self.until is not None:
            return self
        end = transform.observation_end(warehouse.latest_incident(con), inventory)
        if self.since is not None and self.since >= end:
            raise ValueError(
                f"--since {_text(self.since)} is not before the data's end ({_text(end)}, the latest time "
                "in the warehouse): the window is empty; give an earlier --since"
            )
        return dataclasses.replace(self, until=end)

    @property
    def window_text(self) -> str:
        """The window in words for the outputs: "2026-01-01 00:00 to 2026-03-01 00:00 UTC"."""
        start = f"{self.since:%Y-%m-%d %H:%M} to " if self.since is not None else "until "
        end = f"{self.until:%Y-%m-%d %H:%M} UTC" if self.until is not None else "the data's end"
        return start + end

    def in_window(self, frame: pl.DataFrame, column: str = "timestamp_utc") -> pl.DataFrame:
        """The rows of ``frame`` not before ``since`` (all of them without one); see
        :func:`not_before`."""
        return not_before(frame, self.since, column)


DEFAULT_OPTIONS = AnalysisOptions()


def not_before(frame: pl.DataFrame, since: datetime | None, column: str = "timestamp_utc") -> pl.DataFrame:
    """The rows of ``frame`` whose ``column`` is not before ``since`` (a null time is kept: it is
    not known to be before), all of them when ``since`` is None."""
    if since is None:
        return frame
    return frame.filter(pl.col(column).is_null() | (pl.col(column) >= since))


def before_window(
    since: datetime | None, outages: pl.DataFrame, jobs: pl.DataFrame | None, recoveries: pl.DataFrame
) -> dict[str, int]:
    """How many outages began, Slurm jobs started and training-job interruptions were detected
    before ``since`` (the window leaves them out of repair times and job statistics), by kind;
    empty without ``since``."""
    if since is None:
        return {}
    return {
        "outages": int((outages["start_utc"] < since).sum()),
        "Slurm jobs": 0 if jobs is None else int((jobs["start_utc"] < since).sum()),
        "training-job interruptions": int((recoveries["detected_utc"] < since).sum()),
    }


def before_window_note(since: datetime | None, counts: dict[str, int]) -> str | None:
    """One line naming what lies before the window start besides failures, or None."""
    parts = [f"{n:,} {kind}" for kind, n in counts.items() if n]
    if since is None or not parts:
        return None
    return f"before the window start (--since {_text(since)}) and left out: {', '.join(parts)}"
