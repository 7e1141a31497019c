"""Simulated fleets with known ground truth, written as canonical failcast input files.

Each node fails as a *stationary* Weibull renewal process: the first failure time of every service
interval is drawn from the equilibrium (forward-recurrence) distribution, so the expected number of
interrupting failures in any window of length t is exactly ``t * rate_per_node_hour`` whatever the
shape. That makes the generator's rate a ground truth that estimators can be checked against.

For shape k and mean m = 1/rate, the Weibull scale is lambda = m / Gamma(1 + 1/k). The equilibrium
draw is U * L with U ~ Uniform(0, 1) and L length-biased, L = lambda * G^(1/k), G ~ Gamma(1 + 1/k)
(Cox, *Renewal Theory*, 1962, ch. 5).

Non-interrupting noise (application XIDs, memory warnings) is added as a separate Poisson process so
that pipelines which forget to exclude it are caught by the tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl

from pipeline.categories import FailureCategory as C

# Share of interrupting failures by root cause, loosely after Llama 3's 54-day table (Meta 2024:
# GPU 30%, HBM 17%, software 12%, network 8.4%, host 1.7% ... ) folded into failcast's categories.
DEFAULT_CATEGORY_MIX: dict[C, float] = {
    C.GPU_FELL_OFF_BUS: 0.22,
    C.GPU_MEMORY: 0.20,
    C.NVLINK: 0.08,
    C.GPU_FIRMWARE: 0.05,
    C.NCCL_TIMEOUT: 0.10,
    C.NETWORK: 0.12,
    C.HOST: 0.08,
    C.STORAGE: 0.03,
    C.SOFTWARE: 0.12,
}

_GPU_CATEGORIES = frozenset(
    {C.GPU_FELL_OFF_BUS, C.GPU_MEMORY, C.GPU_MEMORY_WARNING, C.NVLINK, C.GPU_FIRMWARE, C.APPLICATION}
)

# A representative log message per category; XID codes from NVIDIA's XID catalog.
_MESSAGES: dict[C, str] = {
    C.GPU_FELL_OFF_BUS: "NVRM: Xid (PCI:0000:{bus:02x}:00): 79, GPU has fallen off the bus.",
    C.GPU_MEMORY: "NVRM: Xid (PCI:0000:{bus:02x}:00): 95, Uncontained ECC error.",
    C.GPU_MEMORY_WARNING: "NVRM: Xid (PCI:0000:{bus:02x}:00): 92, High single-bit ECC error rate.",
    C.NVLINK: "NVRM: Xid (PCI:0000:{bus:02x}:00): 74, NVLink: fatal error detected on link 6.",
    C.GPU_FIRMWARE: "NVRM: Xid (PCI:0000:{bus:02x}:00): 119, Timeout waiting for RPC from GSP.",
    C.APPLICATION: "NVRM: Xid (PCI:0000:{bus:02x}:00): 13, Graphics Engine Exception.",
    C.NCCL_TIMEOUT: "NCCL watchdog: collective operation timed out after 1800000 ms",
    C.NETWORK: "mlx5_core: port 1 link down (InfiniBand)",
    C.HOST: "kernel: Machine check events logged; node rebooted",
    C.STORAGE: "Lustre: client evicted by the metadata server",
    C.SOFTWARE: "torch.distributed: worker process exited unexpectedly (SIGSEGV)",
}

# Ticket-system names some incidents are recorded under (every TICKET_EVERY-th incident of these
# classes, by time order; no random draw, so the rest of the fleet is unchanged): the built-in
# synonyms map them back to their class, so class-level results equal the truth's. A generic
# "Faulty GPU" would be class gpu_hardware, not the simulated gpu_fell_off_bus, so the ticket name
# says what was simulated.
TICKET_NAMES: dict[C, str] = {C.GPU_FELL_OFF_BUS: "GPU fell off the bus", C.NETWORK: "Link Down"}
TICKET_EVERY = 10

# Repair time of an interrupting failure (resolved_at - timestamp): lognormal in hours.
REPAIR_MEDIAN_HOURS = 15.0
REPAIR_SIGMA = 1.3

# PCI bus numbers of the 8 GPUs of an HGX H100 board, by gpu_index.
_PCI_BUS = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


@dataclass(frozen=True)
class FleetSpec:
    """What to simulate. Defaults: six clusters of 32..1024 instances of 8 H100s for 120 days."""

    cluster_sizes: tuple[int, ...] = (32, 64, 128, 256, 512, 1024)
    days: float = 120.0
    rate_per_node_hour: float = 0.0005
    weibull_shape: float = 0.85
    gpus_per_node: int = 8
    instance_type: str = "p5.48xlarge"
    start: datetime = datetime(2026, 3, 1, tzinfo=UTC)
    replaced_fraction: float = 0.03
    maintenance_fraction: float = 0.02
    noise_per_node_hour: float = 0.0001
    category_mix: dict[C, float] = field(default_factory=lambda: dict(DEFAULT_CATEGORY_MIX))
    seed: int = 2026

    @property
    def end(self) -> datetime:
        return self.start + timedelta(days=self.days)


@dataclass(frozen=True)
class Fleet:
    """The simulated fleet: canonical incidents and inventory frames, plus the truth behind them."""

    incidents: pl.DataFrame
    inventory: pl.DataFrame
    spec: FleetSpec

    def write(self, out_dir: Path | str) -> tuple[Path, Path]:
        """Write ``incidents.csv`` and ``inventory.csv`` (ISO 8601 UTC times with ``Z``)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = out / "incidents.csv", out / "inventory.csv"
        iso = "%Y-%m-%dT%H:%M:%SZ"
        self.incidents.with_columns(pl.col("timestamp", "resolved_at").dt.strftime(iso)).write_csv(paths[0])
        self.inventory.with_columns(pl.col("in_service_from", "in_service_to").dt.strftime(iso)).write_csv(
            paths[1]
        )
        return paths


