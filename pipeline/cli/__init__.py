"""The ``failcast`` command line: one sub-command per stage, plus ``run`` for schedulers.

Each module registers its commands on the :data:`main` group; see :mod:`pipeline.cli.common` for
the exit codes and error handling.
"""

from pipeline.cli import (  # noqa: F401 - registers commands
    backtest,
    extract,
    ingest,
    lemons,
    metrics,
    project,
    repairs,
    report,
    run,
    sample,
    stats,
)
from pipeline.cli.common import main

__all__ = ["main"]
