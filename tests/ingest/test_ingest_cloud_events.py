"""EC2 describe-instance-status and GCE system-event audit log entries -> events with a planned
attribute: completed/canceled/scheduled EC2 events, host errors and maintenance on GCE, hostile
text, truncated and malformed JSON, missing fields, counts that add up, idempotent re-ingest, and
``failcast rates --by planned`` separating planned maintenance from unplanned failures."""

from __future__ import annotations

import gzip
import json
from datetime import datetime

import pytest
from click.testing import CliRunner

from pipeline import warehouse
from pipeline.cli import main
from pipeline.ingest import InputError, ReaderOptions, detect_format, ingest_files

# Shapes: DescribeInstanceStatus / InstanceStatusEvent (docs.aws.amazon.com/AWSEC2/latest/APIReference/
# API_InstanceStatusEvent.html): Code, Description ("[Completed] ..."), NotBefore, NotAfter,
# NotBeforeDeadline, InstanceEventId.
EC2 = {
    "InstanceStatuses": [
        {
            "AvailabilityZone": "us-east-1d",
            "InstanceId": "i-0aaa",
            "Events": [
                {
                    "InstanceEventId": "instance-event-0d59937288b749b32",
                    "Code": "system-reboot",
                    "Description": "[Completed] scheduled reboot",
                    "NotBefore": "2024-05-02T00:00:00.000Z",
                    "NotAfter": "2024-05-02T02:00:00.000Z",
                    "NotBeforeDeadline": "2024-05-09T00:00:00.000Z",
                },
                {
                    "InstanceEventId": "instance-event-2",
                    "Code": "instance-stop",
                    "Description": "[Canceled] The instance is running on degraded hardware",
                    "NotBefore": "2024-05-03T00:00:00.000Z",
                },
                {
                    "InstanceEventId": "instance-event-3",
                    "Code": "system-maintenance",
                    "Description": "Scheduled network maintenance",
                    "NotBefore": "2030-01-01T00:00:00+00:00",
                },
            ],
            "InstanceState": {"Code": 16, "Name": "running"},
        },
        {
            "InstanceId": "i-0bbb",
            "Events": [
                {
                    "InstanceEventId": "instance-event-4",
                    "Code": "instance-retirement",
                    "Description": "[Completed] The instance is running on degraded hardware",
                    "NotBefore": "2024-05-05T10:00:00+02:00",
                }
            ],
        },
        {"InstanceId": "i-0ccc", "Events": []},
    ]
}


def _entry(method, name="gpu-007", ts="2024-05-04T14:07:23.102868Z", instance_id="2074079198322937303"):
    """A LogEntry of the System Event audit log (cloud.google.com/compute/docs/logging/audit-logging)."""
    payload = {
        "@type": "type.googleapis.com/google.cloud.audit.AuditLog",
        "status": {"message": "Instance terminated by Compute Engine."},
        "authenticationInfo": {"principalEmail": "system@google.com"},
        "serviceName": "compute.googleapis.com",
        "methodName": method,
    }
    if name is not None:
        payload["resourceName"] = f"projects/p/zones/us-east1-d/instances/{name}"
    entry = {
        "protoPayload": payload,
        "insertId": "fjpkr2e6yi26",
        "resource": {"type": "gce_instance", "labels": {"zone": "us-east1-d", "instance_id": instance_id}},
        "logName": "projects/p/logs/cloudaudit.googleapis.com%2Fsystem_event",
        "operation": {"producer": method, "first": True, "last": True},
    }
    if ts is not None:
        entry["timestamp"] = ts
    return entry


GCE = [
    _entry("compute.instances.hostError"),
    _entry("compute.instances.automaticRestart", ts="2024-05-04T14:09:50Z"),
    _entry("compute.instances.terminateOnHostMaintenance", name="gpu-008", ts="2024-05-06T01:00:00Z"),
    _entry("compute.instances.migrateOnHostMaintenance", name="gpu-009", ts="2024-05-07T01:00:00Z"),
    _entry("compute.instances.preempted", name="gpu-010"),
    _entry("compute.instances.hostError", name=None, ts="2024-05-08T00:00:00Z", instance_id="42"),
]


def _counts(s):
    return (s.rows_read, s.rows_ingested, s.rows_duplicate, s.rows_rejected, s.rows_ignored)


def _adds_up(s):
    return s.rows_read == sum(_counts(s)[1:])


