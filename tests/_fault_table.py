"""A fault table with start and end, shaped like a real LLM-pretraining one (issue 28, item 1).

One row per fault: ``timestamp`` (start), ``resolved_at`` (end). Heavy-tailed repairs (lognormal,
median 20 h, sigma 1.95: mean ~130 h, some of a thousand hours and more), a few faults cleared at
once (end == start, e.g. a stress test that failed and was cleared), a few still open at the
table's end (no end, the node's last fault: censored), a few without an end whose node failed
again (back at an unknown time), and repairs still running at the window end (an end after it).
A node's next fault starts at least an hour after the previous one ended, so each fault is one
outage and the table's own statistics can be computed from its rows alone
(:func:`expected_repairs`), independently of failcast's transforms.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl

START = datetime(2025, 1, 6, tzinfo=UTC)
CATEGORIES = ("GPU", "NVLink", "Network", "Host", "Stress test")


@dataclass(frozen=True)
class FaultTable:
    incidents: pl.DataFrame  # canonical columns, resolved_at null where the table has no end
    inventory: pl.DataFrame
    end: datetime  # the window end (every node's in_service_to)

    def write(self, folder: Path) -> list[Path]:
        folder.mkdir(parents=True, exist_ok=True)
        iso = "%Y-%m-%dT%H:%M:%SZ"
        paths = [folder / "inventory.csv", folder / "faults.csv"]
        self.inventory.with_columns(pl.col("in_service_from", "in_service_to").dt.strftime(iso)).write_csv(
            paths[0]
        )
        self.incidents.with_columns(pl.col("timestamp", "resolved_at").dt.strftime(iso)).write_csv(paths[1])
        return paths


def fault_table(
    seed: int = 28,
    *,
    nodes: int = 300,
    days: float = 180.0,
    zero_length: int = 14,
    still_open: int = 9,
    unknown_end: int = 4,
) -> FaultTable:
    """Faults of ``nodes`` nodes over ``days`` (whole seconds), ``zero_length`` of them with
    end == start, ``still_open`` open at the end, ``unknown_end`` without an end but followed by
    another fault of their node. ~590 faults with the defaults."""
    rng = np.random.default_rng(seed)
    window_s = int(days * 86400)
    mean_gap_s = 2900 * 3600
    rows: list[tuple[str, int, int | None]] = []
    for n in range(nodes):
        node = f"gpu-{n:04d}"
        t = int(rng.uniform(0, mean_gap_s))
        while t < window_s:
            repair = int(round(rng.lognormal(np.log(20.0), 1.95) * 3600))
            rows.append((node, t, t + repair))
            t += repair + 3600 + int(rng.exponential(mean_gap_s))
    node_ids = np.array([r[0] for r in rows])
    last = np.append(node_ids[1:] != node_ids[:-1], True)
    picked = rng.permutation(len(rows))
    zero = picked[:zero_length]
    open_ = [i for i in picked[zero_length:] if last[i]][:still_open]
    unknown = [i for i in picked[zero_length:] if not last[i]][:unknown_end]
    ends: list[int | None] = [r[2] for r in rows]
    for i in zero:
        ends[i] = rows[i][1]
    for i in [*open_, *unknown]:
        ends[i] = None
    at = [START + timedelta(seconds=r[1]) for r in rows]
    incidents = pl.DataFrame(
        {
            "timestamp": at,
            "cluster_id": "pretrain",
            "node_id": node_ids,
            "category": rng.choice(CATEGORIES, len(rows)),
            "resolved_at": [None if e is None else START + timedelta(seconds=e) for e in ends],
        },
        schema_overrides={"timestamp": pl.Datetime("us", "UTC"), "resolved_at": pl.Datetime("us", "UTC")},
    ).sort("timestamp", "node_id")
    end = START + timedelta(seconds=window_s)
    inventory = pl.DataFrame(
        {
            "cluster_id": "pretrain",
            "node_id": [f"gpu-{n:04d}" for n in range(nodes)],
            "instance_type": "p5.48xlarge",
            "gpus_per_node": 8,
            "in_service_from": START,
            "in_service_to": end,
        }
    )
    return FaultTable(incidents=incidents, inventory=inventory, end=end)


@dataclass(frozen=True)
class ExpectedRepairs:
    """What the table says of its own repairs, from its rows alone."""

    table_mean_hours: float  # mean of end - start over the faults with an end
    table_median_hours: float
    km_mean_hours: float  # product-limit restricted mean, open repairs censored at the window end
    km_median_hours: float
    unresolved: int  # open at the window end: no end (and no later fault) or an end after it
    unknown_end: int
    zero_length: int


def expected_repairs(table: FaultTable) -> ExpectedRepairs:
    """The table's own mean and median, and the Kaplan–Meier estimates written out by hand (no
    lifelines): each fault is one outage; a fault without an end is censored at the window end
    when it is its node's last, left out when its node failed again."""
    f = table.incidents.sort("node_id", "timestamp").with_columns(
        later=pl.col("node_id").shift(-1).eq_missing(pl.col("node_id")).fill_null(False)
    )
    hours = ((pl.col("resolved_at") - pl.col("timestamp")).dt.total_seconds() / 3600).alias("h")
    closed = f.filter(pl.col("resolved_at").is_not_null()).select(hours)["h"].to_numpy()
    end = pl.lit(table.end).cast(pl.Datetime("us", "UTC"))
    counted = f.filter(pl.col("resolved_at").is_not_null() | ~pl.col("later")).select(
        duration=(
            pl.min_horizontal(pl.col("resolved_at").fill_null(end), end) - pl.col("timestamp")
        ).dt.total_seconds()
        / 3600,
        observed=pl.col("resolved_at").is_not_null() & (pl.col("resolved_at") <= end),
    )
    t, d = counted["duration"].to_numpy(), counted["observed"].to_numpy()
    s, area, previous, median = 1.0, 0.0, 0.0, None
    for time in np.unique(t):
        area += s * (time - previous)
        previous = time
        at_risk = int((t >= time).sum())
        s *= 1 - int(((t == time) & d).sum()) / at_risk
        if median is None and s <= 0.5:
            median = float(time)
    return ExpectedRepairs(
        table_mean_hours=float(closed.mean()),
        table_median_hours=float(np.median(closed)),
        km_mean_hours=area,
        km_median_hours=median,
        unresolved=int((~d).sum()),
        unknown_end=int(f.filter(pl.col("resolved_at").is_null() & pl.col("later")).height),
        zero_length=int((closed == 0).sum()),
    )
