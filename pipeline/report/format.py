"""Numbers and column names for people: one place decides how every report table reads.

Tables are built from analysis frames whose columns carry their unit in the name
(``mtbf_hours``, ``rate_per_node_hour``, ``cost_usd``); this module turns such a name into a header
in words with its unit, and a value into text with sensible digits:

* rates per node-hour or GPU-hour are shown in percent per instance-hour (GPU-hour), the unit of
  the published figures (Llama 3.1: 0.0161%), with 3 significant digits;
* shares, goodput, availability and ratios in percent; money in dollars with thousands
  separators, the sign first (-$35,196); hours and days with thousands separators and 3
  significant digits below 1,000;
* counts as integers with separators; time-averaged instance counts rounded to whole instances;
* p-values with 3 digits, below 0.001 as "< 0.001"; timestamps to the second, whole days as dates;
* a duration in a sentence (:func:`duration_text`) in hours, minutes below an hour and seconds
  below a minute, with the digits of the tables; a time in a sentence (:func:`timestamp_text`) to
  the second, never with microseconds;
* a rate interval named by the method that made it (:func:`interval_name`), and what it is for
  (``RATE_INTERVAL_SCOPE``).

A column this module does not know keeps a readable form of its name and the generic number
format, so a new table is never unreadable, only less polished.
"""

from __future__ import annotations

import math
from datetime import datetime, time

import polars as pl

LABELS: dict[str, str] = {
    "cluster_id": "Cluster",
    "node_id": "Node",
    "category": "Category",
    "failure_class": "Class",
    "instance_type": "Instance type",
    "size_bucket": "Size bucket (instances)",
    "instances": "Instances",
    "failures": "Failures",
    "expected_failures": "Expected failures",
    "expected_interruptions": "Expected interruptions",
    "exposure_node_hours": "Exposure (instance-hours)",
    "exposure_gpu_hours": "Exposure (GPU-hours)",
    "exposure_cluster_hours": "Observed (cluster-hours)",
    "observed_node_hours": "Service (node-hours, trend clock)",
    "rate_per_node_hour": "Rate (% per instance-hour)",
    "rate_ci_low": "95% CI low (% per instance-hour)",
    "rate_ci_high": "95% CI high (% per instance-hour)",
    "rate_per_gpu_hour": "Rate (% per GPU-hour)",
    "rate_per_gpu_hour_ci_low": "95% CI low (% per GPU-hour)",
    "rate_per_gpu_hour_ci_high": "95% CI high (% per GPU-hour)",
    "mtbf_hours": "MTBF (h)",
    "mtbf_ci_low_hours": "MTBF 95% CI low (h)",
    "mtbf_ci_high_hours": "MTBF 95% CI high (h)",
    "aic": "AIC",
    "family": "Model",
    "share": "Share",
    "goodput": "Goodput",
    "cost_usd": "Cost ($)",
    "usd": "Saving ($)",
    "crow_beta": "Crow-AMSAA β",
    "crow_beta_ci_low": "β 95% CI low",
    "crow_beta_ci_high": "β 95% CI high",
    "crow_statistic": "Crow-AMSAA statistic",
    "crow_p_value": "Crow-AMSAA p",
    "crow_verdict": "Crow-AMSAA verdict",
    "laplace_statistic": "Laplace U",
    "laplace_p_value": "Laplace p",
    "laplace_verdict": "Laplace verdict",
    "p10_days": "P10 (days)",
    "p50_days": "P50 (days)",
    "p90_days": "P90 (days)",
    "rows_read": "Rows read",
    "rows_ingested": "Stored",
    "rows_duplicate": "Duplicates",
    "rows_rejected": "Rejected",
    "ingested_at_utc": "Ingested (UTC)",
    "sha256": "SHA-256",
    "losses": "Jobs stopped",
    "attributed": "Attributed to a node failure",
    "lost_job_hours": "Job time lost (h)",
    "lost_node_hours": "Node time lost (node-h)",
    "losses_without_node_count": "Without a node count",
    "status": "At the configured interval",
    "checkpoint_interval_hours": "Checkpoint interval (h)",
    "optimal_interval_hours": "Optimal interval (h)",
    "optimal_status": "At the optimal interval",
    "optimal_expected_days": "Optimal: expected (days)",
    "optimal_cost_usd": "Optimal: cost ($)",
    "optimal_goodput": "Optimal: goodput",
    "rate_upper_bound": "95% upper bound (% per instance-hour)",
    "outages": "Outages",
    "unresolved": "Unresolved at window end",
    "downtime_hours": "Downtime (node-hours)",
    "downtime_share": "Share of downtime",
    "availability": "Availability",
    "mttr_hours": "MTTR (h)",
    "repair_hours_p50": "Median repair (h)",
    "repair_hours_p90": "P90 repair (h)",
    "interval": "Interval",
    "dispersion": "Dispersion φ",
    "exposure_basis": "Exposure",
    "exposure_estimated": "Exposure estimated",
}

