"""What ``failcast run`` does (see :mod:`pipeline.runs`): lock, record, ingest new and grown files,
rebuild, refit, report, publish, prune; once recorded as succeeded, snapshot for readers and write
the metrics file."""

from __future__ import annotations

import itertools
import logging
import os
import secrets
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from pipeline import analysis, ingest, report, warehouse
from pipeline.config import RunConfig
from pipeline.report import metrics
from pipeline.runs.lock import open_warehouse, warehouse_lock
from pipeline.runs.log import log
from pipeline.runs.manifest import RunRecord, describe, list_runs, mark_abandoned, utc_now
from pipeline.runs.reports import STAMP, dated_name, prune_reports, publish
from pipeline.runs.snapshots import latest_snapshot, publish_snapshot, snapshot_dir

STATUSES = ("new", "grown", "unchanged")
ROW_COUNTS = ("rows_read", "rows_ingested", "rows_duplicate", "rows_rejected")


@dataclass(frozen=True)
class InputFile:
    path: Path
    fmt: str | None  # None: detect from the name
    status: str  # one of STATUSES


def expand_inputs(inputs: dict[str, tuple[str, ...]]) -> tuple[list[tuple[Path, str | None]], list[str]]:
    """(path, format) for every file the globs match, each once, plus the globs that matched none.

    Patterns are read as by ``failcast ingest`` (:func:`pipeline.ingest.expand_pattern`).
    """
    found: dict[str, tuple[Path, str | None]] = {}
    unmatched: list[str] = []
    for kind, patterns in inputs.items():
        fmt = None if kind in ("inventory", "auto") else kind
        for pattern in patterns:
            matches = ingest.expand_pattern(pattern)
            if not matches:
                unmatched.append(pattern)
            for match in matches:
                found.setdefault(os.path.realpath(match), (match, fmt))
    return list(found.values()), unmatched


def classify_inputs(con, files: list[tuple[Path, str | None]]) -> list[InputFile]:
    """new / grown (path seen, content changed) / unchanged (same sha256 already ingested)."""
    known = con.sql("SELECT path, sha256 FROM ingested_files").fetchall()
    paths, hashes = {p for p, _ in known}, {s for _, s in known}
    classified = []
    for path, fmt in files:
        if path.is_file() and ingest.sha256_of(path) in hashes:
            status = "unchanged"
        else:
            status = "grown" if str(path) in paths else "new"
        classified.append(InputFile(path, fmt, status))
    return classified


@dataclass(frozen=True)
class RunResult:
    run_id: str
    report_path: Path
    stages: dict[str, dict[str, Any]]
    input_files: list[dict[str, Any]]


def run_batch(cfg: RunConfig, *, progress: bool = False) -> RunResult:
    """One scheduled run (see :mod:`pipeline.runs`). Raises :class:`LockedError` if another holds
    the warehouse; any other failure is recorded in ``runs`` and re-raised."""
    db = Path(cfg.warehouse)
    started = utc_now()
    run_id = f"{started.strftime(STAMP)}-{secrets.token_hex(3)}"
    waiting = time.perf_counter()
    with warehouse_lock(db, cfg.lock_timeout_seconds, run_id) as previous:
        if previous:
            log("lock", "the previous run did not release the lock (killed?)", logging.WARNING, **previous)
        # a reader holding the warehouse file open: wait for it within the same lock timeout
        left = max(cfg.lock_timeout_seconds - (time.perf_counter() - waiting), 0.0)
        con = open_warehouse(db, timeout_seconds=left, readers=latest_snapshot(db, cfg.snapshot_dir))
        waited = round(time.perf_counter() - waiting, 3)
        try:
            abandoned = mark_abandoned(con)
            for stale in abandoned:
                log("lock", "marked an abandoned run as failed", logging.WARNING, run_id=stale)
            record = RunRecord(con, run_id, started)
            record.stages["lock"] = {"seconds": waited, "abandoned_runs": abandoned}
            record.start(cfg.to_document())
            log("run", "started", run_id=run_id, warehouse=str(db))
            try:
                result, outlook = _stages(con, cfg, record, progress)
                # succeeded before the snapshot, so the snapshot's runs table says so (readers' metrics)
                record.finish("succeeded")
                _after_success(con, cfg, record, result, outlook)
            except BaseException as exc:
                record.finish("failed", describe(exc))
                log("run", "failed", logging.ERROR, run_id=run_id, error=describe(exc))
                raise
            record.finish("succeeded")  # again, with the snapshot and metrics stages
            log("run", "succeeded", run_id=run_id, report=record.report_path)
        finally:
            con.close()
    return RunResult(run_id, Path(record.report_path or ""), record.stages, record.input_files)


