"""kubectl get events/nodes -o json -> events: node-scoped Warning events of both Event APIs, repeats,
Xid codes in messages, node conditions as outages that a later snapshot ends, NodeNotReady paired with
NodeReady, hostile and broken input, every item accounted for, idempotent re-ingest, end to end."""

from __future__ import annotations

import gzip
import json
from datetime import datetime

import pytest
from click.testing import CliRunner

from pipeline import warehouse
from pipeline.cli import main
from pipeline.ingest import InputError, ReaderOptions, detect_format, ingest_files

# Shapes: core/v1 Event and events.k8s.io/v1 Event (kubernetes.io/docs/reference/kubernetes-api/
# cluster-resources/event-v1, k8s.io/api events/v1 types.go); reasons of node-problem-detector's
# config/kernel-monitor.json; NodeNotReady as type Normal from kubernetes/kubernetes
# pkg/controller/util/node/controller_utils.go (RecordNodeStatusChange); Rebooted from the kubelet.


def core_event(node, reason, message, first, *, type_="Warning", last=None, count=1, kind="Node", **extra):
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{node}.17c2f3", "namespace": "default", "creationTimestamp": first},
        "involvedObject": {"kind": kind, "name": node, "uid": node, "apiVersion": "v1"},
        "reason": reason,
        "message": message,
        "source": {"component": "kernel-monitor", "host": node},
        "firstTimestamp": first,
        "lastTimestamp": last or first,
        "count": count,
        "type": type_,
        "eventTime": None,
        "reportingComponent": "kernel-monitor",
        "reportingInstance": node,
        **extra,
    }


def new_event(node, reason, note, event_time, *, series=None, type_="Warning"):
    item = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{node}.18a", "namespace": "default"},
        "eventTime": event_time,
        "reportingController": "gpu-health-monitor",
        "reportingInstance": node,
        "action": "Check",
        "reason": reason,
        "regarding": {"kind": "Node", "name": node},
        "note": note,
        "type": type_,
    }
    if series:
        item["series"] = series
    return item


def node(name, *conditions):
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.count": "8"}},
        "status": {
            "conditions": [
                {
                    "type": t,
                    "status": s,
                    "reason": r,
                    "message": m,
                    "lastHeartbeatTime": "2024-06-01T00:00:00Z",
                    "lastTransitionTime": since,
                }
                for t, s, r, m, since in conditions
            ]
        },
    }


def healthy(name, since="2024-05-01T00:00:00Z"):
    return node(
        name,
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", "ok", since),
        ("KernelDeadlock", "False", "KernelHasNoDeadlock", "kernel has no deadlock", since),
        ("Ready", "True", "KubeletReady", "kubelet is posting ready status", since),
    )


def klist(*items):
    return json.dumps({"apiVersion": "v1", "items": list(items), "kind": "List", "metadata": {}}, indent=4)


def _counts(s):
    return (s.rows_read, s.rows_ingested, s.rows_duplicate, s.rows_rejected, s.rows_ignored)


EVENTS = klist(
    core_event(
        "gpu-1",
        "KernelOops",
        "BUG: unable to handle kernel NULL pointer dereference at x",
        "2024-05-02T10:00:00Z",
    ),
    core_event(
        "gpu-2",
        "TaskHung",
        "task python3:1234 blocked for more than 120 seconds.",
        "2024-05-02T11:00:00Z",
        last="2024-05-02T15:00:00Z",
        count=7,
    ),
    core_event("gpu-3", "Rebooted", "Node gpu-3 has been rebooted, boot id: 1f2e", "2024-05-03T08:00:00Z"),
    core_event("gpu-3", "Starting", "Starting kubelet.", "2024-05-03T08:01:00Z", type_="Normal"),
    core_event(
        "gpu-4", "BackOff", "Back-off restarting failed container", "2024-05-03T09:00:00Z", kind="Pod"
    ),
    new_event(
        "gpu-5", "GpuXidError", "GPU 3: Xid 79, GPU has fallen off the bus", "2024-05-04T12:00:00.123456Z"
    ),
    new_event(
        "gpu-6",
        "NVLinkInactive",
        "NVLink 5 of GPU 0 is inactive",
        "2024-05-04T13:00:00.000000Z",
        series={"count": 3, "lastObservedTime": "2024-05-04T13:30:00.000000Z"},
    ),
)


