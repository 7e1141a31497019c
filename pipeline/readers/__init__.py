"""Readers of input formats, one module each, and the one registry they are known by.

A reader is a module with ``read(ctx: ReadContext) -> FileSummary`` (:mod:`.contract`: what it is
handed, what it owes the store). :data:`READERS` names every format once: the module that reads
it, what it stores (``kind``), how it is sniffed from a file's head, the :class:`ReaderOptions`
fields it uses, a one-line summary, its section in the docs and its lines in ``failcast ingest
--help``. Auto-detection (:func:`detect_format`), the ``--format`` choices of ``failcast ingest``
and ``failcast extract``, the formats ``extract`` carries to a lake (:data:`LAKE_FORMATS`) and the
format table of docs/ingest.md (:func:`format_table`, held to it by a test) all come from it.

Adding a format = one module with ``read`` (and its sniff, if it can be told from its head) +
its table-driven tests + one entry here. A module is imported when its format is first read or
sniffed, so listing the public data sets' readers costs nothing until one is used.

Sniffing: every entry's ``sniffs`` are (rank, predicate in its module) pairs; :func:`detect_format`
tries all of them in rank order on the file's :class:`Head` and the first that holds names the
format. Ranks put the specific before the general: a journal's JSON before Kubernetes' and the
cloud APIs' JSON, those and the public data sets' headers before a ``.json`` or ``.csv`` name, names
before contents, and a kernel log (any line with a syslog, ISO or dmesg prefix) last.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path

from pipeline.readers.contract import Head, ReadContext
from pipeline.readers.options import ReaderOptions
from pipeline.store.files import FileSummary, InputError

__all__ = [
    "FORMATS",
    "LAKE_FORMATS",
    "READERS",
    "Head",
    "ReadContext",
    "Reader",
    "ReaderOptions",
    "detect_format",
    "format_table",
    "reader",
]

DOCS = "docs/ingest.md"


@dataclass(frozen=True)
class Reader:
    """One format: ``name`` (``--format``), ``module`` (``pipeline.readers.<module>``, whose
    ``read`` reads it), ``kind`` (what it stores), ``summary`` (one line), ``anchor`` (its docs
    section), ``options`` (the :class:`ReaderOptions` fields it uses), ``sniffs`` ((rank,
    predicate of a :class:`Head`) in its module; none: named only), ``detected_by`` (the sniff in
    words), ``lake`` (``failcast extract`` carries it to a lake: its merge is one of the store's
    rules), ``help`` (its lines in ``failcast ingest --help``)."""

    name: str
    module: str
    kind: str
    summary: str
    anchor: str
    options: tuple[str, ...] = ()
    sniffs: tuple[tuple[int, str], ...] = ()
    detected_by: str = "named only (`--format`)"
    lake: bool = False
    help: str = field(default="", repr=False)

    def read(self, ctx: ReadContext) -> FileSummary:
        return import_module(f"{__name__}.{self.module}").read(ctx)

    def sniffed(self, rank_predicate: tuple[int, str], head: Head) -> bool:
        return getattr(import_module(f"{__name__}.{self.module}"), rank_predicate[1])(head)


def _table(name: str, what: str, sniffs: tuple, detected_by: str, help: str) -> Reader:
    """A canonical table format: they share a module, options, docs section and lake."""
    return Reader(
        name,
        "canonical",
        "incidents, inventory",
        f"canonical incidents or inventory, {what}",
        f"{DOCS}#canonical-files-csv-jsonl-json-parquet",
        ("column_map", "time_format", "cluster", "timezone", "max_decompressed_bytes"),
        sniffs,
        detected_by,
        lake=True,
        help=help,
    )


READERS: tuple[Reader, ...] = (
    _table(
        "csv",
        "delimited text (comma, tab, semicolon or pipe)",
        ((50, "is_csv_name"), (80, "is_csv_header")),
        "name `.csv`/`.tsv`; else a header naming `timestamp`, `cluster_id` or `node_id`",
        help="""\
