"""Analysis: read the warehouse once, run the transforms and fit the models, return one result.

This is the single entry point that the CLI, the report and the notebooks share, so none of them
re-implements the chain warehouse -> transform -> models. :func:`analyze` (fleet.py) builds a
:class:`FleetAnalysis` from the warehouse readers and evidence of failures.py, the job-level
analyses of jobs.py and the repair analyses of repairs.py; outlook.py turns an analysis into the
failure model of a projected job; counts.py counts the failures of ``failcast rates`` inside DuckDB
(the same rules as the transforms, only aggregates reach Python); options.py holds
:class:`AnalysisOptions`, the window and choices every analysis takes.
"""

from pipeline.analysis.counted import CountedFailures
from pipeline.analysis.failures import (
    FAILURE_COLUMNS,
    TREND_SCHEMA,
    NodeAnalysis,
    RateAnalysis,
    cluster_mtbf,
    interval_check,
    left_out_note,
    left_out_warning,
    lemon_evidence,
    node_evidence,
    rate_exposure,
    read_failures,
    trend_tests,
)
from pipeline.analysis.fits import ReliabilityFits
from pipeline.analysis.fleet import (
    PROJECTED_SIZES,
    FleetAnalysis,
    ServiceWindow,
    WindowCheck,
    analyze,
    checked_window,
    require_inventory,
    require_service,
    service_window,
)
from pipeline.analysis.instance_types import InstanceTypeRates, rates_by_instance_type
from pipeline.analysis.jobs import (
    JobAnalysis,
    JobBacktestResult,
    job_backtest,
    job_badput,
    job_interruptions,
    read_job_recoveries,
    read_jobs,
)
from pipeline.analysis.options import (
    DEFAULT_OPTIONS,
    FIT_RELATIVE_RESOLUTION,
    LEMON_FDR,
    AnalysisOptions,
    before_window_note,
)
from pipeline.analysis.outlook import (
    SizeRates,
    configured_jobs,
    failure_model_for,
    measured_recovery_hours,
    rate_model_for,
    repair_curve,
    size_laws_agreement,
    size_rates,
    spares_for_job,
)
from pipeline.analysis.repairs import (
    ALL_OUTAGES,
    REPAIR_SCHEMA,
    RepairAnalysis,
    repair_analysis,
    repair_count_notes,
    repair_curves,
    repair_summary,
)

__all__ = [
    "AnalysisOptions",
    "CountedFailures",
    "DEFAULT_OPTIONS",
    "before_window_note",
    "FAILURE_COLUMNS",
    "FIT_RELATIVE_RESOLUTION",
    "FleetAnalysis",
    "JobAnalysis",
    "NodeAnalysis",
    "RateAnalysis",
    "ReliabilityFits",
    "RepairAnalysis",
    "JobBacktestResult",
    "LEMON_FDR",
    "PROJECTED_SIZES",
    "REPAIR_SCHEMA",
    "TREND_SCHEMA",
    "analyze",
    "cluster_mtbf",
    "configured_jobs",
    "failure_model_for",
    "job_backtest",
    "job_badput",
    "job_interruptions",
    "left_out_note",
    "left_out_warning",
    "lemon_evidence",
    "measured_recovery_hours",
    "interval_check",
    "node_evidence",
    "rate_exposure",
    "rate_model_for",
    "size_rates",
    "SizeRates",
    "read_failures",
    "read_job_recoveries",
    "read_jobs",
    "repair_curve",
    "require_inventory",
    "require_service",
    "ServiceWindow",
    "service_window",
    "WindowCheck",
    "checked_window",
    "repair_count_notes",
    "repair_summary",
    "repair_analysis",
    "repair_curves",
    "rates_by_instance_type",
    "InstanceTypeRates",
    "ALL_OUTAGES",
    "size_laws_agreement",
    "spares_for_job",
    "trend_tests",
]
