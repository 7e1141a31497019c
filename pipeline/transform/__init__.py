"""Transform: warehouse tables -> exposure, failure rates and times between failures (Polars).

``fleet`` holds the node and fleet statistics (exposure from service intervals, the interval rule,
rates with exact Poisson intervals, category shares); ``interruptions`` collapses faults into node
interruptions and gives times between failures and operating times; ``dispersion`` measures over-
dispersion and picks the rate interval; ``durations`` rounds gaps to a relative grid and aggregates
them into weighted rows for the fits; ``curves`` thins a curve to a bounded number of points;
``outages`` removes the outages' downtime from exposure (uptime) and gives availability; ``jobs``
compares Slurm job interruptions with the node rate; ``backtest`` predicts each job's interruptions
from the data before it started; ``reliability`` gives the points of the Weibull, mean cumulative function and
Duane plots; ``restarts`` measures detection and restart times of training jobs from their logs;
``badput`` adds up the job hours failures cost, per failure class. Callers use this package's names
(``from pipeline import transform; transform.failure_rates``), not the modules.
"""

from pipeline.transform.backtest import (
    MIN_HISTORY_FAILURES,
    RATE_SOURCES,
    SCORED,
    job_predictions,
    rate_source_counts,
    rates_as_of,
)
from pipeline.transform.badput import BADPUT_SCHEMA, badput_by_class
from pipeline.transform.curves import MAX_CURVE_POINTS, downsample
from pipeline.transform.dispersion import (
    INTERVAL_METHODS,
    DispersionTest,
    count_dispersion,
    dispersion_test,
)
from pipeline.transform.durations import FLOOR_HOURS, aggregate_durations, relative_grid
from pipeline.transform.fleet import (
    EXPOSURE_KEYS,
    PERIODS,
    category_shares,
    exposure_estimated,
    exposure_intervals,
    exposure_sums,
    failure_rates,
    failures_in_service,
    failures_left_out,
    in_service,
    in_service_rows,
    observation_end,
    poisson_interval,
    poisson_upper_bound,
    rates_from_counts,
    size_bucket,
)
from pipeline.transform.interruptions import (
    FIRST_GAP_CHOICES,
    INTERRUPTION_WINDOW_MINUTES,
    INTERVAL_MATCH_COLUMNS,
    chained_starts,
    failure_operating_times,
    interval_matches,
    times_between_failures,
)
from pipeline.transform.jobs import job_interruption_rates
from pipeline.transform.keys import KeyCodes, key_codes
from pipeline.transform.matching import (
    BEFORE_WINDOW_REASON,
    CHOSEN_REASONS,
    LEFT_OUT_REASONS,
    Match,
    left_out_reasons,
)
from pipeline.transform.outages import (
    END_SOURCES,
    EXPOSURE_BASES,
    GAP_TOLERANCE,
    availability,
    uptime_intervals,
    uptime_rows,
)
from pipeline.transform.reliability import (
    duane_points,
    mean_cumulative_function,
    weibull_plot_line,
    weibull_plot_points,
)
from pipeline.transform.restarts import job_recoveries, recovery_hours

__all__ = [
    "BADPUT_SCHEMA",
    "END_SOURCES",
    "EXPOSURE_BASES",
    "EXPOSURE_KEYS",
    "FLOOR_HOURS",
    "FIRST_GAP_CHOICES",
    "GAP_TOLERANCE",
    "INTERRUPTION_WINDOW_MINUTES",
    "INTERVAL_MATCH_COLUMNS",
    "KeyCodes",
    "INTERVAL_METHODS",
    "MAX_CURVE_POINTS",
    "BEFORE_WINDOW_REASON",
    "CHOSEN_REASONS",
    "Match",
    "in_service_rows",
    "LEFT_OUT_REASONS",
    "PERIODS",
    "DispersionTest",
    "aggregate_durations",
    "badput_by_class",
    "availability",
    "category_shares",
    "chained_starts",
    "count_dispersion",
    "dispersion_test",
    "downsample",
    "MIN_HISTORY_FAILURES",
    "RATE_SOURCES",
    "SCORED",
    "duane_points",
    "exposure_estimated",
    "exposure_intervals",
    "exposure_sums",
    "failure_operating_times",
    "failure_rates",
    "failures_in_service",
    "failures_left_out",
    "in_service",
    "interval_matches",
    "key_codes",
    "left_out_reasons",
    "job_interruption_rates",
    "mean_cumulative_function",
    "job_predictions",
    "job_recoveries",
    "observation_end",
    "poisson_interval",
    "poisson_upper_bound",
    "rate_source_counts",
    "rates_from_counts",
    "rates_as_of",
    "recovery_hours",
    "relative_grid",
    "size_bucket",
    "times_between_failures",
    "uptime_intervals",
    "uptime_rows",
    "weibull_plot_line",
    "weibull_plot_points",
]