def test_node_events_of_both_apis_with_repeats_and_xid(con, write, sql):
    path = write("events.json", EVENTS)
    assert detect_format(path) == "kubernetes"
    [s] = ingest_files(con, [path], ReaderOptions(cluster="k8s-a"))
    assert (s.format, s.kind) == ("kubernetes", "node_events")
    assert _counts(s) == (7, 5, 0, 0, 2)  # Normal Starting, Pod event ignored
    got = sql(
        "SELECT node_id, cluster_id, timestamp_utc, category, xid, failure_class, interrupting,"
        " resolved_at_utc FROM events ORDER BY node_id, timestamp_utc"
    )
    assert got == [
        ("gpu-1", "k8s-a", datetime(2024, 5, 2, 10), "KernelOops", None, "software", True, None),
        ("gpu-2", "k8s-a", datetime(2024, 5, 2, 11), "TaskHung", None, "software", True, None),
        ("gpu-2", "k8s-a", datetime(2024, 5, 2, 15), "TaskHung", None, "software", True, None),
        ("gpu-3", "k8s-a", datetime(2024, 5, 3, 8), "Rebooted", None, "host", True, None),
        (
            "gpu-5",
            "k8s-a",
            datetime(2024, 5, 4, 12, 0, 0, 123456),
            "GpuXidError Xid 79",
            79,
            "gpu_fell_off_bus",
            True,
            None,
        ),
        ("gpu-6", "k8s-a", datetime(2024, 5, 4, 13), "NVLinkInactive", None, "other", True, None),
        ("gpu-6", "k8s-a", datetime(2024, 5, 4, 13, 30), "NVLinkInactive", None, "other", True, None),
    ]
    assert sql("SELECT message FROM events WHERE node_id = 'gpu-5'") == [
        ("GPU 3: Xid 79, GPU has fallen off the bus",)
    ]
    assert any("2 repeated event(s)" in n for n in s.notes)
    assert any("1 Normal node events" in n and "1 events about other objects" in n for n in s.notes)
    assert any("'NVLinkInactive' 2" in n for n in s.notes)  # unknown to the taxonomy, named


def test_reingest_and_overlapping_export_are_idempotent(con, write, sql):
    [first] = ingest_files(con, [write("a.json", EVENTS)])
    before = sql("SELECT * EXCLUDE (file_id) FROM events ORDER BY event_key")
    assert ingest_files(con, [write("a.json", EVENTS)])[0].skipped
    # a later export holding the same events again plus one more: only the new one is added
    more = json.loads(EVENTS)
    more["items"].append(
        core_event("gpu-9", "KernelOops", "divide error: 0000 [#1] SMP", "2024-05-05T00:00:00Z")
    )
    [again] = ingest_files(con, [write("b.json", json.dumps(more))])
    assert _counts(again) == (8, 1, 5, 0, 2)
    assert sum(_counts(again)[1:]) == again.rows_read
    after = sql("SELECT * EXCLUDE (file_id) FROM events ORDER BY event_key")
    assert len(after) == len(before) + 1 and set(before) <= set(after)


