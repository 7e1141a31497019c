"""LANL failure records 1996-2005 (LA-UR-05-7318; Schroeder & Gibson, DSN 2006) -> canonical frames.

One record = one node interruption with start, fix and root cause. Choices (docs/public-data.md):

* **Times.** ``m/d/yyyy H:MM`` local time at Los Alamos (America/Denver). ``Down Time`` agrees with
  the DST-aware difference (it is 60 min longer across the October fall-back), so the times are
  local; the one ambiguous fall-back time is read as the earlier instant. ``repair_minutes`` is the
  operator's ``Down Time``.
* **Root cause -> category.** Hardware -> hardware (node hardware of a fleet without GPUs),
  Software -> software, Network -> network, Facilities -> facilities, Human Error -> human_error,
  Undetermined and the 453 records with no cause -> undetermined (nobody could say why the node
  went down). ``root_cause`` and ``sub_cause`` keep the original blame (null for no cause).
* **Exposure.** ``nodes`` slots per system: every node with records, plus unrecorded numbers from
  0 up until the system has ``nodes`` slots (systems 11 and 14 number some nodes beyond their node
  count, e.g. node 578 in a 256-node system). A slot with records is in service over the
  union of its node sets' production -> decommission months (month precision: from the first day of
  the production month to the first day after the decommission month); a slot without records gets
  its system's most common node set. ``current`` and later decommissions end at the last record of
  the data set (2005-09-09). ``before tracking`` starts at the month of the system's first record.
  System 17 has no metadata: its 126 incidents are kept, it has no inventory, so rates leave it out.
* LANL counts no GPUs; ``gpus_per_node`` is 1 rather than 0 (which the warehouse accepts for CPU
  nodes) so that per-GPU-hour rates exist and equal per-node-hour rates, the unit LANL baselines are
  compared in. ``procs_per_node`` is kept as an extra column.
* The data set's last record ends every ``current`` interval; under the closed-interval rule
  (:func:`pipeline.transform.in_service`) that record counts as a failure in service.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import polars as pl

from pipeline.categories import FailureCategory
from pipeline.readers import public_data
from pipeline.readers.contract import Head, ReadContext
from pipeline.readers.public_data import CanonicalFrames, merge_intervals, read_text_csv
from pipeline.store.files import FileSummary

LANL_TIMEZONE = "America/Denver"
ROOT_CAUSES = ("Facilities", "Hardware", "Human Error", "Network", "Undetermined", "Software")
CAUSE_CATEGORIES: dict[str | None, FailureCategory] = {
    "Hardware": FailureCategory.HARDWARE,
    "Software": FailureCategory.SOFTWARE,
    "Network": FailureCategory.NETWORK,
    "Facilities": FailureCategory.FACILITIES,
    "Human Error": FailureCategory.HUMAN_ERROR,
    "Undetermined": FailureCategory.UNDETERMINED,
    None: FailureCategory.UNDETERMINED,
}
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _month_start(text: str | None) -> datetime | None:
    """``5-Apr`` -> 2005-04-01, ``Jan-97`` -> 1997-01-01; ``current``/``before tracking`` -> None."""
    if text is None or text in ("current", "before tracking"):
        return None
    first, _, second = text.partition("-")
    year, month = (first, second) if first.isdigit() else (second, first)
    if month not in _MONTHS or not year.isdigit():
        raise ValueError(f"LANL date {text!r} is not yy-Mon or Mon-yy")
    yy = int(year)
    return datetime(2000 + yy if yy < 50 else 1900 + yy, _MONTHS.index(month) + 1, 1)


def _local_to_utc(column: str) -> pl.Expr:
    return (
        pl.col(column)
        .str.to_datetime("%m/%d/%Y %H:%M", time_unit="us")
        .dt.replace_time_zone(LANL_TIMEZONE, ambiguous="earliest")
        .dt.convert_time_zone("UTC")
    )


def _month_expr(column: str, mapping: dict[str, datetime | None]) -> pl.Expr:
    return pl.col(column).replace_strict(mapping, default=None, return_dtype=pl.Datetime("us"))


def read_lanl(path: Path | str) -> CanonicalFrames:
    """Read the LANL CSV (plain or gzip) into canonical incidents, inventory and a ``systems`` extra."""
    path = Path(path)
    raw = read_text_csv(path)
    missing = [
        c for c in ("System", "nodenumz", "Prob Started", "Prob Fixed", *ROOT_CAUSES) if c not in raw.columns
    ]
    if missing:
        raise ValueError(f"{path}: not the LANL failure CSV (missing columns {missing})")
    raw = raw.with_row_index("line", offset=2)

    cause = pl.coalesce(pl.when(pl.col(c).is_not_null()).then(pl.lit(c)) for c in ROOT_CAUSES)
    sub_cause = pl.coalesce(pl.col(c) for c in ROOT_CAUSES)
    records = raw.with_columns(
        timestamp=_local_to_utc("Prob Started"),
        resolved_at=_local_to_utc("Prob Fixed"),
        cluster_id=pl.lit("lanl-") + pl.col("System").str.zfill(2),
        node_id=pl.col("nodenumz"),
        root_cause=cause,
        sub_cause=sub_cause,
        repair_minutes=pl.col("Down Time").cast(pl.Float64),
    )
    categories = {k: v.value for k, v in CAUSE_CATEGORIES.items() if k is not None}
    incidents = records.select(
        "timestamp",
        "cluster_id",
        "node_id",
        category=pl.col("root_cause").replace_strict(
            categories, default=CAUSE_CATEGORIES[None].value, return_dtype=pl.String
        ),
        gpu_index=pl.lit(None, pl.Int64),
        job_id=pl.lit(None, pl.String),
        message=pl.format(
            "LANL record {}: {} / {}",
            "line",
            pl.col("root_cause").fill_null("no cause"),
            pl.col("sub_cause").fill_null("-"),
        ),
        resolved_at="resolved_at",
        system=pl.col("System").cast(pl.Int64),
        root_cause="root_cause",
        sub_cause="sub_cause",
        repair_minutes="repair_minutes",
        purpose="purpose",
        line=pl.col("line").cast(pl.Int64),
    )
    data_end = incidents["timestamp"].max()
    inventory, systems = _inventory(records, data_end)
    return CanonicalFrames("lanl", incidents, inventory, {"systems": systems})


def _inventory(records: pl.DataFrame, data_end: datetime) -> tuple[pl.DataFrame, pl.DataFrame]:
    texts = pl.concat([records["node prod"], records["node decom"]]).drop_nulls().unique().to_list()
    months = {t: _month_start(t) for t in texts}
    known = records.filter(pl.col("nodes").is_not_null()).with_columns(
        first_utc=pl.col("timestamp").min().over("cluster_id").dt.truncate("1mo").dt.replace_time_zone(None),
        prod=_month_expr("node prod", months),
        decom_next=_month_expr("node decom", months).dt.offset_by("1mo"),
    )
    end = data_end.replace(tzinfo=None)
    node_sets = known.with_columns(
        start=pl.col("prod").fill_null(pl.col("first_utc")),
        end=pl.min_horizontal(pl.col("decom_next").fill_null(pl.lit(end)), pl.lit(end)),
        procs_per_node=pl.col("procsinnode").cast(pl.Int64),
        instance_type=pl.col("machine type") + "-" + pl.col("procsinnode") + "p",
    )
    systems = (
        node_sets.group_by("cluster_id", "System", "machine type", "nodes", "procstot")
        .agg(
            pl.len().alias("records"),
            pl.col("start").min().alias("first_in_service"),
            pl.col("end").max().alias("last_in_service"),
        )
        .select(
            "cluster_id",
            system=pl.col("System").cast(pl.Int64),
            machine_type="machine type",
            nodes=pl.col("nodes").cast(pl.Int64),
            procs_total=pl.col("procstot").cast(pl.Int64),
            records="records",
            first_in_service="first_in_service",
            last_in_service="last_in_service",
        )
        .sort("system")
    )
    per_node = (
        node_sets.group_by("cluster_id", "node_id", "start", "end")
        .agg(pl.len().alias("n"), pl.col("instance_type").mode().first(), pl.col("procs_per_node").max())
        .filter(pl.col("end") > pl.col("start"))
    )
    # a slot without records gets its system's most common node set
    modal = per_node.sort("n", descending=True).group_by("cluster_id").first().drop("node_id", "n")
    slots = systems.select(
        "cluster_id", node_id=pl.int_ranges(0, pl.col("nodes")).cast(pl.List(pl.String))
    ).explode("node_id")
    # systems 11 and 14 number some nodes beyond their node count: fill only the missing slots
    recorded = per_node.group_by("cluster_id").agg(recorded=pl.col("node_id").n_unique())
    unseen = (
        slots.join(per_node, on=["cluster_id", "node_id"], how="anti")
        .join(systems.select("cluster_id", "nodes"), on="cluster_id")
        .join(recorded, on="cluster_id", how="left")
        .filter(pl.int_range(pl.len()).over("cluster_id") < pl.col("nodes") - pl.col("recorded").fill_null(0))
        .join(modal, on="cluster_id")
    )
    attrs = pl.concat([per_node.drop("n"), unseen.select(per_node.drop("n").columns)])
    merged = merge_intervals(
        attrs.select("cluster_id", "node_id", "start", "end"), ["cluster_id", "node_id"], "start", "end"
    )
    labels = attrs.group_by("cluster_id", "node_id").agg(
        pl.col("instance_type").first(), pl.col("procs_per_node").max()
    )
    inventory = (
        merged.join(labels, on=["cluster_id", "node_id"])
        .select(
            "cluster_id",
            "node_id",
            "instance_type",
            gpus_per_node=pl.lit(1, pl.Int64),
            in_service_from=pl.col("start").dt.replace_time_zone("UTC"),
            in_service_to=pl.col("end").dt.replace_time_zone("UTC"),
            procs_per_node="procs_per_node",
        )
        .sort("cluster_id", pl.col("node_id").cast(pl.Int64), "in_service_from")
    )
    return inventory, systems


def is_lanl(head: Head) -> bool:
    """The LANL CSV: a header naming the system, the node and the problem's start and end."""
    return {"System", "nodenumz", "Prob Started", "Prob Fixed"} <= set(head.first_line.split(","))


def read(ctx: ReadContext) -> FileSummary:
    """``failcast ingest --format lanl``: its incidents and inventory (times are known to be
    America/Denver, whatever ``--timezone`` says)."""
    return public_data.ingest(ctx, lambda: (read_lanl(ctx.path), []))
