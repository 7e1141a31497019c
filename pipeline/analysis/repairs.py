"""Outages and repair: the repair summary by any key (``failcast repairs``), and what an analysis
keeps of its outages (:class:`RepairAnalysis`: the summaries, fit and curves the report and the
metrics show, made once; issue 27). Measured recovery and hot spares:
:mod:`pipeline.analysis.outlook`, which reads a whole analysis."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from pipeline import models, transform

REPAIR_SCHEMA = {
    "interruptions": pl.Int64,
    "outages": pl.Int64,
    "interruptions_while_down": pl.Int64,
    "zero_length_repairs": pl.Int64,
    "unresolved": pl.Int64,
    "unknown_end": pl.Int64,
    "downtime_hours": pl.Float64,
    "availability": pl.Float64,
    "mttr_hours": pl.Float64,
    "mttr_ci_low_hours": pl.Float64,
    "mttr_ci_high_hours": pl.Float64,
    "mttr_restricted": pl.Boolean,
    "repair_hours_p50": pl.Float64,
    "repair_hours_p50_ci_low": pl.Float64,
    "repair_hours_p50_ci_high": pl.Float64,
    "repair_hours_p90": pl.Float64,
    "repair_hours_p90_ci_low": pl.Float64,
    "repair_hours_p90_ci_high": pl.Float64,
}


_COUNT, _DOWNTIME_US = "_outages", "downtime_us"
"""The columns of grouped outages (:func:`pipeline.analysis.downtime.repair_groups`): how many
outages a row stands for, their downtime in whole microseconds."""
NODE_PROPERTIES = ("instance_type",)
"""Outage keys taken from the node's service interval at the outage's start (are one hardware
type's repairs slower?)."""
_NOT_KEYS = frozenset(  # outage columns that are measurements, not groups
    {
        "categories",
        "faults",
        "last_fault_utc",
        "start_utc",
        "end_utc",
        "interruptions",
        "repair_hours",
        "resolved",
        "downtime_hours",
        _COUNT,
        _DOWNTIME_US,
    }
)


def _with_node_properties(outages: pl.DataFrame, exposure: pl.DataFrame, by: Sequence[str]) -> pl.DataFrame:
    """``outages`` with the :data:`NODE_PROPERTIES` in ``by``, from the node's service interval
    that began last before the outage did (null for an outage before any)."""
    wanted = [k for k in NODE_PROPERTIES if k in by and k not in outages.columns]
    if not wanted:
        return outages
    intervals = exposure.select("cluster_id", "node_id", pl.col("start_utc").alias("_from"), *wanted)
    return (
        outages.sort("start_utc")
        .join_asof(
            intervals.sort("_from"),
            left_on="start_utc",
            right_on="_from",
            by=["cluster_id", "node_id"],
            check_sortedness=False,  # sorted here; Polars cannot check it within groups
        )
        .drop("_from")
    )


def repair_summary(
    outages: pl.DataFrame, exposure: pl.DataFrame, uptime: pl.DataFrame, by: Sequence[str] = ()
) -> pl.DataFrame:
    """One row per group of ``by`` (an outage's cluster_id, node_id, category, failure_class ...,
    or the node's instance_type, :data:`NODE_PROPERTIES`):
    outages, ``interruptions_while_down`` (interruptions that began while their node was already
    down: part of that outage), ``zero_length_repairs`` (resolved when they began: 0 h),
    ``unresolved`` (no end by the window end: right-censored), ``unknown_end`` (no end
    recorded but the node failed again: left out of the repair statistics), downtime, the
    Kaplan–Meier median (``repair_hours_p50``) and p90 with intervals, the mean (MTTR, restricted
    when the longest repair is open: :class:`pipeline.models.RepairTimes`) and, when every key
    is a property of the node (cluster_id, node_id, instance_type), ``availability`` = uptime / (uptime +
    downtime). Statistics of a group without a completed repair are null."""
    return _summary_with_fits(outages, exposure, uptime, by)[0]


def _as_groups(outages: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """The columns the statistics read, as rows that each stand for ``_outages`` outages: grouped
    outages as they are; outage rows one each, their downtime in whole microseconds (what the
    hours were computed from: ``round`` gives it back exactly below 47 years), so both sum it
    exactly and in any order."""
    columns = [*keys, "interruptions", "repair_hours", "resolved"]
    if _COUNT in outages.columns:
        return outages.select(*columns, _COUNT, _DOWNTIME_US)
    microseconds = (pl.col("downtime_hours") * 3_600_000_000).round().cast(pl.Int64)
    return outages.select(*columns, pl.lit(1, pl.Int64).alias(_COUNT), microseconds.alias(_DOWNTIME_US))


def _hours(microseconds: pl.Expr) -> pl.Expr:
    return microseconds.cast(pl.Float64) / 1_000_000 / 3600


def _summary_with_fits(
    outages: pl.DataFrame, exposure: pl.DataFrame, uptime: pl.DataFrame, by: Sequence[str]
) -> tuple[pl.DataFrame, list[tuple[tuple, models.RepairTimes]]]:
    """:func:`repair_summary` and each group's repair-time fit (its key values, the fit) for the
    groups with a completed repair: the fits the summary made, for the curves drawn of them.
    ``outages``: one row per outage, or grouped (:func:`pipeline.analysis.downtime.repair_groups`:
    ``_outages`` outages a row, ``interruptions`` and ``downtime_us`` their sums), which gives the
    same counts, sums and fits (the Kaplan–Meier fit weighs each repair time by its outages)."""
    outages = _with_node_properties(outages, exposure, by)
    unknown = [k for k in by if k not in outages.columns or k in _NOT_KEYS]
    if unknown:
        keys = dict.fromkeys([*(c for c in outages.columns if c not in _NOT_KEYS), *NODE_PROPERTIES])
        raise ValueError(f"cannot group repairs by {unknown}; use any of {', '.join(keys)}")
    keys = list(by)
    # the columns the statistics read: each group below is a copy of its rows (5 M outages at 10 M
    # availability rows)
    outages = _as_groups(outages, keys)
    node_keys = all(k in ("cluster_id", "node_id", *NODE_PROPERTIES) for k in keys)
    share = None
    if node_keys:
        down = outages.group_by(keys or [pl.lit(0).alias("_all")]).agg(
            downtime_hours=_hours(pl.col(_DOWNTIME_US).sum())
        )
        share = transform.availability(exposure, uptime, down.drop("_all", strict=False), keys)
        share = share.select(*keys, "availability")
    rows, fits = [], []
    groups = outages.group_by(keys, maintain_order=True) if keys else [((), outages)]
    for values, group in groups:
        row = dict(zip(keys, values, strict=True)) | dict.fromkeys(REPAIR_SCHEMA)
        known = group.filter(pl.col("repair_hours").is_not_null())
        count, interruptions = int(group[_COUNT].sum()), int(group["interruptions"].sum())
        row |= {
            "interruptions": interruptions,
            "outages": count,
            "interruptions_while_down": interruptions - count,
            "zero_length_repairs": int(known.filter(pl.col("repair_hours") == 0)[_COUNT].sum()),
            "unresolved": int(known.filter(~pl.col("resolved"))[_COUNT].sum()),
            "unknown_end": count - int(known[_COUNT].sum()),
            "downtime_hours": group.select(_hours(pl.col(_DOWNTIME_US).sum())).item(),
        }
        if known["resolved"].any():
            fit = models.RepairTimes().fit(known["repair_hours"], known["resolved"], known[_COUNT])
            fits.append((tuple(values), fit))
            (p50, p50_low, p50_high), (p90, p90_low, p90_high) = fit.quantiles_[0.5], fit.quantiles_[0.9]
            row |= {
                "mttr_hours": fit.mean_hours_,
                "mttr_ci_low_hours": fit.mean_confidence_interval_[0],
                "mttr_ci_high_hours": fit.mean_confidence_interval_[1],
                "mttr_restricted": fit.mean_restricted_,
                "repair_hours_p50": p50,
                "repair_hours_p50_ci_low": p50_low,
                "repair_hours_p50_ci_high": p50_high,
                "repair_hours_p90": p90,
                "repair_hours_p90_ci_low": p90_low,
                "repair_hours_p90_ci_high": p90_high,
            }
        rows.append(row)
    schema = {k: outages.schema[k] for k in keys} | REPAIR_SCHEMA
    frame = pl.DataFrame(rows, schema=schema, orient="row")
    if share is not None and keys:
        frame = frame.drop("availability").join(share, on=keys, how="left").select(list(schema))
    elif share is not None:
        frame = frame.with_columns(availability=pl.lit(share["availability"].item()))
    return (frame.sort(keys) if keys else frame), fits


ALL_OUTAGES = "all outages"
"""The ``group`` of the whole fleet's curve in :attr:`RepairAnalysis.curves`."""


def repair_curves(fits: Sequence[tuple[str, models.RepairTimes]]) -> pl.DataFrame:
    """The Kaplan–Meier curves of ``fits`` ((group, fit), in the order drawn) at their step
    points (``hours``, ``unrepaired``, ``group``), thinned to one budget of
    :data:`pipeline.transform.MAX_CURVE_POINTS` for all of them (at least 2 a curve, its first
    and last kept): a curve's points never grow with the outages it was fitted on."""
    schema = {"hours": pl.Float64, "unrepaired": pl.Float64, "group": pl.String}
    if not fits:
        return pl.DataFrame(schema=schema)
    per_curve = max(transform.MAX_CURVE_POINTS // len(fits), 2)
    return pl.concat(
        transform.downsample(
            pl.DataFrame({"hours": fit.timeline_hours_, "unrepaired": fit.survival_, "group": group}, schema),
            per_curve,
        )
        for group, fit in fits
    )


def repair_count_notes(total: dict) -> list[str]:
    """The counts of a :func:`repair_summary` row that change how its repair times read, in the
    words ``failcast repairs`` and the report both use: repairs of 0 h, interruptions folded into
    an outage because their node was already down."""
    notes = []
    if zero := total["zero_length_repairs"]:
        they = "repairs ended when they" if zero != 1 else "repair ended when it"
        notes.append(f"{zero:,} {they} began (resolved_at = start): counted as 0 h")
    if during := total["interruptions_while_down"]:
        began = "interruptions began" if during != 1 else "interruption began"
        notes.append(f"{during:,} {began} while their node was already down: part of that outage")
    return notes


@dataclass(frozen=True)
class RepairAnalysis:
    """The repair part of an analysis (:class:`pipeline.analysis.FleetAnalysis` ``repairs``), what
    the repair sections, the recovery table, the metrics and the spare pool take: aggregates of
    the outages (:func:`pipeline.analysis.downtime.outages`; with a window start, those that began
    in the window), computed once by :func:`repair_analysis`, no outage rows (issue 27).

    ``total``, ``by_cluster`` and ``by_category``: :func:`repair_summary` of the whole fleet (one
    row, as a dict), per cluster and per category (availability from the calendar service
    intervals and the exposure rates divide by, the calendar one for ``exposure_basis``
    "calendar"). ``times``: the whole fleet's repair-time fit (None without a completed repair).
    ``curves``: the Kaplan–Meier curves the report draws (:func:`repair_curves`), the fleet's
    (group :data:`ALL_OUTAGES`) then each category's in name order."""

    times: models.RepairTimes | None
    total: dict
    by_cluster: pl.DataFrame
    by_category: pl.DataFrame
    curves: pl.DataFrame
    exposure_basis: str

    @property
    def outages(self) -> int:
        """How many outages (in the window) the repair statistics count."""
        return self.total["outages"]


def repair_analysis(
    outages: pl.DataFrame | Mapping[tuple[str, ...], pl.DataFrame],
    exposure: pl.DataFrame,
    uptime: pl.DataFrame,
    exposure_basis: str,
) -> RepairAnalysis:
    """The :class:`RepairAnalysis` of ``outages``: their rows, or grouped for each summary as
    ``analyze`` reads them (:func:`pipeline.analysis.downtime.repair_groups`, by the summary's
    keys). Each summary once (the report and the metrics share them), its fits reused for the
    curves and ``times``."""

    def summary(by: tuple[str, ...]):
        rows = outages if isinstance(outages, pl.DataFrame) else outages[by]
        return _summary_with_fits(rows, exposure, uptime, list(by))

    total, fleet_fit = summary(())
    by_category, category_fits = summary(("category",))
    by_cluster, _ = summary(("cluster_id",))
    # categories in name order (a null one first, as the table sorts): the page's data does not
    # change from run to run with Polars' hashing
    categories = sorted(category_fits, key=lambda item: (item[0][0] is not None, item[0][0] or ""))
    curves = [(ALL_OUTAGES, fit) for _, fit in fleet_fit] + [(c, fit) for (c,), fit in categories]
    return RepairAnalysis(
        times=fleet_fit[0][1] if fleet_fit else None,
        total=total.row(0, named=True),
        by_cluster=by_cluster,
        by_category=by_category,
        curves=repair_curves(curves),
        exposure_basis=exposure_basis,
    )
