"""Report section: the failure model's predictions for the fleet's own past Slurm jobs against
what happened (:class:`pipeline.analysis.JobBacktestResult`). Omitted when there are no jobs."""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline import transform
from pipeline.analysis import JobAnalysis
from pipeline.report.charts import WIDTH
from pipeline.report.section import Section

SLUG = "job-backtest"


def calibration_chart(calibration: pl.DataFrame) -> alt.LayerChart:
    """Predicted against observed share of interrupted jobs per bin (one point per bin) with the
    Wilson interval; on the diagonal the predictions were right."""
    data = calibration.select(
        "bin",
        "jobs",
        "interrupted",
        "hazard_low_per_hour",
        "hazard_high_per_hour",
        predicted=pl.col("predicted_share") * 100,
        observed=pl.col("observed_share") * 100,
        low=pl.col("observed_ci_low") * 100,
        high=pl.col("observed_ci_high") * 100,
    )
    top = float(max(data["high"].max(), data["predicted"].max(), 1.0))
    diagonal = alt.Chart(pl.DataFrame({"x": [0.0, top], "y": [0.0, top]})).mark_line(
        strokeDash=[4, 4], color="#888888"
    )
    x = alt.X(
        "predicted:Q", title="predicted share of jobs interrupted (%)", scale=alt.Scale(domain=[0, top])
    )
    base = alt.Chart(data).encode(x=x)
    return (
        diagonal.encode(x="x:Q", y="y:Q")
        + base.mark_rule(strokeWidth=2, color="#4e79a7").encode(y="low:Q", y2="high:Q")
        + base.mark_point(filled=True, size=70, color="#4e79a7").encode(
            y=alt.Y("observed:Q", title="observed share interrupted (%), 95% Wilson interval"),
            tooltip=[
                alt.Tooltip("jobs:Q", format=",", title="jobs"),
                alt.Tooltip("interrupted:Q", format=",", title="interrupted"),
                alt.Tooltip("predicted:Q", format=".1f", title="predicted (%)"),
                alt.Tooltip("observed:Q", format=".1f", title="observed (%)"),
                alt.Tooltip("hazard_low_per_hour:Q", format=".2g", title="predicted per job-hour from"),
                alt.Tooltip("hazard_high_per_hour:Q", format=".2g", title="predicted per job-hour to"),
            ],
        )
    ).properties(width=WIDTH, height=320)


def _table(calibration: pl.DataFrame) -> pl.DataFrame:
    pct = "{:.1%}".format
    return calibration.select(
        pl.format(
            "{}–{}",
            pl.col("hazard_low_per_hour").map_elements("{:.2g}".format, return_dtype=pl.String),
            pl.col("hazard_high_per_hour").map_elements("{:.2g}".format, return_dtype=pl.String),
        ).alias("predicted interruptions per job-hour"),
        pl.col("jobs").alias("jobs"),
        pl.col("interrupted").alias("interrupted"),
        pl.col("predicted_share").map_elements(pct, return_dtype=pl.String).alias("predicted share"),
        pl.format(
            "{} ({}–{})",
            *(
                pl.col(c).map_elements(pct, return_dtype=pl.String)
                for c in ("observed_share", "observed_ci_low", "observed_ci_high")
            ),
        ).alias("observed share (95% CI)"),
    )


def _share(value: float | None) -> str:
    return "not observed" if value is None else f"{value:.0%}"


def backtest_section(jobs: JobAnalysis):
    """The section, or None without jobs that could be scored (the report omits it)."""
    result = jobs.backtest
    if result is None or result.backtest is None:
        return None
    fitted = result.backtest
    counts = transform.rate_source_counts(result.predictions)
    left_out = counts["no history"] + counts["did not run"]
    coverage = fitted.coverage_
    note = (
        f"{fitted.headline.capitalize()}. Each job's prediction uses only failures and exposure before it "
        f"started: its cluster's rate ({counts['cluster']:,} jobs) once the cluster had "
        f"{result.min_history_failures} failures, else the fleet's ({counts['fleet']:,} jobs); "
        f"{left_out:,} jobs left out ({counts['no history']:,} with too little history, "
        f"{counts['did not run']:,} that never ran). Jobs are binned by their predicted interruptions "
        "per job-hour, known at the start; a job stops at its first interruption, so the predicted "
        "share is its expected interruptions over the hours it ran. Time to first interruption against "
        f"its predicted P10–P90: {_share(coverage['before_p10'])} before the P10 (nominal 10%), "
        f"{_share(coverage['within_p10_p90'])} within (80%), {_share(coverage['after_p90'])} after (10%). "
        f"Brier score {fitted.brier_score_:.3f} (always forecasting the observed share: "
        f"{fitted.brier_reference_:.3f})."
    )
    return Section(
        SLUG,
        "Backtest: predicted against actual interruptions of past Slurm jobs",
        calibration_chart(fitted.calibration_),
        _table(fitted.calibration_),
        note=note,
    )
