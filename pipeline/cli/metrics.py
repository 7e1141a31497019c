"""failcast metrics: the fleet's figures as Prometheus metrics (a file or a scrape endpoint)."""

from __future__ import annotations

import logging
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import click

from pipeline import analysis as analysis_mod
from pipeline import config as config_mod
from pipeline import report as report_mod
from pipeline import runs as runs_mod
from pipeline import warehouse
from pipeline.cli.common import main
from pipeline.report import metrics as metrics_mod

METRICS_HELP = """The current figures in the Prometheus text format, for node_exporter's textfile
collector (--out, written atomically) or a scrape (--serve, on 127.0.0.1).

\b
Reads --db (default: the latest snapshot of the config's warehouse, else the warehouse); projects
every configured job (without --config, the bundled sample job). See docs/operations.md.
"""


def render(db: Path, cfg: config_mod.RunConfig) -> str:
    """The metrics text for warehouse or snapshot ``db``: analysis, the configured job, last run."""
    with warehouse.connect(db, read_only=True) as con:
        result = analysis_mod.analyze(con, cfg.analysis_options())
        last = metrics_mod.last_run(runs_mod.list_runs(con, limit=50))
    outlook = None
    if cfg.jobs:
        specs, measured = analysis_mod.configured_jobs(result, cfg.jobs, cfg.recovery, cfg.recovery_source)
        outlook = report_mod.job_outlook(  # the metrics use expected values, as failcast run writes them
            specs[0], monte_carlo_runs=0, measured=measured or None, others=specs[1:]
        )
    return metrics_mod.render_metrics(metrics_mod.MetricInputs(result, outlook, last))


class CachedMetrics:
    """Rendered once per version of the file: a new snapshot swapped in as ``latest.duckdb`` is a
    new inode, so the next scrape re-reads it; scrapes in between cost nothing."""

    def __init__(self, db: Path, cfg: config_mod.RunConfig) -> None:
        self.db, self.cfg = db, cfg
        self._key: tuple[int, int, int] | None = None
        self._text = ""
        self._lock = threading.Lock()

    def text(self) -> str:
        with self._lock:
            stat = os.stat(self.db)
            key = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
            if key != self._key:
                self._text, self._key = render(self.db, self.cfg), key
            return self._text


def make_server(cache: CachedMetrics, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """An HTTP server answering ``GET /metrics`` (port 0: any free port, see ``server_address``)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404, "failcast serves /metrics only")
                return
            try:
                body, status = cache.text().encode(), 200
            except Exception as exc:  # a scrape must get an answer, and the server must stay up
                body, status = f"failcast: {type(exc).__name__}: {exc}\n".encode(), 500
            self.send_response(status)
            self.send_header("Content-Type", metrics_mod.CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
            logging.getLogger("failcast").debug(format, *args)

    return ThreadingHTTPServer((host, port), Handler)


@main.command(help=METRICS_HELP)
@click.option(
    "--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), help="failcast.toml"
)
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), help="Warehouse or snapshot to read.")
@click.option(
    "--out", type=click.Path(dir_okay=False, path_type=Path), help="Write this .prom file atomically."
)
@click.option("--serve", is_flag=True, help="Serve http://127.0.0.1:PORT/metrics until interrupted.")
@click.option("--port", type=click.IntRange(0, 65535), default=9464, show_default=True)
def metrics(config_path: Path | None, db: Path | None, out: Path | None, serve: bool, port: int) -> None:
    cfg = config_mod.load_config(config_path)
    db = db or runs_mod.reader_db(cfg.warehouse, cfg.snapshot_dir)
    if serve:
        server = make_server(CachedMetrics(db, cfg), port)
        click.echo(f"serving {db} on http://127.0.0.1:{server.server_address[1]}/metrics", err=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
        return
    text = render(db, cfg)
    if out is None:
        click.echo(text, nl=False)
    else:
        click.echo(f"wrote {metrics_mod.write_metrics(text, out)}")
