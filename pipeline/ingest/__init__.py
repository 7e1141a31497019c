"""Ingest: input files -> warehouse tables ``events``, ``incidents``, ``inventory``, ``jobs``, ``rejects``.

Formats (auto-detected, or named with ``fmt``): canonical incidents/inventory ``csv``, ``jsonl``,
``parquet`` (:mod:`.canonical`); NVIDIA XID lines in kernel logs, ``kernel-log`` (:mod:`.kernel_log`,
codes mapped by :mod:`.xid`); Slurm ``sacct`` parsable output (:mod:`.sacct`), node events
``slurm-events`` (``sacctmgr show event -P``, :mod:`.slurm_events`) and ``slurmctld`` log lines
(:mod:`.slurmctld`); Kubernetes events and node conditions ``kubernetes`` (``kubectl get events -A
-o json``, ``kubectl get nodes -o json``, :mod:`.kubernetes`); cloud maintenance and host-error events
``ec2-status`` (``aws ec2 describe-instance-status``) and ``gce-audit`` (Compute Engine system-event audit
log entries), :mod:`.cloud_events`; SageMaker HyperPod health-monitoring agent detections
``hyperpod-hma`` (CloudWatch exports, :mod:`.hyperpod_hma`); the systemd journal as JSON ``journald-json``
(``journalctl -k -o json``, :mod:`.journald`); PyTorch job logs ``training-log`` (NCCL
watchdog, torchelastic restarts: :mod:`.training_log`); a log lake written by ``failcast extract``
(a directory, :mod:`.lake`); public data sets ``lanl``, ``titan``, ``bgl`` (named only,
:mod:`pipeline.datasets.load`). Any may be ``.gz``.

Rules that every reader follows:

* **Idempotent.** A file whose sha256 is already in ``ingested_files`` is skipped; a record whose
  content key is already stored counts as a duplicate, so a log that grew adds only its new lines.
  (A large kernel log whose size no stored file has is new content: it is hashed while it is parsed.)
* **Nothing lost.** Every line is counted: read = ingested + duplicate + rejected + ignored. A line
  that should carry a record but cannot be used goes to ``rejects`` with file, line, raw text and
  the reason; ``ignored`` lines carry nothing by design (ordinary kernel messages, sacct job steps).
* **All or nothing per file.** Each file is written in one transaction; Ctrl-C mid-file rolls it back.
* **UTC.** Times with an offset are converted; naive times are read in ``timezone`` (default UTC).
* **Streaming.** Text logs are read in blocks of lines (:mod:`.lines`); only relevant lines are kept
  (kernel logs: in a Parquet file in the temp folder until the file is done).
* **Their own words.** Readers store the source's category text; :mod:`.taxonomy` gives each new
  event its failure class and ``interrupting`` flag after the file, one note naming unknown ones.
* **Bounded.** A ``.gz`` may expand to at most ``max_decompressed_bytes`` (a gzip bomb is an error).
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pipeline import rebuild, record_checks, warehouse
from pipeline.categories import CategoryMap
from pipeline.ingest import canonical_store, lake, taxonomy
from pipeline.ingest.canonical import (
    INCIDENT_COLUMNS,
    INCIDENT_OPTIONAL,
    INVENTORY_COLUMNS,
    INVENTORY_OPTIONAL,
    TABLE_FORMATS,
    csv_separator,
    ingest_canonical,
)
from pipeline.ingest.cloud_events import FORMATS as CLOUD_FORMATS
from pipeline.ingest.cloud_events import ingest_cloud_events
from pipeline.ingest.common import FileSummary, InputError, check_time_format, checked_timezone, sha256_of
from pipeline.ingest.hyperpod_hma import FORMAT as HMA_FORMAT
from pipeline.ingest.hyperpod_hma import SNIFF as HMA_SNIFF
from pipeline.ingest.hyperpod_hma import ingest_hyperpod_hma
from pipeline.ingest.journald import FORMAT as JOURNALD_FORMAT
from pipeline.ingest.journald import ingest_journald_json
from pipeline.ingest.journald import looks_like as looks_like_journald
from pipeline.ingest.json_array import is_json_document
from pipeline.ingest.kernel_log import SpanWorkers, ingest_kernel_log, parallel_parts
from pipeline.ingest.kubernetes import ingest_kubernetes
from pipeline.ingest.lines import BOM, MAX_DECOMPRESSED_BYTES, head_text, is_gzip
from pipeline.ingest.options import MAX_REJECTED_PERCENT, MIN_REFUSED, ReaderOptions
from pipeline.ingest.sacct import ingest_sacct
from pipeline.ingest.slurm_events import ingest_slurm_events
from pipeline.ingest.slurmctld import ingest_slurmctld
from pipeline.ingest.taxonomy import parse_category_map
from pipeline.ingest.training_log import SNIFF as TRAINING_LOG_SNIFF
from pipeline.ingest.training_log import ingest_training_log

DATASET_FORMATS = ("lanl", "titan", "bgl")
# Line-oriented log readers: each streams its file in blocks and takes the common options (sha,
# progress, size and block limits) plus the ones named here (from ReaderOptions; workers: the
# threads that parse large kernel logs).
LOG_READERS = {
    "kernel-log": (ingest_kernel_log, ("cluster", "node", "year", "bus_order", "workers")),
    "sacct": (ingest_sacct, ("cluster",)),
    "slurm-events": (ingest_slurm_events, ("cluster",)),
    "slurmctld": (ingest_slurmctld, ("cluster", "year")),
    "kubernetes": (ingest_kubernetes, ("cluster",)),
    "training-log": (ingest_training_log, ("cluster", "node", "job", "year")),
    HMA_FORMAT: (ingest_hyperpod_hma, ("cluster", "node")),
    JOURNALD_FORMAT: (ingest_journald_json, ("cluster", "node", "bus_order")),
}
FORMATS = (*TABLE_FORMATS, *LOG_READERS, *CLOUD_FORMATS, *DATASET_FORMATS)

__all__ = [
    "expand_pattern",
    "check_readable",
    "check_time_format",
    "read_file",
    "ReaderOptions",
    "MAX_REJECTED_PERCENT",
    "refuse_mostly_rejected",
    "session_timezone",
    "DATASET_FORMATS",
    "FORMATS",
    "INCIDENT_COLUMNS",
    "INCIDENT_OPTIONAL",
    "INVENTORY_COLUMNS",
    "INVENTORY_OPTIONAL",
    "MAX_DECOMPRESSED_BYTES",
    "FileSummary",
    "InputError",
    "InventoryCheck",
    "detect_format",
    "ingest_files",
    "inventory_check",
    "parse_bus_order",
    "parse_category_map",
    "parse_column_map",
    "refresh_incidents",
    "sha256_of",
]

_LOG_LINE = re.compile(
    r"^(?:\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}|[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} |\[)|Xid", re.M
)

# Slurm's own log prefix ([2024-05-01T12:00:00.123]: LogTimeFormat iso8601[_ms], rfc5424, rfc3339;
# [May 01 12:00:00]: short)
# or a syslog line of slurmctld; a file that also has kernel Xid lines is read as a kernel log (a
# drain reason may say "Xid 79", a kernel line says "Xid (PCI:0000:18:00): 79"). The same holds for
# training-log marks (a node's journal can hold both the kernel and the job's output).
_SLURMCTLD_LINE = re.compile(
    r"^\[(?:\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{2} \d{2}:\d{2}:\d{2})\] "
    r"|\bslurmctld(?:\[\d+\])?: ",
    re.M,
)

_KERNEL_XID = re.compile(r"Xid \((?:PCI:)?[0-9A-Fa-f]{4}:")

# kubectl -o json of Events or Nodes (a List, one object, or JSON Lines of them): a core/v1 or
# events.k8s.io/v1 apiVersion beside an Event's or a Node's kind, in the first 64 KiB
_KUBERNETES = re.compile(r'"kind"\s*:\s*"(?:Event|Node)"')
_KUBERNETES_API = re.compile(r'"apiVersion"\s*:\s*"(?:v1|events\.k8s\.io/v1(?:beta1)?)"')

# JSON of the cloud readers, told from canonical JSON Lines by their own keys
_CLOUD_JSON = (
    ("ec2-status", re.compile(r'"(?:InstanceStatuses|InstanceEventId)"\s*:')),
    ("gce-audit", re.compile(r'"protoPayload"\s*:|"methodName"\s*:\s*"compute\.instances\.')),
)


def expand_pattern(pattern: str) -> list[Path]:
    """The files a path or glob names (``**`` recursive), each once by real path: a symlink loop
    makes ``**`` match one file under many names. An existing file is taken as named even if its
    name has glob characters (``[``, ``*``); a plain path that does not exist is returned as is, so
    ingest reports it as missing."""
    literal = os.path.lexists(pattern) or not glob.has_magic(pattern)
    matched = [pattern] if literal else sorted(glob.glob(pattern, recursive=True))
    files: dict[str, Path] = {}
    for match in matched:
        files.setdefault(os.path.realpath(match), Path(match))
    return list(files.values())


def detect_format(path: Path) -> str:
    """From the name (.csv/.tsv, .jsonl/.ndjson/.json, .parquet), else from the first 64 KiB. JSON
    (first character ``{`` or ``[``) that holds Kubernetes Events or Nodes is ``kubernetes``, EC2 or
    GCE cloud events when its keys say so, whatever the file's name; other JSON is ``json`` (one
    document: an array of records, or an object holding one) or ``jsonl`` (a record per line).
    A file (CSV too) naming HyperPod's ``HealthMonitoringAgentDetectionEvent`` is ``hyperpod-hma``;
    one whose first line is a journal entry (``__REALTIME_TIMESTAMP``, ``__CURSOR``) is ``journald-json``."""
    name = path.name.lower().removesuffix(".gz")
    if not name.endswith((".csv", ".tsv", ".parquet")) and looks_like_journald(
        head_text(path).removeprefix(BOM)
    ):
        return JOURNALD_FORMAT  # first: a node's journal may hold other tools' JSON in its messages
    if not name.endswith(".parquet") and HMA_SNIFF.search(head_text(path)):
        return HMA_FORMAT
    if not name.endswith((".csv", ".tsv", ".parquet")):
        head = head_text(path).removeprefix(BOM)
        if head.lstrip().startswith("{") and _KUBERNETES.search(head) and _KUBERNETES_API.search(head):
            return "kubernetes"
        if head.lstrip()[:1] in ("{", "["):
            for fmt, keys in _CLOUD_JSON:
                if keys.search(head):
                    return fmt
    if name.endswith(".json"):
        return "json" if is_json_document(head) else "jsonl"
    for suffix, fmt in ((".csv", "csv"), (".tsv", "csv"), (".jsonl", "jsonl"), (".ndjson", "jsonl")):
        if name.endswith(suffix):
            return fmt
    with path.open("rb") as f:
        if name.endswith(".parquet") or f.read(4) == b"PAR1":
            return "parquet"
    head = head_text(path).removeprefix(BOM)
    first = next((line for line in head.splitlines() if line.strip()), "")
    columns = {c.strip() for c in first.lower().split("|")}
    if "|" in first and {"nodename", "timestart"} <= columns:
        return "slurm-events"
    if "|" in first and "jobid" in columns:
        return "sacct"
    names = first.lower().split(csv_separator(first))
    if {"node_id", "cluster_id", "timestamp"} & {c.strip().strip('"') for c in names}:
        return "csv"
    if is_json_document(head):
        return "json"
    if first.lstrip().startswith("{"):
        return "jsonl"
    if not _KERNEL_XID.search(head) and any(mark in head for mark in TRAINING_LOG_SNIFF):
        return "training-log"
    if not _KERNEL_XID.search(head) and _SLURMCTLD_LINE.search(head):
        return "slurmctld"
    if _LOG_LINE.search(head):
        return "kernel-log"
    raise InputError(
        f"{path}: cannot tell the format from the name or content; use --format {'|'.join(FORMATS)}"
    )


def _guess_format(path: Path, fmt: str | None) -> str | None:
    """The format given or detected, None if it cannot be told (:func:`detect_format` says why)."""
    try:
        return fmt or detect_format(path)
    except InputError:
        return None


@contextmanager
def session_timezone(con, timezone: str) -> Iterator[None]:
    """Naive times in the block are read in ``timezone`` (the readers' SQL casts in the session
    time zone); UTC again after it."""
    con.execute(f"SET TimeZone = '{checked_timezone(con, timezone)}'")
    try:
        yield
    finally:
        con.execute("SET TimeZone = 'UTC'")


def read_file(
    con,
    path: Path,
    *,
    sha: str,
    fmt: str,
    options: ReaderOptions,
    progress: Callable[[int], None] | None = None,
    workers: SpanWorkers | None = None,
    category_map: CategoryMap | None = None,
) -> FileSummary:
    """Parse one file with its format's reader into the warehouse ``con``: the one parsing step of
    ``ingest`` and of ``extract`` (which runs it on a scratch warehouse per file, on a worker). The
    caller holds the transaction and the session time zone (:func:`session_timezone`); the new
    events are left unclassified (:mod:`.taxonomy` runs after the file), except a canonical file's
    when a ``category_map`` is given: those are stored classified. ``progress`` is called with the
    number of bytes just read (compressed bytes for ``.gz``); ``workers``: the threads that parse
    large kernel logs (None: the reader starts its own)."""
    if fmt in TABLE_FORMATS:
        summary = ingest_canonical(
            con,
            path,
            sha=sha,
            fmt=fmt,
            column_map=options.column_map,
            max_decompressed_bytes=options.max_decompressed_bytes,
            category_map=category_map,
            time_format=options.time_format,
            cluster=options.cluster,
        )
        if progress:
            progress(path.stat().st_size)
        return summary
    if fmt in DATASET_FORMATS:
        from pipeline.datasets.load import ingest_dataset  # datasets build on ingest

        return ingest_dataset(con, path, sha=sha, fmt=fmt, timezone=options.timezone, progress=progress)
    if fmt in CLOUD_FORMATS:
        return ingest_cloud_events(
            con,
            path,
            sha=sha,
            fmt=fmt,
            cluster=options.cluster,
            progress=progress,
            max_decompressed_bytes=options.max_decompressed_bytes,
        )
    reader, extra = LOG_READERS[fmt]
    values = {
        "cluster": options.cluster,
        "node": options.node,
        "job": options.job,
        "year": options.year,
        "bus_order": options.bus_index,
        "workers": workers,
    }
    return reader(
        con,
        path,
        sha=sha,
        progress=progress,
        max_decompressed_bytes=options.max_decompressed_bytes,
        block_bytes=options.block_bytes,
        **{name: values[name] for name in extra},
    )


def refuse_mostly_rejected(con, summary: FileSummary, max_rejected_percent: float) -> None:
    """An :class:`InputError` when more than ``max_rejected_percent`` of the file's records (lines
    that carried one: read - ignored), and at least :data:`MIN_REFUSED`, were rejected. Called
    inside the file's transaction, so the file is then stored not at all, rather than by its few
    rows that happened to parse: exit 2 with the first reason, instead of exit 0 and rates biased by
    what is left."""
    records = summary.rows_read - summary.rows_ignored
    if summary.rows_rejected < MIN_REFUSED or summary.rows_rejected * 100 <= max_rejected_percent * records:
        return
    first = con.sql(
        "SELECT line, reason FROM rejects WHERE file_id = ? ORDER BY line LIMIT 1",
        params=[summary.file_id],
    ).fetchall()
    example = f"; line {first[0][0]}: {first[0][1]}" if first else ""
    raise InputError(
        f"{summary.path}: {summary.rows_rejected:,} of {records:,} records rejected "
        f"({100 * summary.rows_rejected / records:.0f}%, more than --max-rejected {max_rejected_percent:g}%)"
        f"{example}. Nothing from this file was stored: fix how it is read (--map, --timezone, --format"
        f"{_TIME_FORMAT_ADVICE if first and 'ISO 8601' in first[0][1] else ''}) or the file, or raise "
        "--max-rejected ([ingest] max_rejected_percent in failcast.toml)"
    )


_TIME_FORMAT_ADVICE = ", --time-format for times such as 01.03.2026 05:26 or 03/01/2026 5:26 PM"


def check_readable(path: Path) -> None:
    """An :class:`InputError` naming the problem unless ``path`` is a regular file we may read."""
    if path.is_dir():
        raise InputError(f"{path}: is a directory: pass files or a glob (e.g. '{path}/*.csv')")
    if path.exists() and not path.is_file():
        raise InputError(f"{path}: not a regular file (a FIFO or device): pass files or a glob")
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    try:
        path.open("rb").close()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror}); check the file's permissions") from exc


def _ingest_one(
    con,
    path: Path,
    options: ReaderOptions,
    category_map: CategoryMap,
    progress: Callable[[int], None] | None,
    workers: SpanWorkers,
) -> FileSummary:
    check_readable(path)
    fmt = options.fmt
    size = path.stat().st_size
    if size == 0 or (is_gzip(path) and not head_text(path, 1)):
        if progress:
            progress(size)
        return FileSummary(str(path), "-", fmt or "-", notes=["empty file: nothing to ingest"])
    hasher = None
    if (
        parallel_parts(path) > 1
        and _guess_format(path, fmt) == "kernel-log"
        and not con.sql("SELECT 1 FROM ingested_files WHERE size_bytes = ?", params=[size]).fetchall()
    ):  # no stored file has this size, so none has this content: hashed while it is parsed
        hasher = ThreadPoolExecutor(1, thread_name_prefix="sha256")
    if hasher is None:
        sha: str | Callable[[], str] = sha256_of(path)
        stored = con.sql(
            "SELECT kind, format FROM ingested_files WHERE sha256 = ? ORDER BY file_id LIMIT 1", params=[sha]
        ).fetchall()
        if stored:
            if progress:
                progress(size)
            return _already_ingested(path, *stored[0], fmt)
    else:
        sha = hasher.submit(sha256_of, path).result
    fmt = fmt or detect_format(path)
    try:
        with session_timezone(con, options.timezone), warehouse.transaction(con):
            summary = read_file(
                con,
                path,
                sha=sha,
                fmt=fmt,
                options=options,
                progress=progress,
                workers=workers,
                category_map=category_map,
            )
            refuse_mostly_rejected(con, summary, options.max_rejected_percent)
            summary.notes.extend(taxonomy.classify_new_events(con, category_map))
    finally:
        if hasher is not None:
            hasher.shutdown()
    return summary


def _already_ingested(path: Path, kind: str, stored_format: str, fmt: str | None) -> FileSummary:
    """A file whose bytes are stored: skipped, as the kind and format it was read as. A --format
    other than that one does not read it again (its records are stored once): say so."""
    summary = FileSummary(str(path), kind, stored_format, skipped=True)
    if fmt is not None and fmt != stored_format:
        summary.notes.append(
            f"read as {stored_format} before: --format {fmt} does not read it again; its records "
            "stay as stored (ingest into a new warehouse to read it another way)"
        )
    return summary


def ingest_files(
    con,
    paths: Iterable[Path | str],
    options: ReaderOptions | None = None,
    *,
    category_map: CategoryMap | None = None,
    window_seconds: float = 600.0,
    estimate_exposure: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[FileSummary]:
    """Ingest each file in its own transaction, then rebuild ``incidents`` from ``events``.

    ``options``: how the files are read (:class:`ReaderOptions`; default: formats detected, UTC).
    ``category_map``: the user's taxonomy (:mod:`.taxonomy`); a map other than the one the
    warehouse was built with reclassifies every stored event. ``window_seconds``: events of one
    node and fault closer than this are one incident. ``estimate_exposure``: GPUs per node of an
    inventory estimated from the nodes seen, when there is no inventory. ``progress`` is called
    with the number of bytes just read (compressed bytes for ``.gz``).
    """
    options = options or ReaderOptions()
    if options.fmt is not None and options.fmt not in FORMATS:
        raise InputError(f"unknown format {options.fmt!r}; use one of {', '.join(FORMATS)}")
    category_map = category_map or CategoryMap()
    canonical_store.rekey_stored_incidents(con)  # once per warehouse, before any new key meets the stored
    summaries: list[FileSummary] = []
    try:
        with SpanWorkers() as workers:  # the threads parsing large kernel logs, for every file
            for path in map(Path, paths):
                if lake.is_lake(path):  # each input's summary kept as it commits, should a later one fail
                    for summary in lake.ingest_lake(con, path, category_map=category_map):
                        summaries.append(summary)
                else:
                    summaries.append(_ingest_one(con, path, options, category_map, progress, workers))
    except InputError as exc:
        if not summaries:
            raise
        _rebuild(con, window_seconds, estimate_exposure, category_map)  # the files before it are committed
        stored = sum(not s.skipped and s.file_id is not None for s in summaries)
        if not stored:
            raise
        raise InputError(
            f"{exc} ({stored} file(s) before it were ingested and stay; once it is fixed, ingesting all"
            " again skips them)"
        ) from exc
    _rebuild(con, window_seconds, estimate_exposure, category_map)
    return summaries


def _rebuild(con, window_seconds: float, estimate_exposure: int | None, category_map: CategoryMap) -> None:
    with warehouse.transaction(con):
        refresh_incidents(con, window_seconds=window_seconds, category_map=category_map)
        warehouse.estimate_inventory(con, gpus_per_node=estimate_exposure)


def refresh_incidents(con, *, window_seconds: float, category_map: CategoryMap | None = None) -> None:
    """Reclassify the stored events if the category map changed, then rebuild ``incidents`` (in
    full after a reclassification, else only what changed). Call inside a transaction."""
    category_map = category_map or CategoryMap()
    changed = taxonomy.apply_category_map(con, category_map)
    rebuild.rebuild_incidents(
        con, window_seconds=window_seconds, category_map=category_map.fingerprint, full=changed
    )


@dataclass(frozen=True)
class InventoryCheck:
    """How far the inventory covers the nodes in the data; ``exposure_estimated`` must be shown
    by every output whose exposure comes from this warehouse when it is true."""

    inventory_rows: int
    estimated_rows: int
    nodes_not_in_inventory: tuple[str, ...]
    late_records: tuple[record_checks.LateRecords, ...] = ()
    respelled: record_checks.RespelledNodes = record_checks.RespelledNodes(())

    @property
    def exposure_estimated(self) -> bool:
        return self.estimated_rows > 0


def inventory_check(con) -> InventoryCheck:
    """Inventory rows (real and estimated), the nodes with incidents or jobs but no inventory row
    (their incidents have no exposure, so rates leave them out), and the clusters whose records
    seem to start after their service and the nodes the inventory holds under another spelling
    (:mod:`pipeline.record_checks`)."""
    real, estimated = con.sql(
        "SELECT count(*) FILTER (WHERE NOT estimated), count(*) FILTER (WHERE estimated) FROM inventory"
    ).fetchall()[0]
    missing = con.sql(
        "SELECT DISTINCT node_id FROM (SELECT node_id FROM incidents UNION ALL"
        " SELECT unnest(nodes) FROM jobs) seen"
        " WHERE node_id NOT IN (SELECT node_id FROM inventory) ORDER BY node_id"
    ).fetchall()
    respelled = record_checks.respelled_nodes(con) if missing and real else record_checks.RespelledNodes(())
    return InventoryCheck(
        real, estimated, tuple(m[0] for m in missing), record_checks.late_records(con), respelled
    )


def parse_bus_order(text: str) -> tuple[str, ...]:
    """``"18,2a,3a"`` -> ``("18", "2a", "3a")`` (PCI bus numbers of gpu_index 0, 1, 2 ...)."""
    buses = tuple(b.strip().lower().removeprefix("0x") for b in text.split(",") if b.strip())
    bad = [b for b in buses if not re.fullmatch(r"[0-9a-f]{1,2}", b)]
    if bad or len(set(buses)) != len(buses):
        raise InputError(
            f"--gpu-bus-order {text!r}: expected distinct hex PCI bus numbers in gpu_index order, "
            "e.g. 18,2a,3a,5d,9a,ab,ba,db"
        )
    return buses


def parse_column_map(pairs: Iterable[str]) -> dict[str, str | tuple[str, ...]]:
    """``["node_id=hostname", ...]`` -> ``{"node_id": "hostname"}`` with a clear error. A canonical
    column given twice has several sources (``node_id=host`` for the tickets, ``node_id=hostname``
    for the inventory): ``{"node_id": ("host", "hostname")}``, each file using the one it has."""
    known = {*INCIDENT_COLUMNS, *INCIDENT_OPTIONAL, *INVENTORY_COLUMNS, *INVENTORY_OPTIONAL}
    sources: dict[str, list[str]] = {}
    target: dict[str, str] = {}
    for pair in pairs:
        canon, sep, source = pair.partition("=")
        if not sep or not canon or not source:
            raise InputError(f"--map {pair!r}: expected CANONICAL=SOURCE, e.g. node_id=hostname")
        if canon not in known:
            raise InputError(
                f"--map {pair!r}: {canon!r} is not a canonical column ({', '.join(sorted(known))})"
            )
        if target.setdefault(source, canon) != canon:
            raise InputError(f"--map {pair!r}: column {source!r} is already read as {target[source]}")
        if source not in sources.setdefault(canon, []):
            sources[canon].append(source)
    return {canon: names[0] if len(names) == 1 else tuple(names) for canon, names in sources.items()}
