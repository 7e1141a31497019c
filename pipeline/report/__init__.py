"""Report: one self-contained HTML file (Altair charts, Vega libraries inlined, no network), plus
a PNG and an SVG of every chart for slides and tickets.

- :mod:`.charts`: fleet charts from a :class:`~pipeline.analysis.FleetAnalysis` (aggregated frames
  only, fixed colours per cluster and per recovery mode).
- :mod:`.outlook`: :func:`job_outlook` turns a job projection into frames; its charts.
- :mod:`.drivers`: trend tests, root-cause shares per cluster, the nodes with the most failures.
- :mod:`.comparisons`: Slurm job interruptions against node rate x nodes; public baselines.
- :mod:`.section`: ``Section`` (chart, table, note); :mod:`.sections`: the registry of sections in
  page order, which imports the section modules (none imports it back).
- :mod:`.cards`: the headline's cards.
- :mod:`.page`: the page (banner, headline, sections, provenance), escaping, file output.

Each name loads its module when first used (:mod:`pipeline.lazy`), so a command that only
formats numbers (:mod:`.format`) does not import Altair.
"""

from pipeline.lazy import lazy_package

# name -> the module that defines it
EXPORTS = {
    "MAX_CURVE_POINTS": "charts",
    "MODE_COLORS": "charts",
    "cluster_color": "charts",
    "mode_color": "charts",
    "JobOutlook": "outlook",
    "checkpoint_chart": "outlook",
    "job_outlook": "outlook",
    "monte_carlo_chart": "outlook",
    "size_sweep_chart": "outlook",
    "CHARTS_DIR": "page",
    "REPORT_FILENAME": "page",
    "render_html": "page",
    "summary_cards": "cards",
    "table_html": "page",
    "write_chart_images": "page",
    "write_report": "page",
    "Section": "section",
    "sections": "sections",
}
__all__ = sorted(EXPORTS)
lazy_package(__name__, EXPORTS)