def test_ec2_completed_events_become_planned_outage_windows(con, write, sql):
    path = write("status.json", json.dumps(EC2, indent=4))
    assert detect_format(path) == "ec2-status"
    [s] = ingest_files(con, [path], ReaderOptions(cluster="aws1"))
    assert _counts(s) == (4, 2, 0, 0, 2) and _adds_up(s)
    assert any("1 record(s) ignored: canceled" in n for n in s.notes)
    assert any("1 record(s) ignored: EC2 events not completed yet" in n for n in s.notes)
    got = sql(
        "SELECT node_id, cluster_id, timestamp_utc, resolved_at_utc, category, failure_class, interrupting,"
        " json_extract_string(attributes, '$.planned'), source_format FROM events ORDER BY node_id"
    )
    assert got == [
        (
            "i-0aaa",
            "aws1",
            datetime(2024, 5, 2),
            datetime(2024, 5, 2, 2),
            "system-reboot",
            "host",
            True,
            "true",
            "ec2-status",
        ),
        (
            "i-0bbb",
            "aws1",
            datetime(2024, 5, 5, 8),
            None,
            "instance-retirement",
            "host",
            True,
            "true",
            "ec2-status",
        ),
    ]


def test_gce_host_errors_are_unplanned_and_maintenance_planned(con, write, sql):
    path = write("system_event.json", json.dumps(GCE, indent=2))
    assert detect_format(path) == "gce-audit"
    [s] = ingest_files(con, [path], ReaderOptions(cluster="gcp1"))
    assert _counts(s) == (6, 4, 0, 0, 2) and _adds_up(s)
    got = sql(
        "SELECT node_id, timestamp_utc, category, interrupting, json_extract_string(attributes, '$.planned'),"
        " message FROM events ORDER BY timestamp_utc"
    )
    assert got == [
        (
            "gpu-007",
            datetime(2024, 5, 4, 14, 7, 23, 102868),
            "compute.instances.hostError",
            True,
            "false",
            "Instance terminated by Compute Engine.",
        ),
        (
            "gpu-008",
            datetime(2024, 5, 6, 1),
            "compute.instances.terminateOnHostMaintenance",
            True,
            "true",
            "Instance terminated by Compute Engine.",
        ),
        (
            "gpu-009",
            datetime(2024, 5, 7, 1),
            "compute.instances.migrateOnHostMaintenance",
            False,  # live migration: the VM kept running
            "true",
            "Instance terminated by Compute Engine.",
        ),
        # no resourceName: the numeric instance id names the node
        (
            "42",
            datetime(2024, 5, 8),
            "compute.instances.hostError",
            True,
            "false",
            "Instance terminated by Compute Engine.",
        ),
    ]
    # the host error's outage ends at the instance's automaticRestart (2 min 27 s later)
    assert sql("SELECT node_id, resolved_at_utc FROM events WHERE resolved_at_utc IS NOT NULL") == [
        ("gpu-007", datetime(2024, 5, 4, 14, 9, 50))
    ]
    notes = " ".join(s.notes)
    assert "1 host error(s) end at the instance's automaticRestart" in notes
    assert "method compute.instances.automaticRestart is not a host event" in notes
    assert "method compute.instances.preempted is not a host event" in notes


def test_json_lines_gzip_and_epoch_times(con, write, sql):
    lines = [json.dumps(e) for e in (_entry("compute.instances.hostError", ts="1714831643"), GCE[2])]
    path = write("events.jsonl.gz", gzip.compress(("\n".join(lines) + "\n").encode()))
    assert detect_format(path) == "gce-audit"
    [s] = ingest_files(con, [path])
    assert _counts(s) == (2, 2, 0, 0, 0)
    assert sql("SELECT min(timestamp_utc), min(cluster_id) FROM events") == [
        (datetime(2024, 5, 4, 14, 7, 23), warehouse.UNKNOWN_CLUSTER)
    ]
    # one InstanceStatus per line (jq -c '.InstanceStatuses[]') is read too
    per_line = "\n".join(json.dumps(status) for status in EC2["InstanceStatuses"])
    [e] = ingest_files(con, [write("statuses.ndjson", per_line)])
    assert (e.format, _counts(e)) == ("ec2-status", (4, 2, 0, 0, 2))


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        ({"Code": "system-reboot", "Description": "[Completed] x", "NotBefore": "2024-05-02"}, "InstanceId"),
        ({"Description": "[Completed] x", "NotBefore": "2024-05-02"}, "event Code is missing"),
        ({"Code": "system-reboot", "Description": "[Completed] x"}, "NotBefore is missing"),
        (
            {"Code": "system-reboot", "Description": "[Completed] x", "NotBefore": "next Tuesday"},
            "is not a time",
        ),
        (
            {
                "Code": "system-reboot",
                "Description": "[Completed]",
                "NotBefore": "2024-05-02",
                "NotAfter": "2024-05-01",
            },
            "NotAfter is before NotBefore",
        ),
        (
            {
                "Code": "system-reboot",
                "Description": "[Completed]",
                "NotBefore": "2024-05-02",
                "NotAfter": "soon",
            },
            "NotAfter",
        ),
        ("not an event", "not a JSON object"),
    ],
)
def test_ec2_records_missing_fields_are_rejected_with_their_line(con, write, sql, record, reason):
    status = {"InstanceId": "i-0bad", "Events": [record]}
    if reason == "InstanceId":
        del status["InstanceId"]
    good = {"InstanceId": "i-0ok", "Events": [EC2["InstanceStatuses"][0]["Events"][0]]}
    path = write("status.json", json.dumps({"InstanceStatuses": [good, status]}, indent=2))
    [s] = ingest_files(con, [path], ReaderOptions(fmt="ec2-status"))
    assert _counts(s) == (2, 1, 0, 1, 0)
    [(line, raw, why)] = sql("SELECT line, raw, reason FROM rejects")
    assert reason in why
    text = path.read_text()
    second_events = text.index('"Events"', text.index('"Events"') + 1)
    assert line == text[:second_events].count("\n") + 2  # the bad event's own line, not the document's
    assert raw and len(raw) <= 2000


