"""Packages that load their modules on first use (pipeline.lazy): every public name resolves, and
`failcast rates` runs without the fitting and charting libraries."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest
from click.testing import CliRunner

from pipeline import models, report
from pipeline.cli import main


@pytest.mark.parametrize("package", [models, report])
def test_every_public_name_resolves_to_what_its_module_defines(package):
    for name in package.__all__:
        module = sys.modules.get(f"{package.__name__}.{package.EXPORTS[name]}") or __import__(
            f"{package.__name__}.{package.EXPORTS[name]}", fromlist=[name]
        )
        assert getattr(package, name) is getattr(module, name)
        assert name in dir(package)
    with pytest.raises(AttributeError):
        package.no_such_name  # noqa: B018


def test_a_submodule_named_like_a_function_does_not_hide_it():
    """report/sections.py defines report.sections(): importing the module (page.py does) must
    leave the package's name bound to the function; submodules stay reachable as attributes."""
    import pipeline.report.page  # noqa: F401

    assert callable(report.sections) and not isinstance(report.sections, types.ModuleType)
    assert report.sections is sys.modules["pipeline.report.sections"].sections
    assert isinstance(models.lemons, types.ModuleType) and models.lemons.LemonTest is models.LemonTest


def test_rates_runs_without_lifelines_pandas_or_altair(tmp_path):
    """`failcast rates` (what users run most on a big warehouse) imports neither the survival
    fits' libraries nor the report's: a fresh interpreter prints the rates of a warehouse and
    lists which of them it loaded."""
    inventory = tmp_path / "inventory.csv"
    inventory.write_text(
        "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n"
        "c1,n1,p5.48xlarge,8,2026-03-01T00:00:00Z,\nc1,n2,p5.48xlarge,8,2026-03-01T00:00:00Z,\n"
    )
    incidents = tmp_path / "i.csv"
    incidents.write_text(
        "timestamp,cluster_id,node_id,category\n2026-03-02T04:26:29Z,c1,n1,nvlink\n"
        "2026-03-05T01:00:00Z,c1,n2,host\n"
    )
    db = str(tmp_path / "w.duckdb")
    ingested = CliRunner().invoke(main, ["ingest", str(inventory), str(incidents), "--db", db, "-q"])
    assert ingested.exit_code == 0, ingested.output
    code = (
        "import sys\n"
        "from pipeline.cli import main\n"
        "try:\n"
        f"    main(['rates', '--db', {db!r}])\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "print(sorted(m for m in ('lifelines', 'pandas', 'altair') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = done.stdout.strip().splitlines()
    assert any(line.startswith("Fleet: ") and "2 failures" in line for line in lines)
    assert lines[-1] == "[]"
