"""The user's taxonomy: free-text categories, their failure classes, overrides and extra columns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline import warehouse
from pipeline.categories import SYNONYMS, CategoryMap, FailureCategory, normal_form
from pipeline.cli import main
from pipeline.config import ConfigError, load_config
from pipeline.ingest import ReaderOptions, ingest_files, parse_category_map
from pipeline.store.taxonomy import category_with_xid, classify

C = FailureCategory


@pytest.mark.parametrize(
    ("text", "cls", "interrupting"),
    [
        # a GPU named as failed, not how: generic GPU hardware, never a specific mode
        ("GPU", C.GPU_HARDWARE, True),
        ("Faulty GPU", C.GPU_HARDWARE, True),
        ("  faulty-gpu ", C.GPU_HARDWARE, True),
        ("GPU failure", C.GPU_HARDWARE, True),
        ("bad gpu", C.GPU_HARDWARE, True),
        ("Failed GPU", C.GPU_HARDWARE, True),
        ("GPU error", C.GPU_HARDWARE, True),
        ("GPU hardware", C.GPU_HARDWARE, True),
        ("gpu_hardware", C.GPU_HARDWARE, True),
        # what names a GPU that dropped off the bus
        ("gpu_fell_off_bus", C.GPU_FELL_OFF_BUS, True),
        ("GPU_FELL_OFF_BUS", C.GPU_FELL_OFF_BUS, True),
        ("GPU fell off the bus", C.GPU_FELL_OFF_BUS, True),
        ("GPU has fallen off the bus.", C.GPU_FELL_OFF_BUS, True),
        ("GPU is lost", C.GPU_FELL_OFF_BUS, True),
        ("Faulty GPU: Xid 79", C.GPU_FELL_OFF_BUS, True),  # a ticket that quotes the Xid names it
        ("GPU failure (Xid 48)", C.GPU_MEMORY, True),
        ("HBM", C.GPU_MEMORY, True),
        ("ECC", C.GPU_MEMORY, True),
        ("GPU memory", C.GPU_MEMORY, True),
        ("NIC", C.NETWORK, True),
        ("Link Down", C.NETWORK, True),
        ("LINK_DOWN", C.NETWORK, True),
        ("InfiniBand", C.NETWORK, True),
        ("Parameter Plane Cable", C.NETWORK, True),
        ("NVLink", C.NVLINK, True),
        ("Power Supply", C.HOST, True),
        ("PSU", C.HOST, True),
        ("CPU", C.HOST, True),
        ("DIMM", C.HOST, True),
        ("Memory", C.HOST, True),
        ("BMC", C.HOST, True),
        ("Stress Test Failure", C.HARDWARE, True),
        ("unavailable", C.UNDETERMINED, True),
        ("Xid 79", C.GPU_FELL_OFF_BUS, True),
        ("GPU reset after XID 48 (DBE)", C.GPU_MEMORY, True),
        ("xid_13 in job", C.APPLICATION, False),  # application-caused: the class does not interrupt
        ("Xid 38", C.GPU_FIRMWARE, False),  # the catalog says IGNORE although the class interrupts
        ("Xid 999", C.UNKNOWN_XID, True),
        ("SXid 12028", C.NVLINK, True),
        ("application", C.APPLICATION, False),
        ("gpu_memory_warning", C.GPU_MEMORY_WARNING, False),
        ("Cosmic rays", C.OTHER, True),
        ("Maxidle 7", C.OTHER, True),  # "xid" inside a word is not an Xid
        ("unixid 5", C.OTHER, True),
        # the EKS node monitoring agent's reasons: Xid in CamelCase, GPU missing, NVLink, DBE
        ("NvidiaXID79Error", C.GPU_FELL_OFF_BUS, True),
        ("NvidiaXID13Warning", C.APPLICATION, False),
        ("NvidiaSXID12028Error", C.NVLINK, True),
        ("NvidiaXid79Error", C.OTHER, True),  # only the agent's upper-case XID counts inside a word
        ("NvidiaDeviceCountMismatch", C.GPU_HARDWARE, True),  # a GPU missing, maybe never enumerated
        ("DCGMDiagnosticFailure", C.GPU_HARDWARE, True),
        ("NvidiaPCIeError", C.GPU_HARDWARE, True),
        ("NeuronHBMUncorrectableError", C.HARDWARE, True),
        ("NvidiaNVLinkError", C.NVLINK, True),
        ("NvidiaDoubleBitError", C.GPU_MEMORY, True),
        ("NvidiaPageRetirement", C.GPU_MEMORY_WARNING, False),
        ("SoftLockup", C.SOFTWARE, True),
    ],
)
def test_built_in_classification(text, cls, interrupting):
    got = classify(text)
    assert (got.failure_class, got.interrupting, got.user_interrupting) == (cls, interrupting, None)
    assert got.known is (cls is not C.OTHER)


@pytest.mark.parametrize(
    ("text", "cls", "words"),
    [
        # qualifiers dropped, then the rest is a class or synonym
        ("NVLink error", C.NVLINK, "nvlink"),
        ("Disk failure", C.STORAGE, "disk"),
        ("Power supply failure", C.HOST, "power supply"),
        ("Uncorrectable ECC error", C.GPU_MEMORY, "uncorrectable ecc"),
        ("Network issue", C.NETWORK, "network"),
        # the longest run of words that names a class
        ("ECC uncorrectable", C.GPU_MEMORY, "ecc"),
        ("Kernel panic", C.SOFTWARE, "kernel"),
        ("InfiniBand link down", C.NETWORK, "link down"),  # "link down" is longer than "infiniband"
        ("GPU memory ECC error", C.GPU_MEMORY, "gpu memory"),  # not "memory" (host) or "ecc"
        ("IB port flapping", C.NETWORK, "ib"),
        ("Unknown GPU error", C.GPU_HARDWARE, "gpu"),  # a cause not known yields to one named
        ("Node not responding", C.UNDETERMINED, "not responding"),  # ... and decides alone
        ("Application crash", C.APPLICATION, "application"),
        # words of two classes, a vague word alone, no word at all: not a guess
        ("GPU driver crash", C.OTHER, None),
        ("Memory ECC error", C.OTHER, None),  # HBM or a DIMM's ECC?
        ("Power cycle", C.OTHER, None),
        ("Memory leak", C.OTHER, None),
        ("OS upgrade", C.OTHER, None),
        ("Cosmic rays", C.OTHER, None),
        ("Other hardware", C.HARDWARE, "hardware"),  # "other" names no class
        ("GPU failure (Xid 48)", C.GPU_MEMORY, None),  # an Xid in the text comes first
        ("NvidiaXid79Error", C.OTHER, None),  # one word: no guess inside it
        ("Faulty GPU", C.GPU_HARDWARE, None),  # a synonym as a whole: no guess
    ],
)
def test_class_by_words_of_the_name(text, cls, words):
    got = classify(text)
    assert (got.failure_class, got.words, got.known) == (cls, words, cls is not C.OTHER)
    assert got.interrupting is cls.interrupting


def test_the_word_rule_is_part_of_the_fingerprint(monkeypatch):
    """A changed rule must reclassify stored events, as a changed synonym does."""
    before = CategoryMap().fingerprint
    monkeypatch.setattr("pipeline.categories.QUALIFIER_WORDS", frozenset({"error"}))
    assert CategoryMap().fingerprint != before


def test_only_names_of_a_lost_gpu_are_fell_off_the_bus():
    """gpu_fell_off_bus is one failure mode (Xid 79): a synonym must name it (the bus, or the
    driver's "GPU is lost"); a GPU named only as failed is gpu_hardware, which interrupts."""
    for name, cls in SYNONYMS.items():
        if cls is C.GPU_FELL_OFF_BUS:
            assert "bus" in name.lower() or "lost" in name.lower(), name
    assert C.GPU_HARDWARE.interrupting


def test_every_class_maps_to_itself_and_the_synonyms_do_not_collide():
    for c in C:
        assert classify(c.value).failure_class is c
    keys = [normal_form(k) for k in SYNONYMS]
    assert len(keys) == len(set(keys)) and not set(keys) & {normal_form(c.value) for c in C}


def test_user_map_overrides_class_and_flag():
    cmap = parse_category_map(
        [
            "Stress Test Failure=host",
            "Maintenance=other:noninterrupting",
            "application=application:interrupting",
        ]
    )
    assert classify("stress-test failure", cmap).failure_class is C.HOST
    maintenance = classify("MAINTENANCE", cmap)
    assert (maintenance.failure_class, maintenance.user_interrupting, maintenance.known) == (
        C.OTHER,
        False,
        True,
    )
    assert classify("Xid 13", cmap).user_interrupting is True  # via its class's entry
    assert classify("Faulty GPU", cmap).failure_class is C.GPU_HARDWARE  # built-ins still apply


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ("Faulty GPU", "expected SOURCE=CLASS"),
        ("Faulty GPU=gpux", "'gpux' is not a failure class"),
        ("X=host:sometimes", "write :interrupting or :noninterrupting"),
    ],
)
def test_bad_category_map_flag_is_one_line(pair, message):
    with pytest.raises(ValueError, match=message):
        parse_category_map([pair])
    result = CliRunner().invoke(main, ["ingest", "x.csv", "--category-map", pair])
    assert result.exit_code == 2 and message in result.output and len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('"Faulty GPU" = "gpux"', "key 'categories.Faulty GPU' 'gpux' is not a failure class"),
        ('Maintenance = { class = "other", interrupting = "no" }', "interrupting must be true or false"),
        ('Maintenance = { klass = "other" }', "must be a class name or"),
        ('"Link Down" = "network"\n"link-down" = "nvlink"', "names the same category as 'Link Down'"),
    ],
)
def test_bad_categories_table_names_the_key(tmp_path, table, message):
    path = tmp_path / "failcast.toml"
    path.write_text(f"[categories]\n{table}\n")
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_categories_table_and_flags_merge(tmp_path):
    path = tmp_path / "failcast.toml"
    path.write_text(
        '[categories]\n"Stress Test Failure" = "host"\n'
        'Maintenance = { class = "other", interrupting = false }\n'
    )
    cfg = load_config(path).with_overrides(category_map=parse_category_map(["Stress Test Failure=hardware"]))
    assert cfg.category_map == CategoryMap(
        {"stresstestfailure": C.HARDWARE, "maintenance": C.OTHER}, {"maintenance": False}
    )
    assert load_config(path).category_map.fingerprint != cfg.category_map.fingerprint


