"""failcast extract SOURCE... --out LAKE, then failcast ingest LAKE, from the command line."""

from __future__ import annotations

import json
import re
import sys

from click.testing import CliRunner

from pipeline.cli import main
from tests.extract._lake_fleet import YEAR


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_extract_then_ingest_lake_counts_every_line(fleet, tmp_path):
    lake, db = tmp_path / "lake", tmp_path / "w.duckdb"
    result = run("extract", *map(str, fleet), "--out", str(lake), "--year", str(YEAR), "--workers", "2")
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"{len(fleet)} of {len(fleet)} file(s) extracted to {lake}")
    n = r"([\d,]+)"
    counted = rf"read {n} = stored {n} \+ duplicate {n} \+ rejected {n} \+ ignored {n}"
    sums = re.findall(counted, result.output)
    assert len(sums) == len(fleet)
    for read, *parts in sums:
        assert int(read.replace(",", "")) == sum(int(p.replace(",", "")) for p in parts)
    ingested = run("ingest", str(lake), "--db", str(db), "--json")
    assert ingested.exit_code == 0, ingested.output
    summaries = json.loads(ingested.stdout)
    assert [s["path"] for s in summaries] == [str(f) for f in fleet]
    for s in summaries:
        parts = ("rows_ingested", "rows_duplicate", "rows_rejected", "rows_ignored")
        assert s["rows_read"] == sum(s[p] for p in parts)
    again = run("extract", *map(str, fleet), "--out", str(lake), "--json")
    assert [r["skipped"] for r in json.loads(again.stdout)] == [True] * len(fleet)
    human = run("ingest", str(lake), "--db", str(db))
    assert human.output.count("same sha256: skipped") == len(fleet)


def test_bad_input_is_one_line_and_exit_2(fleet, tmp_path):
    missing = run("extract", str(tmp_path / "nope-*.log"), "--out", str(tmp_path / "lake"))
    assert missing.exit_code == 2
    assert missing.stderr.strip().splitlines() == [f"failcast: {tmp_path / 'nope-*.log'}: no files match"]
    odd = tmp_path / "events.json"
    odd.write_text('{"kind": "Node", "apiVersion": "v1"}\n')
    partly = run("extract", str(fleet[0]), str(odd), "--out", str(tmp_path / "lake"))
    assert partly.exit_code == 2
    assert "1 of 2 file(s) extracted" in partly.stdout
    assert partly.stderr.strip().splitlines() == [
        f"failcast: {odd}: format kubernetes is not extracted to a lake (formats: csv, jsonl, json, parquet, "
        "kernel-log, journald-json, sacct, slurm-events); ingest it directly with failcast ingest"
    ]


def test_engine_ray_without_ray_says_how_to_install_it(fleet, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    result = run("extract", str(fleet[0]), "--out", str(tmp_path / "lake"), "--engine", "ray")
    assert result.exit_code == 2
    assert result.stderr.strip() == "failcast: --engine ray needs Ray: pip install 'failcast[ray]'"
