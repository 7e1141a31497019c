"""The driver's messages without an Xid code (a GPU fallen off the bus) and Xid 154 by its recovery
action, in every line form of docs/ingest.md ("Kernel logs"), table-driven.

Forms and their sources (hostnames, ids and times changed; docs/ingest.md cites each):

* ``NVRM: GPU at 0000:02:00.0 has fallen off the bus.``: older drivers (Bumblebee-Project/Bumblebee
  issue 554; /work/shared/reference/log_formats.md, pastebin xJaypMZt);
* ``NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.``: current drivers, printed beside the
  Xid 79 (NVIDIA/open-gpu-kernel-modules ``osHandleGpuLost``; issue 1151);
* ``NVRM: The NVIDIA GPU 0000:b3:00.0`` / ``NVRM: (PCI ID: 10de:26b5) installed in this system
  has`` / ``NVRM: fallen off the bus and is not responding to commands.``: one printk over three
  lines (open-gpu-kernel-modules ``rm_is_supported_device``; NVIDIA/NVSentinel issue 155 in
  ``dmesg``, leptonai/gpud pull 1209 in ``journalctl -k``): continuation lines indented without a
  prefix (dmesg, journalctl), or each line with its own prefix (syslog daemons reading the kernel
  line by line); two-line and one-line variants;
* ``NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset
  Required)``: NVSentinel's parser tests; the catalog's row 154 names the values.
"""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from pipeline import analysis
from pipeline.ingest import ReaderOptions, ingest_files

HOST = "gpu-017"
DMESG_T = "[Mon Mar  2 04:26:29 2026]"
INDENT = " " * 27  # dmesg and journalctl indent a message's continuation lines under its text
THREE_LINES = [
    "NVRM: The NVIDIA GPU 0000:b3:00.0",
    "NVRM: (PCI ID: 10de:26b5) installed in this system has",
    "NVRM: fallen off the bus and is not responding to commands.",
]
JOINED = (
    "NVRM: The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system has fallen off the bus"
    " and is not responding to commands."
)
NOISE = f"Mar  2 04:26:20 {HOST} kernel: mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link ACTIVE"


def syslog(message: str, second: int = 29) -> str:
    return f"Mar  2 04:26:{second:02d} {HOST} kernel: {message}"


# (case, lines, --node, (read, ingested, duplicate, rejected, ignored), events as (line, pci_bus_id, message))
FELL_OFF_FORMS = [
    (
        "old driver, one line",
        [NOISE, syslog("[12149.628762] NVRM: GPU at 0000:02:00.0 has fallen off the bus.")],
        None,
        (2, 1, 0, 0, 1),
        [(2, "0000:02:00", "NVRM: GPU at 0000:02:00.0 has fallen off the bus.")],
    ),
    (
        "current driver, one line (NV_DEV_PRINTF)",
        [f"2026-03-02T04:26:29.5+00:00 {HOST} kernel: NVRM: GPU 0000:2B:00.0: GPU has fallen off the bus."],
        None,
        (1, 1, 0, 0, 0),
        [(1, "0000:2b:00", "NVRM: GPU 0000:2B:00.0: GPU has fallen off the bus.")],
    ),
    (
        "three lines, dmesg -T (continuations indented)",
        [f"{DMESG_T} {THREE_LINES[0]}", *(INDENT + line for line in THREE_LINES[1:]), NOISE],
        HOST,
        (4, 1, 0, 0, 3),
        [(1, "0000:b3:00", JOINED)],
    ),
    (
        "three lines, journalctl -k (continuations indented)",
        [NOISE, syslog(THREE_LINES[0]), *(" " * 32 + line for line in THREE_LINES[1:])],
        None,
        (4, 1, 0, 0, 3),
        [(2, "0000:b3:00", JOINED)],
    ),
    (
        "three lines, each with its syslog prefix",
        [syslog(line) for line in THREE_LINES],
        None,
        (3, 1, 0, 0, 2),
        [(1, "0000:b3:00", JOINED)],
    ),
    (
        "two lines (PCI ID on the first)",
        [
            syslog("NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:2d04) installed in this system has"),
            syslog("NVRM: fallen off the bus and is not responding to commands."),
        ],
        None,
        (2, 1, 0, 0, 1),
        [
            (
                1,
                "0000:01:00",
                "NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:2d04) installed in this system has fallen"
                " off the bus and is not responding to commands.",
            )
        ],
    ),
    (
        "one line",
        [syslog(JOINED)],
        None,
        (1, 1, 0, 0, 0),
        [(1, "0000:b3:00", JOINED)],
    ),
    (
        "two GPUs lost at probe, one after the other",
        [syslog(line) for line in THREE_LINES]
        + [syslog(line.replace("b3", "b4").replace("26b5", "26b6"), 30) for line in THREE_LINES],
        None,
        (6, 2, 0, 0, 4),
        [(1, "0000:b3:00", JOINED), (4, "0000:b4:00", JOINED.replace("b3", "b4").replace("26b5", "26b6"))],
    ),
    (
        "the same message twice in one second",
        [syslog("NVRM: GPU at 0000:01:00.0 has fallen off the bus.")] * 2,
        None,
        (2, 1, 1, 0, 0),
        [(1, "0000:01:00", "NVRM: GPU at 0000:01:00.0 has fallen off the bus.")],
    ),
    (
        "the first line of another message (not supported): ignored",
        [
            syslog("NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:1234)"),
            syslog("NVRM: installed in this system is not supported by open"),
            syslog("NVRM: nvidia.ko because it does not include the required GPU"),
            syslog("NVRM: GPU at PCI:0000:18:00: GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae"),
        ],
        None,
        (4, 0, 0, 0, 4),
        [],
    ),
]


