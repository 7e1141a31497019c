"""Shared parts of the ``failcast`` command line: the group, error handling, JSON output.

Exit codes: 0 success; 2 bad usage or bad input (one line on stderr naming the file and reason);
1 an unexpected error (one line; ``--debug`` shows the traceback).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import os
import sys
from datetime import date, datetime
from pathlib import Path

import click
import duckdb
import polars as pl

from pipeline import warehouse

EXIT_INPUT = 2
EXIT_UNEXPECTED = 1
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a tool killed by the signal
# errors of bad input: the class names the module that defines it, read only when that module is
# loaded (a command that never imports the ingest readers cannot have raised their InputError)
EXPECTED_ERRORS = (
    ("pipeline.ingest", "InputError"),
    ("pipeline.config", "ConfigError"),
    ("builtins", "ValueError"),
    ("builtins", "FileNotFoundError"),
)


def expected_errors() -> tuple[type[Exception], ...]:
    """The classes of :data:`EXPECTED_ERRORS` whose modules are loaded."""
    return tuple(getattr(sys.modules[m], name) for m, name in EXPECTED_ERRORS if m in sys.modules)


def fail(message: str, code: int = EXIT_INPUT) -> None:
    """Stop with one line on stderr: what is wrong and, where possible, how to fix it."""
    click.echo(f"failcast: {message}", err=True)
    sys.exit(code)


def _json_default(value):
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    raise TypeError(f"cannot serialise {type(value).__name__}")


def _finite(value):
    """JSON has no infinity or NaN: an unbounded interval end is written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def echo_json(payload) -> None:
    click.echo(json.dumps(_finite(payload), indent=2, default=_json_default, allow_nan=False))


def records(frame: pl.DataFrame) -> list[dict]:
    return frame.to_dicts()


def safe_text(text: str) -> str:
    """Neutralise terminal control characters in text that came from logs: ``\x1b[2J`` (clear
    screen), OSC 8 hyperlinks and window titles print as their escaped form, so they stay visible
    but inert."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def echo_late_records(late_records, *, err: bool = True) -> None:
    """Warn of clusters whose records start long after their service (record_checks.LateRecords):
    every rate, fit and projection from them counts that time as failure-free."""
    for late in late_records:
        click.echo(f"warning: {safe_text(late.describe())}", err=err)


def safe_lines(text: str) -> str:
    """:func:`safe_text` line by line, keeping the line breaks (tables printed as text)."""
    return "\n".join(safe_text(line) for line in text.split("\n"))


db_option = click.option(
    "--db",
    type=click.Path(dir_okay=False, path_type=Path),
    default=warehouse.DEFAULT_DB_PATH,
    show_default=True,
    help="DuckDB warehouse file.",
)


def recovery_option(default: str | None = "assumed"):
    """``--recovery assumed|measured`` of project, report and run (None: the config decides)."""
    return click.option(
        "--recovery",
        "recovery_source",
        type=click.Choice(["assumed", "measured"]),
        default=default,
        show_default=default is not None,
        help="measured: the manual mode waits for the fleet's measured mean repair time (MTTR) from "
        "the warehouse, the automatic mode for the swap or, with no spare free, the earliest repair "
        "(the spare pool at the 99% row); detection and restart times come from training-job logs "
        "where ingested; the rest stays assumed (docs/projection.md).",
    )


json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")


def window_options(command):
    """``--since`` and ``--until`` of every command that counts in a window: parameters ``since``
    and ``until`` (:func:`analysis_options`)."""
    until = click.option(
        "--until",
        "until",
        type=click.DateTime(),
        help="End of the observed window (UTC); default: the latest time in the data.",
    )
    since = click.option(
        "--since",
        "since",
        type=click.DateTime(),
        help="Start of the observed window (UTC): service intervals are clipped to it, and failures, "
        "outages and jobs before it are left out (counted and said); default: no start.",
    )
    return since(until(command))


def analysis_options(params: dict, **overrides):
    """The command's parameters (``click`` names equal to the fields: ``since``, ``until``,
    ``interruption_window_minutes``, ``exposure_basis``, ``interval``, ``lemon_fdr``,
    ``first_gap``) as one :class:`pipeline.analysis.AnalysisOptions`, built once and passed whole.
    Imported here, not at the top: ``failcast ingest`` starts without the statistics' modules."""
    from pipeline.analysis.options import AnalysisOptions

    names = {f.name for f in dataclasses.fields(AnalysisOptions)}
    return AnalysisOptions(**{k: v for k, v in {**params, **overrides}.items() if k in names})


def out_of_memory(exc: duckdb.OutOfMemoryException) -> str:
    """DuckDB's own advice names SQL settings a failcast user cannot reach; say what to change."""
    reason = str(exc).strip().splitlines()[0]
    cap = os.environ.get(warehouse.MEMORY_ENV, "").strip()
    if cap == "0":
        return f"DuckDB ran out of memory ({reason}): free memory, or run on a machine with more RAM"
    now = cap or f"{warehouse.DEFAULT_MEMORY_MB}, the default"
    return (
        f"DuckDB ran out of memory ({reason}): raise {warehouse.MEMORY_ENV} (now {now}; "
        "whole MB, 0 for no cap)"
    )


# Sub-command -> the module of pipeline.cli that defines it. A command's module is imported only
# when that command runs (or help lists it): `failcast ingest` then starts without scipy.stats,
# lifelines and Altair, which the statistics and report commands need (~1.3 s of a 2 s start).
# A new command: one line here (tests/test_cli.py checks the table against the modules).
COMMANDS = {
    "backtest": "backtest",
    "extract": "extract",
    "fit": "fit",
    "ingest": "ingest",
    "lemons": "lemons",
    "metrics": "metrics",
    "project": "project",
    "rates": "stats",
    "repairs": "repairs",
    "report": "report",
    "run": "run",
    "runs": "run",
    "sample": "sample",
    "spares": "spares",
}


class FailcastGroup(click.Group):
    """Turns expected errors into one line and exit code 2, anything else into exit code 1; loads
    each sub-command's module when it is first asked for (:data:`COMMANDS`)."""

    def list_commands(self, ctx) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx, cmd_name: str):
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            importlib.import_module(f"pipeline.cli.{COMMANDS[cmd_name]}")  # registers it on main
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except expected_errors() as exc:
            fail(safe_text(str(exc)))
        except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise
        except duckdb.OutOfMemoryException as exc:
            fail(out_of_memory(exc), EXIT_UNEXPECTED)
        except BrokenPipeError:  # the reader stopped (`| head`): not an error, and nothing to say
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit's flush
            sys.exit(EXIT_BROKEN_PIPE)
        except Exception as exc:
            if ctx.params.get("debug"):
                raise
            fail(
                f"unexpected error: {type(exc).__name__}: {safe_text(str(exc))} "
                "(rerun with --debug for the traceback)",
                EXIT_UNEXPECTED,
            )


@click.group(cls=FailcastGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks of unexpected errors.")
@click.version_option(package_name="failcast")
def main(debug: bool) -> None:
    """failcast: failure rates, MTBF and training-time projections for GPU clusters."""
