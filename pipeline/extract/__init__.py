"""Extract: input files -> a hive-partitioned Parquet log lake, in parallel (processes or Ray).

The stage that needs more than one machine at fleet scale: parsing tens of TB of logs. Each input
file is one task. A task parses the file with failcast's own reader (:func:`pipeline.ingest.read_file`,
the code ``failcast ingest`` runs) into a scratch in-memory warehouse of its own
(:func:`pipeline.warehouse.scratch`), then writes what the reader stored, its rejects and its counts
to the lake (layout and merge rules: :mod:`pipeline.store.lake`) with pyarrow. ``failcast ingest
LAKE`` then merges the lake into the warehouse on one machine: everything after parsing (dedup
across files, incidents, fits, projection, report) stays as it is.

Crash safety: every part file is written under a temporary name (``.part-*.tmp``, never read) and
renamed when complete; the input's manifest entry is written the same way, last. An input without a
manifest entry is not in the lake: a crashed task's input is parsed again, by the engine's retry or
the next run (its parts, named by the input's sha256, are replaced whole); an input whose worker
died :data:`ATTEMPTS` times in one run (a file too big for a worker's memory) is reported as
failed. Re-running skips every input whose sha256 has a manifest entry. One extract run per lake
at a time.

Engines (:mod:`.engines`): ``local``, a process pool on this machine; ``ray``, Ray Data's
``map_batches`` on a Ray cluster (optional extra ``failcast[ray]``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import polars as pl
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipeline import warehouse
from pipeline.extract.engines import ATTEMPTS, ENGINES, EngineError, EngineMissing, run_tasks
from pipeline.ingest import (
    InputError,
    ReaderOptions,
    check_readable,
    detect_format,
    expand_pattern,
    read_file,
    refuse_mostly_rejected,
    session_timezone,
    sha256_of,
)
from pipeline.readers import LAKE_FORMATS
from pipeline.readers.lines import head_text, is_gzip
from pipeline.store import lake as layout

ATTEMPTS_DIR = "attempts"
"""``LAKE/attempts/<run>-<sha256>-<id>``: one empty file per attempt at an input whose process is
still running it, or died running it; the attempt after :data:`ATTEMPTS` deaths reports the input
as failed instead of parsing it again (Ray Data retries a task that lost its worker without end)."""

__all__ = ["ENGINES", "EngineError", "EngineMissing", "Extracted", "extract_files", "list_inputs"]


@dataclass(frozen=True)
class Extracted:
    """What happened to one input. Lines add up: read = stored + duplicate + rejected + ignored
    (duplicates within the file; duplicates of other files are counted by ``ingest LAKE``)."""

    path: str
    format: str = "-"
    kind: str = "-"
    rows_read: int = 0
    rows_stored: int = 0
    rows_duplicate: int = 0
    rows_rejected: int = 0
    rows_ignored: int = 0
    skipped: bool = False
    error: str | None = None
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return asdict(self)


def list_inputs(sources: Sequence[str]) -> list[str]:
    """Each source's files, in order, each once: a local path or glob (``**`` recursive), or a URL
    that pyarrow's filesystems read (``s3://bucket/logs/``, ``gs://``, ``hdfs://``): a file, or every
    file under a prefix."""
    files: dict[str, None] = {}
    for source in sources:
        found = _list_url(source) if "://" in source else [str(p) for p in expand_pattern(source)]
        if not found:
            raise InputError(f"{source}: no files match")
        files.update(dict.fromkeys(found))
    return list(files)


def _list_url(url: str) -> list[str]:
    try:
        fs, root = pafs.FileSystem.from_uri(url)
        info = fs.get_file_info(root)
    except (OSError, ValueError) as exc:
        raise InputError(f"{url}: cannot open ({exc}); check the URL and the credentials") from exc
    if info.type == pafs.FileType.File:
        return [url]
    if info.type != pafs.FileType.Directory:
        raise InputError(f"{url}: no such file or prefix")
    # the URL up to the path, e.g. s3:// or hdfs://namenode:8020
    trimmed, path = url.rstrip("/"), root.rstrip("/")
    base = trimmed[: len(trimmed) - len(path)] if trimmed.endswith(path) else url.split("://", 1)[0] + "://"
    listed = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    return sorted(base + f.path for f in listed if f.type == pafs.FileType.File)


@contextmanager
def _local_copy(source: str) -> Iterator[Path]:
    """The input as a local file: a local path as is; a URL streamed to a temporary file that keeps
    the object's modification time (syslog years are read from it)."""
    if "://" not in source:
        yield Path(source)
        return
    with tempfile.TemporaryDirectory(prefix="failcast-extract-") as tmp:
        try:
            fs, path = pafs.FileSystem.from_uri(source)
            info = fs.get_file_info(path)
            if info.type != pafs.FileType.File:
                raise InputError(f"{source}: no such object (or not a file)")
            local = Path(tmp) / Path(path).name
            with fs.open_input_stream(path) as src, local.open("wb") as dst:
                shutil.copyfileobj(src, dst, 8 << 20)
        except (OSError, ValueError) as exc:
            raise InputError(f"{source}: cannot read ({exc}); check the URL and the credentials") from exc
        if info.mtime is not None:
            os.utime(local, (info.mtime.timestamp(), info.mtime.timestamp()))
        yield local


