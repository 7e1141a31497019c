"""failcast run and failcast runs: the scheduled batch and its history."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

import click

from pipeline import config as config_mod
from pipeline import ingest as ingest_mod
from pipeline import runs as runs_mod
from pipeline.cli.common import (
    echo_json,
    fail,
    json_option,
    main,
    recovery_option,
)

# --- run -----------------------------------------------------------------------------------------
RUN_HELP = """All stages for schedulers: ingest new and grown inputs, rebuild, refit, write a dated report.

\b
Writes reports/failcast-report-YYYYMMDDTHHMMSSZ.html and points latest.html and
failcast-report.html at it only after every stage succeeded; old dated reports are pruned
(retention). Each run is recorded in the warehouse's runs table (see 'failcast runs').
\b
Exit codes: 0 succeeded; 2 bad config or input; 1 unexpected failure; 75 another run holds the
warehouse lock; 130/143 interrupted by SIGINT/SIGTERM (the run is recorded as failed).
"""


@main.command(help=RUN_HELP)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="failcast.toml (see failcast.example.toml); without it the bundled sample in data/sample/.",
)
@click.option("--db", "warehouse", type=click.Path(dir_okay=False), help="Override the config's warehouse.")
@click.option("--out", "report_dir", type=click.Path(file_okay=False), help="Override the report folder.")
@click.option("--timezone", help="Time zone of timestamps without an offset.")
@click.option("--window-minutes", "dedup_window_minutes", type=float, help="Incident collapse window.")
@click.option("--until", "observed_until", type=click.DateTime(), help="End of the observed window (UTC).")
@click.option("--since", "observed_since", type=click.DateTime(), help="Start of the observed window (UTC).")
@click.option(
    "--category-map",
    multiple=True,
    metavar="SOURCE=CLASS",
    help="Class of a category, over the config's [categories] (repeatable; as failcast ingest's).",
)
@click.option("--keep-reports", type=click.IntRange(min=1), help="Dated reports to keep (config default 30).")
@click.option(
    "--keep-days",
    type=click.FloatRange(min=0, min_open=True),
    help="Also delete dated reports older than this many days.",
)
@click.option(
    "--lock-timeout",
    "lock_timeout_seconds",
    type=click.FloatRange(min=0),
    help="Seconds to wait for another run's lock before exiting with code 75 (config default 60).",
)
@click.option("--log-format", type=click.Choice(config_mod.LOG_FORMATS), help="Log lines on stderr.")
@recovery_option(default=None)
@click.option(
    "--print-config",
    type=click.Choice(["toml", "json"]),
    is_flag=False,
    flag_value="toml",
    help="Print the merged config (file + flags) and exit.",
)
def run(config_path: Path | None, print_config: str | None, category_map, **overrides) -> None:
    categories = ingest_mod.parse_category_map(category_map) if category_map else None
    cfg = config_mod.load_config(config_path).with_overrides(category_map=categories, **overrides)
    if print_config:
        document = cfg.to_document()
        render = config_mod.render_json if print_config == "json" else config_mod.render_toml
        click.echo(render(document), nl=print_config == "json")
        return
    cfg.analysis_options()  # an empty window (--since at or after --until) stops before any work
    runs_mod.setup_logging(cfg.log_format)
    previous = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminated)
    try:
        result = runs_mod.run_batch(cfg, progress=sys.stderr.isatty() and cfg.log_format == "text")
    except runs_mod.LockedError as exc:
        fail(str(exc), runs_mod.EXIT_LOCKED)
    except KeyboardInterrupt:
        sys.exit(130)
    finally:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, previous)
    click.echo(f"wrote {result.report_path}")


def _terminated(signum, frame) -> None:
    """SIGTERM (systemd stop, a scheduler timeout) unwinds like Ctrl-C: roll back, record, exit."""
    raise SystemExit(128 + signum)


# --- runs ----------------------------------------------------------------------------------------
@main.command()
@click.option(
    "--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), help="failcast.toml"
)
@click.option("--db", "db_override", type=click.Path(dir_okay=False), help="Override the config's warehouse.")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@json_option
def runs(config_path: Path | None, db_override: str | None, limit: int, as_json: bool) -> None:
    """List recorded runs, newest first: status, timings, files, report, error."""
    db = config_mod.load_config(config_path).with_overrides(warehouse=db_override).warehouse
    try:
        con = runs_mod.open_warehouse(db, read_only=True)
    except runs_mod.LockedError as exc:
        fail(str(exc), runs_mod.EXIT_LOCKED)
    with con:
        recorded = runs_mod.list_runs(con, limit)
    if as_json:
        echo_json(recorded)
        return
    for run_row in recorded:
        click.echo(runs_mod.format_run(run_row))
    if not recorded:
        click.echo(f"{db}: no runs recorded yet")