def weibull_scale_hours(mean_hours: float, shape: float) -> float:
    """Scale lambda of a Weibull with the given mean: lambda = mean / Gamma(1 + 1/k)."""
    return mean_hours / math.gamma(1.0 + 1.0 / shape)


def stationary_renewal_times(
    durations_hours: np.ndarray, mean_hours: float, shape: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Event times of independent stationary Weibull renewal processes on [0, duration).

    Returns (interval index, time in hours) for every event. Vectorised: draws a block of
    inter-arrival times per interval and extends only the intervals not yet covered.
    """
    n = len(durations_hours)
    scale = weibull_scale_hours(mean_hours, shape)
    length_biased = scale * rng.gamma(1.0 + 1.0 / shape, size=n) ** (1.0 / shape)
    clock = rng.uniform(size=n) * length_biased
    owners, times = [np.arange(n)], [clock.copy()]
    active = np.flatnonzero(clock < durations_hours)
    block = max(4, int(np.ceil(durations_hours.max() / mean_hours * 2)) if n else 4)
    while active.size:
        gaps = scale * rng.weibull(shape, size=(active.size, block))
        steps = clock[active, None] + np.cumsum(gaps, axis=1)
        owners.append(np.repeat(active, block))
        times.append(steps.ravel())
        clock[active] = steps[:, -1]
        active = active[clock[active] < durations_hours[active]]
    owner = np.concatenate(owners)
    time = np.concatenate(times)
    keep = time < durations_hours[owner]
    return owner[keep], time[keep]


def _inventory(spec: FleetSpec, rng: np.random.Generator) -> pl.DataFrame:
    """Service intervals: most nodes serve the whole window, some are replaced or go to repair.

    A spare or repaired node that would come back after the window ends (short windows: repairs
    take 1-10 days) is left out, so every interval lies inside the window. The random draws do not
    depend on that, so windows long enough for every return give the same fleet as before.
    """
    rows: list[tuple[str, str, datetime, datetime | None]] = []
    for size in spec.cluster_sizes:
        cluster = f"c{size:04d}"
        for i in range(size):
            node = f"{cluster}-n{i:04d}"
            u = rng.uniform()
            if u < spec.replaced_fraction:  # retired mid-window, a spare takes its slot
                cut = spec.start + timedelta(days=rng.uniform(0.1, 0.9) * spec.days)
                rows.append((cluster, node, spec.start, cut))
                if cut + timedelta(hours=4) < spec.end:
                    rows.append((cluster, f"{cluster}-s{i:04d}", cut + timedelta(hours=4), None))
            elif u < spec.replaced_fraction + spec.maintenance_fraction:  # out for repair, back
                out = spec.start + timedelta(days=rng.uniform(0.1, 0.7) * spec.days)
                back = out + timedelta(days=rng.uniform(1, 10))
                rows.append((cluster, node, spec.start, out))
                if back < spec.end:
                    rows.append((cluster, node, back, None))
            else:
                rows.append((cluster, node, spec.start, None))
    return (
        pl.DataFrame(
            rows,
            schema={
                "cluster_id": pl.String,
                "node_id": pl.String,
                "in_service_from": pl.Datetime("us", "UTC"),
                "in_service_to": pl.Datetime("us", "UTC"),
            },
            orient="row",
        )
        .with_columns(
            instance_type=pl.lit(spec.instance_type),
            gpus_per_node=pl.lit(spec.gpus_per_node, pl.Int32),
        )
        .select(
            "cluster_id",
            "node_id",
            "instance_type",
            "gpus_per_node",
            "in_service_from",
            "in_service_to",
        )
    )


def simulate_fleet(spec: FleetSpec | None = None) -> Fleet:
    """Simulate incidents for every inventory interval; deterministic for a given spec.seed."""
    spec = spec or FleetSpec()
    rng = np.random.default_rng(spec.seed)
    inventory = _inventory(spec, rng)
    end = spec.end
    starts = inventory["in_service_from"].to_list()
    stops = [t if t is not None else end for t in inventory["in_service_to"].to_list()]
    durations = np.array([(b - a).total_seconds() / 3600 for a, b in zip(starts, stops, strict=True)])

    owner, hours = stationary_renewal_times(durations, 1.0 / spec.rate_per_node_hour, spec.weibull_shape, rng)
    categories = list(spec.category_mix)
    weights = np.array([spec.category_mix[c] for c in categories])
    picked = rng.choice(len(categories), size=owner.size, p=weights / weights.sum())
    failure_cats = [categories[i] for i in picked]

    noise_counts = rng.poisson(durations * spec.noise_per_node_hour)
    noise_owner = np.repeat(np.arange(len(durations)), noise_counts)
    noise_hours = rng.uniform(size=noise_owner.size) * durations[noise_owner]
    noise_cats = [
        C.APPLICATION if u < 0.7 else C.GPU_MEMORY_WARNING for u in rng.uniform(size=noise_owner.size)
    ]

    owner = np.concatenate([owner, noise_owner])
    hours = np.concatenate([hours, noise_hours])
    cats = failure_cats + noise_cats
    gpu = rng.integers(0, spec.gpus_per_node, size=owner.size)
    # repair of an interruption: lognormal, median 15 h, sigma 1.3 (mean 35 h, p90 80 h): the heavy
    # tail of real fault start/end traces (issue 15: median ~20 h, mean ~133 h); noise has none.
    # Failures keep coming on the calendar clock while a node is in repair (a renewal process
    # independent of repairs); failcast counts those as "node out of service", not as failures,
    # and divides by uptime, so the measured rate is the process's rate on either clock.
    repair_hours = rng.lognormal(mean=np.log(REPAIR_MEDIAN_HOURS), sigma=REPAIR_SIGMA, size=owner.size)
    repair_hours[len(failure_cats) :] = np.nan
    base = inventory.select("cluster_id", "node_id", "in_service_from")[owner]
    # whole seconds, never past the interval's end: every failure lies in its closed service
    # interval [from, to] (pipeline.transform.in_service), also after the CSV's times are cut to
    # whole seconds
    span_us = np.array([(b - a) // timedelta(microseconds=1) for a, b in zip(starts, stops, strict=True)])
    offset = pl.Series(np.minimum(np.round(hours * 3600).astype(np.int64) * 1_000_000, span_us[owner]))
    incidents = (
        base.with_columns(
            timestamp=pl.col("in_service_from") + pl.duration(microseconds=offset),
            category=pl.Series([c.value for c in cats]),
            gpu_index=pl.Series(
                [int(g) if c in _GPU_CATEGORIES else None for g, c in zip(gpu, cats, strict=True)],
                dtype=pl.Int32,
            ),
            message=pl.Series(
                [_MESSAGES[c].format(bus=_PCI_BUS[g % 8]) for g, c in zip(gpu, cats, strict=True)]
            ),
            repair_s=pl.Series(np.round(repair_hours * 3600)).cast(pl.Int64, strict=False),
        )
        .with_columns(
            resolved_at=pl.col("timestamp") + pl.duration(seconds=pl.col("repair_s")),
            job_id=pl.format("job-{}", (pl.col("timestamp").dt.epoch("s") // 86400 % 97)),
        )
        .sort("timestamp", "cluster_id", "node_id")
        .with_columns(category=_ticket_names(pl.col("category")))
        .select(
            "timestamp", "cluster_id", "node_id", "category", "gpu_index", "job_id", "message", "resolved_at"
        )
    )
    return Fleet(incidents=incidents, inventory=inventory, spec=spec)


def _ticket_names(category: pl.Expr) -> pl.Expr:
    """Every ``TICKET_EVERY``-th incident of a class in ``TICKET_NAMES`` under its ticket name."""
    names = {c.value: n for c, n in TICKET_NAMES.items()}
    category = category.cast(pl.String)  # an empty fleet's column has no type yet
    renamed = category.replace_strict(names, default=None, return_dtype=pl.String)
    nth = pl.int_range(pl.len()).over(category) % TICKET_EVERY == TICKET_EVERY - 1
    return pl.when(nth & renamed.is_not_null()).then(renamed).otherwise(category)


# The PCI bus numbers above as ``failcast ingest --gpu-bus-order`` takes them (gpu_index order).
PCI_BUS_ORDER: tuple[str, ...] = tuple(f"{bus:02x}" for bus in _PCI_BUS)
KERNEL_LOG_FORMS = {"syslog": "%b %e %H:%M:%S", "iso": "%Y-%m-%dT%H:%M:%S%.6f+00:00"}


def write_kernel_logs(
    fleet: Fleet,
    out_dir: Path | str,
    *,
    form: str = "syslog",
    storm_seconds: tuple[int, ...] = (0, 0, 1, 2),
) -> list[Path]:
    """The fleet's GPU incidents as NVIDIA XID kernel-log lines, one ``kern-<cluster>.log`` each.

    Like a real log, each fault is a storm: the Xid line once per entry of ``storm_seconds`` (an
    offset from the fault time; a repeated offset is an exact repeat), preceded by the driver's
    ``NVRM: GPU at PCI:...`` line and an ordinary kernel message, which readers must ignore.
    ``form`` is ``syslog`` (``Mar  2 04:26:29``, no year) or ``iso``; times are UTC. Non-GPU
    incidents have no XID and are not written, so the logs hold exactly the GPU incidents.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    xid = fleet.incidents.filter(pl.col("message").str.starts_with("NVRM: Xid")).with_row_index("fault")
    pci = pl.col("message").str.extract(r"\((PCI:[0-9a-f:]+)\)", 1)
    storm = xid.with_columns(offset_s=pl.lit(list(storm_seconds))).explode("offset_s")
    lines = (
        pl.concat(
            [
                xid.with_columns(
                    offset_s=pl.lit(-37), order=pl.lit(0), text=pl.lit("EXT4-fs (nvme0n1p1): re-mounted.")
                ),
                xid.with_columns(
                    offset_s=pl.lit(0),
                    order=pl.lit(1),
                    text=pl.format("NVRM: GPU at {}: GPU-{}", pci, "fault"),
                ),
                storm.with_columns(order=pl.lit(2), text=pl.col("message")),
            ],
            how="diagonal_relaxed",
        )
        .with_columns(time=pl.col("timestamp") + pl.duration(seconds=pl.col("offset_s")))
        .sort("cluster_id", "time", "fault", "order", maintain_order=True)
        .with_columns(
            line=pl.format(
                "{} {} kernel: {}",
                pl.col("time").dt.strftime(KERNEL_LOG_FORMS[form]),
                pl.col("node_id"),
                pl.col("text"),
            )
        )
    )
    paths = []
    for (cluster,), group in lines.group_by("cluster_id", maintain_order=True):
        path = out / f"kern-{cluster}.log"
        path.write_text("\n".join(group["line"].to_list()) + "\n", encoding="utf-8")
        paths.append(path)
    return paths
