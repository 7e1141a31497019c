"""Shared test options and fixtures: ``--run-slow`` enables long fuzz/coverage runs marked ``slow``;
small sample warehouses are built once per session.

``sample_warehouse`` is a clean simulated fleet (known rate and shape, see ``SAMPLE_SPEC``);
``hostile_warehouse`` adds a cluster whose ids and messages are script injections, plus a rejected
line carrying one, for the escaping tests. Open them read-only (``warehouse.connect(path,
read_only=True)``) so tests cannot change what other tests see.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from pipeline import ingest, sample, warehouse

# Small but fit-able: three cluster sizes, enough failures for every model, built in < 1 s.
SAMPLE_SPEC = sample.FleetSpec(cluster_sizes=(8, 16, 32), days=60.0, rate_per_node_hour=0.002, seed=7)

HOSTILE_CLUSTER = '</script><img src=x onerror="window.__xss=1">'
HOSTILE_NODE = "<svg onload=window.__xss=2>"
HOSTILE_MESSAGE = "</script><script>window.__xss=3</script><img src=x onerror=alert(1)>"
HOSTILE_STRINGS = (HOSTILE_CLUSTER, HOSTILE_NODE, HOSTILE_MESSAGE)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", help="also run tests marked slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def _build(db: Path, files: list[Path]) -> Path:
    con = warehouse.connect(db)
    try:
        ingest.ingest_files(con, files)
    finally:
        con.close()
    return db


@pytest.fixture(scope="session")
def sample_fleet() -> sample.Fleet:
    return sample.simulate_fleet(SAMPLE_SPEC)


@pytest.fixture(scope="session")
def sample_warehouse(tmp_path_factory, sample_fleet) -> Path:
    """A DuckDB warehouse file holding ``SAMPLE_SPEC``'s fleet (inventory first, then incidents)."""
    root = tmp_path_factory.mktemp("sample")
    incidents, inventory = sample_fleet.write(root / "input")
    return _build(root / "failcast.duckdb", [inventory, incidents])


@pytest.fixture(scope="session")
def hostile_warehouse(tmp_path_factory, sample_fleet) -> Path:
    """The sample fleet plus a 4-instance cluster named and logged by an attacker."""
    root = tmp_path_factory.mktemp("hostile")
    incidents, inventory = sample_fleet.write(root / "input")
    bad = sample.simulate_fleet(sample.FleetSpec(cluster_sizes=(4,), days=60.0, rate_per_node_hour=0.004))
    rename = {"cluster_id": pl.lit(HOSTILE_CLUSTER), "node_id": HOSTILE_NODE + pl.col("node_id")}
    bad_incidents, bad_inventory = sample.Fleet(
        incidents=bad.incidents.with_columns(**rename, message=pl.lit(HOSTILE_MESSAGE)),
        inventory=bad.inventory.with_columns(**rename),
        spec=bad.spec,
    ).write(root / "hostile")
    with bad_incidents.open("a", encoding="utf-8") as f:  # one line that ingest must reject
        f.write(f'not-a-time,c1,n1,gpu_fell_off_bus,0,job-1,"{HOSTILE_MESSAGE.replace(chr(34), "")}",\n')
    return _build(root / "failcast.duckdb", [inventory, bad_inventory, incidents, bad_incidents])


@pytest.fixture(scope="session")
def hostile_strings() -> tuple[str, ...]:
    return HOSTILE_STRINGS
