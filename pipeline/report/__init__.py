"""Report: one self-contained HTML file (Altair charts, Vega libraries inlined, no network), plus
a PNG and an SVG of every chart for slides and tickets.

- :mod:`.charts`: fleet charts from a :class:`~pipeline.analysis.FleetAnalysis` (aggregated frames
  only, fixed colours per cluster and per recovery mode).
- :mod:`.outlook`: :func:`job_outlook` turns a job projection into frames; its charts.
- :mod:`.drivers`: trend tests, root-cause shares per cluster, the nodes with the most failures.
- :mod:`.comparisons`: Slurm job interruptions against node rate x nodes; public baselines.
- :mod:`.sections`: the sections in page order (chart, table, note).
- :mod:`.page`: the page (banner, headline, sections, provenance), escaping, file output.
"""

from pipeline.report.charts import MAX_CURVE_POINTS, MODE_COLORS, cluster_color, mode_color
from pipeline.report.outlook import (
    JobOutlook,
    checkpoint_chart,
    job_outlook,
    monte_carlo_chart,
    size_sweep_chart,
)
from pipeline.report.page import (
    CHARTS_DIR,
    REPORT_FILENAME,
    render_html,
    summary_cards,
    table_html,
    write_chart_images,
    write_report,
)
from pipeline.report.sections import Section, sections

__all__ = [
    "CHARTS_DIR",
    "MAX_CURVE_POINTS",
    "MODE_COLORS",
    "REPORT_FILENAME",
    "JobOutlook",
    "Section",
    "checkpoint_chart",
    "cluster_color",
    "job_outlook",
    "mode_color",
    "monte_carlo_chart",
    "render_html",
    "sections",
    "size_sweep_chart",
    "summary_cards",
    "table_html",
    "write_chart_images",
    "write_report",
]