canonical incidents: timestamp,cluster_id,node_id,category,gpu_index,job_id,message,resolved_at
2026-03-02T04:26:29Z,c0512,c0512-n0017,gpu_fell_off_bus,3,job-7,"NVRM: Xid ...",
or inventory: cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to
c0512,c0512-n0017,p5.48xlarge,8,2026-03-01T00:00:00Z,""",
    ),
    _table(
        "jsonl",
        "one JSON record per line",
        ((50, "is_jsonl_name"), (91, "is_jsonl_content")),
        "name `.jsonl`/`.ndjson`, or `.json` that is not one document; else a first line `{`",
        help='{"timestamp": "2026-03-02T04:26:29+00:00", "cluster_id": "c0512", ...}',
    ),
    _table(
        "json",
        "one JSON document (a REST export)",
        ((50, "is_json_name"), (90, "is_json_content")),
        "name `.json` holding one document; else `[{` or an object wrapping an array of records",
        help="the same records as one JSON document (a REST export): [{...}, ...] or "
        '{"result": [{...}, ...]}',
    ),
    _table(
        "parquet",
        "Parquet",
        ((50, "is_parquet"),),
        "name `.parquet`, or the bytes `PAR1`",
        help="the same columns",
    ),
    Reader(
        "kernel-log",
        "kernel_log",
        "xid_log",
        "NVIDIA Xid/SXid and fallen-off-the-bus lines in syslog, journalctl or dmesg -T text",
        f"{DOCS}#kernel-logs-kernel-log",
        ("cluster", "node", "year", "bus_order", "timezone", "max_decompressed_bytes", "block_bytes"),
        ((120, "is_kernel_log"),),
        "a line with a syslog, ISO 8601 or `[`dmesg prefix, or `Xid` (tried last)",
        lake=True,
        help="""\
NVIDIA Xid/SXid lines in syslog, journalctl or dmesg -T output, e.g.
2026-03-02T04:26:29.892511+00:00 node-017 kernel: NVRM: Xid (PCI:0000:18:00): 79, GPU has ...
Mar  2 04:26:29 node-017 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=10895, name=python3, ...
[Mon Mar  2 04:26:29 2026] NVRM: Xid (PCI:0000:18:00): 79, ...   (needs --node)
and a GPU fallen off the bus without an Xid (NVRM: GPU at 0000:01:00.0 has fallen off
the bus.; the three-line NVRM: The NVIDIA GPU ... fallen off the bus ... message);
other kernel messages are counted as ignored; syslog lines have no year: see --year""",
    ),
    Reader(
        "journald-json",
        "journald",
        "xid_log",
        "the same driver messages from `journalctl -k -o json`",
        f"{DOCS}#the-systemd-journal-as-json-journald-json",
        ("cluster", "node", "bus_order", "max_decompressed_bytes", "block_bytes"),
        ((10, "is_journal"),),
        "a first line that is a journal entry (`__REALTIME_TIMESTAMP`, `__CURSOR`), any name but a table's",
        lake=True,
        help="""\
journalctl -k -o json (one entry per line): the same messages in MESSAGE, time
__REALTIME_TIMESTAMP, node _HOSTNAME (else --node); entries of other sources ignored
{"__REALTIME_TIMESTAMP":"1772425589892511","_HOSTNAME":"node-017","MESSAGE":"NVRM: Xid ..."}""",
    ),
    Reader(
        "sacct",
        "sacct",
        "jobs",
        "Slurm accounting, `sacct -P` with its header",
        f"{DOCS}#slurm-accounting-sacct",
        ("cluster", "timezone", "max_decompressed_bytes", "block_bytes"),
        ((71, "is_sacct"),),
        "a pipe-separated header naming `JobID`",
        lake=True,
        help="""\
sacct -P (--parsable2) with its header, any column order; needs JobID,State,Start,End,NodeList
JobID|JobName|State|Start|End|ElapsedRaw|NNodes|NodeList
881204|pretrain-7b|NODE_FAIL|2024-03-01T10:00:03|2024-03-01T13:12:44|11561|4|gpu-[001-004]""",
    ),
    Reader(
        "slurm-events",
        "slurm_events",
        "node_events",
        "Slurm node events, `sacctmgr -P show event` with its header",
        f"{DOCS}#slurm-node-events-slurm-events",
        ("cluster", "timezone", "max_decompressed_bytes", "block_bytes"),
        ((70, "is_slurm_events"),),
        "a pipe-separated header naming `NodeName` and `TimeStart`",
        lake=True,
        help="""\
