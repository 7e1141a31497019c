"""The fleet's figures as Prometheus metrics, for node_exporter's textfile collector or a scrape.

Format: the Prometheus text exposition format 0.0.4
(https://prometheus.io/docs/instrumenting/exposition_formats/), which node_exporter's textfile
collector reads (``*.prom`` files; no sample timestamps allowed there, so none are written):

    # HELP failcast_cluster_mtbf_hours Cluster MTBF: cluster-hours observed / interruptions.
    # TYPE failcast_cluster_mtbf_hours gauge
    failcast_cluster_mtbf_hours{cluster="c0032"} 51.8

Names follow Prometheus' conventions (https://prometheus.io/docs/practices/naming/): a
``failcast_`` prefix, the unit as suffix (``_hours``, ``_seconds``, ``_dollars``, ``_ratio``),
``_total`` on counters. Label values are escaped (backslash, double quote, newline); an unbounded
value (MTBF of a cluster without failures) is ``+Inf``.

:data:`METRICS` is the one table of metrics: adding one is adding a row. A row without a
``samples`` function is *reserved*: its name is planned (the Grafana dashboard in
``deploy/grafana/`` already queries it) but not exported yet, because the analysis does not
compute it yet.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pipeline.analysis import FleetAnalysis
from pipeline.report.outlook import JobOutlook

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class LastRun:
    """The newest succeeded ``failcast run`` (from the ``runs`` table)."""

    run_id: str
    started_at_utc: datetime
    ended_at_utc: datetime
    rows_ingested: int
    rows_rejected: int


@dataclass(frozen=True)
class MetricInputs:
    analysis: FleetAnalysis
    outlook: JobOutlook | None = None
    last_run: LastRun | None = None


Sample = tuple[dict[str, str], float]


@dataclass(frozen=True)
class Metric:
    name: str
    kind: str  # "gauge" or "counter"
    help: str
    samples: Callable[[MetricInputs], Iterable[Sample]] | None  # None: reserved, not exported yet


def _fleet(column: str) -> Callable[[MetricInputs], Iterable[Sample]]:
    return lambda i: [({}, i.analysis.rates.overall[column][0])]


def _per_cluster(frame: str, column: str) -> Callable[[MetricInputs], Iterable[Sample]]:
    """A column of one of the rate part's per-cluster frames (``RateAnalysis.by_cluster``, ...)."""

    def samples(i: MetricInputs) -> Iterable[Sample]:
        rows = getattr(i.analysis.rates, frame).select("cluster_id", column).iter_rows()
        return [({"cluster": cluster}, value) for cluster, value in rows]

    return samples


def _best_fit(attribute: str, index: int | None = None) -> Callable[[MetricInputs], Iterable[Sample]]:
    def samples(i: MetricInputs) -> Iterable[Sample]:
        if i.analysis.fits.best_family is None:  # no failures yet: nothing was fitted, nothing to export
            return []
        value = getattr(i.analysis.fits.node_fits[i.analysis.fits.best_family], attribute)
        return [({"family": i.analysis.fits.best_family}, value if index is None else value[index])]

    return samples


def _interruptions(i: MetricInputs) -> Iterable[Sample]:
    """Per cluster and failure class (the ``category`` label: a bounded set, where the fleet's own
    category names could be unbounded label values), counted as the rates count them."""
    counts = i.analysis.rates.category_shares  # the report's root causes per cluster
    return [
        ({"cluster": c, "category": k}, n)
        for c, k, n in counts.select("cluster_id", "failure_class", "failures").iter_rows()
    ]


def _repairs(i: MetricInputs, column: str) -> Iterable[Sample]:
    """Per cluster with outages, one column of :func:`pipeline.analysis.repair_summary` (the
    analysis' ``repairs.by_cluster``, which the report's table shows; clusters without a completed
    repair have no MTTR: no sample, not a zero)."""
    rows = i.analysis.repairs.by_cluster.select("cluster_id", column).drop_nulls().iter_rows()
    return [({"cluster": cluster}, value) for cluster, value in rows]


def _lemon_counts(i: MetricInputs) -> Iterable[Sample]:
    """Lemon nodes per cluster, 0 for a cluster without any (a gauge that goes back to 0)."""
    flagged = i.analysis.nodes.lemons.lemons_.group_by("cluster_id").len()
    counts = dict(flagged.iter_rows())
    return [({"cluster": c}, counts.get(c, 0)) for c in i.analysis.rates.by_cluster["cluster_id"]]


def _job(column: str) -> Callable[[MetricInputs], Iterable[Sample]]:
    """Every configured job per recovery mode (``job``, ``recovery``): +Inf where the mode cannot
    finish; no cost sample for a job without a price (not NaN)."""

    def samples(i: MetricInputs) -> Iterable[Sample]:
        jobs = i.outlook.jobs if i.outlook is not None else None
        if jobs is None:
            return []
        out = []
        for row in jobs.iter_rows(named=True):
            if column == "cost_usd" and not row["priced"]:
                continue
            value = row[column] if row["outcome"] == "finishes" else math.inf
            out.append(({"job": row["job"], "recovery": row["mode"]}, value))
        return out

    return samples