def test_gce_entries_missing_fields_and_non_objects_are_rejected(con, write, sql):
    entries = [
        _entry("compute.instances.hostError", ts=None),
        {**_entry("compute.instances.hostError", name=None), "resource": {"type": "gce_instance"}},
        "a string",
        {"textPayload": "not an audit entry", "timestamp": "2024-05-01T00:00:00Z"},
    ]
    [s] = ingest_files(
        con, [write("logs.json", json.dumps(entries, indent=2))], ReaderOptions(fmt="gce-audit")
    )
    assert _counts(s) == (4, 0, 0, 3, 1)
    reasons = [r for (r,) in sql("SELECT reason FROM rejects ORDER BY line")]
    assert reasons[0] == "timestamp is missing"
    assert reasons[1].startswith("no instance")
    assert reasons[2] == "not a LogEntry object"


def test_truncated_array_keeps_the_records_before_the_break(con, write, sql):
    text = json.dumps(GCE[:3], indent=2)
    path = write("cut.json", text[: text.rindex('"timestamp"') + 20])  # cut inside the third entry
    [s] = ingest_files(con, [path])
    assert _counts(s) == (3, 1, 0, 1, 1) and _adds_up(s)
    [(line, why)] = sql("SELECT line, reason FROM rejects")
    assert "truncated or malformed" in why and "ends inside" in why
    third = [i for i in range(len(text)) if text.startswith("\n  {", i)][2] + 1
    assert line == text[:third].count("\n") + 1  # the line where the broken entry starts


def test_a_malformed_json_line_is_rejected_and_the_next_lines_are_read(con, write, sql):
    good = [json.dumps(_entry("compute.instances.hostError", name=f"gpu-{i}")) for i in range(3)]
    text = "\n".join([good[0], '{"protoPayload": {"methodName": "compute.instances.hostError",', *good[1:]])
    [s] = ingest_files(con, [write("events.jsonl", text)])
    assert _counts(s) == (4, 3, 0, 1, 0)
    assert sql("SELECT line FROM rejects") == [(2,)]
    assert sql("SELECT count(DISTINCT node_id) FROM events") == [(3,)]


def test_hostile_text_is_stored_verbatim_and_not_interpreted(con, write, sql):
    name = "gpu-1'; DROP TABLE events; --<script>"
    entry = _entry("compute.instances.hostError", name=name)
    entry["protoPayload"]["status"]["message"] = "\x1b[31mred\x1b[0m <b>bold</b> \u202e"
    [s] = ingest_files(con, [write("x.json", json.dumps([entry]))])
    assert _counts(s) == (1, 1, 0, 0, 0)
    assert sql("SELECT node_id, message FROM events") == [(name, "\x1b[31mred\x1b[0m <b>bold</b> \u202e")]


def test_reingest_changes_nothing_and_a_later_export_adds_only_new_events(con, write, sql):
    first = write("a.json", json.dumps(EC2))
    ingest_files(con, [first])
    [again] = ingest_files(con, [first])
    assert again.skipped
    later = json.loads(json.dumps(EC2))
    later["InstanceStatuses"][0]["Events"][2]["Description"] = "[Completed] Scheduled network maintenance"
    later["InstanceStatuses"][0]["Events"][2]["NotBefore"] = "2024-05-10T00:00:00Z"
    [s] = ingest_files(con, [write("b.json", json.dumps(later, indent=1))])
    assert _counts(s) == (4, 1, 2, 0, 1)  # the two stored events are duplicates
    assert sql("SELECT count(*), count(DISTINCT event_key) FROM events") == [(3, 3)]


