"""The ``failcast`` command line: one sub-command per stage, plus ``run`` for schedulers.

Each module registers its commands on the :data:`main` group, which imports a module only when one
of its commands is used (:data:`pipeline.cli.common.COMMANDS`); see :mod:`pipeline.cli.common` for
the exit codes and error handling.
"""

from pipeline.cli.common import main

__all__ = ["main"]
