"""Transform: warehouse tables -> exposure, failure rates and times between failures (Polars).

``fleet`` holds the node and fleet statistics (exposure from service intervals, rates with exact
Poisson intervals, node interruptions, times between failures, category shares, operating
times); ``durations`` rounds gaps to a relative grid and aggregates them into weighted rows for
the fits; ``outages`` pairs interruptions with their end (repair times, downtime, availability)
and removes downtime from exposure; ``jobs`` compares Slurm job interruptions with the node rate.
Callers use this package's names (``from pipeline import transform; transform.failure_rates``),
not the modules.
"""

from pipeline.transform.durations import FLOOR_HOURS, aggregate_durations, relative_grid
from pipeline.transform.fleet import (
    EXPOSURE_KEYS,
    FIRST_GAP_CHOICES,
    INTERRUPTION_WINDOW_MINUTES,
    PERIODS,
    category_shares,
    count_dispersion,
    exposure_estimated,
    exposure_intervals,
    failure_operating_times,
    failure_rates,
    failures_in_service,
    node_interruptions,
    observation_end,
    poisson_interval,
    size_bucket,
    times_between_failures,
)
from pipeline.transform.jobs import job_interruption_rates
from pipeline.transform.outages import (
    END_SOURCES,
    EXPOSURE_BASES,
    GAP_TOLERANCE,
    availability,
    outages,
    uptime_intervals,
)

__all__ = [
    "END_SOURCES",
    "EXPOSURE_BASES",
    "EXPOSURE_KEYS",
    "FLOOR_HOURS",
    "FIRST_GAP_CHOICES",
    "GAP_TOLERANCE",
    "INTERRUPTION_WINDOW_MINUTES",
    "PERIODS",
    "aggregate_durations",
    "availability",
    "category_shares",
    "count_dispersion",
    "exposure_estimated",
    "exposure_intervals",
    "failure_operating_times",
    "failure_rates",
    "failures_in_service",
    "job_interruption_rates",
    "node_interruptions",
    "observation_end",
    "outages",
    "poisson_interval",
    "relative_grid",
    "size_bucket",
    "times_between_failures",
    "uptime_intervals",
]
