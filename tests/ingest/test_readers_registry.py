"""The readers' registry (pipeline/readers/__init__.py) and the contract every registered reader keeps:
one table-driven sample per format, each detected as its own format (or named, for the public data
sets), every line accounted for (read = ingested + duplicate + rejected + ignored, in the summary and
in ingested_files), and a re-ingest that changes nothing. The docs' format table is the registry's."""

from __future__ import annotations

import ast
import gzip
import json
import re
from pathlib import Path

import polars as pl
import pytest

from pipeline import readers, warehouse
from pipeline.ingest import ReaderOptions, detect_format, ingest_files
from pipeline.readers import READERS
from pipeline.readers import ReaderOptions as RegistryOptions

REPO = Path(__file__).resolve().parents[2]
CANONICAL = "timestamp,cluster_id,node_id,category,gpu_index,job_id,message,resolved_at\n"
INCIDENTS = [
    {"timestamp": "2026-03-02T04:26:29Z", "cluster_id": "c1", "node_id": "n1", "category": "gpu_memory"},
    {"timestamp": "2026-03-02T04:26:29Z", "cluster_id": "c1", "node_id": "n1", "category": "gpu_memory"},
    {"timestamp": "yesterday", "cluster_id": "c1", "node_id": "n2", "category": "nvlink"},
    {"timestamp": "2026-03-03T01:00:00Z", "cluster_id": "c1", "node_id": "n2", "category": "host"},
]
SYSLOG = "Mar  2 04:26:{:02d} node-017 kernel: NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.\n"
JOURNAL = {
    "__REALTIME_TIMESTAMP": "1772425589892511",
    "_HOSTNAME": "gpu-017",
    "_TRANSPORT": "kernel",
    "MESSAGE": "NVRM: Xid (PCI:0000:18:00): 79, pid=10895, name=python3, GPU has fallen off the bus.",
}
K8S_EVENT = {
    "apiVersion": "v1",
    "kind": "Event",
    "involvedObject": {"kind": "Node", "name": "gpu-1"},
    "reason": "KernelOops",
    "type": "Warning",
    "message": "BUG: unable to handle kernel NULL pointer dereference",
    "firstTimestamp": "2024-05-02T10:00:00Z",
    "lastTimestamp": "2024-05-02T10:00:00Z",
    "count": 1,
}
EC2 = {
    "InstanceStatuses": [
        {
            "InstanceId": "i-0aaa",
            "Events": [
                {
                    "InstanceEventId": "instance-event-1",
                    "Code": "system-reboot",
                    "Description": "[Completed] scheduled reboot",
                    "NotBefore": "2024-05-02T00:00:00.000Z",
                    "NotAfter": "2024-05-02T02:00:00.000Z",
                },
                {
                    "Code": "instance-stop",
                    "Description": "[Canceled] degraded",
                    "NotBefore": "2024-05-03T00:00:00Z",
                },
            ],
        }
    ]
}
GCE = [
    {
        "protoPayload": {
            "methodName": "compute.instances.hostError",
            "resourceName": "projects/p/zones/z/instances/gpu-007",
            "status": {"message": "Instance terminated by Compute Engine."},
        },
        "timestamp": "2024-05-02T10:00:00Z",
    },
    {"protoPayload": {"methodName": "v1.compute.instances.insert"}, "timestamp": "2024-05-02T11:00:00Z"},
]
HMA_MESSAGE = json.dumps(
    {
        "level": "info",
        "ts": "2024-08-21T18:35:35Z",
        "msg": "NPD caught event: %v",
        "details: ": {
            "severity": "warn",
            "timestamp": "2024-08-22T20:59:29Z",
            "reason": "XidHardwareFailure",
            "message": "Node condition NvidiaErrorReboot is now: True, reason: XidHardwareFailure,"
            ' message: "NVRM: Xid (PCI:0000:b9:00): 71, pid=<unknown>, name=<unknown>, NVLink: fatal error"',
        },
        "HealthMonitoringAgentDetectionEvent": "HealthEvent",
    }
)
HMA = {
    "events": [
        {
            "logStreamName": "SagemakerHealthMonitoringAgent/group-a/i-0aa017cbf6c240f3f",
            "timestamp": 1724265335532,
            "message": HMA_MESSAGE,
        },
        {
            "logStreamName": "SagemakerHealthMonitoringAgent/group-a/i-0b",
            "timestamp": 1,
            "message": "started",
        },
    ]
}
LANL = (
    "System,machine type,nodes,procstot,procsinnode,nodenum,nodenumz,node install,node prod,node decom,"
    "fru type,mem,cputype,memtype,num intercon,purpose,Prob Started,Prob Fixed,Down Time,Facilities,"
    "Hardware,Human Error,Network,Undetermined,Software,Same Event\n"
    "3,cluster,2,8,4,1,0,3-Aug,3-Sep,current,part,4,1,1,1,compute,"
    "7/14/2004 9:00,7/14/2004 10:30,90,,CPU,,,,,No\n"
    "3,cluster,2,8,4,2,1,3-Aug,3-Sep,current,part,4,1,1,1,compute,"
    "7/15/2004 9:00,7/15/2004 9:30,30,,,,,,OS,No\n"
)
TITAN = (
    "SN,location,insert,remove,duration,out,event\n"
    "0320117100060,c11-2c1s4n1,2013-04-09 21:36:19,2014-08-01 20:07:33,72916274,FALSE,DBE\n"
    "0320117100061,c11-2c1s4n2,2013-04-09 21:36:19,2016-08-01 20:07:33,72916274,TRUE,\n"
)
BGL = (
    "- 1117838570 2005.06.03 R02-M1-N0-C:J12-U11 2005-06-03-15.42.50.363779 R02-M1-N0-C:J12-U11"
    " RAS KERNEL INFO instruction cache parity error corrected\n"
    "KERNDTLB 1118536327 2005.06.11 R30-M0-N9-C:J16-U01 2005-06-11-17.32.07.581048 R30-M0-N9-C:J16-U01"
    " RAS KERNEL FATAL data TLB error interrupt\n"
    "KERNFOO 1118536328 2005.06.11 R30-M0-N9-C:J16-U01 2005-06-11-17.32.08.581048 R30-M0-N9-C:J16-U01"
    " RAS KERNEL FATAL what is this\n"
)