# unit suffixes of column names, longest first: (suffix, words appended to the label)
_UNITS = (
    ("_ci_low_hours", " 95% CI low (h)"),
    ("_ci_high_hours", " 95% CI high (h)"),
    ("_hours", " (h)"),
    ("_days", " (days)"),
    ("_usd", " ($)"),
    ("_utc", " (UTC)"),
    ("_ci_low", " 95% CI low"),
    ("_ci_high", " 95% CI high"),
)
_WORDS = {"mtbf": "MTBF", "mttr": "MTTR", "aft": "AFT", "gpu": "GPU", "ci": "CI", "p": "p", "id": "id"}

_RATE_PREFIXES = ("rate_per_node_hour", "rate_per_gpu_hour", "rate_ci_", "rate_upper_bound")
_PERCENT = ("share", "goodput", "availability", "percent_of", "_ratio", "_share", "_probability")
_INTEGERS = ("instances", "size_bucket")


def column_label(column: str) -> str:
    """A header in words with its unit: ``mtbf_ci_low_hours`` -> ``MTBF 95% CI low (h)``."""
    if column in LABELS:
        return LABELS[column]
    stem, unit = column, ""
    for suffix, words in _UNITS:
        if column.endswith(suffix) and column != suffix.lstrip("_"):
            stem, unit = column[: -len(suffix)], words
            break
    words = [_WORDS.get(w, w) for w in stem.split("_") if w]
    text = " ".join(words) or column
    return text[:1].upper() + text[1:] + unit


def p_value_text(p: float) -> str:
    """``p = 0.042`` or ``p < 0.001`` (the table cell of :func:`format_value` after "p")."""
    cell = format_value("p_value", p)
    return f"p {cell}" if cell.startswith("<") else f"p = {cell}"


def _significant(value: float, digits: int) -> str:
    """``digits`` significant digits with thousands separators, no exponent for ordinary sizes."""
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(digits - 1 - magnitude, 0)
    return f"{value:,.{decimals}f}"


def usd(value: float, decimals: int = 0, suffix: str = "") -> str:
    """Dollars with separators, the sign before the symbol: ``-$35,196`` (not ``$-35,196``), and
    no sign on an amount that rounds to zero."""
    text = f"{abs(value):,.{decimals}f}"
    sign = "-" if value < 0 and text.strip("0.,") else ""
    return f"{sign}${text}{suffix}"


