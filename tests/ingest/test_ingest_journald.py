"""The systemd journal as JSON (``journalctl -k -o json``) read as a kernel log, table-driven.

Entries are built from the Journal JSON Format (systemd.io/JOURNAL_EXPORT_FORMATS: strings; a value
that is not printable UTF-8 as an array of byte values; several values as an array; a value left out
as null; ``__REALTIME_TIMESTAMP`` microseconds as a decimal string) and the fields of
systemd.journal-fields(7) (``_HOSTNAME``, ``_TRANSPORT``, ``SYSLOG_IDENTIFIER``, ``_BOOT_ID``,
``PRIORITY``); messages are the driver's lines of docs/ingest.md ("Kernel logs").
"""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime

import pytest

from pipeline import warehouse
from pipeline.ingest import InputError, ReaderOptions, detect_format, ingest_files

HOST = "gpu-017"
T0 = 1772425589_892511  # 2026-03-02T04:26:29.892511Z in microseconds
XID79 = "NVRM: Xid (PCI:0000:18:00): 79, pid=10895, name=python3, GPU has fallen off the bus."
FELL = "NVRM: GPU 0000:18:00.0: GPU has fallen off the bus."
SXID = "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32"
REBOOT = "NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (OS Reboot)"
MULTI_LINE = (
    "NVRM: The NVIDIA GPU 0000:b3:00.0\n"
    "NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
    "NVRM: fallen off the bus and is not responding to commands."
)
JOINED = (
    "NVRM: The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system has fallen off the bus"
    " and is not responding to commands."
)


def entry(message: object = XID79, seconds: int = 0, **fields: object) -> str:
    """One line of ``journalctl -k -o json``: the kernel's fields, then ``fields`` (None removes one)."""
    record = {
        "__CURSOR": f"s=0b1c;i={seconds:x};b=9f2e;m=55;t=61;x=7d",
        "__REALTIME_TIMESTAMP": str(T0 + seconds * 1_000_000),
        "__MONOTONIC_TIMESTAMP": str(361589124297 + seconds * 1_000_000),
        "_BOOT_ID": "9f2e3c1d5b6a47f08e2d4c6b8a0f1e3d",
        "_MACHINE_ID": "0123456789abcdef0123456789abcdef",
        "_HOSTNAME": HOST,
        "PRIORITY": "3",
        "_TRANSPORT": "kernel",
        "SYSLOG_FACILITY": "0",
        "SYSLOG_IDENTIFIER": "kernel",
        "_SOURCE_MONOTONIC_TIMESTAMP": "361589123011",
        "MESSAGE": message,
    }
    record.update(fields)
    return json.dumps({k: v for k, v in record.items() if v is not None}, separators=(",", ":"))


def at(seconds: int = 0) -> datetime:
    return datetime.fromtimestamp((T0 + seconds * 1_000_000) / 1e6, UTC).replace(tzinfo=None)


