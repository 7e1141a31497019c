"""failcast ingest: read logs, accounting and inventory into the warehouse."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import click

from pipeline import ingest as ingest_mod
from pipeline import readers, warehouse
from pipeline.cli.common import (
    db_option,
    echo_json,
    echo_late_records,
    fail,
    json_option,
    main,
    safe_text,
)


# --- ingest --------------------------------------------------------------------------------------
def _format_lines(readers) -> str:
    """Each format's lines of the help, its name in a column of 12 (from the registry)."""
    blocks = []
    for r in readers:
        first, *rest = r.help.splitlines()
        blocks.append(
            "\n".join(
                [f"  {r.name}{' ' * max(12 - len(r.name), 2)}{first}", *(" " * 14 + line for line in rest)]
            )
        )
    return "\n".join(blocks)


INGEST_HELP = f"""Read incident logs, job accounting and inventory files into the warehouse.

\b
Formats (auto-detected from the name or the first lines, or --format); any may be .gz:
{_format_lines(r for r in readers.READERS if r.sniffs)}

\b
Public failure data sets (only with --format; incidents AND inventory from one file, see
docs/public-data.md):
{_format_lines(r for r in readers.READERS if not r.sniffs)}

\b
A log lake written by 'failcast extract SOURCE... --out LAKE' is ingested by naming its directory:
  failcast ingest LAKE   only the lake's files not ingested yet (by sha256), with the same dedup
              and line counts as ingesting the files themselves; rejects keep their file and line

\b
Every line is counted: read = ingested + duplicate + rejected + ignored. Rejected lines are kept in
the rejects table with the reason. Files already ingested (same sha256) are skipped; records already
stored count as duplicates, so a log that grew adds only its new lines.
"""


def reader_options() -> ingest_mod.ReaderOptions:
    """The reader options of the running ``ingest`` or ``extract`` from its parameters: the texts of
    ``--map`` and ``--gpu-bus-order`` parsed, the size limit in bytes, the flags named as the
    options' fields (time zone, year, cluster, node, job, reject limit, time format: checked) as
    they are."""
    params = click.get_current_context().params
    names = {f.name for f in dataclasses.fields(ingest_mod.ReaderOptions)}
    return ingest_mod.ReaderOptions(
        column_map=ingest_mod.parse_column_map(params["mapping"]),
        bus_order=ingest_mod.parse_bus_order(params["gpu_bus_order"]),
        max_decompressed_bytes=params["max_decompressed_mb"] << 20,
        **{k: v for k, v in params.items() if k in names},
    )


def time_format_option(command):
    """``--time-format``, shared by ``ingest`` and ``extract``."""
    return click.option(
        "--time-format",
        metavar="FORMAT",
        help="strptime format of canonical times that are not ISO 8601 or epoch numbers, tried first, "
        "e.g. '%d.%m.%Y %H:%M' or '%m/%d/%Y %I:%M %p' (naive times are read in --timezone; %z: an offset).",
    )(command)


def limit_options(command):
    """The limits on one input file, shared by ``ingest`` and ``extract``."""
    command = click.option(
        "--max-decompressed-mb",
        type=click.IntRange(min=1),
        default=ingest_mod.MAX_DECOMPRESSED_BYTES >> 20,
        show_default=True,
        help="Stop with an error when one .gz input expands past this size (a gzip bomb).",
    )(command)
    return click.option(
        "--max-rejected",
        "max_rejected_percent",
        type=click.FloatRange(0, 100),
        default=ingest_mod.MAX_REJECTED_PERCENT,
        show_default=True,
        metavar="PERCENT",
        help="Refuse a file whole (exit 2, nothing stored) when more than this share of its records "
        "is rejected: it is being read wrong (a date format, --map, --timezone, --format).",
    )(command)


