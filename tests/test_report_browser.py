"""The report in real headless Chromium, offline: every chart draws, nothing errors, no injected script runs.

Skips when Chromium or Playwright is missing, unless ``FAILCAST_REQUIRE_BROWSER=1`` (CI), where
that is a failure. ``FAILCAST_UPDATE_SCREENSHOT=1`` also saves ``docs/report.png`` for the README.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from pipeline import analysis, report, warehouse
from pipeline import projection as proj

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]  # fmt: skip
SCREENSHOT = REPO / "docs" / "report.png"
VIEWPORT = {"width": 1280, "height": 900}
SCREENSHOT_HEIGHT = 2000

# For each chart container: how many data marks (not axes or legends) Vega drew into its SVG.
COUNT_MARKS = """() => Array.from(document.querySelectorAll('div.chart')).map(el => ({
    slug: el.dataset.slug,
    svg: el.querySelectorAll('svg.marks').length,
    marks: el.querySelectorAll('svg g.role-mark > *').length,
    text: el.textContent.slice(0, 200),
}))"""


def sync_playwright():
    """Playwright's entry point, or a skip (a failure in CI) naming what is missing."""
    missing = None
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        missing = f"Chromium not found at {CHROMIUM} (Debian package 'chromium', installed by .ci/run)"
    try:
        from playwright.sync_api import sync_playwright as entry
    except ImportError:
        missing = missing or "playwright is not installed (pip install -e '.[dev]')"
    if missing:
        if os.environ.get("FAILCAST_REQUIRE_BROWSER") == "1":
            pytest.fail(f"FAILCAST_REQUIRE_BROWSER=1 but {missing}")
        pytest.skip(missing)
    return entry()


@pytest.fixture(scope="module", params=["sample", "hostile"])
def report_file(request, tmp_path_factory) -> tuple[str, Path, int]:
    """The report of a sample warehouse (clean, or with injected strings), with a job projection."""
    db = request.getfixturevalue(f"{request.param}_warehouse")
    con = warehouse.connect(db, read_only=True)
    try:
        fleet = analysis.analyze(con)
    finally:
        con.close()
    spec = proj.load_job_spec(REPO / "data" / "jobs" / "llama3-70b.toml")
    outlook = report.job_outlook(spec, monte_carlo_runs=2000)
    out = tmp_path_factory.mktemp(f"report-{request.param}")
    path = report.write_report(fleet, out, projection=outlook, images=False)
    return request.param, path, len(report.sections(fleet, outlook))


def test_report_renders_offline_without_errors_or_injection(report_file, tmp_path, hostile_strings):
    which, path, expected = report_file
    console_errors, page_errors, dialogs, blocked = [], [], [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            context = browser.new_context(viewport=VIEWPORT)

            # every request is recorded by the "request" listener below; non-local ones are aborted
            context.route(
                "**/*", lambda r: r.continue_() if r.request.url.startswith(("file:", "data:")) else r.abort()
            )
            page = context.new_page()
            page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: page_errors.append(str(e)))
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.on(
                "request", lambda r: None if r.url.startswith(("file:", "data:")) else blocked.append(r.url)
            )
            page.goto(path.as_uri(), wait_until="load")
            page.wait_for_function(
                f"document.querySelectorAll('div.chart svg.marks').length >= {expected}", timeout=20_000
            )
            if which == "sample" and os.environ.get("FAILCAST_UPDATE_SCREENSHOT") == "1":
                page.set_viewport_size({"width": VIEWPORT["width"], "height": SCREENSHOT_HEIGHT})
                SCREENSHOT.parent.mkdir(exist_ok=True)
                page.screenshot(
                    path=str(SCREENSHOT), clip={"x": 0, "y": 0, **VIEWPORT, "height": SCREENSHOT_HEIGHT}
                )
            charts = page.evaluate(COUNT_MARKS)
            tooltips = _hover_every_point(page, "failure-rate-by-cluster")
            xss = page.evaluate("() => [window.__xss, document.querySelectorAll('img, iframe').length]")
        finally:
            browser.close()

    assert len(charts) == expected
    for chart in charts:
        assert chart["svg"] == 1 and chart["marks"] > 0, chart
        assert "chart failed" not in chart["text"], chart
    assert not console_errors and not page_errors
    assert not blocked, f"the report tried to reach the network: {blocked}"
    assert xss == [None, 0] and not dialogs
    assert tooltips, "no tooltip appeared when hovering the points"
    assert all(t["markup"] == 0 for t in tooltips), tooltips
    if which == "hostile":
        assert any(hostile_strings[0] in t["text"] for t in tooltips), tooltips


def _hover_every_point(page, slug: str) -> list[dict]:
    """Hover each point of one chart; return the tooltip's text and how many elements it holds."""
    found = []
    points = page.locator(f"#chart-{slug} svg g.mark-symbol.role-mark > path")
    for i in range(points.count()):
        points.nth(i).hover(force=True)
        page.wait_for_timeout(50)
        found.append(
            page.evaluate(
                """() => { const t = document.getElementById('vg-tooltip-element');
                const markup = t ? t.querySelectorAll('img, svg, script, iframe').length : 0;
                return {text: t ? t.textContent : '', markup: markup}; }"""
            )
        )
    return [t for t in found if t["text"]]


@pytest.mark.parametrize(
    ("required", "outcome"), [(None, pytest.skip.Exception), ("1", pytest.fail.Exception)]
)
def test_missing_chromium_skips_unless_required(monkeypatch, required, outcome):
    monkeypatch.setattr(sys.modules[__name__], "CHROMIUM", "/nonexistent/chromium")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    if required is None:
        monkeypatch.delenv("FAILCAST_REQUIRE_BROWSER", raising=False)
    else:
        monkeypatch.setenv("FAILCAST_REQUIRE_BROWSER", required)
    with pytest.raises(outcome, match="Chromium not found"):
        sync_playwright()