# (case, lines, --node, counts (read, ingested, duplicate, rejected, ignored), events as
# (line, node_id, time, category, interrupting, xid, pci_bus_id, message))
FORMS = [
    (
        "an Xid line",
        [entry()],
        None,
        (1, 1, 0, 0, 0),
        [(1, HOST, at(), "gpu_fell_off_bus", True, 79, "0000:18:00", XID79)],
    ),
    (
        "MESSAGE as bytes (a control character: not printable)",
        [entry(list((XID79 + "\x1b[0m").encode()))],
        None,
        (1, 1, 0, 0, 0),
        [(1, HOST, at(), "gpu_fell_off_bus", True, 79, "0000:18:00", XID79 + "\x1b[0m")],
    ),
    (
        "MESSAGE as bytes, not UTF-8 (the process name)",
        [entry(list(b"NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=caf\xe9, Graphics Exception"))],
        None,
        (1, 1, 0, 0, 0),
        [
            (
                1,
                HOST,
                at(),
                "application",
                False,
                13,
                "0000:18:00",
                "NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=caf\ufffd, Graphics Exception",
            )
        ],
    ),
    (
        "the driver's three-line message: one entry",
        [entry(MULTI_LINE)],
        None,
        (1, 1, 0, 0, 0),
        [(1, HOST, at(), "gpu_fell_off_bus", True, None, "0000:b3:00", JOINED)],
    ),
    (
        "fallen off the bus, one line, beside its Xid 79",
        [entry(XID79), entry(FELL)],
        None,
        (2, 2, 0, 0, 0),
        [
            (1, HOST, at(), "gpu_fell_off_bus", True, 79, "0000:18:00", XID79),
            (
                2,
                HOST,
                at(),
                "gpu_fell_off_bus",
                True,
                None,
                "0000:18:00",
                "NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.",
            ),
        ],
    ),
    (
        "an SXid of NVSwitch",
        [entry(SXID)],
        None,
        (1, 1, 0, 0, 0),
        [
            (
                1,
                HOST,
                at(),
                "nvlink",
                True,
                12028,
                "0000:05:00",
                SXID,
            )
        ],
    ),
    (
        "Xid 154 asking for a reboot",
        [entry(REBOOT)],
        None,
        (1, 1, 0, 0, 0),
        [
            (
                1,
                HOST,
                at(),
                "gpu_hardware",
                True,
                154,
                "0000:18:00",
                REBOOT,
            )
        ],
    ),
    (
        "several values of MESSAGE: joined",
        [
            entry(
                [
                    "NVRM: GPU at 0000:01:00.0 has fallen off the bus.",
                    "NVRM: os_pci_init_handle: invalid context!",
                ]
            )
        ],
        None,
        (1, 1, 0, 0, 0),
        [
            (
                1,
                HOST,
                at(),
                "gpu_fell_off_bus",
                True,
                None,
                "0000:01:00",
                "NVRM: GPU at 0000:01:00.0 has fallen off the bus. os_pci_init_handle: invalid context!",
            )
        ],
    ),
    (
        "no __REALTIME_TIMESTAMP: the source's time",
        [entry(__REALTIME_TIMESTAMP=None, _SOURCE_REALTIME_TIMESTAMP=str(T0 + 5_000_000))],
        None,
        (1, 1, 0, 0, 0),
        [(1, HOST, at(5), "gpu_fell_off_bus", True, 79, "0000:18:00", XID79)],
    ),
    (
        "no _HOSTNAME: --node",
        [entry(_HOSTNAME=None)],
        "node-9",
        (1, 1, 0, 0, 0),
        [(1, "node-9", at(), "gpu_fell_off_bus", True, 79, "0000:18:00", XID79)],
    ),
    (
        "logger -t kernel (syslog transport, the kernel's identifier): read",
        [entry(_TRANSPORT="syslog")],
        None,
        (1, 1, 0, 0, 0),
        [(1, HOST, at(), "gpu_fell_off_bus", True, 79, "0000:18:00", XID79)],
    ),
    (
        "json-seq: a record separator before each entry",
        ["\x1e" + entry()],
        None,
        (1, 1, 0, 0, 0),
        [(1, HOST, at(), "gpu_fell_off_bus", True, 79, "0000:18:00", XID79)],
    ),
    (
        "older journalctl: spaced JSON, MESSAGE as bytes",
        [
            "{ "
            + ", ".join(
                f'"{k}" : {json.dumps(v)}'
                for k, v in json.loads(entry(list((XID79 + "\x07").encode()))).items()
            ).replace(",", ", ")
            + " }"
        ],
        None,
        (1, 1, 0, 0, 0),
        [(1, HOST, at(), "gpu_fell_off_bus", True, 79, "0000:18:00", XID79 + "\x07")],
    ),
    (
        "ignored by rule: other kernel messages, blank lines, other sources, no MESSAGE or a null one",
        [
            entry("mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link ACTIVE"),
            "",
            entry("NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01"),
            entry("GPU Xid 79 seen on GPU 3", _TRANSPORT="stdout", SYSLOG_IDENTIFIER="health-monitor"),
            entry(None),
            entry(
                list(b"usb 1-1: reset \x07"), __REALTIME_TIMESTAMP=None
            ),  # parsed (bytes), no time: no concern
            entry("NVRM: GPU at PCI:0000:18:00: GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae"),
            entry("NVRM: Xid").replace('"NVRM: Xid"', "null"),  # left out: 4096 bytes or more
        ],
        None,
        (8, 0, 0, 0, 8),
        [],
    ),
    (
        "the same entry twice",
        [entry(), entry()],
        None,
        (2, 1, 1, 0, 0),
        [(1, HOST, at(), "gpu_fell_off_bus", True, 79, "0000:18:00", XID79)],
    ),
]


def _counts(s) -> tuple:
    return (s.rows_read, s.rows_ingested, s.rows_duplicate, s.rows_rejected, s.rows_ignored)


def _events(sql) -> list[tuple]:
    return sql(
        "SELECT line, node_id, timestamp_utc, failure_class, interrupting, xid, pci_bus_id, message"
        " FROM events ORDER BY line"
    )