@main.command(help=INGEST_HELP)
@click.argument("paths", nargs=-1, required=True)
@db_option
@click.option("--format", "fmt", type=click.Choice(ingest_mod.FORMATS))
@click.option(
    "--map",
    "mapping",
    multiple=True,
    metavar="CANONICAL=SOURCE",
    help="Read a differently named column, e.g. --map node_id=hostname (repeatable; files that name one"
    " column differently: --map node_id=hostname --map node_id=host).",
)
@click.option(
    "--category-map",
    "category_map",
    multiple=True,
    metavar="SOURCE=CLASS",
    help="Class of a category the built-in synonyms do not know, e.g. --category-map 'Burn-in=hardware'; "
    "add :noninterrupting (or :interrupting) after the class to override that flag (repeatable; "
    "see docs/ingest.md). A changed map reclassifies every stored event.",
)
@click.option(
    "--timezone", default="UTC", show_default=True, help="Time zone of timestamps that carry no offset."
)
@click.option(
    "--year",
    type=click.IntRange(1970, 2999),
    help="Year of the first line of year-less syslog files (default: from each file's modification time).",
)
@click.option(
    "--cluster",
    help="cluster_id for logs that do not name one (default: from the inventory), and of tables "
    "(tickets, inventory) with no cluster_id column: one cluster's exports.",
)
@click.option(
    "--node",
    help="node_id for log lines without a hostname (dmesg -T output, training logs, HyperPod HMA lines).",
)
@click.option(
    "--job",
    help="job_id of a training log (default: the file name without .log/.gz); its Slurm JobID links it "
    "to the job's sacct record (nodes, node count) for badput by cause.",
)
@click.option(
    "--gpu-bus-order",
    default="",
    metavar="BUS,BUS,...",
    help="PCI bus numbers (hex) of gpu_index 0,1,...: XID lines then get a gpu_index, "
    "e.g. 18,2a,3a,5d,9a,ab,ba,db (HGX H100).",
)
@click.option(
    "--window-minutes",
    type=float,
    default=10.0,
    show_default=True,
    help="Events of one node, category and GPU closer than this form one incident.",
)
@click.option(
    "--estimate-exposure",
    type=click.IntRange(min=1),
    metavar="GPUS_PER_NODE",
    help="With no inventory at all, ESTIMATE one from the nodes seen in the data (in service from the "
    "first observation on); every result then says exposure_estimated. A real inventory replaces it.",
)
@time_format_option
@limit_options
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@json_option
def ingest(
    paths,
    db: Path,
    fmt,
    mapping,
    category_map,
    timezone: str,
    year: int | None,
    cluster: str | None,
    node: str | None,
    job: str | None,
    gpu_bus_order: str,
    window_minutes: float,
    estimate_exposure: int | None,
    time_format: str | None,
    max_decompressed_mb: int,
    max_rejected_percent: float,
    quiet: bool,
    as_json: bool,
) -> None:
    files = _expand(paths)
    options = reader_options()
    categories = ingest_mod.parse_category_map(category_map)
    con = warehouse.connect(db)
    show_bar = not quiet and not as_json and sys.stderr.isatty()
    total = sum(f.stat().st_size for f in files if f.is_file())
    with click.progressbar(
        length=total, label=f"ingesting {len(files)} file(s)", file=sys.stderr, hidden=not show_bar
    ) as bar:
        summaries = ingest_mod.ingest_files(
            con,
            files,
            options,
            category_map=categories,
            window_seconds=window_minutes * 60,
            estimate_exposure=estimate_exposure,
            progress=bar.update,
        )
    check = ingest_mod.inventory_check(con)
    if as_json:  # a list of per-file summaries; notes and inventory warnings go to stderr too
        echo_json([{**s.to_dict(), "timezone": timezone} for s in summaries])
        for s in summaries:
            for note in s.notes:
                click.echo(f"{safe_text(s.path)}: note: {safe_text(note)}", err=True)
        _echo_inventory_check(check, err=True)
        return
    click.echo(
        f"timestamps without an offset read as {timezone}"
        + (f"; times in the form {safe_text(time_format)} tried first" if time_format else "")
    )
    for s in summaries:
        if s.skipped:
            click.echo(
                f"{safe_text(s.path)}: already ingested as {s.kind} ({s.format}), same sha256: skipped"
            )
            for note in s.notes:
                click.echo(f"  note: {safe_text(note)}", err=True)
            continue
        click.echo(
            f"{safe_text(s.path)}: {s.kind} ({s.format}), read {s.rows_read}, ingested {s.rows_ingested}, "
            f"duplicate {s.rows_duplicate}, rejected {s.rows_rejected}, ignored {s.rows_ignored}"
        )
        if s.attribute_columns:
            click.echo(f"  extra columns kept as attributes: {safe_text(', '.join(s.attribute_columns))}")
        if s.ignored_columns:
            click.echo(f"  ignored columns: {safe_text(', '.join(s.ignored_columns))}")
        for note in s.notes:
            click.echo(f"  note: {safe_text(note)}", err=True)
        if s.rows_rejected:
            first = con.sql(
                "SELECT line, reason FROM rejects WHERE file_id = ? ORDER BY line LIMIT 3", params=[s.file_id]
            ).fetchall()
            for line, reason in first:
                click.echo(f"  rejected {safe_text(s.path)}:{line}: {safe_text(reason)}")
            if s.rows_rejected > len(first):
                click.echo(f"  ... {s.rows_rejected - len(first)} more in the rejects table")
    _echo_inventory_check(check)


def _echo_inventory_check(check: ingest_mod.InventoryCheck, *, err: bool = False) -> None:
    echo_late_records(check.late_records, err=err)
    if check.exposure_estimated:
        click.echo(
            f"WARNING: EXPOSURE IS ESTIMATED: no inventory was ingested, so {check.estimated_rows} nodes "
            "seen in the data count as in service from the first observation on; nodes never seen are "
            "missing, so rates are likely too high. Ingest an inventory file to replace the estimate.",
            err=err,
        )
    elif check.inventory_rows == 0:
        click.echo(
            "note: no inventory yet: rates need one; ingest an inventory file, or pass "
            "--estimate-exposure GPUS_PER_NODE to estimate it from the nodes seen",
            err=err,
        )
    elif check.nodes_not_in_inventory:
        names = ", ".join(check.nodes_not_in_inventory[:5])
        click.echo(
            f"warning: {len(check.nodes_not_in_inventory)} node(s) in the data are not in the inventory "
            f"({safe_text(names)}{', ...' if len(check.nodes_not_in_inventory) > 5 else ''}): "
            "their incidents have no exposure and are left out of rates",
            err=err,
        )
        if check.respelled:
            click.echo(f"warning: {safe_text(check.respelled.describe())}", err=err)


def _expand(patterns) -> list[Path]:
    """Each file once: a symlink loop makes ``**`` match one file under many names. An existing
    file is taken as named even if its name has glob characters (``[``, ``*``)."""
    files: dict[str, Path] = {}
    for pattern in patterns:
        matched = ingest_mod.expand_pattern(pattern)
        if not matched:
            fail(f"{safe_text(pattern)}: no files match")
        for match in matched:
            files.setdefault(os.path.realpath(match), match)
    return list(files.values())
