"""Curves thinned to a bounded number of points: what a chart embeds and what an analysis keeps of
a curve (the repair-time curves of :class:`pipeline.analysis.RepairAnalysis`) never grows with the
rows the curve was computed from."""

from __future__ import annotations

import numpy as np
import polars as pl

MAX_CURVE_POINTS = 300


def downsample(frame: pl.DataFrame, n: int = MAX_CURVE_POINTS) -> pl.DataFrame:
    """At most ``n`` evenly spaced rows, always keeping the first and the last."""
    if frame.height <= n:
        return frame
    idx = np.unique(np.linspace(0, frame.height - 1, n).round().astype(int))
    return frame[idx]
