"""failcast extract: parse a fleet's log files into a Parquet lake, in parallel (processes or Ray)."""

from __future__ import annotations

from pathlib import Path

import click

from pipeline import extract as extract_mod
from pipeline.cli.common import echo_json, fail, json_option, main, safe_text
from pipeline.cli.ingest import limit_options, reader_options, time_format_option
from pipeline.readers import LAKE_FORMATS

EXTRACT_HELP = f"""Parse log files into a hive-partitioned Parquet lake, one task per file, in parallel.

\b
SOURCE: files, globs ('logs/**/*.log') or URLs that pyarrow's filesystems read (s3://bucket/logs/,
gs://..., hdfs://...: a file or every file under the prefix).
Formats: {", ".join(LAKE_FORMATS)} (as for failcast ingest; the others are
ingested directly). Each file is parsed by failcast ingest's own reader; the lake LAKE holds its
events, jobs, inventory rows, rejects (file, line, raw, reason) and a manifest entry with its line
counts. Files already in the lake (same sha256) are skipped; a file whose task died is parsed again
(after 3 deaths in one run it is reported as failed). Then 'failcast ingest LAKE' merges the new
files into the warehouse (duplicates across files, incidents, rates: as if the files were ingested
directly).

\b
Engines: local (default) - a process pool on this machine (--workers, default: the cores);
ray - Ray Data on the Ray cluster at --address (auto: the cluster this machine joined with
'ray start'; ray://HEAD:10001 for Ray Client), or a local Ray with --workers CPUs.
Needs {extract_mod.engines.RAY_EXTRA}. On a cluster, LAKE must be a path every node sees (NFS).
"""


@main.command(help=EXTRACT_HELP)
@click.argument("sources", nargs=-1, required=True)
@click.option(
    "--out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The lake's directory (created if needed).",
)
@click.option("--engine", type=click.Choice(extract_mod.ENGINES), default="local", show_default=True)
@click.option("--address", help="Ray cluster address (--engine ray), e.g. auto or ray://head:10001.")
@click.option("--workers", type=click.IntRange(min=1), help="Parallel tasks (default: the cores).")
@click.option("--format", "fmt", type=click.Choice(LAKE_FORMATS))
@click.option("--map", "mapping", multiple=True, metavar="CANONICAL=SOURCE", help="As for ingest.")
@click.option("--timezone", default="UTC", show_default=True, help="Time zone of times without an offset.")
@click.option("--year", type=click.IntRange(1970, 2999), help="Year of year-less syslog files (see ingest).")
@click.option("--cluster", help="cluster_id for logs that do not name one (default: from the inventory).")
@click.option("--node", help="node_id for log lines without a hostname (dmesg -T output).")
@click.option("--gpu-bus-order", default="", metavar="BUS,BUS,...", help="As for ingest.")
@time_format_option
@limit_options
@json_option
def extract(
    sources,
    out: Path,
    engine: str,
    address: str | None,
    workers: int | None,
    fmt: str | None,
    mapping,
    timezone: str,
    year: int | None,
    cluster: str | None,
    node: str | None,
    gpu_bus_order: str,
    time_format: str | None,
    max_decompressed_mb: int,
    max_rejected_percent: float,
    as_json: bool,
) -> None:
    if address and engine != "ray":
        fail("--address is for --engine ray")
    options = reader_options()
    try:
        results = extract_mod.extract_files(
            sources, out, engine=engine, address=address, options=options, workers=workers
        )
    except extract_mod.EngineError as exc:
        fail(safe_text(str(exc)))
    if as_json:
        echo_json([r.to_dict() for r in results])
    else:
        _echo_summary(results, out)
    for r in results:
        if r.error:
            click.echo(f"failcast: {safe_text(r.error)}", err=True)
    if any(r.error for r in results):
        raise SystemExit(2)


def _echo_summary(results: list[extract_mod.Extracted], out: Path) -> None:
    done = [r for r in results if not r.skipped and not r.error and r.format != "-"]
    skipped = sum(r.skipped for r in results)
    failed = sum(bool(r.error) for r in results)
    lines = sum(r.rows_read for r in done)
    click.echo(
        f"{len(done)} of {len(results)} file(s) extracted to {safe_text(str(out))}, {lines:,} lines read; "
        f"{skipped} already in the lake, {failed} failed"
    )
    for r in results:
        if r.skipped:
            click.echo(f"{safe_text(r.path)}: already in the lake (same sha256), skipped")
        elif r.error:
            click.echo(f"{safe_text(r.path)}: not extracted (see the error below)")
        elif r.format == "-":
            click.echo(f"{safe_text(r.path)}: {safe_text('; '.join(r.notes))}")
        else:
            click.echo(
                f"{safe_text(r.path)}: {r.kind} ({r.format}), read {r.rows_read:,} = stored {r.rows_stored:,}"
                f" + duplicate {r.rows_duplicate:,} + rejected {r.rows_rejected:,}"
                f" + ignored {r.rows_ignored:,}"
            )
            for note in r.notes:
                click.echo(f"  note: {safe_text(note)}")
    if done:
        click.echo(f"next: failcast ingest {safe_text(str(out))} (duplicates across files are counted there)")