def test_node_conditions_are_outages_that_a_later_snapshot_ends(con, write, sql):
    day1 = klist(
        healthy("gpu-1"),
        node(
            "gpu-2",
            ("Ready", "False", "KubeletNotReady", "PLEG is not healthy", "2024-05-10T06:00:00Z"),
            (
                "KernelDeadlock",
                "True",
                "DockerHung",
                "task docker:7 blocked for more than 300 seconds.",
                "2024-05-10T05:58:00Z",
            ),
            ("MemoryPressure", "True", "KubeletHasInsufficientMemory", "low", "2024-05-10T05:00:00Z"),
        ),
        node(
            "gpu-3",
            (
                "AcceleratedHardwareReady",
                "False",
                "NvidiaXIDError",
                "GPU 2 reported Xid 48",
                "2024-05-10T07:00:00Z",
            ),
            (
                "Ready",
                "Unknown",
                "NodeStatusUnknown",
                "Kubelet stopped posting node status.",
                "2024-05-10T07:05:00Z",
            ),
        ),
    )
    [s1] = ingest_files(con, [write("nodes-day1.json", day1)], ReaderOptions(cluster="k8s-a"))
    assert _counts(s1) == (3, 2, 0, 0, 1)  # gpu-1 healthy: ignored; MemoryPressure is no outage
    rows = (
        "SELECT node_id, category, timestamp_utc, resolved_at_utc, attributes->>'condition'"
        " FROM events ORDER BY 1, 3"
    )
    assert sql(rows) == [
        ("gpu-2", "DockerHung", datetime(2024, 5, 10, 5, 58), None, "KernelDeadlock"),
        ("gpu-2", "KubeletNotReady", datetime(2024, 5, 10, 6), None, "Ready"),
        ("gpu-3", "NvidiaXIDError Xid 48", datetime(2024, 5, 10, 7), None, "AcceleratedHardwareReady"),
        ("gpu-3", "NodeStatusUnknown", datetime(2024, 5, 10, 7, 5), None, "Ready"),
    ]
    assert any("4 outage(s) still open" in n for n in s1.notes)
    # the next snapshot: gpu-2 recovered at 09:00; gpu-3 still down (same transition time)
    day2 = klist(
        node(
            "gpu-2",
            ("Ready", "True", "KubeletReady", "kubelet is posting ready status", "2024-05-10T09:00:00Z"),
            (
                "KernelDeadlock",
                "False",
                "KernelHasNoDeadlock",
                "kernel has no deadlock",
                "2024-05-10T08:30:00Z",
            ),
        ),
        node(
            "gpu-3",
            (
                "AcceleratedHardwareReady",
                "False",
                "NvidiaXIDError",
                "GPU 2 reported Xid 48",
                "2024-05-10T07:00:00Z",
            ),
            (
                "Ready",
                "Unknown",
                "NodeStatusUnknown",
                "Kubelet stopped posting node status.",
                "2024-05-10T07:05:00Z",
            ),
        ),
    )
    [s2] = ingest_files(con, [write("nodes-day2.json", day2)], ReaderOptions(cluster="k8s-a"))
    assert _counts(s2) == (2, 1, 1, 0, 0)
    assert any("2 stored open outage(s) ended" in n for n in s2.notes)
    assert sql(rows) == [
        ("gpu-2", "DockerHung", datetime(2024, 5, 10, 5, 58), datetime(2024, 5, 10, 8, 30), "KernelDeadlock"),
        ("gpu-2", "KubeletNotReady", datetime(2024, 5, 10, 6), datetime(2024, 5, 10, 9), "Ready"),
        ("gpu-3", "NvidiaXIDError Xid 48", datetime(2024, 5, 10, 7), None, "AcceleratedHardwareReady"),
        ("gpu-3", "NodeStatusUnknown", datetime(2024, 5, 10, 7, 5), None, "Ready"),
    ]
    # a third snapshot where gpu-3 is down again since a later time: the old outage ends there
    day3 = klist(
        node("gpu-3", ("Ready", "False", "KubeletNotReady", "runtime down", "2024-05-11T00:00:00Z")),
    )
    ingest_files(con, [write("nodes-day3.json", day3)], ReaderOptions(cluster="k8s-a"))
    assert sql("SELECT resolved_at_utc FROM events WHERE category = 'NodeStatusUnknown'") == [
        (datetime(2024, 5, 11),)
    ]


def test_node_not_ready_event_is_ended_by_node_ready(con, write, sql):
    text = klist(
        core_event(
            "gpu-1",
            "NodeNotReady",
            "Node gpu-1 status is now: NodeNotReady",
            "2024-05-01T10:00:00Z",
            type_="Normal",
        ),
        core_event(
            "gpu-1",
            "NodeReady",
            "Node gpu-1 status is now: NodeReady",
            "2024-05-01T10:20:00Z",
            type_="Normal",
        ),
        core_event(
            "gpu-2",
            "NodeNotReady",
            "Node gpu-2 status is now: NodeNotReady",
            "2024-05-01T11:00:00Z",
            type_="Normal",
        ),
        core_event(
            "gpu-3",
            "NodeReady",
            "Node gpu-3 status is now: NodeReady",
            "2024-05-01T11:00:00Z",
            type_="Normal",
        ),
    )
    [s] = ingest_files(con, [write("ev.json", text)])
    assert _counts(s) == (4, 3, 0, 0, 1)  # gpu-3's NodeReady ends nothing
    got = sql("SELECT node_id, category, resolved_at_utc, cluster_id FROM events ORDER BY 1")
    assert got == [
        ("gpu-1", "NodeNotReady", datetime(2024, 5, 1, 10, 20), "unknown"),
        ("gpu-2", "NodeNotReady", None, "unknown"),
    ]
    # the NodeReady of gpu-2 arrives in the next export
    later = klist(core_event("gpu-2", "NodeReady", "ready", "2024-05-01T12:00:00Z", type_="Normal"))
    [s2] = ingest_files(con, [write("ev2.json", later)])
    assert _counts(s2) == (1, 1, 0, 0, 0)
    assert sql("SELECT resolved_at_utc FROM events WHERE node_id = 'gpu-2'") == [(datetime(2024, 5, 1, 12),)]