def _write(table, target: Path) -> None:
    """Write ``table`` to ``target`` whole or not at all: a temporary name, renamed when complete."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.stem}-{uuid.uuid4().hex}.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, target)


def _write_parts(con, lake: Path, source: str, sha: str) -> dict[str, list[str]]:
    """What the reader stored in the scratch warehouse ``con`` as the input's part files."""
    parts: dict[str, list[str]] = {}
    name = f"part-{sha}.parquet"
    events = warehouse.table(con, "events").select(layout.EVENT_COLUMNS)
    if events.height:
        keyed = events.with_columns(month=pl.col("timestamp_utc").dt.strftime("%Y-%m"))
        for (cluster, month), group in keyed.group_by("cluster_id", "month", maintain_order=True):
            rel = Path("events", f"cluster={layout.partition_value(cluster)}", f"month={month}", name)
            _write(group.drop("month").sort("line", "event_key").to_arrow(), lake / rel)
            parts.setdefault("events", []).append(rel.as_posix())
    frames = {
        "jobs": warehouse.table(con, "jobs").select(layout.JOB_COLUMNS),
        "inventory": warehouse.table(con, "inventory")
        .filter(~pl.col("estimated"))
        .select(layout.INVENTORY_COLUMNS),
        "rejects": warehouse.table(con, "rejects")
        .with_columns(path=pl.lit(source))
        .select(layout.REJECT_COLUMNS),
    }
    for table, frame in frames.items():
        if frame.height:
            _write(frame.sort("line").to_arrow(), lake / table / name)
            parts[table] = [f"{table}/{name}"]
    return parts


def extract_one(task: Mapping, *, lake: str, options: ReaderOptions) -> dict:
    """One input -> its part files and manifest entry (run by a worker; the task is
    ``{"source": ..., "listed": [run, position]}``). Returns an :class:`Extracted` as a dict; a bad
    input's error names the source (a URL, not the worker's temporary copy)."""
    source = task["source"]
    try:
        with _local_copy(source) as path:
            try:
                return _extract(path, task, Path(lake), options).to_dict()
            except InputError as exc:
                raise InputError(str(exc).replace(str(path), source)) from exc
    except InputError as exc:
        return Extracted(source, error=str(exc)).to_dict()


def _extract(path: Path, task: Mapping, lake: Path, options: ReaderOptions) -> Extracted:
    source = task["source"]
    check_readable(path)
    size = path.stat().st_size
    if size == 0 or (is_gzip(path) and not head_text(path, 1)):
        return Extracted(source, notes=("empty file: nothing to extract",))
    sha = sha256_of(path)
    if layout.manifest_path(lake, sha).exists():
        return Extracted(source, skipped=True)
    # one marker per attempt, removed when the attempt ends in any way but its process dying
    run = task["listed"][0]
    died = len(list((lake / ATTEMPTS_DIR).glob(f"{run}-{sha}-*")))
    if died >= ATTEMPTS:
        raise InputError(
            f"{path}: the worker parsing it died {died} times (out of memory?); not in the lake. Run "
            "extract again with fewer --workers per machine (more memory each), or on a bigger machine"
        )
    marker = lake / ATTEMPTS_DIR / f"{run}-{sha}-{uuid.uuid4().hex}"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    try:
        return _parse_into_lake(path, task, sha, size, lake, options)
    finally:
        marker.unlink()


