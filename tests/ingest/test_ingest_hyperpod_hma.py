"""SageMaker HyperPod health-monitoring agent (HMA) detections -> events: the AWS doc's example in
each export shape (filter-log-events JSON, Logs Insights CSV, console text lines), the odd
``"details: "`` key, records that are not detections, malformed JSON, the node from the stream or
--node, idempotent re-ingest and overlapping exports, the Xid catalog, counts that add up, and the
CLI end to end through ``failcast rates``."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime

import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.ingest import InputError, ReaderOptions, detect_format, ingest_files

# The detection message as the AWS doc shows it (sagemaker-hyperpod-eks-resiliency-health-monitoring-agent)
DOC_MESSAGE = (
    '{"level":"info","ts":"2024-08-21T18:35:35Z","msg":"NPD caught event: %v","details: ":{"severity":"warn",'
    '"timestamp":"2024-08-22T20:59:29Z","reason":"XidHardwareFailure","message":"Node condition '
    'NvidiaErrorReboot is now: True, reason: XidHardwareFailure, message: \\"NVRM: Xid (PCI:0000:b9:00): 71, '
    "pid=<unknown>, name=<unknown>, NVLink: fatal error detected on link 6(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, "
    '0x0)\\""},"HealthMonitoringAgentDetectionEvent":"HealthEvent"}'
)
STREAM = "SagemakerHealthMonitoringAgent/group-g5-8x/i-0aa017cbf6c240f3f"
NODE = "i-0aa017cbf6c240f3f"
WHEN = datetime(2024, 8, 22, 20, 59, 29)  # details.timestamp
NOT_DETECTION = '{"level":"info","ts":"2024-08-21T18:00:00Z","msg":"health monitoring agent started"}'


def _detection(
    condition="NvidiaErrorReboot", status="True", xid=71, when="2024-08-22T20:59:29Z", key="details: "
):
    quoted = f'"NVRM: Xid (PCI:0000:b9:00): {xid}, pid=<unknown>, name=<unknown>, ..."'
    details = {
        "severity": "warn",
        "timestamp": when,
        "reason": "XidHardwareFailure",
        "message": f"Node condition {condition} is now: {status}, reason: XidHardwareFailure, "
        f"message: {quoted}",
    }
    doc = {"level": "info", "ts": "2024-08-21T18:35:35Z", "msg": "NPD caught event: %v", key: details}
    return json.dumps({**doc, "HealthMonitoringAgentDetectionEvent": "HealthEvent"})


def _events_json(*messages, stream=STREAM, indent=4):
    events = [
        {
            "logStreamName": stream,
            "timestamp": 1724265335532 + i,
            "message": m,
            "ingestionTime": 1724265336000,
            "eventId": f"3822{i}",
        }
        for i, m in enumerate(messages)
    ]
    return json.dumps({"events": events, "searchedLogStreams": [{"logStreamName": stream}]}, indent=indent)


def _insights_csv(*messages, stream=STREAM):
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["@timestamp", "@logStream", "@message"] if stream else ["@timestamp", "@message"])
    for m in messages:
        writer.writerow(["2024-08-21 18:35:35.532", stream, m] if stream else ["2024-08-21 18:35:35.532", m])
    return out.getvalue()


def _counts(s):
    return s.rows_read, s.rows_ingested, s.rows_duplicate, s.rows_rejected, s.rows_ignored


def _events(sql):
    return sql(
        "SELECT node_id, timestamp_utc, cluster_id, category, failure_class, interrupting, xid, pci_bus_id,"
        " message, CAST(attributes AS VARCHAR) FROM events ORDER BY node_id, timestamp_utc"
    )


DOC_ROW_MESSAGE = (
    'Node condition NvidiaErrorReboot is now: True, reason: XidHardwareFailure, message: "NVRM: Xid '
    "(PCI:0000:b9:00): 71, pid=<unknown>, name=<unknown>, NVLink: fatal error detected on link 6(0x10000, "
    '0x0, 0x0, 0x0, 0x0, 0x0, 0x0)"'
)


@pytest.mark.parametrize(
    ("name", "content", "node", "group"),
    [
        ("filter-log-events pretty", _events_json(DOC_MESSAGE), None, "group-g5-8x"),
        ("filter-log-events one line", _events_json(DOC_MESSAGE, indent=None), None, "group-g5-8x"),
        (
            "events as JSON Lines",
            json.dumps(json.loads(_events_json(DOC_MESSAGE))["events"][0]),
            None,
            "group-g5-8x",
        ),
        ("Insights CSV", _insights_csv(DOC_MESSAGE), None, "group-g5-8x"),
        ("Insights CSV without @logStream", _insights_csv(DOC_MESSAGE, stream=None), NODE, None),
        ("console text line", f"2024-08-21T11:35:35.532-07:00 {DOC_MESSAGE}\n", NODE, None),
        ("bare message line", DOC_MESSAGE + "\n", NODE, None),
    ],
)
def test_doc_example_in_each_shape(con, write, sql, name, content, node, group):
    path = write("hma.export", content)
    assert detect_format(path) == "hyperpod-hma"
    [s] = ingest_files(con, [path], ReaderOptions(node=node))
    assert (s.format, _counts(s)) == ("hyperpod-hma", (1, 1, 0, 0, 0)), name
    attributes = {
        "condition": "NvidiaErrorReboot",
        "severity": "warn",
        **({"instance_group": group} if group else {}),
    }
    assert _events(sql) == [
        (
            NODE,
            WHEN,
            "unknown",
            "XidHardwareFailure Xid 71",
            "unknown_xid",
            True,
            71,
            "0000:b9:00",
            DOC_ROW_MESSAGE,
            json.dumps(attributes),
        )
    ]


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        # the documented odd key, and the plain one should AWS ever fix it
        (_detection(key="details: "), ("XidHardwareFailure Xid 71", True)),
        (_detection(key="details"), ("XidHardwareFailure Xid 71", True)),
        # HyperPod replaces the node: interrupting by the source's word
        (_detection(condition="NvidiaErrorTerminate", xid=79), ("XidHardwareFailure Xid 79", True)),
        # another condition: the taxonomy decides (Xid 63, a row-remap notice, does not interrupt)
        (_detection(condition="NvidiaGpuWarning", xid=63), ("XidHardwareFailure Xid 63", False)),
    ],
)
def test_details_key_condition_and_interrupting(con, write, sql, message, expected):
    ingest_files(con, [write("e.json", _events_json(message))])
    assert sql("SELECT category, interrupting FROM events") == [expected]


def test_catalog_classes_the_quoted_xid(con, write, sql):
    # 71 is not in failcast's catalog (NVIDIA's: a copy-engine error): unknown_xid, kept with its
    # code; 79 is, so the same reader's event is classed as the catalog says
    ingest_files(
        con,
        [write("e.json", _events_json(_detection(xid=71), _detection(xid=79, when="2024-08-23T00:00:00Z")))],
    )
    assert sql("SELECT xid, failure_class FROM events ORDER BY xid") == [
        (71, "unknown_xid"),
        (79, "gpu_fell_off_bus"),
    ]


def test_every_record_counted_ignored_and_rejected(con, write, sql):
    cleared = _detection(status="False")
    no_time = json.dumps(
        {
            "details: ": {"reason": "XidHardwareFailure", "message": "x"},
            "HealthMonitoringAgentDetectionEvent": "HealthEvent",
        }
    )
    bad_time = _detection(when="yesterday")
    lines = [
        f"2024-08-21T11:35:35.532-07:00 {DOC_MESSAGE}",
        f"2024-08-21T11:36:00.000-07:00 {NOT_DETECTION}",  # the agent's other log lines: ignored
        "",
        f"2024-08-21T11:37:00.000-07:00 {cleared}",  # the condition cleared: ignored
        '2024-08-21T11:38:00.000-07:00 {"level":"info","HealthMonitoringAgentDetectionEvent":',  # cut off
        f"2024-08-21T11:39:00.000-07:00 {no_time[:-1]}",  # not valid JSON either
        f"{no_time}",
        f"2024-08-21T11:40:00.000-07:00 {bad_time}",
        f"2024-08-21T11:35:35.532-07:00 {DOC_MESSAGE}",  # the same detection again
    ]
    [s] = ingest_files(con, [write("node.log", "\n".join(lines) + "\n")], ReaderOptions(node=NODE))
    assert _counts(s) == (9, 1, 1, 4, 3)
    assert s.rows_read == s.rows_ingested + s.rows_duplicate + s.rows_rejected + s.rows_ignored
    rejects = sql("SELECT line, reason FROM rejects ORDER BY line")
    assert [line for line, _ in rejects] == [5, 6, 7, 8]
    assert "not valid JSON" in rejects[0][1] and "not valid JSON" in rejects[1][1]
    assert "without a time" in rejects[2][1]
    assert rejects[3][1] == "details.timestamp yesterday is not a time (ISO 8601 or epoch)"
    assert any("not HMA detections" in n and "cleared" in n and "blank" in n for n in s.notes)


def test_malformed_json_event_rejected_with_its_line(con, write, sql):
    text = _events_json(DOC_MESSAGE, _detection()[:-5], stream=STREAM)
    [s] = ingest_files(con, [write("e.json", text)])
    assert _counts(s)[3] == 1
    [(line, raw, reason)] = sql("SELECT line, raw, reason FROM rejects")
    assert text.splitlines()[line - 1].strip() == "{" and '"eventId": "38221"' in raw
    assert reason.startswith("detection is not valid JSON")


@pytest.mark.parametrize(
    "content",
    [f"2024-08-21T11:35:35.532-07:00 {DOC_MESSAGE}\n", _insights_csv(DOC_MESSAGE, stream=None)],
)
def test_no_node_is_one_clear_error(con, write, sql, content):
    with pytest.raises(InputError, match="pass --node INSTANCE_ID"):
        ingest_files(con, [write("hma.txt", content)])
    assert sql("SELECT count(*) FROM ingested_files") == [(0,)]


def test_reingest_idempotent_and_overlapping_exports_duplicate(con, write, sql):
    first = write("week1.json", _events_json(DOC_MESSAGE))
    ingest_files(con, [first])
    [again] = ingest_files(con, [first])
    assert again.skipped
    later = _detection(xid=79, when="2024-08-25T00:00:00Z")
    # the next export overlaps: the doc's event again (other eventId, ingestion time), one new
    [s] = ingest_files(con, [write("week2.json", _events_json(later, DOC_MESSAGE).replace("38221", "99"))])
    assert _counts(s) == (2, 1, 1, 0, 0)
    # the same detection exported another way (Insights CSV) is a duplicate as well
    [s] = ingest_files(con, [write("insights.csv", _insights_csv(DOC_MESSAGE))])
    assert _counts(s) == (1, 0, 1, 0, 0)
    assert sql("SELECT count(*) FROM events") == [(2,)]


def test_cli_ingest_then_rates_with_inventory(tmp_path, write):
    db = tmp_path / "w.duckdb"
    inventory = write(
        "inventory.csv",
        "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n"
        f"hp1,{NODE},ml.p5.48xlarge,8,2024-08-01T00:00:00Z,2024-09-01T00:00:00Z\n"
        "hp1,i-0bbb,ml.p5.48xlarge,8,2024-08-01T00:00:00Z,2024-09-01T00:00:00Z\n",
    )
    export = write(
        "hma.json", _events_json(DOC_MESSAGE, _detection(xid=79, when="2024-08-10T00:00:00Z"), NOT_DETECTION)
    )
    runner = CliRunner()
    for args in (["ingest", str(inventory)], ["ingest", str(export)]):
        result = runner.invoke(main, [*args, "--db", str(db)], catch_exceptions=False)
        assert result.exit_code == 0, result.output
    assert "hyperpod-hma" in result.output
    result = runner.invoke(
        main,
        ["rates", "--db", str(db), "--by", "cluster_id", "--exposure", "calendar", "--json"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout)
    # the cluster comes from the inventory by instance id; 2 interrupting failures over 2 x 31 days
    assert (row["cluster_id"], row["failures"], row["exposure_node_hours"]) == ("hp1", 2, 2 * 31 * 24.0)


def test_cli_bad_input_exits_2_with_one_line(tmp_path, write):
    path = write("node.log", f"2024-08-21T11:35:35.532-07:00 {DOC_MESSAGE}\n")
    result = CliRunner().invoke(main, ["ingest", str(path), "--db", str(tmp_path / "w.duckdb")])
    assert result.exit_code == 2
    assert "--node" in result.output