def _savings(column: str) -> Callable[[MetricInputs], Iterable[Sample]]:
    """What each mode saves over its job's baseline, every job (none without a price, in USD)."""

    def samples(i: MetricInputs) -> Iterable[Sample]:
        saved = i.outlook.job_savings if i.outlook is not None else None
        if saved is None:
            return []
        rows = saved.select("job", "baseline", "mode", column).drop_nulls(column).iter_rows()
        return [({"job": j, "baseline": b, "recovery": m}, value) for j, b, m, value in rows]

    return samples


def _last_run(value: Callable[[LastRun], float]) -> Callable[[MetricInputs], Iterable[Sample]]:
    return lambda i: [] if i.last_run is None else [({}, value(i.last_run))]


def _unix(t: datetime) -> float:
    return t.replace(tzinfo=UTC).timestamp()


RATE = "Interruptions per node-hour (instance-hour)"
CI = (
    "95% interval, exact Poisson (Garwood) or quasi-Poisson when node counts are overdispersed "
    "(failcast_rate_interval_dispersion says which)"
)
METRICS: tuple[Metric, ...] = (
    Metric(
        "failcast_fleet_interruption_rate_per_node_hour",
        "gauge",
        f"{RATE}, whole fleet.",
        _fleet("rate_per_node_hour"),
    ),
    Metric(
        "failcast_fleet_interruption_rate_ci_low_per_node_hour",
        "gauge",
        f"{RATE}, whole fleet: {CI}, low.",
        _fleet("rate_ci_low"),
    ),
    Metric(
        "failcast_fleet_interruption_rate_ci_high_per_node_hour",
        "gauge",
        f"{RATE}, whole fleet: {CI}, high.",
        _fleet("rate_ci_high"),
    ),
    Metric(
        "failcast_cluster_interruption_rate_per_node_hour",
        "gauge",
        f"{RATE}, per cluster.",
        _per_cluster("by_cluster", "rate_per_node_hour"),
    ),
    Metric(
        "failcast_cluster_interruption_rate_ci_low_per_node_hour",
        "gauge",
        f"{RATE}, per cluster: {CI}, low.",
        _per_cluster("by_cluster", "rate_ci_low"),
    ),
    Metric(
        "failcast_cluster_interruption_rate_ci_high_per_node_hour",
        "gauge",
        f"{RATE}, per cluster: {CI}, high.",
        _per_cluster("by_cluster", "rate_ci_high"),
    ),
    Metric(
        "failcast_rate_interval_dispersion",
        "gauge",
        "Dispersion phi the rate intervals are widened by (quasi-Poisson: the Garwood interval of "
        "k/phi failures in T/phi hours); 1 = exact Poisson (Garwood).",
        lambda i: [({}, i.analysis.nodes.dispersion_test.dispersion(i.analysis.rates.interval_method))],
    ),
    Metric(
        "failcast_cluster_instances",
        "gauge",
        "Instances in service in the cluster, averaged over the observed window.",
        _per_cluster("cluster_mtbf", "instances"),
    ),
    Metric(
        "failcast_cluster_mtbf_hours",
        "gauge",
        "Cluster MTBF: cluster-hours observed / interruptions (+Inf without interruptions).",
        _per_cluster("cluster_mtbf", "mtbf_hours"),
    ),
    Metric(
        "failcast_cluster_mtbf_ci_low_hours",
        "gauge",
        f"Cluster MTBF: {CI}, low.",
        _per_cluster("cluster_mtbf", "mtbf_ci_low_hours"),
    ),
    Metric(
        "failcast_cluster_mtbf_ci_high_hours",
        "gauge",
        f"Cluster MTBF: {CI}, high.",
        _per_cluster("cluster_mtbf", "mtbf_ci_high_hours"),
    ),
    Metric(
        "failcast_node_mtbf_hours",
        "gauge",
        "Node MTBF of the best time-between-failures fit by AIC.",
        _best_fit("mtbf_hours_"),
    ),
    Metric(
        "failcast_node_mtbf_ci_low_hours",
        "gauge",
        "Node MTBF of the best fit: 95% interval, low.",
        _best_fit("mtbf_confidence_interval_", 0),
    ),
    Metric(
        "failcast_node_mtbf_ci_high_hours",
        "gauge",
        "Node MTBF of the best fit: 95% interval, high.",
        _best_fit("mtbf_confidence_interval_", 1),
    ),
    Metric(
        "failcast_interruptions_total",
        "counter",
        "Node interruptions observed while in service, by cluster and root-cause category.",
        _interruptions,
    ),
    Metric(
        "failcast_exposure_node_hours_total",
        "counter",
        "Node-hours in service and observed, per cluster.",
        _per_cluster("by_cluster", "exposure_node_hours"),
    ),
    Metric(
        "failcast_exposure_estimated",
        "gauge",
        "1 if the inventory was estimated from the nodes seen in the logs (rates approximate), else 0.",
        lambda i: [({}, float(i.analysis.exposure_estimated))],
    ),
    Metric(
        "failcast_observed_until_timestamp_seconds",
        "gauge",
        "End of the observed window (Unix time).",
        lambda i: [({}, _unix(i.analysis.observed_until))],
    ),
    Metric(
        "failcast_rejected_rows_total",
        "counter",
        "Input lines rejected, all runs and ingests.",
        lambda i: [({}, i.analysis.rejects.height)],
    ),
    Metric(
        "failcast_job_projected_days",
        "gauge",
        "Projected wall time of each configured job per recovery mode (+Inf: cannot finish).",
        _job("expected_days"),
    ),
    Metric(
        "failcast_job_projected_cost_dollars",
        "gauge",
        "Projected cost of each configured job with a price (USD; +Inf: cannot finish).",
        _job("cost_usd"),
    ),
    Metric(
        "failcast_job_projected_savings_days",
        "gauge",
        "Days a recovery mode saves over the baseline mode.",
        _savings("days"),
    ),
    Metric(
        "failcast_job_projected_savings_dollars",
        "gauge",
        "USD a recovery mode saves over the baseline mode.",
        _savings("usd"),
    ),
    Metric(
        "failcast_last_success_timestamp_seconds",
        "gauge",
        "End of the last succeeded failcast run (Unix time).",
        _last_run(lambda r: _unix(r.ended_at_utc)),
    ),
    Metric(
        "failcast_last_success_duration_seconds",
        "gauge",
        "Duration of the last succeeded failcast run.",
        _last_run(lambda r: (r.ended_at_utc - r.started_at_utc).total_seconds()),
    ),
    Metric(
        "failcast_last_success_rows_ingested",
        "gauge",
        "Rows ingested by the last succeeded run.",
        _last_run(lambda r: r.rows_ingested),
    ),
    Metric(
        "failcast_last_success_rows_rejected",
        "gauge",
        "Rows rejected by the last succeeded run.",
        _last_run(lambda r: r.rows_rejected),
    ),
    # outages and repair (pipeline.analysis.repair_summary), lemon nodes (pipeline.models.LemonTest)
    Metric(
        "failcast_cluster_availability_ratio",
        "gauge",
        "Uptime / (uptime + known repair downtime) of the cluster's nodes.",
        lambda i: _repairs(i, "availability"),
    ),
    Metric(
        "failcast_cluster_mttr_hours",
        "gauge",
        "Mean time to repair (outage start to resolution; Kaplan-Meier restricted mean).",
        lambda i: _repairs(i, "mttr_hours"),
    ),
    Metric(
        "failcast_outages_open",
        "gauge",
        "Outages with no recorded end by the end of the observed window, per cluster.",
        lambda i: _repairs(i, "unresolved"),
    ),
    Metric(
        "failcast_lemon_nodes",
        "gauge",
        "Nodes failing more often than the rest of their cluster (test against the rest of the "
        "cluster allowing for failures that cluster in time, Benjamini-Hochberg FDR).",
        _lemon_counts,
    ),
)

