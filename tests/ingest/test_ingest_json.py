"""Canonical records as one JSON document: an array, or an object holding one (REST exports)."""

from __future__ import annotations

import gzip
import json

import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.ingest import InputError, ReaderOptions, detect_format, ingest_files
from pipeline.readers import json_array

RECORDS = [
    {
        "timestamp": "2026-03-02T04:26:29Z",
        "cluster_id": "c1",
        "node_id": "n1",
        "category": "Xid 79",
        "gpu_index": 3,
    },
    {"timestamp": "bad", "cluster_id": "c1", "node_id": "n2", "category": "NVLink"},
    {
        "timestamp": "2026-03-03T04:00:00Z",
        "cluster_id": "c1",
        "node_id": "n2",
        "category": "NVLink",
        "gpu_index": None,
    },
]
PRETTY = json.dumps(RECORDS, indent=2)  # each record starts on its own line: 2, 9, 15


def _starts(text: str) -> list[int]:
    """The lines where the array's records open (``  {`` at the record's indent)."""
    return [n for n, line in enumerate(text.splitlines(), 1) if line in ("  {", "    {")]


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("tickets.json", PRETTY),  # an array, pretty-printed
        ("tickets.json", json.dumps(RECORDS)),  # an array on one line
        ("export.json", json.dumps({"result": RECORDS}, indent=2)),  # ServiceNow's Table API
        ("search.json", json.dumps({"total": 3, "issues": RECORDS, "names": {"a": 1}}, indent=2)),
        ("wrapped.json", json.dumps({"result": RECORDS})),  # one line holding the whole document
        ("tickets", "\ufeff" + PRETTY),  # no suffix, a BOM: told from the content
        ("crlf.json", PRETTY.replace("\n", "\r\n")),
    ],
)
def test_a_json_document_is_read_record_by_record_with_its_lines(con, write, sql, name, text):
    path = write(name, text)
    assert detect_format(path) == "json"
    [s] = ingest_files(con, [path])
    assert (s.format, s.rows_read, s.rows_ingested, s.rows_rejected, s.rows_duplicate) == ("json", 3, 2, 1, 0)
    lines = _starts(text.replace("\r\n", "\n").removeprefix("\ufeff")) or [1, 2, 3]  # one line: numbers
    stored = sql("SELECT line, node_id, gpu_index FROM events ORDER BY line, node_id")
    assert stored == sorted([(lines[0], "n1", 3), (lines[2], "n2", None)])
    [(line, raw, reason)] = sql("SELECT line, raw, reason FROM rejects")
    assert line == lines[1] and reason == "timestamp bad is not ISO 8601" and "'n2'" in raw


def test_duplicate_records_on_one_line_are_told_apart(con, write, sql):
    [s] = ingest_files(con, [write("t.json", json.dumps([RECORDS[0], RECORDS[0], RECORDS[2]]))])
    assert (s.rows_read, s.rows_ingested, s.rows_duplicate, s.rows_rejected) == (3, 2, 1, 0)
    assert sql("SELECT line FROM events ORDER BY line") == [(1,), (3,)]


def test_json_lines_named_json_stay_json_lines(con, write):
    path = write("records.json", "".join(json.dumps(r) + "\n" for r in RECORDS))
    assert detect_format(path) == "jsonl"
    [s] = ingest_files(con, [path])
    assert (s.format, s.rows_ingested, s.rows_rejected) == ("jsonl", 2, 1)