@pytest.mark.parametrize(
    ("lines", "node", "counts", "events"), [c[1:] for c in FORMS], ids=[c[0] for c in FORMS]
)
def test_entries(con, write, sql, lines, node, counts, events):
    path = write("kern.json", "\n".join(lines) + "\n")
    [s] = ingest_files(con, [path], ReaderOptions(cluster="c1", node=node))
    assert (s.kind, s.format) == ("xid_log", "journald-json")
    assert _counts(s) == counts
    assert s.rows_read == sum(counts[1:])
    assert _events(sql) == events
    assert sql("SELECT DISTINCT source_format FROM events") == ([("journald-json",)] if events else [])


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (entry()[:60], "not a JSON object"),  # cut off
        ('{"MESSAGE": "NVRM: Xid (PCI:0000:18:00): 79",}', "not a JSON object"),
        ("[1, 2]", "not a JSON object"),
        ("NVRM: Xid (PCI:0000:18:00): 79, a text line in a JSON export", "not a JSON object"),
        (entry(__REALTIME_TIMESTAMP=None), "entry has no __REALTIME_TIMESTAMP"),
        (entry(__REALTIME_TIMESTAMP="2026-03-02 04:26:29"), "is not microseconds since the epoch"),
        (entry(_HOSTNAME=None), "entry has no _HOSTNAME; pass --node NAME"),
        (entry("NVRM: Xid (PCI:0000:18:00"), "Xid line without (PCI:dddd:bb:dd): CODE"),
        (entry("NVRM: fallen off the bus and is not responding to commands."), "without its first line"),
    ],
)
def test_rejects_name_the_line_and_the_reason(con, write, sql, line, reason):
    good = entry("NVRM: Xid (PCI:0000:18:00): 48, DBE", seconds=1)
    ordinary = entry("usb 1-1: new high-speed USB device number 2 using xhci_hcd", seconds=2)
    path = write("kern.json", f"{good}\n{line}\n{ordinary}\n")
    [s] = ingest_files(con, [path], ReaderOptions(cluster="c1"))
    assert _counts(s) == (3, 1, 0, 1, 1)
    [(line_no, raw, got)] = sql("SELECT line, raw, reason FROM rejects")
    assert (line_no, raw) == (2, line)
    assert reason in got


def test_notes_say_what_was_ignored_and_what_was_decoded(con, write):
    lines = [
        entry("GPU Xid 79 seen", _TRANSPORT="stdout", SYSLOG_IDENTIFIER="health-monitor"),
        entry(list(b"NVRM: Xid (PCI:0000:18:00): 13, name=caf\xe9")),
        entry(MULTI_LINE, seconds=3),
    ]
    [s] = ingest_files(con, [write("kern.json", "\n".join(lines) + "\n")], ReaderOptions(cluster="c1"))
    notes = " | ".join(s.notes)
    assert "1 entries not from the kernel (_TRANSPORT stdout, health-monitor)" in notes
    assert "1 MESSAGE byte array(s) not UTF-8" in notes
    assert "1 message(s) of a GPU fallen off the bus without an Xid read as gpu_fell_off_bus" in notes


@pytest.mark.parametrize("name", ["kern.json", "kern.jsonl", "journal.log", "kern.json.gz", "export"])
def test_detected_from_its_first_line(write, name):
    data = (entry() + "\n").encode()
    path = write(name, gzip.compress(data) if name.endswith(".gz") else data)
    assert detect_format(path) == "journald-json"


def test_a_pretty_printed_journal_says_how_to_export_it(con, write):
    pretty = json.dumps(json.loads(entry()), indent=4)
    path = write("kern.json", pretty + "\n")
    assert detect_format(path) == "journald-json"
    with pytest.raises(InputError, match="journalctl -k -o json"):
        ingest_files(con, [path], ReaderOptions(cluster="c1"))