def _parse_into_lake(
    path: Path, task: Mapping, sha: str, size: int, lake: Path, options: ReaderOptions
) -> Extracted:
    source, started = task["source"], time.perf_counter()
    fmt = options.fmt or detect_format(path)
    if fmt not in LAKE_FORMATS:
        raise InputError(
            f"{path}: format {fmt} is not extracted to a lake (formats: "
            f"{', '.join(LAKE_FORMATS)}); ingest it directly with failcast ingest"
        )
    with warehouse.scratch() as con:
        with session_timezone(con, options.timezone):
            summary = read_file(con, path, sha=sha, fmt=fmt, options=options)
            refuse_mostly_rejected(con, summary, options.max_rejected_percent)
        parts = _write_parts(con, lake, source, sha)
    entry = {
        "path": source,
        "size_bytes": size,
        "sha256": sha,
        "format": summary.format,
        "kind": summary.kind,
        "rows_read": summary.rows_read,
        "rows_accepted": summary.rows_ingested + summary.rows_duplicate,
        "rows_stored": summary.rows_ingested,
        "rows_duplicate": summary.rows_duplicate,
        "rows_rejected": summary.rows_rejected,
        "rows_ignored": summary.rows_ignored,
        "notes": summary.notes,
        "ignored_columns": summary.ignored_columns,
        "attribute_columns": summary.attribute_columns,
        "parts": parts,
        "listed": list(task["listed"]),
        "extracted_at_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": round(time.perf_counter() - started, 3),
    }
    _write_manifest(lake, entry)
    return Extracted(
        source,
        summary.format,
        summary.kind,
        summary.rows_read,
        summary.rows_ingested,
        summary.rows_duplicate,
        summary.rows_rejected,
        summary.rows_ignored,
        notes=tuple(summary.notes),
    )


def _write_manifest(lake: Path, entry: dict) -> None:
    target = layout.manifest_path(lake, entry["sha256"])
    tmp = target.parent / f".{entry['sha256']}-{uuid.uuid4().hex}.tmp"
    tmp.write_text(json.dumps(entry, indent=1))
    os.replace(tmp, target)


def extract_files(
    sources: Sequence[str],
    out_lake: Path | str,
    *,
    engine: str = "local",
    address: str | None = None,
    options: ReaderOptions | None = None,
    workers: int | None = None,
) -> list[Extracted]:
    """Extract every input of ``sources`` (paths, globs, URLs) not in the lake ``out_lake`` yet, one
    task per file on ``engine`` with ``workers`` workers (default: the cores); ``options``: how the
    inputs are read, as by ``failcast ingest``. Returns what happened to each, in the order listed.
    A bad input does not stop the others: its :attr:`Extracted.error` says why (it is not in the
    lake)."""
    options = options or ReaderOptions()
    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}")
    if options.fmt is not None and options.fmt not in LAKE_FORMATS:
        raise InputError(f"format {options.fmt} is not extracted to a lake; use one of {LAKE_FORMATS}")
    lake = Path(out_lake)
    if lake.exists() and not lake.is_dir():
        raise InputError(f"{lake}: not a directory; --out takes the lake's directory")
    with warehouse.scratch() as con, session_timezone(con, options.timezone):
        pass  # a bad --timezone stops here, before any task runs
    files = list_inputs(sources)
    for folder in (layout.MANIFEST, ATTEMPTS_DIR):
        (lake / folder).mkdir(parents=True, exist_ok=True)
    # a crashed run's unfinished writes (never read) and attempt markers: removed
    for stale in [*lake.rglob(".*.tmp"), *(lake / ATTEMPTS_DIR).iterdir()]:
        stale.unlink()
    run = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")  # sorts in time order; a file name part
    tasks = [{"source": s, "listed": [run, i]} for i, s in enumerate(files)]
    task = partial(extract_one, lake=str(lake.resolve()), options=options)
    results = run_tasks(engine, task, tasks, workers=workers, address=address)
    for died in (lake / ATTEMPTS_DIR).glob(f"{run}-*"):
        died.unlink()
    return [Extracted(**{**r, "notes": tuple(r["notes"])}) for r in results]