def test_a_gzipped_inventory_document_and_values_of_any_json_type(con, write, sql, tmp_path):
    inventory = [
        {
            "cluster_id": "c1",
            "node_id": "n1",
            "instance_type": "p5",
            "gpus_per_node": 8,
            "in_service_from": "2026-03-01T00:00:00Z",
            "in_service_to": None,
        },
        {
            "cluster_id": "c1",
            "node_id": "cpu1",
            "instance_type": "c7i",
            "gpus_per_node": 0.0,
            "in_service_from": 1772323200,  # epoch seconds
            "rack": {"row": 4},
            "spare": True,
        },
    ]
    path = tmp_path / "inventory.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"nodes": inventory}).encode()))
    [s] = ingest_files(con, [path])
    assert (s.kind, s.format, s.rows_ingested, s.rows_rejected) == ("inventory", "json", 2, 0)
    assert sql(
        "SELECT node_id, gpus_per_node, CAST(in_service_from_utc AS VARCHAR) FROM inventory ORDER BY 1"
    ) == [
        ("cpu1", 0, "2026-03-01 00:00:00"),
        ("n1", 8, "2026-03-01 00:00:00"),
    ]


def test_nested_values_and_flags_become_attributes_as_json_text(con, write, sql):
    record = dict(RECORDS[0], labels={"rack": "r1"}, planned=False, priority=2)
    [s] = ingest_files(con, [write("t.json", json.dumps([record]))])
    assert s.attribute_columns == ["labels", "planned", "priority"]
    [(attributes,)] = sql("SELECT attributes FROM events")
    assert json.loads(attributes) == {"labels": '{"rack": "r1"}', "planned": "false", "priority": "2"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[\n  {"timestamp": "x"},\n  7\n]', "t.json:3: cannot read as json: element 2 is not an object"),
        ('[\n  {"timestamp": "x"},\n  {"a": }\n]', "t.json:3: cannot read as json: Expecting value"),
        ('[\n  {"timestamp": "x"}\n  {"a": 1}\n]', "t.json:3: cannot read as json: expected ',' or ']'"),
        ('[{"timestamp": "x"}]\n[{"a": 1}]', "t.json:2: cannot read as json: extra data after the document"),
        ('{\n  "total": 0,\n  "name": "x"\n}', "expected an array of records, or an object holding one"),
        ('{"a": [{"x": 1}], "b": [{"y": 2}]}', "expected an array of records, or an object holding one"),
    ],
)
def test_a_broken_document_is_one_line_naming_the_file_and_line(con, write, text, message):
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        ingest_files(con, [write("t.json", text)], ReaderOptions(fmt="json"))


def test_a_document_past_the_size_limit_is_refused_with_how_to_convert_it(con, write, monkeypatch):
    monkeypatch.setattr(json_array, "MAX_JSON_BYTES", 64)
    with pytest.raises(InputError, match=r"over 0 MB is read whole.*jq -c '\.\[\]' t\.json"):
        ingest_files(con, [write("t.json", PRETTY)])


def test_cli_ingests_a_mapped_ticket_export_and_a_rerun_changes_nothing(tmp_path):
    tickets = [
        {
            "sys_created_on": "2026-03-02 05:26:29",
            "cmdb_ci": "gpu-1",
            "u_cluster": "a",
            "short_description": "Xid 79",
        },
        {
            "sys_created_on": "2026-03-02 06:00:00",
            "cmdb_ci": "gpu-2",
            "u_cluster": "a",
            "short_description": "ECC",
        },
    ]
    path = tmp_path / "incidents.json"
    path.write_text(json.dumps({"result": tickets}, indent=4))
    args = ["ingest", str(path), "--db", str(tmp_path / "w.duckdb"), "--json"]
    args += ["--map", "timestamp=sys_created_on", "--map", "node_id=cmdb_ci", "--map", "cluster_id=u_cluster"]
    args += ["--map", "category=short_description"]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    [summary] = json.loads(first.stdout)
    assert (summary["format"], summary["rows_read"], summary["rows_ingested"]) == ("json", 2, 2)
    path.write_text(json.dumps({"result": tickets}, indent=2))  # the same records, laid out anew
    [again] = json.loads(CliRunner().invoke(main, args).stdout)
    assert (again["rows_read"], again["rows_ingested"], again["rows_duplicate"]) == (2, 0, 2)