TICKETS = """\
ticket,opened,cluster,host,fault,level,rack,gpu_index
T-1,2026-03-02T04:00:00Z,c1,n1,Faulty GPU,P1,r01,3
T-2,2026-03-02T05:00:00Z,c1,n2,Parameter Plane Cable,P2,r01,
T-3,2026-03-03T05:00:00Z,c1,n3,Power Supply,P1,r02,
T-4,2026-03-04T05:00:00Z,c1,n4,Stress Test Failure,P3,r02,
T-5,2026-03-05T05:00:00Z,c1,n1,unavailable,P2,r01,
T-6,2026-03-06T05:00:00Z,c1,n2,Cosmic Rays,P1,r01,
T-7,2026-03-06T06:00:00Z,c1,n3,Cosmic Rays,P2,r02,
T-8,2026-03-07T05:00:00Z,c1,n4,GPU,P1,r02,1
T-8,2026-03-07T05:00:00Z,c1,n4,GPU,P1,r02,1
T-9,2026-03-08T05:00:00Z,c1,,GPU,P1,r02,1
T-10,2026-03-09T05:00:00Z,c1,n2,NVLink error,P2,r01,
"""
INVENTORY = "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n" + "".join(
    f"c1,n{i},p5,8,2026-03-01T00:00:00Z,2026-04-01T00:00:00Z\n" for i in range(1, 5)
)
MAP = [
    "--map",
    "timestamp=opened",
    "--map",
    "cluster_id=cluster",
    "--map",
    "node_id=host",
    "--map",
    "category=fault",
]


