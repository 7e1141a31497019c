"""Slurm's ``-P`` (``--parsable2``, or ``-p`` with a trailing ``|``) exports, shared by the
``sacct`` and ``sacctmgr show event`` readers: the header that names the columns, the staging of
the lines block by block, and Slurm's time fields."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from pipeline.readers.contract import ReadContext
from pipeline.readers.lines import LINE_REASONS, LINE_SCHEMA
from pipeline.store import staging
from pipeline.store.files import FileSummary, InputError, time_sql


def pipe_columns(header: str) -> set[str]:
    """The lower-case column names of a ``-P`` header line (the sniffs of both readers)."""
    return {c.strip() for c in header.lower().split("|")}


def slurm_time(column: str) -> str:
    """SQL for a Slurm time field as printed by ``slurm_make_time_str`` (src/common/parse_time.c):
    ``%FT%T`` in the session time zone, epoch seconds with ``SLURM_TIME_FORMAT=%s``, or ``Unknown``
    (0 or INFINITE) / ``None`` (NO_VAL), which are NULL. ``column`` must be a trusted SQL name."""
    return f"CASE WHEN {column} IN ('', 'Unknown', 'None') THEN NULL ELSE {time_sql(column)} END"


PIPE_REASONS = f"""{LINE_REASONS}
         WHEN fields <> $fields THEN 'expected ' || $fields || ' |-separated fields like the header, found '
                                    || fields"""
"""The first reasons of both ``-P`` readers' SQL: :data:`LINE_REASONS`, then a line whose field
count is not the header's (``$fields``)."""


Header = tuple[str, dict[str, int], int]
"""A ``-P`` export's header line, its lower-case column -> position map and its field count."""


@dataclass(frozen=True)
class PipeExport:
    """How one kind of Slurm ``-P`` (pipe-separated) export is staged: ``what`` names it in
    messages, ``export`` is the command that writes a readable one, ``required`` and ``optional``
    its columns, ``parse`` turns a block of lines into rows of :attr:`schema`, which land in the
    temp table ``table``."""

    what: str
    export: str
    required: tuple[str, ...]
    optional: tuple[str, ...]
    table: str
    parse: Callable[[pl.DataFrame, Header], pl.DataFrame]
    derived: tuple[str, ...] = ()

    @property
    def schema(self) -> dict[str, pl.DataType]:
        """The staged lines: the line, its field count, the fields by their lower-case names, the
        ``derived`` text columns, the nodes of the hostlist (or why it cannot be expanded)."""
        return {
            **LINE_SCHEMA,
            "fields": pl.Int32,
            **{c: pl.String for c in (*self.required, *self.optional, *self.derived)},
            "nodes": pl.List(pl.String),
            "hostlist_error": pl.String,
        }


def _pipe_header(path, frame: pl.DataFrame, spec: PipeExport) -> Header:
    """The first non-blank line; its columns must include ``spec.required`` (any order)."""
    first = frame.filter(pl.col("text").str.strip_chars() != "").head(1)
    if first.height == 0:
        raise InputError(f"{path}: no header line; export {spec.what} without -n/--noheader")
    header = first["text"][0]
    names = [n.strip().lower() for n in header.removesuffix("|").split("|")]
    missing = [c for c in spec.required if c not in names]
    if missing:
        raise InputError(
            f"{path}:{first['line'][0]}: {spec.what} header lacks {missing}; export with {spec.export}"
        )
    return header, {n: i for i, n in enumerate(names)}, len(names)


def stage_pipe_export(ctx: ReadContext, spec: PipeExport, summary: FileSummary) -> Header:
    """Streams the file block by block into the temp table ``spec.table`` (lines counted in
    ``summary.rows_read``) and returns the header; the caller's SQL takes it from there."""
    staging.create(ctx.con, spec.table, spec.schema)
    header: Header | None = None
    for frame in ctx.lines():
        summary.rows_read += frame.height
        if header is None:
            header = _pipe_header(ctx.path, frame, spec)
        staging.append(ctx.con, spec.table, spec.parse(frame, header))
    if header is None:
        raise InputError(f"{ctx.path}: no lines; export {spec.what} with its header line")
    return header
