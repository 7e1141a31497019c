"""Report sections "Configured jobs" (every ``[[jobs]]`` entry per recovery mode) and "Hot spares"
(each job's spare table: days, goodput and cost for S = 0, 1, 2, ... spares, the recommended S
and its interval ends; :func:`pipeline.projection.spare_advice`). Both come from a
:class:`~pipeline.report.outlook.JobOutlook`'s ``jobs``, ``spares`` and ``spares_summary``."""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.report.charts import WIDTH, mode_color
from pipeline.report.format import duration_text
from pipeline.report.outlook import JobOutlook
from pipeline.report.section import Section

JOBS_SLUG, JOBS_TITLE = "configured-jobs", "Every configured job: training days, goodput and cost"
SPARES_SLUG, SPARES_TITLE = "hot-spares", "Hot spares: what each spare is worth"


def jobs_chart(jobs: pl.DataFrame) -> alt.Chart:
    """Expected training days per job, one bar per recovery mode (none where it cannot finish)."""
    data = jobs.filter(pl.col("expected_days").is_not_null()).select(
        "job", "mode", "expected_days", "goodput", "instances"
    )
    return (
        alt.Chart(data)
        .mark_bar()
        .encode(
            y=alt.Y("job:N", title="job", sort=jobs["job"].unique(maintain_order=True).to_list()),
            yOffset="mode:N",
            x=alt.X("expected_days:Q", title="expected training days"),
            color=alt.Color("mode:N", title="recovery", scale=mode_color(jobs["mode"].unique().to_list())),
            tooltip=[
                "job:N",
                "mode:N",
                alt.Tooltip("instances:Q", format=",.0f"),
                alt.Tooltip("expected_days:Q", format=",.1f", title="expected days"),
                alt.Tooltip("goodput:Q", format=".1%"),
            ],
        )
        .properties(width=WIDTH, height=40 * max(data["job"].n_unique(), 1) + 20)
    )


def spares_chart(spares: pl.DataFrame) -> alt.LayerChart:
    """Expected training days against the number of hot spares per job (log scale: the first
    spares save orders of magnitude); the recommended count is a filled diamond."""
    data = spares.filter(pl.col("expected_days").is_not_null()).select(
        "job", "spares", "expected_days", "free_spare_probability", "replace_hours", "note"
    )
    base = alt.Chart(data).encode(
        x=alt.X("spares:Q", title="hot spares", axis=alt.Axis(tickMinStep=1)),
        y=alt.Y("expected_days:Q", title="expected training days", scale=alt.Scale(type="log")),
        color=alt.Color("job:N", title="job"),
        tooltip=[
            "job:N",
            alt.Tooltip("spares:Q", title="hot spares"),
            alt.Tooltip("free_spare_probability:Q", format=".1%", title="a failure finds a spare"),
            alt.Tooltip("replace_hours:Q", format=",.2f", title="replace time (h)"),
            alt.Tooltip("expected_days:Q", format=",.1f", title="expected days"),
            "note:N",
        ],
    )
    chosen = base.transform_filter(alt.datum.note != "").mark_point(shape="diamond", size=140, filled=True)
    return (base.mark_line(point=True) + chosen).properties(width=WIDTH, height=260)


def _spares_note(outlook: JobOutlook) -> str:
    summary = outlook.spares_summary
    assert summary is not None
    parts = []
    for row in summary.iter_rows(named=True):
        if row["recommended"] is None:
            parts.append(f"{row['job']}: cannot finish at any number of spares.")
            continue
        spread = (
            f" ({row['recommended_low']} to {row['recommended_high']} over {row['intervals']})"
            if row["recommended_low"] is not None and row["recommended_high"] is not None
            else ""
        )
        parts.append(
            f"{row['job']}: hold {row['recommended']}{spread}; the 99% row (a failure finds a free spare "
            f"with ≥ 99% probability) is {row['probability_row']}."
        )
    rule = summary["rule"][0]
    return (
        " ".join(parts)
        + f" Rule: {rule}. A job of N instances with S spares: N + S nodes fail at the job's rate and "
        "are repaired in parallel (the fleet's Kaplan–Meier repair times); a failure finds a free "
        "spare with Engset's probability, else waits for the earliest repair (mean MTTR / (S + 1)) and "
        "stalls until N nodes are up; days by Daly's model on the automatic recovery profile "
        "(docs/projection.md, Hot spares). The headline's hot-spares card is the 99% row."
    )


def spares_card(outlook: JobOutlook) -> list[tuple[str, str, str]]:
    """The headline's hot-spares card: the first job's spare table at its 99% row (the same
    numbers as the table, at the job's own failure rate), and the recommended count."""
    if outlook.spares is None or outlook.spares_summary is None:
        return []
    summary = outlook.spares_summary.row(0, named=True)
    table = outlook.spares.filter(pl.col("job") == summary["job"])
    row = table.filter(pl.col("spares") == summary["probability_row"]).row(0, named=True)
    recommended = (
        "cannot finish at any number of spares"
        if summary["recommended"] is None
        else f"recommended for days and cost: {summary['recommended']:,}"
    )
    return [
        (
            f"Hot spares for {outlook.instances:,} instances",
            f"{row['spares']:,}",
            f"a failure finds a free spare {row['free_spare_probability']:.1%} of the time (the fewest "
            f"with ≥ 99%; MTTR {duration_text(outlook.mean_repair_hours)}); {recommended} (see Hot spares)",
        )
    ]


def planning_sections(outlook: JobOutlook) -> list:
    """The two sections (the spares one a note naming the input when there are no repair times)."""
    out = []
    if outlook.jobs is not None:
        jobs = outlook.jobs.drop(["priced"] + ([] if outlook.priced else ["cost_usd"]))
        cannot = jobs.filter(pl.col("outcome") != "finishes").height
        out.append(
            Section(
                JOBS_SLUG,
                JOBS_TITLE,
                jobs_chart(outlook.jobs),
                jobs,
                note=f"{outlook.jobs['job'].n_unique()} configured job(s), analytic expected values (Daly) "
                "on "
                "the fleet's failure model for each job's size; the first is the one projected in detail "
                "above."
                + (f" {cannot} mode(s) cannot finish (goodput < 1%): no bar, no days." if cannot else "")
                + ("" if outlook.priced else " No price given: costs are left out."),
            )
        )
    if outlook.spares is None:
        out.append(
            Section(
                SPARES_SLUG,
                SPARES_TITLE,
                None,
                note="No repair times: the spare table needs outages with an end (resolved_at, or a "
                "return in the inventory).",
            )
        )
        return out
    columns = ["job", "spares", "free_spare_probability", "mean_wait_hours", "mean_stall_hours",
               "replace_hours", "expected_days", "goodput", "saving_days"]  # fmt: skip
    columns += ["cost_usd", "saving_usd"] if outlook.priced else []
    out.append(
        Section(
            SPARES_SLUG,
            SPARES_TITLE,
            spares_chart(outlook.spares),
            outlook.spares.select(*columns, "note"),
            note=_spares_note(outlook),
        )
    )
    return out