sacctmgr -P show event (node events, header kept): DOWN/DRAIN/FAIL become events
with the Reason as category; TimeEnd Unknown = still out of service
Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User
tiger|gpu-017|2024-05-01T12:00:00|Unknown|DRAIN|Xid 79|root(0)""",
    ),
    Reader(
        "slurmctld",
        "slurmctld",
        "node_events",
        "node failures in slurmctld log lines",
        f"{DOCS}#slurmctld-logs-slurmctld",
        ("cluster", "year", "timezone", "max_decompressed_bytes", "block_bytes"),
        ((110, "is_slurmctld"),),
        "Slurm's `[time]` prefix or `slurmctld:` in syslog, and no kernel Xid line",
        help="""\
slurmctld log lines: Nodes ... not responding, setting DOWN; update_node: node ...
reason/state set to ...; Killing JobId=... on failed node ...; other lines ignored
[2024-05-01T12:00:00.123] error: Nodes gpu-[017-018] not responding, setting DOWN""",
    ),
    Reader(
        "kubernetes",
        "kubernetes",
        "node_events",
        "Kubernetes node events and node conditions, `kubectl get events/nodes -o json`",
        f"{DOCS}#kubernetes-events-and-node-conditions-kubernetes",
        ("cluster", "max_decompressed_bytes", "block_bytes"),
        ((30, "is_kubernetes"),),
        'JSON with `"kind": "Event"` or `"Node"` beside a core/v1 or events.k8s.io `apiVersion`',
        help="""\
kubectl get events -A -o json / kubectl get nodes -o json (or JSON Lines of items):
Warning node events and NodeNotReady become events (reason as category); node
conditions in trouble (Ready=False, KernelDeadlock=True ...) are outages that a
later snapshot showing them healthy ends; other events and healthy nodes ignored""",
    ),
    Reader(
        "ec2-status",
        "cloud_events",
        "node_events",
        "EC2 scheduled events, `aws ec2 describe-instance-status`",
        f"{DOCS}#cloud-host-events-ec2-status-gce-audit",
        ("cluster", "timezone", "max_decompressed_bytes", "block_bytes"),
        ((40, "is_ec2_status"),),
        'JSON with `"InstanceStatuses":` or `"InstanceEventId":`',
        help="""\