def format_value(column: str, value) -> str:
    """``value`` of ``column`` as text for a table cell (see the module docstring)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d" if value.time() == time() else TIMESTAMP_FORMAT)
    if not isinstance(value, float):
        return str(value)
    if math.isnan(value):
        return "–"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    if column.startswith(_RATE_PREFIXES):
        return f"{_significant(value * 100, 3)}%"
    if column.endswith("_usd") or column == "usd":
        return usd(value)
    if column == "availability":  # 99.8% and 99.5% are far apart for a fleet: two decimals
        return f"{value:.2%}"
    if column in ("share", "goodput") or any(p in column for p in _PERCENT):
        return f"{value:.1%}"
    if column.endswith("p_value"):
        return "< 0.001" if value < 0.001 else f"{value:.3f}"  # beyond 3 decimals digits mean nothing
    if column in _INTEGERS:
        return f"{value:,.0f}"
    if abs(value) >= 1e12 or abs(value) < 1e-3:  # an unbounded interval's end (1.95e+23 h), or
        return f"{value:.3g}"  # its other end (8.79e-09 h): digits past the third mean nothing
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if column.endswith(("_hours", "_days")) or "_hours_" in column:  # 15.2 h, 0.0833 h, repair_hours_p50
        # alike: more digits are noise
        return _significant(value, 3)
    return _significant(value, 4 if abs(value) >= 1 else 3)


def duration_text(hours: float) -> str:
    """A duration for a sentence or a card, with the digits of a table's hours: ``1,734 h``,
    ``7.52 h``; below an hour in minutes (``45.1 min``), below a minute in seconds (``1.37 s``), so
    a small MTBF never reads ``0.0 min``; ``∞`` for an unbounded one."""
    if hours is None or math.isnan(hours):
        return "–"
    if math.isinf(hours):
        return "∞ h"
    for unit, per_hour in (("h", 1), ("min", 60), ("s", 3600)):
        if abs(hours) * per_hour >= 1 or unit == "s":
            return f"{format_value('duration_hours', hours * per_hour)} {unit}"
    raise AssertionError("unreachable")


TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S"


def timestamp_text(value: datetime) -> str:
    """A UTC time for a sentence: to the second (``2025-07-28 19:01:29 UTC``), never the
    microseconds ``str(datetime)`` prints."""
    return f"{value.strftime(TIMESTAMP_FORMAT)} UTC"


INTERVAL_NAMES = {
    "exact": "exact Poisson (Garwood)",
    "overdispersed": "quasi-Poisson (overdispersed)",
}


def interval_name(method: str) -> str:
    """The words for a rate interval's method (``exact``, ``overdispersed``: the ``interval``
    column of ``failcast rates`` and ``FleetAnalysis.interval_method``)."""
    return INTERVAL_NAMES.get(method, method)


# What a rate interval is for, said wherever one is shown (report, failcast rates, docs); the
# numbers are measured by tests/test_rate_interval_scope.py.
RATE_INTERVAL_SCOPE = (
    "A rate's 95% interval is about this fleet as it is, its lemon nodes included: on simulated "
    "fleets with 5% lemon nodes it covers this fleet's true rate about 95% of the time, but the "
    "true rate of a freshly drawn fleet of the same kind only 64–76% of the time. It is not a "
    "prediction for another fleet."
)


def text_table(frame: pl.DataFrame, *, max_rows: int = 200) -> str:
    """``frame`` as an aligned plain-text table for a terminal: headers by :func:`column_label`,
    cells by :func:`format_value`, numbers right-aligned. At most ``max_rows`` rows, then a line
    saying how many more (``--json`` has them all). Text from logs is not escaped here: callers
    print it through the CLI's ``safe_lines``."""
    shown = frame.head(max_rows)
    numeric = [dtype.is_numeric() for dtype in shown.dtypes]
    cells = [
        [format_value(c, v) for c, v in zip(shown.columns, row, strict=True)] for row in shown.iter_rows()
    ]
    header = [column_label(c) for c in shown.columns]
    widths = (
        [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(header)]
        if cells
        else [len(h) for h in header]
    )

    def line(values: list[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)
        ).rstrip()

    lines = [line(header), "  ".join("-" * w for w in widths), *(line(r) for r in cells)]
    if frame.height > max_rows:
        lines.append(f"... {frame.height - max_rows:,} more rows (--json prints all)")
    return "\n".join(lines)