HOSTILE = '<script>alert("x")</script>\x1b[31mRED\x1b[0m \'quoted\' "double" ' + "y" * 5000


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        (core_event("", "KernelOops", "m", "2024-05-01T00:00:00Z"), "without the node's name"),
        (core_event("gpu-1", "", "m", "2024-05-01T00:00:00Z"), "without a reason"),
        (
            {
                **core_event("gpu-1", "KernelOops", "m", "2024-05-01T00:00:00Z"),
                "firstTimestamp": "yesterday",
                "lastTimestamp": None,
                "metadata": {},
            },
            "without a time",
        ),
        (node("", ("Ready", "False", "r", "m", "2024-05-01T00:00:00Z")), "without metadata.name"),
        (node("gpu-1", ("Ready", "False", "KubeletNotReady", "m", None)), "without a lastTransitionTime"),
        ("just a string", "not a JSON object"),
    ],
)
def test_bad_items_are_rejected_with_index_and_raw(con, write, sql, item, reason):
    text = klist(core_event("gpu-9", "KernelOops", "fine", "2024-05-01T00:00:00Z"), item)
    [s] = ingest_files(con, [write("bad.json", text)], ReaderOptions(fmt="kubernetes"))
    assert _counts(s) == (2, 1, 0, 1, 0)
    [(line, raw, why)] = sql("SELECT line, raw, reason FROM rejects")
    assert line == 2 and reason in why and len(raw) <= 2001


def test_hostile_text_is_stored_verbatim_and_long_raw_is_cut(con, write, sql):
    bad = core_event("gpu-1", "KernelOops", HOSTILE, "not a time")
    bad["lastTimestamp"] = None
    bad["metadata"] = {}
    text = klist(core_event("gpu-1", HOSTILE[:60], HOSTILE, "2024-05-01T00:00:00Z"), bad)
    [s] = ingest_files(con, [write("h.json", text)])
    assert _counts(s) == (2, 1, 0, 1, 0)
    assert sql("SELECT category, message FROM events") == [(HOSTILE[:60], HOSTILE)]
    [(raw,)] = sql("SELECT raw FROM rejects")
    assert len(raw) == 2001 and raw.endswith("…")


def test_json_lines_stream_with_bad_lines_rejected(con, write, sql):
    lines = [
        json.dumps(core_event("gpu-1", "KernelOops", "oops", "2024-05-01T00:00:00Z")),
        "",
        '{"apiVersion": "v1", "kind": "Event", "reason": "cut',
        json.dumps(
            node(
                "gpu-2", ("ReadonlyFilesystem", "True", "FilesystemIsReadOnly", "ro", "2024-05-01T01:00:00Z")
            )
        ),
    ]
    path = write("items.jsonl.gz", gzip.compress("\n".join(lines).encode()))
    assert detect_format(path) == "kubernetes"
    [s] = ingest_files(con, [path], ReaderOptions(block_bytes=64))
    assert _counts(s) == (4, 2, 0, 1, 1)
    [(line, reason)] = sql("SELECT line, reason FROM rejects")
    assert line == 3 and reason.startswith("not a JSON object (Unterminated string")
    assert sql("SELECT node_id, category, failure_class FROM events ORDER BY 1") == [
        ("gpu-1", "KernelOops", "software"),
        ("gpu-2", "FilesystemIsReadOnly", "storage"),
    ]