EXPORTED = tuple(m.name for m in METRICS if m.samples is not None)
RESERVED = tuple(m.name for m in METRICS if m.samples is None)


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def render_metrics(inputs: MetricInputs) -> str:
    """Every exported metric with samples, in the text format (a metric without samples, e.g.
    the job's without a configured job, is left out whole)."""
    lines = []
    for metric in METRICS:
        samples = list(metric.samples(inputs)) if metric.samples else []
        if not samples:
            continue
        help_text = metric.help.replace("\\", "\\\\").replace("\n", "\\n")
        lines += [f"# HELP {metric.name} {help_text}", f"# TYPE {metric.name} {metric.kind}"]
        for labels, value in samples:
            pairs = ",".join(f'{k}="{escape_label(str(v))}"' for k, v in labels.items())
            lines.append(
                f"{metric.name}{{{pairs}}} {_number(value)}" if pairs else f"{metric.name} {_number(value)}"
            )
    return "\n".join(lines) + "\n"


def write_metrics(text: str, path: Path | str) -> Path:
    """Write atomically: a temp file in the same folder, fsynced, renamed over ``path``, so the
    textfile collector never reads a half-written file. The temp name does not end in ``.prom``
    (the collector reads only those)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.chmod(0o644)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def last_run(runs: list[dict]) -> LastRun | None:
    """The newest succeeded run among ``runs`` (rows of :func:`pipeline.runs.list_runs`)."""
    for run in runs:
        if run["status"] == "succeeded" and run["ended_at_utc"] is not None:
            ingest = (run["stages"] or {}).get("ingest", {})
            return LastRun(
                run["run_id"],
                run["started_at_utc"],
                run["ended_at_utc"],
                int(ingest.get("rows_ingested", 0)),
                int(ingest.get("rows_rejected", 0)),
            )
    return None