def _stages(
    con, cfg: RunConfig, record: RunRecord, progress: bool
) -> tuple[analysis.FleetAnalysis, report.JobOutlook | None]:
    with record.stage("ingest") as counts:
        counts.update(_ingest(con, cfg, record, progress))
    with record.stage("transform") as counts:
        with warehouse.transaction(con):
            ingest.refresh_incidents(
                con, window_seconds=cfg.dedup_window_minutes * 60, category_map=cfg.category_map
            )
        for name in ("events", "incidents", "inventory", "rejects"):
            counts[name] = con.sql(f"SELECT count(*) FROM {name}").fetchall()[0][0]  # noqa: S608
    with record.stage("analyze") as counts:
        result = analysis.analyze(con, cfg.analysis_options())
        counts.update(observed_until=result.observed_until.isoformat(), best_family=result.fits.best_family)
    with record.stage("project") as counts:
        outlook = _job_outlook(cfg, result)
        counts["job"] = outlook.job if outlook else None
    with record.stage("report") as counts:
        path = report.write_report(
            result, cfg.report_dir, filename=dated_name(record.started_at_utc), projection=outlook
        )
        counts["bytes"] = path.stat().st_size
        record.report_path = str(path)
    with record.stage("publish") as counts:
        counts["aliases"] = [str(p) for p in publish(path)]
        pruned = prune_reports(path.parent, keep=cfg.keep_reports, keep_days=cfg.keep_days, now=utc_now())
        counts["pruned"] = len(pruned)
    return result, outlook


def _after_success(
    con, cfg: RunConfig, record: RunRecord, result: analysis.FleetAnalysis, outlook: report.JobOutlook | None
) -> None:
    """Publish the snapshot readers open, then the metrics file (if configured). A failure here
    marks the run failed; the previous snapshot stays ``latest``."""
    db = Path(cfg.warehouse)
    with record.stage("snapshot") as counts:
        out_dir = snapshot_dir(db, cfg.snapshot_dir)
        counts.update(
            publish_snapshot(con, db, out_dir, record.run_id, keep=cfg.keep_snapshots, now=utc_now())
        )
    if cfg.metrics_file:
        with record.stage("metrics") as counts:
            inputs = metrics.MetricInputs(result, outlook, metrics.last_run(list_runs(con, limit=20)))
            counts["path"] = str(metrics.write_metrics(metrics.render_metrics(inputs), cfg.metrics_file))


def _job_outlook(cfg: RunConfig, result: analysis.FleetAnalysis) -> report.JobOutlook | None:
    """Every configured job projected on this fleet: the first in detail, all of them (and their
    spare tables) side by side."""
    if not cfg.jobs:
        return None
    specs, measured = analysis.configured_jobs(result, cfg.jobs, cfg.recovery, cfg.recovery_source)
    if measured == {}:
        log(
            "project",
            "recovery_source = measured, but no outage has an end and no training log an interruption: "
            "the projection uses the assumed recovery times",
            logging.WARNING,
        )
    return report.job_outlook(
        specs[0], measured=measured, repair=analysis.repair_curve(result.repairs), others=specs[1:]
    )


def _ingest(con, cfg: RunConfig, record: RunRecord, progress: bool) -> dict[str, int]:
    """Ingest new and grown files; returns file and row counts for the manifest."""
    files, unmatched = expand_inputs(cfg.inputs)
    for pattern in unmatched:
        log("ingest", "no files match", logging.WARNING, glob=pattern)
    inputs = classify_inputs(con, files)
    counts = {"files": len(inputs), **{s: sum(f.status == s for f in inputs) for s in STATUSES}}
    counts |= dict.fromkeys(ROW_COUNTS, 0)
    record.input_files = [
        {"path": str(f.path), "status": f.status} for f in inputs if f.status == "unchanged"
    ]
    changed = [f for f in inputs if f.status != "unchanged"]
    # ingest_files rebuilds incidents after each call (about 2 s per million events), so a run passes
    # all files of one format at once; on a terminal its progress callback moves a bar by bytes read.
    batches = [list(group) for _, group in itertools.groupby(changed, key=lambda f: f.fmt)]
    total = sum(f.path.stat().st_size for f in changed if f.path.is_file())
    bar = click.progressbar(length=total, label="ingest", file=sys.stderr, hidden=not progress)
    with bar:
        for batch in batches:
            summaries = ingest.ingest_files(
                con,
                [f.path for f in batch],
                cfg.reader_options(batch[0].fmt),
                category_map=cfg.category_map,
                window_seconds=cfg.dedup_window_minutes * 60,
                estimate_exposure=cfg.estimate_exposure,
                progress=bar.update if progress else None,
            )
            for item, summary in zip(batch, summaries, strict=True):
                entry = {"status": item.status, **summary.to_dict()}
                record.input_files.append(entry)
                for key in ROW_COUNTS:
                    counts[key] += entry[key]
                log(
                    "ingest",
                    "file",
                    logging.DEBUG if progress else logging.INFO,  # the bar shows it on a terminal
                    path=str(item.path),
                    status=item.status,
                    kind=summary.kind,
                    rows_ingested=summary.rows_ingested,
                    rows_rejected=summary.rows_rejected,
                )
                for note in summary.notes:
                    log("ingest", note, path=str(item.path))
    check = ingest.inventory_check(con)
    for late in check.late_records:
        log("ingest", late.describe(), logging.WARNING, cluster=late.cluster_id)
    if check.inventory_rows and check.nodes_not_in_inventory:
        log(
            "ingest",
            f"{len(check.nodes_not_in_inventory):,} node(s) in the data are not in the inventory: their "
            "incidents have no exposure and are left out of rates",
            logging.WARNING,
        )
    if check.respelled:
        log("ingest", check.respelled.describe(), logging.WARNING)
    return counts