def _events(sql) -> list[tuple]:
    return sql(
        "SELECT line, pci_bus_id, message FROM events WHERE category = 'gpu_fell_off_bus' AND xid IS NULL"
        " ORDER BY line"
    )


@pytest.mark.parametrize(
    ("lines", "node", "counts", "events"),
    [case[1:] for case in FELL_OFF_FORMS],
    ids=[c[0] for c in FELL_OFF_FORMS],
)
def test_fallen_off_the_bus_without_an_xid(con, write, sql, lines, node, counts, events):
    """Each form is one event per occurrence, class gpu_fell_off_bus (interrupting), on the node
    and the GPU (PCI bus id as Xid lines write it); a multi-line message is one event at its first
    line, its other lines ignored; every line is counted."""
    path = write("kern.log", "\n".join(lines) + "\n")
    [s] = ingest_files(con, [path], ReaderOptions(year=2026, cluster="c1", node=node))
    got = (s.rows_read, s.rows_ingested, s.rows_duplicate, s.rows_rejected, s.rows_ignored)
    assert got == counts
    assert s.rows_read == sum(got[1:])
    assert _events(sql) == events
    stored = sql("SELECT DISTINCT node_id, failure_class, interrupting FROM events")
    assert stored == ([(HOST, "gpu_fell_off_bus", True)] if events else [])
    if events:
        assert any("without an Xid read as gpu_fell_off_bus" in note for note in s.notes)


@pytest.mark.parametrize(
    ("lines", "reason"),
    [
        (  # its first line lost (the log starts after it): the GPU is not known
            [syslog(THREE_LINES[1]), syslog(THREE_LINES[2])],
            "without its first line (NVRM: The NVIDIA GPU <PCI id>)",
        ),
        (  # too far from its first line
            [syslog(THREE_LINES[0]), NOISE, NOISE, syslog(THREE_LINES[2])],
            "without its first line",
        ),
        (  # plain dmesg: the message is read, but has no date
            [f"[ 1843.308145] {THREE_LINES[0]}", *(" " * 15 + line for line in THREE_LINES[1:])],
            "dmesg time since boot has no date",
        ),
    ],
)
def test_a_message_that_cannot_be_used_is_one_reject(con, write, sql, lines, reason):
    path = write("kern.log", "\n".join(lines) + "\n")
    [s] = ingest_files(con, [path], ReaderOptions(year=2026, cluster="c1", max_rejected_percent=100))
    assert (s.rows_ingested, s.rows_rejected) == (0, 1)
    assert s.rows_read == s.rows_ingested + s.rows_duplicate + s.rows_rejected + s.rows_ignored
    [(got,)] = sql("SELECT reason FROM rejects")
    assert reason in got


def _failures(con) -> list[tuple]:
    failures = analysis.read_failures(con)
    return failures.select("node_id", "category").rows()