@pytest.fixture
def tickets(tmp_path) -> tuple[Path, Path, Path]:
    (tmp_path / "tickets.csv").write_text(TICKETS)
    (tmp_path / "inventory.csv").write_text(INVENTORY)
    return tmp_path / "w.duckdb", tmp_path / "inventory.csv", tmp_path / "tickets.csv"


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_a_ticket_table_is_ingested_end_to_end(tickets):
    db, inventory, table = tickets
    assert _invoke("ingest", inventory, "--db", db).exit_code == 0
    result = _invoke("ingest", table, "--db", db, *MAP, "--json")
    assert result.exit_code == 0, result.output
    [summary] = json.loads(result.stdout)
    assert (summary["rows_read"], summary["rows_ingested"], summary["rows_duplicate"]) == (11, 9, 1)
    assert (summary["rows_rejected"], summary["rows_ignored"]) == (1, 0)  # T-9 has no node
    assert summary["rows_read"] == sum(
        summary[f"rows_{k}"] for k in ("ingested", "duplicate", "rejected", "ignored")
    )
    assert summary["attribute_columns"] == ["ticket", "level", "rack"]
    guessed, unknown = summary["notes"]
    assert "1 category classed by words of the name: 'NVLink error' 1 as nvlink (by 'nvlink')" in guessed
    assert "1 category not in the taxonomy" in unknown and "'Cosmic Rays' 2" in unknown
    assert (
        "note: 1 category not in the taxonomy" in result.stderr
        and "note: 1 category classed" in result.stderr
    )

    con = warehouse.connect(db, read_only=True)
    rows = con.sql(
        "SELECT category, failure_class, json_extract_string(attributes, '$.ticket') FROM incidents"
    ).fetchall()
    con.close()
    assert sorted(rows) == sorted(
        [
            ("Faulty GPU", "gpu_hardware", "T-1"),
            ("Parameter Plane Cable", "network", "T-2"),
            ("Power Supply", "host", "T-3"),
            ("Stress Test Failure", "hardware", "T-4"),
            ("unavailable", "undetermined", "T-5"),
            ("Cosmic Rays", "other", "T-6"),
            ("Cosmic Rays", "other", "T-7"),
            ("GPU", "gpu_hardware", "T-8"),
            ("NVLink error", "nvlink", "T-10"),
        ]
    )
    by_level = json.loads(_invoke("rates", "--db", db, "--by", "level", "--json").stdout)
    assert {r["level"]: r["failures"] for r in by_level} == {"P1": 4, "P2": 4, "P3": 1}
    by_class = json.loads(_invoke("rates", "--db", db, "--by", "class", "--by", "rack", "--json").stdout)
    assert sum(r["failures"] for r in by_class) == 9
    assert {(r["failure_class"], r["rack"]) for r in by_class if r["failures"]} >= {
        ("other", "r01"),
        ("other", "r02"),
    }
    by_category = json.loads(_invoke("rates", "--db", db, "--by", "category", "--json").stdout)
    assert {r["category"]: r["failures"] for r in by_category}["Cosmic Rays"] == 2
    bad = _invoke("rates", "--db", db, "--by", "severity")
    assert bad.exit_code == 2 and "attributes: level, rack, ticket" in bad.output


