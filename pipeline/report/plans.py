"""The frames of the report's planning sections, from projections: every configured job per
recovery mode and each job's spare table (:mod:`.planning` draws them; :mod:`.outlook` puts them
in a :class:`~pipeline.report.outlook.JobOutlook`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import polars as pl

from pipeline import projection as proj


def jobs_frames(specs: Sequence[proj.JobSpec], first: proj.Projection) -> dict[str, pl.DataFrame]:
    """Every job per mode (``jobs``) and what each mode saves over the job's baseline
    (``job_savings``: job, baseline, mode, days, percent, usd; only between modes that both
    finish, usd null without a price), analytic (the first job's projection is ``first``)."""
    rows, savings = [], []
    for spec in specs:
        p = first if spec is specs[0] else proj.project(spec, monte_carlo_runs=0)
        rows += [
            {
                "job": spec.name,
                "instances": spec.instances,
                "gpus_per_instance": spec.gpus_per_instance,
                "gpu_hours_of_work": spec.work_gpu_hours,
                "mode": m.mode,
                "outcome": m.status,
                "expected_days": m.expected_days if m.finishes else None,
                "goodput": m.goodput,
                "expected_interruptions": m.expected_interruptions if m.finishes else None,
                "cost_usd": m.cost_usd if m.finishes else None,
                "priced": spec.price_per_gpu_hour_usd is not None,
            }
            for m in p.modes.values()
        ]
        savings += [{"job": spec.name, **dataclasses.asdict(s)} for s in p.savings]
    floats = ("expected_days", "expected_interruptions", "cost_usd")
    schema = {"job": pl.String, "baseline": pl.String, "mode": pl.String, "days": pl.Float64,
              "percent": pl.Float64, "usd": pl.Float64}  # fmt: skip
    return {
        "jobs": pl.DataFrame(rows, infer_schema_length=None).with_columns(pl.col(*floats).cast(pl.Float64)),
        "job_savings": pl.DataFrame(savings, schema=schema),
    }


def spares_frames(
    specs: Sequence[proj.JobSpec], repair: proj.RepairCurve | None
) -> dict[str, pl.DataFrame | None]:
    """The spare table and recommendation of every job (none without repair times)."""
    if repair is None:
        return {"spares": None, "spares_summary": None}
    tables, summary = [], []
    for spec in specs:
        advice = proj.spare_advice(spec, repair)
        note = pl.concat_str(
            pl.when(pl.col("spares") == advice.recommended).then(pl.lit("recommended")).otherwise(pl.lit("")),
            pl.when(pl.col("spares") == advice.probability_row)
            .then(pl.lit(f"{advice.probability:.0%} row"))
            .otherwise(pl.lit("")),
            separator=" ",
        ).str.strip_chars()
        tables.append(advice.table.with_columns(job=pl.lit(spec.name), note=note))
        summary.append(
            {
                "job": spec.name,
                "recommended": advice.recommended,
                "recommended_low": advice.low,
                "recommended_high": advice.high,
                "probability_row": advice.probability_row,
                "rule": advice.rule,
                "intervals": advice.intervals,
            }
        )
    return {
        "spares": pl.concat(tables, how="vertical_relaxed"),
        "spares_summary": pl.DataFrame(summary, infer_schema_length=None),
    }