@pytest.mark.parametrize(
    ("lines", "incidents"),
    [
        (  # the Xid 79, its GPU line and the fallen-off line of the same GPU: one fault
            [
                syslog(
                    "NVRM: Xid (PCI:0000:2b:00): 79, pid='<unknown>', name=<unknown>, "
                    "GPU has fallen off the bus."
                ),
                syslog("NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.", 30),
                syslog("NVRM: GPU 0000:2b:00.0: GPU serial number is 1652923011234.", 30),
            ],
            [("gpu_fell_off_bus", 79, 2)],
        ),
        (  # a fallen-off message of another GPU is its own fault
            [
                syslog("NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus."),
                syslog("NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.", 30),
            ],
            [("gpu_fell_off_bus", 79, 1), ("gpu_fell_off_bus", None, 1)],
        ),
        (  # the probe's three lines minutes after the Xid (the driver reloaded): the same fault
            [syslog("NVRM: Xid (PCI:0000:b3:00): 79, GPU has fallen off the bus.", 0)]
            + [f"Mar  2 04:31:00 {HOST} kernel: {line}" for line in THREE_LINES],
            [("gpu_fell_off_bus", 79, 2)],
        ),
    ],
)
def test_an_xid_79_and_its_own_fallen_off_lines_are_one_failure(con, write, sql, lines, incidents):
    path = write("kern.log", "\n".join(lines) + "\n")
    ingest_files(con, [path], ReaderOptions(year=2026, cluster="c1"))
    got = sql("SELECT category, xid, events FROM incidents ORDER BY pci_bus_id")
    assert got == incidents
    assert _failures(con) == [(HOST, "gpu_fell_off_bus")]


# (recovery action text, class, interrupting, attribute): the catalog's values, and those of newer drivers
XID_154 = [
    ("0x0 (None) to 0x1 (GPU Reset Required)", "gpu_hardware", True, "GPU Reset Required"),
    ("0x0 (None) to 0x2 (Node Reboot Required)", "gpu_hardware", True, "Node Reboot Required"),
    ("0x0 (None) to 0x3 (Drain P2P)", "gpu_hardware", True, "Drain P2P"),
    ("0x0 (None) to 0x4 (Drain and Reset)", "gpu_hardware", True, "Drain and Reset"),
    ("0x0 (None) to 0x2 (OS Reboot)", "gpu_hardware", True, "OS Reboot"),
    ("0x0 (None) to 0x1 (PF FLR)", "gpu_hardware", True, "PF FLR"),
    ("0x1 (GPU Reset Required) to 0x0 (None)", "other", False, "None"),
    ("0x0 to 0x2", "gpu_hardware", True, None),  # no names: the code decides
    ("0x2 to 0x0", "other", False, None),
]


@pytest.mark.parametrize(("change", "category", "interrupting", "action"), XID_154)
def test_xid_154_is_classed_by_its_recovery_action(con, write, sql, change, category, interrupting, action):
    line = f"NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed from {change}"
    [s] = ingest_files(con, [write("kern.log", syslog(line) + "\n")], ReaderOptions(year=2026, cluster="c1"))
    assert s.rows_ingested == 1
    [(got_category, got_interrupting, attributes, xid)] = sql(
        "SELECT failure_class, interrupting, attributes, xid FROM events"
    )
    assert (got_category, got_interrupting, xid) == (category, interrupting, 154)
    assert (json.loads(attributes)["recovery_action"] if attributes else None) == action


def test_xid_154_without_an_action_keeps_the_catalog_row(con, write, sql):
    line = syslog("NVRM: Xid (PCI:0008:01:00): 154, recovery text of a future driver")
    ingest_files(con, [write("kern.log", line + "\n")], ReaderOptions(year=2026, cluster="c1"))
    assert sql("SELECT failure_class, interrupting, attributes FROM events") == [("other", False, None)]


def test_an_xid_79_and_the_reboot_it_asks_for_are_one_failure(con, write, sql):
    """The 154 is its own incident (another class) but falls in the Xid 79's node interruption, so
    rates count one failure, under the 79's class; the 154's action is kept for --by."""
    lines = [
        syslog("NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus."),
        syslog("NVRM: GPU 0000:01:00.0: GPU has fallen off the bus."),
        syslog(
            "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (OS Reboot)",
            31,
        ),
    ]
    ingest_files(con, [write("kern.log", "\n".join(lines) + "\n")], ReaderOptions(year=2026, cluster="c1"))
    assert sql("SELECT category, events FROM incidents ORDER BY timestamp_utc") == [
        ("gpu_fell_off_bus", 2),
        ("gpu_hardware", 1),
    ]
    assert _failures(con) == [(HOST, "gpu_fell_off_bus")]
    [(attributes,)] = sql("SELECT attributes FROM incidents WHERE xid = 154")
    assert json.loads(attributes) == {"recovery_action": "OS Reboot"}
    assert sql("SELECT min(timestamp_utc) FROM incidents") == [(datetime(2026, 3, 2, 4, 26, 29),)]