aws ec2 describe-instance-status --include-all-instances --output json: completed
scheduled events (Code as category, NotBefore-NotAfter), attribute planned=true
{"InstanceStatuses": [{"InstanceId": "i-0abc", "Events": [{"Code": "system-reboot", ...""",
    ),
    Reader(
        "gce-audit",
        "cloud_events",
        "node_events",
        "Compute Engine host events from the system-event audit log",
        f"{DOCS}#cloud-host-events-ec2-status-gce-audit",
        ("cluster", "timezone", "max_decompressed_bytes", "block_bytes"),
        ((41, "is_gce_audit"),),
        'JSON with `"protoPayload":` or a `compute.instances.` method',
        help="""\
gcloud logging read (system_event audit log) --format=json: compute.instances.hostError
(planned=false), terminateOnHostMaintenance / migrateOnHostMaintenance (planned=true)""",
    ),
    Reader(
        "hyperpod-hma",
        "hyperpod_hma",
        "node_events",
        "SageMaker HyperPod health-monitoring agent detections from CloudWatch",
        f"{DOCS}#sagemaker-hyperpod-health-monitoring-agent-hyperpod-hma",
        ("cluster", "node", "timezone", "max_decompressed_bytes", "block_bytes"),
        ((20, "is_hma"),),
        "`HealthMonitoringAgentDetectionEvent` or its log stream's name, any name but `.parquet`",
        help="""\
SageMaker HyperPod health-monitoring agent detections from CloudWatch: aws logs
filter-log-events --output json, a Logs Insights CSV (@timestamp,@logStream,@message) or
the console's lines (<@timestamp> {"level":...,"details: ":{...}} : need --node); node =
instance id of SagemakerHealthMonitoringAgent/<group>/<instance-id>, category = reason""",
    ),
    Reader(
        "training-log",
        "training_log",
        "training_log",
        "PyTorch job logs: NCCL watchdog timeouts, torchelastic failures and restarts",
        f"{DOCS}#training-job-logs-training-log",
        ("cluster", "node", "job", "year", "timezone", "max_decompressed_bytes", "block_bytes"),
        ((100, "is_training_log"),),
        "NCCL watchdog or torchelastic words, and no kernel Xid line",
        help="""\
PyTorch job logs: NCCL watchdog timeouts, torchelastic worker-group failures and
rendezvous completions (restarts) give measured detection and restart times, e.g.
[rank1]:[E810 03:04:11.061727749 ProcessGroupNCCL.cpp:683] [Rank 1] Watchdog caught ...
I0501 12:00:00.123000 140 torch/.../agent/server/api.py:700] [default] Worker group FAILED. ...
one job per file (--job, default the file name); --node for the host, if known""",
    ),
    Reader(
        "lanl",
        "lanl",
        "incidents, inventory",
        "LANL failure records 1996-2005 (public data set)",
        "docs/public-data.md#mapping-choices",
        sniffs=((45, "is_lanl"),),
        detected_by="a header naming `System`, `nodenumz`, `Prob Started` and `Prob Fixed`",
        help="""\
LANL failure records 1996-2005 (LA-UR-05-7318-failure-data-1996-2005.csv[.gz])
20,cluster,512,2048,4,...,5/13/2004 9:11,5/13/2004 10:52,101,,CPU,,,,,No""",
    ),
    Reader(
        "titan",
        "titan",
        "incidents, inventory",
        "OLCF Titan GPU lifetimes (public data set)",
        "docs/public-data.md#mapping-choices",
        ("timezone",),
        ((46, "is_titan"),),
        "a header naming `SN`, `location`, `insert`, `remove` and `event`",
        help="""\
OLCF Titan GPU lifetimes: gc_full.csv[.gz]; gc_summary_loc.csv[.gz] (batch) and
titan.service.txt[.gz] (service nodes) are read from the same folder when present
0320117100060,c11-2c1s4n1,2017-04-09 21:36:19,2019-08-01 20:07:33,72916274,FALSE,DBE""",
    ),
    Reader(
        "bgl",
        "bgl",
        "incidents",
        "Loghub BlueGene/L RAS log (public data set)",
        "docs/public-data.md#mapping-choices",
        sniffs=((60, "is_bgl"),),
        detected_by="a first line `<tag> <epoch> <yyyy.mm.dd> <location> <time> <location> RAS ...`",
        help="""\
Loghub BlueGene/L RAS log: alert lines become incidents, "-" lines are ignored
KERNDTLB 1118536327 2005.06.11 R30-M0-N9-C:J16-U01 2005-06-11-17.32.07.581048 ... FATAL ...""",
    ),
)
FORMATS = tuple(r.name for r in READERS)
LAKE_FORMATS = tuple(r.name for r in READERS if r.lake)
"""Formats ``failcast extract`` carries to a lake: those whose merge into the warehouse is one of
the store's rules (:mod:`pipeline.store.lake`). The others are ingested directly."""
_BY_NAME = {r.name: r for r in READERS}
_SNIFFS = sorted((rank, r.name, (rank, predicate)) for r in READERS for rank, predicate in r.sniffs)


def reader(fmt: str) -> Reader:
    """The reader of ``fmt``; an :class:`InputError` naming the formats when there is none."""
    if fmt not in _BY_NAME:
        raise InputError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    return _BY_NAME[fmt]


def detect_format(path: Path) -> str:
    """The format of ``path`` from its name and its first 64 KiB: the first sniff, in rank order,
    that holds (see the module docstring); an :class:`InputError` when none does."""
    head = Head(path)
    for _, name, sniff in _SNIFFS:
        if _BY_NAME[name].sniffed(sniff, head):
            return name
    raise InputError(
        f"{path}: cannot tell the format from the name or content; use --format {'|'.join(FORMATS)}"
    )


def format_table() -> str:
    """The format table of docs/ingest.md, in Markdown (a test holds the docs to it)."""
    rows = ["| format | stores | detected from | options | what |", "|---|---|---|---|---|"]
    for r in READERS:
        options = ", ".join(f"`{o}`" for o in r.options) or "-"
        link = (
            r.anchor.removeprefix(DOCS) if r.anchor.startswith(f"{DOCS}#") else r.anchor.removeprefix("docs/")
        )
        rows.append(f"| [`{r.name}`]({link}) | {r.kind} | {r.detected_by} | {options} | {r.summary} |")
    return "\n".join(rows) + "\n"