def test_empty_or_recordless_files(con, write):
    with pytest.raises(InputError, match="no JSON records"):
        ingest_files(con, [write("blank.json", "\n\n  \n")], ReaderOptions(fmt="gce-audit"))
    [s] = ingest_files(con, [write("none.json", '{"InstanceStatuses": []}')])
    assert (s.format, _counts(s)) == ("ec2-status", (0, 0, 0, 0, 0))


def test_rates_by_planned_separate_maintenance_from_failures(tmp_path, write):
    db = tmp_path / "w.duckdb"
    inventory = write(
        "inventory.csv",
        "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n"
        + "".join(
            f"gcp1,{n},a3-highgpu-8g,8,2024-05-01T00:00:00Z,2024-05-11T00:00:00Z\n"
            for n in ("gpu-007", "gpu-008", "gpu-009", "42")
        ),
    )
    logs = write("system_event.json", json.dumps(GCE))
    runner = CliRunner()
    for args in (["ingest", str(inventory)], ["ingest", str(logs)]):
        result = runner.invoke(main, [*args, "--db", str(db)], catch_exceptions=False)
        assert result.exit_code == 0, result.output
    result = runner.invoke(
        main,
        ["rates", "--db", str(db), "--by", "planned", "--exposure", "calendar", "--json"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    rows = {r["planned"]: r for r in json.loads(result.stdout)}
    # interrupting only: two host errors unplanned, one terminate-on-maintenance planned (the live
    # migration kept its VM running); each uses the whole fleet's 4 x 240 calendar node-hours (the
    # default, uptime, subtracts the host errors' minutes until the automatic restart)
    assert {k: r["failures"] for k, r in rows.items()} == {"false": 2, "true": 1}
    assert {r["exposure_node_hours"] for r in rows.values()} == {960.0}
    assert rows["false"]["rate_per_node_hour"] == pytest.approx(2 / 960)


def test_odd_shapes_do_not_break_reading(con, write, sql):
    # an "Events" key nested before the real one, a canceled event without times (ignored: it
    # carries nothing), Events null, and a status that is not an object
    odd = {
        "InstanceStatuses": [
            {
                "InstanceState": {"Events": [1, 2, 3]},
                "InstanceId": "i-0odd",
                "Events": [
                    {"Code": "instance-stop", "Description": "[Canceled] degraded hardware"},
                    {"Code": "\u202esystem-reboot", "Description": "[Completed] x", "NotBefore": 1714600000},
                ],
            },
            {"InstanceId": "i-0none", "Events": None},
            "i-0str",
        ]
    }
    [s] = ingest_files(con, [write("odd.json", json.dumps(odd, indent=2))])
    assert _counts(s) == (3, 1, 0, 1, 1) and _adds_up(s)
    assert sql("SELECT node_id, category, timestamp_utc FROM events") == [
        ("i-0odd", "\u202esystem-reboot", datetime(2024, 5, 1, 21, 46, 40))
    ]
    assert sql("SELECT reason FROM rejects") == [("not an InstanceStatus object (no InstanceId)",)]


def test_a_restart_closes_only_its_own_host_error_in_any_order(con, write, sql):
    # gcloud lists newest first: errors at 10:00 and 12:00, one restart at 12:05 (the 10:00 error's
    # restart is missing), on gpu-1; gpu-2's restart belongs to no error of gpu-1
    entries = [
        _entry("compute.instances.automaticRestart", name="gpu-2", ts="2024-05-01T10:01:00Z"),
        _entry("compute.instances.automaticRestart", name="gpu-1", ts="2024-05-01T12:05:00Z"),
        _entry("compute.instances.hostError", name="gpu-1", ts="2024-05-01T12:00:00Z"),
        _entry("compute.instances.hostError", name="gpu-1", ts="2024-05-01T10:00:00Z"),
    ]
    [s] = ingest_files(con, [write("newest_first.json", json.dumps(entries, indent=2))])
    assert _counts(s) == (4, 2, 0, 0, 2)
    assert sql("SELECT timestamp_utc, resolved_at_utc FROM events ORDER BY timestamp_utc") == [
        (datetime(2024, 5, 1, 10), None),
        (datetime(2024, 5, 1, 12), datetime(2024, 5, 1, 12, 5)),
    ]
