"""Packages whose public names load their module on first use.

Why: ``import pipeline.models`` used to import every model, and with them lifelines, pandas and
scipy.stats (2 s), although ``failcast rates`` needs only the lemon test; ``pipeline.report``
imported Altair for a command that only formats numbers. A package lists which module defines
each of its names; :func:`lazy_package` makes the package load that module when the name is
first read (``models.LemonTest``, ``from pipeline.models import LemonTest``) and keep it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types


class LazyPackage(types.ModuleType):
    """A package module that imports ``_lazy_exports[name]`` when ``name`` is first read."""

    _lazy_exports: dict[str, str]

    def __getattr__(self, name: str):
        module = self._lazy_exports.get(name)
        if module is None:  # a submodule (models.lemons), as an eager package would have it
            if name.startswith("__") or importlib.util.find_spec(f"{self.__name__}.{name}") is None:
                raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
            return importlib.import_module(f"{self.__name__}.{name}")
        value = getattr(importlib.import_module(f"{self.__name__}.{module}"), name)
        types.ModuleType.__setattr__(self, name, value)
        return value

    def __setattr__(self, name: str, value) -> None:
        # the import system sets every loaded submodule as an attribute of its package: a
        # submodule named like one of the package's names (report.sections, the function, lives
        # in report/sections.py) must not hide that name
        if name in self._lazy_exports and isinstance(value, types.ModuleType):
            return
        types.ModuleType.__setattr__(self, name, value)

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self._lazy_exports})


def lazy_package(name: str, exports: dict[str, str]) -> None:
    """Make the package ``name`` (call with ``__name__`` from its ``__init__``) load each name of
    ``exports`` (name -> submodule defining it) on first use."""
    package = sys.modules[name]
    types.ModuleType.__setattr__(package, "_lazy_exports", exports)
    package.__class__ = LazyPackage