def test_truncated_list_is_one_clear_error_and_stores_nothing(con, write, sql):
    text = EVENTS[: len(EVENTS) // 2]
    path = write("cut.json", text)
    with pytest.raises(InputError, match=r"cut.json:\d+: not valid JSON .*jq -c"):
        ingest_files(con, [path], ReaderOptions(fmt="kubernetes"))
    assert sql("SELECT count(*) FROM events") == [(0,)]
    assert sql("SELECT count(*) FROM ingested_files") == [(0,)]


def test_list_over_the_size_limit_is_refused(con, write, monkeypatch):
    from pipeline.readers import kubernetes

    monkeypatch.setattr(kubernetes, "MAX_LIST_BYTES", 1000)
    with pytest.raises(InputError, match="over 0 MB is not read whole; convert it to JSON Lines"):
        ingest_files(con, [write("big.json", EVENTS)])


def test_not_a_list_is_an_error(con, write):
    with pytest.raises(InputError, match="not a Kubernetes List"):
        status = json.dumps({"apiVersion": "v1", "kind": "Status", "status": "Failure"}, indent=2)
        ingest_files(con, [write("x.json", status)], ReaderOptions(fmt="kubernetes"))


def test_end_to_end_inventory_events_and_nodes_give_rates_and_outages(con, write, sql, tmp_path):
    inventory = write(
        "inventory.csv",
        "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n"
        + "".join(
            f"k8s-a,gpu-{i},p5.48xlarge,8,2024-05-01T00:00:00Z,2024-05-31T00:00:00Z\n" for i in range(1, 5)
        ),
    )
    events = write(
        "events.json",
        klist(
            new_event("gpu-1", "GpuXidError", "Xid 79 on GPU 1", "2024-05-05T00:00:00.000000Z"),
            core_event("gpu-2", "KernelOops", "oops", "2024-05-06T00:00:00Z"),
            core_event("gpu-2", "OOMKilling", "Killed process 99 (python3)", "2024-05-07T00:00:00Z"),
            core_event("gpu-3", "Starting", "Starting kubelet.", "2024-05-07T00:00:00Z", type_="Normal"),
        ),
    )
    snap1 = write(
        "nodes1.json",
        klist(
            healthy("gpu-1"),
            node("gpu-4", ("Ready", "False", "KubeletNotReady", "PLEG", "2024-05-10T00:00:00Z")),
        ),
    )
    snap2 = write("nodes2.json", klist(healthy("gpu-4", since="2024-05-10T06:00:00Z")))
    db = str(tmp_path / "fleet.duckdb")
    runner = CliRunner()
    for path in (inventory, events, snap1, snap2):
        result = runner.invoke(main, ["ingest", str(path), "--db", db, "--cluster", "k8s-a"])
        assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["rates", "--db", db, "--json"])
    assert result.exit_code == 0, result.output
    [rates] = json.loads(result.output)
    # 4 nodes x 30 days of uptime less gpu-4's 6 h outage, which the second snapshot closed (its
    # incident used to stay open until a full rebuild: the outage had no end and no downtime);
    # gpu-2's OOM kill is class application: not interrupting, not a failure
    assert (rates["failures"], rates["exposure_node_hours"]) == (3, 4 * 30 * 24.0 - 6)
    assert "uptime" in rates["exposure_basis"]
    result = runner.invoke(main, ["rates", "--db", db, "--json", "--view", "shares"])
    assert result.exit_code == 0, result.output
    shares = {r["failure_class"]: r["share"] for r in json.loads(result.output)}
    assert shares == pytest.approx({"gpu_fell_off_bus": 1 / 3, "software": 1 / 3, "undetermined": 1 / 3})
    con2 = warehouse.connect(db)
    got = con2.sql(
        "SELECT node_id, failure_class, interrupting, timestamp_utc, resolved_at_utc"
        " FROM events ORDER BY 1, 4"
    ).fetchall()
    con2.close()
    assert got == [
        ("gpu-1", "gpu_fell_off_bus", True, datetime(2024, 5, 5), None),
        ("gpu-2", "software", True, datetime(2024, 5, 6), None),
        ("gpu-2", "application", False, datetime(2024, 5, 7), None),
        ("gpu-4", "undetermined", True, datetime(2024, 5, 10), datetime(2024, 5, 10, 6)),
    ]


def test_one_list_of_nodes_and_events_and_other_kinds(con, write, sql):
    # kubectl get nodes,events -A -o json: one List with both kinds (and a kind we do not read)
    text = klist(
        node("gpu-1", ("ReadonlyFilesystem", "True", "FilesystemIsReadOnly", "ro", "2024-05-01T01:00:00Z")),
        core_event("gpu-1", "Ext4Error", "EXT4-fs error (device sda1): bad block", "2024-05-01T00:59:00Z"),
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer-0"}},
    )
    [s] = ingest_files(con, [write("mixed.json", text)], ReaderOptions(cluster="k8s-a"))
    assert _counts(s) == (3, 2, 0, 0, 1)
    assert any("1 Pod objects" in n for n in s.notes)
    assert sql("SELECT category, failure_class FROM events ORDER BY timestamp_utc") == [
        ("Ext4Error", "storage"),
        ("FilesystemIsReadOnly", "storage"),
    ]