# format -> (file name, content as text, or a frame for Parquet): each a sample a fleet could export,
# with a duplicate, a reject or an ignored line where the format has them.
SAMPLES: dict[str, tuple[str, str | pl.DataFrame]] = {
    "csv": ("incidents.csv", CANONICAL + "".join(",".join(r.values()) + ",,,,\n" for r in INCIDENTS)),
    "jsonl": ("incidents.jsonl", "".join(json.dumps(r) + "\n" for r in INCIDENTS)),
    "json": ("incidents.json", json.dumps(INCIDENTS, indent=1)),
    "parquet": ("incidents.parquet", pl.DataFrame(INCIDENTS)),
    "kernel-log": (
        "kern.log",
        SYSLOG.format(29) + SYSLOG.format(29) + "Mar  2 04:27:00 node-017 kernel: usb\n",
    ),
    "journald-json": ("journal.json", json.dumps(JOURNAL) + "\n{not json\n"),
    "sacct": (
        "sacct.out",
        "JobID|State|Start|End|NNodes|NodeList\n9|NODE_FAIL|2026-03-02T00:00:00|2026-03-02T04:27:00|1|node-017\n"
        "9.batch|NODE_FAIL|2026-03-02T00:00:00|2026-03-02T04:27:00|1|node-017\n10|COMPLETED|soon|||node-1\n",
    ),
    "slurm-events": (
        "events.txt",
        "Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User\n"
        "tiger|gpu-[002-003]|2024-05-03T08:00:00|Unknown|DRAIN|Xid 79|root(0)\n"
        "tiger|gpu-004|2024-05-03T09:00:00|2024-05-03T10:00:00|IDLE*||\n"
        "tiger|gpu-005|not a time||FAIL||\n",
    ),
    "slurmctld": (
        "slurmctld.log",
        "[2024-05-02T11:58:00.001] sched: Allocate JobId=48 NodeList=gpu-[001-002]\n"
        "[2024-05-02T12:00:00.123] error: Nodes gpu-001 not responding, setting DOWN\n"
        "[2024-05-02T12:00:00.200] Killing JobId=48 on failed node gpu-001\n",
    ),
    "kubernetes": ("events.json", json.dumps({"apiVersion": "v1", "kind": "List", "items": [K8S_EVENT] * 2})),
    "ec2-status": ("ec2.json", json.dumps(EC2)),
    "gce-audit": ("gce.json", json.dumps(GCE)),
    "hyperpod-hma": ("hma.json", json.dumps(HMA, indent=1)),
    "training-log": (
        "job-42.log",
        "I0810 02:00:00.000000 1 torch/distributed/elastic/agent/server/api.py:525] [default] Rendezvous"
        " complete for workers. Result:\nstep 100 | loss 2.31\n"
        "[rank1]:[E810 03:04:11.000000000 ProcessGroupNCCL.cpp:683] [Rank 1] Watchdog caught collective"
        " operation timeout: WorkNCCL(SeqNum=78) ran for 600000 milliseconds before timing out.\n",
    ),
    "lanl": ("lanl.csv", LANL),
    "titan": ("gc_full.csv", TITAN),
    "bgl": ("BGL_2k.log", BGL),
}