def test_a_changed_map_reclassifies_stored_events_and_the_same_map_changes_nothing(tickets):
    db, inventory, table = tickets
    assert _invoke("ingest", inventory, "--db", db).exit_code == 0
    assert _invoke("ingest", table, "--db", db, *MAP).exit_code == 0

    def state():
        con = warehouse.connect(db, read_only=True)
        found = (
            con.sql("SELECT category, failure_class, interrupting FROM incidents ORDER BY ALL").fetchall(),
            con.sql("SELECT * FROM incidents_built").fetchall(),
        )
        con.close()
        return found

    before = state()
    remap = [
        "--category-map",
        "Cosmic Rays=facilities",
        "--category-map",
        "unavailable=other:noninterrupting",
    ]
    assert _invoke("ingest", table, "--db", db, *MAP, *remap).exit_code == 0  # same file: skipped
    after = state()
    assert after != before
    classes = {c: (k, i) for c, k, i in after[0]}
    assert classes["Cosmic Rays"] == ("facilities", True) and classes["unavailable"] == ("other", False)
    assert _invoke("ingest", table, "--db", db, *MAP, *remap).exit_code == 0
    assert state() == after
    assert _invoke("ingest", table, "--db", db, *MAP).exit_code == 0  # back to the built-in map
    assert state()[0] == before[0]


