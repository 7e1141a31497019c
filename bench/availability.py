"""Availability-trace fleets for the benchmark (issue 27): long node histories.

    python -m bench.fleet_bench --rows 598000 --intervals-per-node 230 ...   # 1,300 nodes x 230

An availability trace (a public one: ~1,300 nodes, 230 up-intervals and 230 failures per node over
18 months) records, per node, the intervals it was up; each ends in a failure, and the node comes
back after a repair gap. As failcast inputs:

- ``inventory.csv``: one row per up-interval (``in_service_from`` .. ``in_service_to``); a node's
  last interval is open (empty ``in_service_to``) when the window ends while it is up;
- ``incidents.csv``: one row per failure, at its interval's end, with ``resolved_at`` = the node's
  return (the next interval's start), empty when the node is still down at the window end.

Shape: ``nodes = rows / (2 * K)`` nodes in up to 15 clusters whose sizes spread 1:8 (the scaling
law needs several sizes), one year; per node a renewal of up-times (1 h + Weibull shape 0.85, so
no two failures fall within the 30-minute interruption window and every failure is one
interruption) and repair gaps (lognormal, median 8% of the mean cycle), so that about ``K``
intervals fit in the year. The first interval starts at a uniform point of the first cycle (the
node was already running). Categories follow the sample's mix of interrupting classes.

Vectorised (NumPy, Polars): a 10 M-row fleet takes well under a minute.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl

START = np.datetime64("2025-01-01T00:00:00", "us")
DAYS = 365
MAX_CLUSTERS = 15
MIN_UP_HOURS = 1.0
UP_SHAPE = 0.85
REPAIR_SHARE = 0.08  # median repair gap / mean cycle
ISO = "%Y-%m-%dT%H:%M:%SZ"


def cluster_sizes(nodes: int) -> list[int]:
    """``nodes`` split into up to ``MAX_CLUSTERS`` clusters (at least 20 nodes each) whose sizes
    grow geometrically from 1 to 8 parts."""
    count = max(1, min(MAX_CLUSTERS, nodes // 20))
    weights = 2 ** np.linspace(0, 3, count)
    sizes = np.floor(weights / weights.sum() * nodes).astype(int)
    sizes[-1] += nodes - sizes.sum()
    return [int(s) for s in sizes]


def generate(out: Path, rows: int, intervals_per_node: int, seed: int = 2027) -> dict[str, Path]:
    """Write ``incidents.csv`` and ``inventory.csv`` of an availability-trace fleet with about
    ``rows`` rows in both (unless they exist); returns their paths."""
    paths = {"incidents": out / "incidents.csv", "inventory": out / "inventory.csv"}
    if all(p.exists() for p in paths.values()):
        return paths
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    k = intervals_per_node
    nodes = max(1, round(rows / (2 * k)))
    sizes = cluster_sizes(nodes)
    window_h = DAYS * 24.0
    cycle_h = window_h / k
    repair_median = REPAIR_SHARE * cycle_h
    repair_sigma = 0.8
    repair_mean = repair_median * math.exp(repair_sigma**2 / 2)
    up_mean = max(cycle_h - repair_mean - MIN_UP_HOURS, 0.1)
    up_scale = up_mean / math.gamma(1 + 1 / UP_SHAPE)
    draws = math.ceil(k * 1.4) + 20  # cycles drawn per node; the year ends well before
    cycles: list[pl.DataFrame] = []
    for first in range(0, nodes, 2000):  # blocks of nodes: bounded memory at 10 M rows
        n = min(2000, nodes - first)
        up = MIN_UP_HOURS + up_scale * rng.weibull(UP_SHAPE, size=(n, draws))
        down = np.maximum(rng.lognormal(math.log(repair_median), repair_sigma, size=(n, draws)), 1 / 60)
        offset = -rng.uniform(size=(n, 1)) * cycle_h  # the node was already running
        starts = offset + np.concatenate([np.zeros((n, 1)), np.cumsum(up + down, axis=1)[:, :-1]], axis=1)
        ends = starts + up
        keep = ends > 0  # intervals that reach into the window
        keep &= starts < window_h
        node = np.broadcast_to(np.arange(first, first + n)[:, None], keep.shape)[keep]
        cycles.append(
            pl.DataFrame(
                {
                    "node": node,
                    "from_h": np.maximum(starts[keep], 0.0),
                    "to_h": ends[keep],
                    "next_h": (starts + up + down)[keep],
                }
            )
        )
    frame = pl.concat(cycles)
    cluster = np.repeat(np.arange(len(sizes)), sizes)
    index = np.concatenate([np.arange(s) for s in sizes])
    names = pl.DataFrame(
        {
            "cluster_id": [f"a{c:02d}" for c in cluster],
            "node_id": [f"a{c:02d}-n{i:05d}" for c, i in zip(cluster, index, strict=True)],
        }
    )
    frame = frame.with_columns(
        cluster_id=names["cluster_id"].gather(frame["node"]), node_id=names["node_id"].gather(frame["node"])
    )
    failed = pl.col("to_h") < window_h  # the window ends while the last interval is up: open
    inventory = frame.select(
        "cluster_id",
        "node_id",
        instance_type=pl.lit("p5.48xlarge"),
        gpus_per_node=pl.lit(8),
        in_service_from=_iso(pl.col("from_h")),
        in_service_to=pl.when(failed).then(_iso(pl.col("to_h"))),
    )
    from pipeline import sample

    categories = [c.value for c in sample.DEFAULT_CATEGORY_MIX]
    weights = np.array(list(sample.DEFAULT_CATEGORY_MIX.values()))
    failures = frame.filter(failed)
    picked = rng.choice(len(categories), size=failures.height, p=weights / weights.sum())
    incidents = failures.select(
        timestamp=_iso(pl.col("to_h")),
        cluster_id="cluster_id",
        node_id="node_id",
        category=pl.Series(np.array(categories)[picked]),
        resolved_at=pl.when(pl.col("next_h") <= window_h).then(_iso(pl.col("next_h"))),
    )
    incidents.sort("timestamp").write_csv(paths["incidents"])
    inventory.write_csv(paths["inventory"])
    return paths


def _iso(hours: pl.Expr) -> pl.Expr:
    """START + hours, in whole seconds, as ISO 8601 UTC text."""
    start = pl.lit(START.astype("datetime64[us]").item())
    return (start + pl.duration(seconds=(hours * 3600).round().cast(pl.Int64))).dt.strftime(ISO)
