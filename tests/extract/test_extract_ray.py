"""The Ray engine on a local Ray cluster (``ray.init(num_cpus=2)``, shared by the module's tests)."""

from __future__ import annotations

import logging
from functools import partial

import pytest

from pipeline.extract import extract_files, extract_one
from pipeline.extract.engines import run_ray
from pipeline.ingest import ReaderOptions
from tests.extract._lake_fleet import BUSES, YEAR, crash_always, crash_once, direct_ingest, lake_ingest
from tests.extract.test_extract import assert_same_warehouse

ray = pytest.importorskip("ray")

OPTIONS = ReaderOptions(year=YEAR, bus_order=tuple(BUSES))


@pytest.fixture(scope="module", autouse=True)
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    yield
    ray.shutdown()


def test_ray_lake_ingests_like_the_files_and_a_rerun_skips_them(fleet, tmp_path):
    lake = tmp_path / "lake"
    extracted = extract_files([str(f) for f in fleet], lake, engine="ray", options=OPTIONS)
    assert [e.path for e in extracted] == [str(f) for f in fleet]
    assert [e.error for e in extracted] == [None] * len(fleet)
    assert ray.is_initialized()  # the session the caller started is left running
    direct_ingest(fleet, tmp_path / "direct.duckdb")
    lake_ingest(lake, tmp_path / "lake.duckdb")
    assert_same_warehouse(tmp_path / "direct.duckdb", tmp_path / "lake.duckdb")
    again = extract_files([str(f) for f in fleet], lake, engine="ray", options=OPTIONS)
    assert all(e.skipped for e in again)


def test_a_ray_worker_killed_mid_file_is_redone_and_every_line_counted_once(fleet, tmp_path):
    lake = tmp_path / "lake"
    lake.joinpath("manifest").mkdir(parents=True)
    marker = tmp_path / "died-once"
    inner = partial(extract_one, lake=str(lake), options=OPTIONS)
    task = partial(crash_once, marker=str(marker), victim="kern-2.log", inner=inner)
    items = [{"source": str(f), "listed": ["run", i]} for i, f in enumerate(fleet)]
    results = run_ray(task, items, workers=None, address=None)
    assert marker.exists()
    assert [r["error"] for r in results] == [None] * len(fleet)
    direct_ingest(fleet, tmp_path / "direct.duckdb")
    lake_ingest(lake, tmp_path / "lake.duckdb")
    assert_same_warehouse(tmp_path / "direct.duckdb", tmp_path / "lake.duckdb")


def test_a_file_that_kills_every_ray_worker_is_reported_after_three_deaths(fleet, tmp_path):
    """Ray Data retries a task that lost its worker without end; the task stops it by counting its
    own deaths, and the other files are in the lake."""
    lake = tmp_path / "lake"
    lake.joinpath("manifest").mkdir(parents=True)
    inner = partial(extract_one, lake=str(lake), options=OPTIONS)
    task = partial(crash_always, victim="sacct.txt", inner=inner)
    items = [{"source": str(f), "listed": ["run", i]} for i, f in enumerate(fleet)]
    results = run_ray(task, items, workers=None, address=None)
    failed = [r for r in results if r["error"]]
    assert [r["path"] for r in failed] == [str(f) for f in fleet if f.name == "sacct.txt"]
    assert "died 3 times" in failed[0]["error"]
    assert len(list((lake / "manifest").glob("*.json"))) == len(fleet) - 1