def test_an_xid_logs_own_flag_survives_reclassification(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("2026-03-02T04:26:29+00:00 n1 kernel: NVRM: Xid (PCI:0000:18:00): 38, watchdog\n")
    con = warehouse.connect(tmp_path / "w.duckdb")
    ingest_files(con, [log], ReaderOptions(cluster="c1"))
    ingest_files(con, [], category_map=parse_category_map(["Cosmic Rays=other"]))
    assert con.sql("SELECT category, failure_class, interrupting FROM events").fetchall() == [
        ("gpu_firmware", "gpu_firmware", False)
    ]
    ingest_files(con, [], category_map=parse_category_map(["gpu_firmware=gpu_firmware:interrupting"]))
    assert con.sql("SELECT interrupting FROM incidents").fetchall() == [(True,)]  # the user's word wins


OLD_COLUMNS = {
    "events": ("failure_class", "source_interrupting", "attributes"),
    "incidents": ("failure_class", "attributes"),
    "incidents_built": ("category_map",),
}


def test_a_warehouse_from_before_classes_keeps_working(tmp_path):
    db = tmp_path / "old.duckdb"
    incidents = tmp_path / "incidents.csv"
    incidents.write_text(
        "timestamp,cluster_id,node_id,category,message\n"
        "2026-03-02T04:00:00Z,c1,n1,GPU_Memory,m\n2026-03-03T04:00:00Z,c1,n2,application,m\n"
    )
    inventory = tmp_path / "inventory.csv"
    inventory.write_text(INVENTORY)
    con = warehouse.connect(db)
    ingest_files(con, [inventory, incidents])
    for table, columns in OLD_COLUMNS.items():  # the schema as it was: no classes, interrupting NOT NULL
        for column in columns:
            con.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    con.execute("UPDATE events SET category = lower(category)")  # old ingests stored lower case
    con.execute("UPDATE incidents SET category = lower(category)")
    con.execute("ALTER TABLE events ALTER COLUMN interrupting SET NOT NULL")
    con.close()

    rates = _invoke("rates", "--db", db, "--by", "class", "--json")  # read-only: not upgraded
    assert rates.exit_code == 0, rates.output
    assert {r["failure_class"]: r["failures"] for r in json.loads(rates.stdout)} == {"gpu_memory": 1}

    again = tmp_path / "again.csv"
    again.write_text(  # the same rows, columns in another order
        "message,category,node_id,cluster_id,timestamp\n"
        "m,GPU_Memory,n1,c1,2026-03-02T04:00:00Z\nm,application,n2,c1,2026-03-03T04:00:00Z\n"
    )
    con = warehouse.connect(db)
    [summary] = ingest_files(con, [again])
    assert (summary.rows_ingested, summary.rows_duplicate) == (0, 2)  # the content key did not change
    assert con.sql("SELECT category, failure_class, interrupting FROM incidents ORDER BY ALL").fetchall() == [
        ("application", "application", False),
        ("gpu_memory", "gpu_memory", True),
    ]


@pytest.mark.parametrize(
    ("reason", "message", "expected"),
    [
        ("GpuError", "Xid 48 on GPU 3", ("GpuError Xid 48", 48)),
        ("NVSwitchFault", "SXid 12028 non-fatal", ("NVSwitchFault SXid 12028", 12028)),
        ("NvidiaXID79Error", "Xid 48", ("NvidiaXID79Error", 79)),  # the reason's code wins
        ("KernelOops", "BUG: unable to handle page fault", ("KernelOops", None)),
        # the driver's line is not read here (the PCI id stands between word and code): readers
        # that quote it (hyperpod_hma) pass its code as "Xid N"
        ("XidHardwareFailure", "NVRM: Xid (PCI:0000:b9:00): 79, pid=1", ("XidHardwareFailure", None)),
    ],
)
def test_category_with_xid(reason, message, expected):
    assert category_with_xid(reason, message) == expected