def test_the_same_messages_as_a_kernel_log_give_the_same_events(tmp_path, write):
    """One node's journal as JSON and as journalctl -o short-iso text: the same events, classes,
    GPUs and messages (the three-line message joined alike), one failure each."""
    messages = [
        (0, XID79),
        (1, FELL),
        (
            2,
            REBOOT,
        ),
        (4000, MULTI_LINE),
        (9000, "NVRM: Xid (PCI:0000:2a:00): 48, An uncorrectable double bit error"),
    ]
    journal = write("kern.json", "".join(entry(m, s) + "\n" for s, m in messages))
    text = ""
    for seconds, message in messages:
        stamp = at(seconds).isoformat() + "+00:00"
        first, *rest = message.split("\n")
        text += f"{stamp} {HOST} kernel: {first}\n" + "".join(f"{' ' * 40}{line}\n" for line in rest)
    kernel_log = write("kern.log", text)
    tables = []
    for path in (journal, kernel_log):
        con = warehouse.connect(tmp_path / f"{path.name}.duckdb")
        ingest_files(con, [path], ReaderOptions(cluster="c1"))
        tables.append(
            (
                con.sql(
                    "SELECT timestamp_utc, node_id, failure_class, interrupting, xid, pci_bus_id, message,"
                    " attributes FROM events ORDER BY timestamp_utc, message"
                ).fetchall(),
                con.sql("SELECT failure_class, events FROM incidents ORDER BY timestamp_utc").fetchall(),
            )
        )
        con.close()
    assert tables[0] == tables[1]
    assert [row[2] for row in tables[0][0]] == [
        "gpu_fell_off_bus",
        "gpu_fell_off_bus",
        "gpu_hardware",
        "gpu_fell_off_bus",
        "gpu_memory",
    ]


@pytest.mark.parametrize("block_bytes", [None, 61])
def test_gz_and_small_blocks_read_like_plain(tmp_path, write, block_bytes):
    lines = [entry(XID79, s) if s % 3 == 0 else entry(f"usb 1-1: device {s}", s) for s in range(40)]
    lines += [entry(MULTI_LINE, 50), entry()[:70]]
    data = ("\n".join(lines) + "\n").encode()
    results = []
    for name, content in (("plain.json", data), ("packed.json.gz", gzip.compress(data))):
        con = warehouse.connect(tmp_path / f"{name}-{block_bytes}.duckdb")
        options = ReaderOptions(cluster="c1", block_bytes=block_bytes)
        [s] = ingest_files(con, [write(name, content)], options)
        results.append(
            (_counts(s), con.sql("SELECT line, xid, message FROM events ORDER BY line").fetchall())
        )
        con.close()
    assert results[0] == results[1]
    assert results[0][0] == (42, 15, 0, 1, 26)


def test_re_ingest_is_a_no_op_and_a_grown_export_adds_its_new_entries(con, write, sql):
    first = "".join(entry(XID79, s) + "\n" for s in range(3))
    path = write("kern.json", first)
    ingest_files(con, [path], ReaderOptions(cluster="c1"))
    assert ingest_files(con, [path], ReaderOptions(cluster="c1"))[0].skipped
    grown = write("kern.json", first + entry(MULTI_LINE, 10) + "\n")
    [s] = ingest_files(con, [grown], ReaderOptions(cluster="c1"))
    assert _counts(s) == (4, 1, 3, 0, 0)
    assert sql("SELECT count(*) FROM events") == [(4,)]


def test_a_lake_of_journal_exports_ingests_like_the_files(tmp_path, write):
    """failcast extract parses journal exports in parallel like the kernel log: the lake gives the
    same events, incidents, rejects and counts as ingesting the files."""
    from pipeline.extract import extract_files
    from tests.extract._lake_fleet import tables

    first = write("a.json", "".join(entry(XID79, s) + "\n" for s in range(3)) + entry()[:50] + "\n")
    second = write("b.json", entry(XID79, 2) + "\n" + entry(MULTI_LINE, 7, _HOSTNAME="gpu-018") + "\n")
    options = ReaderOptions(cluster="c1", max_rejected_percent=100)
    con = warehouse.connect(tmp_path / "direct.duckdb")
    direct = ingest_files(con, [first, second], options)
    con.close()
    extracted = extract_files([str(first), str(second)], tmp_path / "lake", options=options, workers=1)
    assert [e.error for e in extracted] == [None, None]
    con = warehouse.connect(tmp_path / "lake.duckdb")
    from_lake = ingest_files(con, [tmp_path / "lake"])
    con.close()
    assert (
        [_counts(s) for s in from_lake] == [_counts(s) for s in direct] == [(4, 3, 0, 1, 0), (2, 1, 1, 0, 0)]
    )
    direct_tables, lake_tables = tables(tmp_path / "direct.duckdb"), tables(tmp_path / "lake.duckdb")
    for name in ("events", "incidents", "rejects"):
        assert (
            lake_tables[name]
            .drop("file_id", strict=False)
            .equals(direct_tables[name].drop("file_id", strict=False))
        ), name