PUBLIC_DATA = ("lanl", "titan", "bgl")


def write(tmp_path: Path, fmt: str, suffix: str = "") -> Path:
    name, content = SAMPLES[fmt]
    path = tmp_path / name
    if isinstance(content, pl.DataFrame):
        content.write_parquet(path, compression="zstd" if suffix else "snappy")
    else:
        path.write_text(content + suffix)
    return path


def test_every_registered_format_has_a_sample():
    assert sorted(SAMPLES) == sorted(r.name for r in READERS)


def tables(con) -> dict[str, list]:
    return {
        name: con.sql(f"SELECT * EXCLUDE (file_id) FROM {name} ORDER BY ALL").fetchall()  # noqa: S608
        for name in ("events", "jobs", "inventory", "rejects")
    }


@pytest.mark.parametrize("entry", READERS, ids=lambda r: r.name)
def test_reader_contract(entry, tmp_path):
    """Detected from its own head (or named, when it has no sniff); every line accounted for;
    a second ingest of the same bytes is skipped and of the same records under new bytes stores
    nothing new."""
    path = write(tmp_path, entry.name)
    if entry.sniffs:
        assert detect_format(path) == entry.name
        options = ReaderOptions(year=2026)
    else:
        options = ReaderOptions(fmt=entry.name, year=2026)
    con = warehouse.connect(tmp_path / "w.duckdb")
    [summary] = ingest_files(con, [path], options)
    assert summary.format == entry.name and not summary.skipped
    assert summary.kind in entry.kind.split(", ")
    assert summary.rows_read > 0
    parts = summary.rows_ingested + summary.rows_duplicate + summary.rows_rejected + summary.rows_ignored
    assert parts == summary.rows_read, summary
    stored = con.sql(
        "SELECT rows_read, rows_ingested, rows_duplicate, rows_rejected FROM ingested_files"
        " WHERE file_id = ?",
        params=[summary.file_id],
    ).fetchall()
    if entry.name not in PUBLIC_DATA:  # a public data set counts canonical incidents, not records
        assert stored == [
            (summary.rows_read, summary.rows_ingested, summary.rows_duplicate, summary.rows_rejected)
        ]
    before = tables(con)
    assert sum(map(len, before.values())) > 0
    [again] = ingest_files(con, [path], options)
    assert again.skipped and tables(con) == before
    rewritten = tmp_path / "again"
    rewritten.mkdir()
    [copy] = ingest_files(con, [write(rewritten, entry.name, suffix="\n")], options)
    assert not copy.skipped and copy.rows_ingested == 0, copy
    after = tables(con)
    assert after["events"] == before["events"] and after["jobs"] == before["jobs"]
    assert after["inventory"] == before["inventory"]


