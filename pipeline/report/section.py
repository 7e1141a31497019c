"""``Section``: one part of the report (a chart or None, the table under it, a note).

A leaf module: every section module builds its ``Section`` from here and the registry
(:mod:`.sections`) imports the section modules, never the other way round (issue 30: no import
circles)."""

from __future__ import annotations

from dataclasses import dataclass

import altair as alt
import polars as pl


@dataclass(frozen=True)
class Section:
    slug: str  # file name of the chart's PNG/SVG and the id of its container
    title: str
    chart: alt.TopLevelMixin | None
    table: pl.DataFrame | None = None
    note: str = ""