def test_gzip_is_read_like_the_plain_file(tmp_path):
    """Any format may be .gz: sniffed through the compression, stored alike."""
    for entry in READERS:
        name, content = SAMPLES[entry.name]
        if entry.sniffs and isinstance(content, str) and not name.endswith(".parquet"):
            path = tmp_path / f"{name}.gz"
            path.write_bytes(gzip.compress(content.encode()))
            assert detect_format(path) == entry.name


def test_docs_format_table_is_the_registry():
    docs = (REPO / "docs/ingest.md").read_text()
    table = re.search(r"<!-- formats: .*? -->\n(.*?)<!-- end of formats -->", docs, re.S)
    assert table is not None, "docs/ingest.md has no generated format table"
    assert table.group(1) == readers.format_table(), (
        "regenerate it: python -c 'from pipeline import readers; print(readers.format_table())'"
    )


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but - and _ dropped, spaces as -."""
    return {
        re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        for heading in re.findall(r"^#{1,6} (.+)$", markdown, re.M)
    }


@pytest.mark.parametrize("entry", READERS, ids=lambda r: r.name)
def test_anchor_names_a_docs_section(entry):
    page, _, anchor = entry.anchor.partition("#")
    assert anchor in _anchors((REPO / page).read_text()), entry.anchor


_STREAMS = ("ctx.lines()", "ctx.text()", "stage_pipe_export(")
_OPTION = re.compile(r"(?:ctx\.options|\bo)\.(\w+)")


@pytest.mark.parametrize("entry", READERS, ids=lambda r: r.name)
def test_declared_options_are_the_ones_the_reader_reads(entry):
    """The registry's ``options`` are the ReaderOptions fields the module reads (``timezone``
    acts through the session, so it is declared but not read; the streams read the block size and
    the .gz limit)."""
    source = (REPO / "pipeline/readers" / f"{entry.module}.py").read_text()
    fields = set(RegistryOptions.__dataclass_fields__)
    named = {"bus_order" if name == "bus_index" else name for name in _OPTION.findall(source)}
    read = named & fields  # (SQL aliases such as o.node_id are not options)
    if any(stream in source for stream in _STREAMS):
        read |= {"block_bytes", "max_decompressed_bytes"}
    assert set(entry.options) <= fields
    assert read <= set(entry.options), f"{entry.name} reads {sorted(read - set(entry.options))}: declare them"
    assert set(entry.options) - read <= {"timezone"}, f"{entry.name} declares options it does not read"


def test_sniff_ranks_order_modules_and_formats_are_named_once():
    """Two modules never share a rank (their order would be an accident); the names of one module
    may (its predicates exclude each other: ``.csv`` or ``.json``)."""
    modules: dict[int, set[str]] = {}
    for r in READERS:
        for rank, _ in r.sniffs:
            modules.setdefault(rank, set()).add(r.module)
    assert all(len(names) == 1 for names in modules.values()), modules
    assert len(readers.FORMATS) == len(set(readers.FORMATS))
    assert set(readers.LAKE_FORMATS) <= set(readers.FORMATS)


def _imports(path: Path) -> set[str]:
    """Every module a file imports (module or function level)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return found


@pytest.mark.parametrize(
    ("package", "below"),
    [("store", ("pipeline.readers", "pipeline.ingest")), ("readers", ("pipeline.ingest",))],
)
def test_imports_flow_one_way(package, below):
    """store <- readers <- ingest: the store imports no reader, no reader imports the ingest."""
    for path in sorted((REPO / "pipeline" / package).glob("*.py")):
        wrong = sorted(m for m in _imports(path) if m.startswith(below))
        assert not wrong, f"{path.name} imports {wrong}"
