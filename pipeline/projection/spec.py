"""Inputs of a projection: the job spec, failure model, recovery profiles, GPU table (the TOML
reader of a job file is :mod:`pipeline.projection.job_file`).

Everything here is plain floats so that ``pipeline.models`` (fitted from the warehouse) can build
a :class:`FailureModel` without this module importing it.

GPU peak dense BF16 FLOP/s (no 2:4 sparsity), per GPU, from the vendors' datasheets:
H100 SXM5 989.4 TFLOP/s and H100 PCIe 756 TFLOP/s (NVIDIA H100 datasheet lists 1 979 / 1 513
"with sparsity"); H200 SXM is the same Hopper die, 989 TFLOP/s; A100 312 TFLOP/s; B200 (HGX)
2.25 PFLOP/s dense (4.5 with sparsity); AMD MI300X 1 307.4 TFLOP/s.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, fields

from scipy import stats

GPU_PEAK_BF16_FLOPS: dict[str, float] = {
    "H100": 989e12,
    "H100-PCIE": 756e12,
    "H200": 989e12,
    "A100": 312e12,
    "B200": 2.25e15,
    "MI300X": 1307.4e12,
}

HOURS_PER_DAY = 24.0
NODE_AGES = ("stationary", "new")


class SpecError(ValueError):
    """An invalid job spec. The message is one line: what is wrong and how to fix it."""


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise SpecError(message)


def _positive(name: str, value: float) -> None:
    _require(
        isinstance(value, int | float) and math.isfinite(value) and value > 0,
        f"{name} must be a positive number, got {value!r}",
    )


def _non_negative(name: str, value: float) -> None:
    _require(
        isinstance(value, int | float) and math.isfinite(value) and value >= 0,
        f"{name} must be >= 0 hours, got {value!r}",
    )


@dataclass(frozen=True)
class RecoveryProfile:
    """What one failure costs in one operating mode; all durations in hours.

    Downtime = detect + replace + restart (reload the checkpoint). Lost work (progress since the
    last checkpoint) is not a parameter: it follows from the checkpoint interval and the failure
    process.
    """

    detect_hours: float
    replace_hours: float
    restart_hours: float
    checkpoint_interval_hours: float
    checkpoint_write_hours: float

    def __post_init__(self) -> None:
        for f in fields(self):
            _non_negative(f.name, getattr(self, f.name))
        _positive("checkpoint_interval_hours", self.checkpoint_interval_hours)

    @property
    def downtime_hours(self) -> float:
        return self.detect_hours + self.replace_hours + self.restart_hours

    def with_interval(self, checkpoint_interval_hours: float) -> RecoveryProfile:
        return RecoveryProfile(
            self.detect_hours,
            self.replace_hours,
            self.restart_hours,
            checkpoint_interval_hours,
            self.checkpoint_write_hours,
        )


# Documented defaults (docs/projection.md explains the choice). Both modes checkpoint every hour
# and write a checkpoint in 3 minutes, so the comparison isolates detection and replacement.
# manual: a hang is noticed by alerting/on-call after ~1 h, a ticket and a replacement node from
# the provider take ~2 h (no spare pool), re-launch and checkpoint reload ~0.5 h: 3.5 h down plus
# ~0.5 h of lost work = ~4 h lost per failure.
# automatic: health checks detect in ~5 min, a node from a warm spare pool in ~10 min, automatic
# resume from the last checkpoint in ~15 min: 0.5 h down plus ~0.5 h of lost work.
DEFAULT_RECOVERY: dict[str, RecoveryProfile] = {
    "manual": RecoveryProfile(1.0, 2.0, 0.5, 1.0, 0.05),
    "automatic": RecoveryProfile(5 / 60, 10 / 60, 15 / 60, 1.0, 0.05),
}


RECOVERY_SOURCES = ("assumed", "measured")


@dataclass(frozen=True)
class FailureModel:
    """Per-instance failure process: exponential (rate) or Weibull (shape, scale) between failures.

    For the cluster, instances fail independently and a failed node is replaced (renewal), so the
    job sees the superposition of N renewal processes. By Drenick's theorem (1960) that
    superposition of N independent stationary renewal processes tends to a Poisson process of rate
    N / mean time between failures as N grows; the analytic model and the first Monte Carlo use a
    Poisson process of rate ``cluster_rate_per_hour(N)`` for both kinds. For a Weibull model the
    projection adds the renewal Monte Carlo (:mod:`pipeline.projection.renewal`), which simulates
    every instance slot, with fresh nodes after replacement. A Weibull model may carry the rate's
    interval (kept from the measured rate) and ``weibull_log_covariance`` (from the fit).
    """

    kind: str  # "exponential" or "weibull"
    rate_per_instance_hour: float
    rate_ci_low_per_instance_hour: float | None = None
    rate_ci_high_per_instance_hour: float | None = None
    weibull_shape: float | None = None
    weibull_scale_hours: float | None = None
    source: str = "user"
    # covariance of (log scale, log shape) of a fitted Weibull: the renewal Monte Carlo draws from it
    weibull_log_covariance: tuple[tuple[float, float], tuple[float, float]] | None = None

    def __post_init__(self) -> None:
        _require(self.kind in ("exponential", "weibull"), f"unknown failure kind {self.kind!r}")
        _positive("failure rate per instance-hour", self.rate_per_instance_hour)
        lo, hi = self.rate_ci_low_per_instance_hour, self.rate_ci_high_per_instance_hour
        _require((lo is None) == (hi is None), "give both rate_ci_low and rate_ci_high, or neither")
        if lo is not None and hi is not None:
            _require(
                0 < lo <= self.rate_per_instance_hour <= hi,
                f"rate CI must satisfy 0 < low <= rate <= high, got {lo} <= "
                f"{self.rate_per_instance_hour} <= {hi}",
            )

    @classmethod
    def exponential(
        cls,
        rate_per_instance_hour: float,
        ci_low: float | None = None,
        ci_high: float | None = None,
        source: str = "user",
    ) -> FailureModel:
        return cls("exponential", rate_per_instance_hour, ci_low, ci_high, source=source)

    @classmethod
    def weibull(cls, shape: float, scale_hours: float, source: str = "user") -> FailureModel:
        """Weibull time between failures of one instance (k < 1: infant mortality)."""
        _positive("weibull_shape", shape)
        _positive("weibull_scale_hours", scale_hours)
        mean_hours = scale_hours * math.gamma(1 + 1 / shape)
        return cls("weibull", 1 / mean_hours, None, None, shape, scale_hours, source)

    def with_weibull_shape(
        self,
        shape: float,
        log_covariance: tuple[tuple[float, float], tuple[float, float]] | None = None,
        source: str | None = None,
    ) -> FailureModel:
        """The same mean rate (and rate interval) with Weibull gaps of ``shape``: scale = mean gap /
        Gamma(1 + 1/shape). ``log_covariance`` of (log scale, log shape) is unchanged by rescaling."""
        _positive("weibull_shape", shape)
        scale = self.mean_tbf_hours / math.gamma(1 + 1 / shape)
        return dataclasses.replace(
            self,
            kind="weibull",
            weibull_shape=float(shape),
            weibull_scale_hours=scale,
            weibull_log_covariance=log_covariance,
            source=source or self.source,
        )

    @classmethod
    def from_counts(cls, failures: int, instance_hours: float, source: str) -> FailureModel:
        """Rate = failures / exposure, with the exact (Garwood) 95% Poisson interval."""
        _positive("failures", failures)
        _positive("instance_hours", instance_hours)
        lo = stats.chi2.ppf(0.025, 2 * failures) / 2 / instance_hours
        hi = stats.chi2.ppf(0.975, 2 * failures + 2) / 2 / instance_hours
        return cls.exponential(failures / instance_hours, float(lo), float(hi), source)

    @classmethod
    def preset(cls, name: str) -> FailureModel:
        """A published fleet failure rate; see PRESETS and docs/projection.md for derivations."""
        key = name.strip().lower()
        _require(
            key in PRESETS,
            f"unknown failure-rate preset {name!r}; choose one of {', '.join(sorted(PRESETS))}",
        )
        failures, instance_hours, source, counted = PRESETS[key]
        if not counted:  # only a rate is published: no interval
            return cls.exponential(failures / instance_hours, source=source)
        return cls.from_counts(int(failures), instance_hours, source)

    @property
    def mean_tbf_hours(self) -> float:
        """Mean time between failures of ONE instance."""
        return 1.0 / self.rate_per_instance_hour

    def cluster_rate_per_hour(self, instances: int) -> float:
        return instances * self.rate_per_instance_hour

    def cluster_mtbf_hours(self, instances: int) -> float:
        return 1.0 / self.cluster_rate_per_hour(instances)


# name -> (failures, instance-hours, source, counts published?). Rates are per instance-hour; with
# published counts the preset carries the exact 95% Poisson interval as its uncertainty.
PRESETS: dict[str, tuple[float, float, str, bool]] = {
    # OPT-175B logbook: 35 manual + 70 automatic restarts, 124 instances (992 A100) for ~60 days.
    "opt-175b": (35 + 70, 124 * 1440, "OPT-175B logbook (Zhang et al. 2022)", True),
    # Llama 3 405B: 417 unexpected interruptions in a 54-day snapshot on ~2 000 hosts (16K H100).
    "llama-3.1": (417, 2000 * 1296, "Llama 3 herd of models (Dubey et al. 2024), Table 5", True),
    # MPT-7B: 4 hardware failures, 55 instances (440 A100) over 9.5 days.
    "mpt-7b": (4, 55 * 228, "MosaicML MPT-7B release notes (2023)", True),
    # Meta RSC: 6.5 failures per 1 000 node-days (Kokolis et al. 2024); only the rate is given.
    "meta-rsc": (6.5, 1000 * 24, "Kokolis et al. 2024, RSC clusters, 6.5 / 1000 node-days", False),
}


@dataclass(frozen=True)
class JobSpec:
    """One training job. Work is GPU-hours, or 6*params*tokens FLOPs at ``mfu`` of GPU peak. Without
    a price (None) the projection gives days, goodput and interruptions and no costs."""

    instances: int
    price_per_gpu_hour_usd: float | None
    failure: FailureModel
    gpus_per_instance: int = 8
    gpu: str = "H100"
    gpu_hours: float | None = None
    params: float | None = None
    tokens: float | None = None
    mfu: float | None = None
    recovery: dict[str, RecoveryProfile] = field(default_factory=lambda: dict(DEFAULT_RECOVERY))
    name: str = "job"
    # ages of the nodes at job start, for the renewal Monte Carlo of a Weibull model: "stationary"
    # (a fleet that has been running) or "new" (every node fresh: infant mortality at start)
    node_ages: str = "stationary"

    def __post_init__(self) -> None:
        _require(
            isinstance(self.instances, int) and self.instances > 0,
            f"instances must be a positive integer, got {self.instances!r}",
        )
        _require(
            isinstance(self.gpus_per_instance, int) and self.gpus_per_instance > 0,
            f"gpus_per_instance must be a positive integer, got {self.gpus_per_instance!r}",
        )
        _require(
            self.gpu.upper() in GPU_PEAK_BF16_FLOPS,
            f"unknown gpu {self.gpu!r}; choose one of {', '.join(GPU_PEAK_BF16_FLOPS)}",
        )
        if self.price_per_gpu_hour_usd is not None:
            _positive("price_per_gpu_hour_usd", self.price_per_gpu_hour_usd)
        if self.mfu is not None:
            _require(
                isinstance(self.mfu, int | float) and 0 < self.mfu <= 1,
                f"mfu must be in (0, 1], got {self.mfu}",
            )
        for name in ("gpu_hours", "params", "tokens"):
            if getattr(self, name) is not None:
                _positive(name, getattr(self, name))
        has_pd = self.params is not None and self.tokens is not None
        _require(
            (self.params is None) == (self.tokens is None),
            "give both params and tokens (training FLOPs = 6 * params * tokens), or neither",
        )
        _require(
            self.gpu_hours is not None or (has_pd and self.mfu is not None),
            "work is undefined: give gpu_hours, or params, tokens and mfu",
        )
        _require(
            not (self.gpu_hours is not None and self.mfu is not None),
            "give either gpu_hours or mfu, not both (gpu_hours and params*tokens imply the mfu)",
        )
        _require(len(self.recovery) > 0, "at least one recovery mode is required")
        _require(
            self.node_ages in NODE_AGES,
            f"node_ages must be one of {', '.join(NODE_AGES)}, got {self.node_ages!r}",
        )

    @property
    def gpus(self) -> int:
        return self.instances * self.gpus_per_instance

    def cost_usd(self, wall_hours: float) -> float | None:
        """What ``wall_hours`` of the job's GPUs cost (None without a price)."""
        price = self.price_per_gpu_hour_usd
        return None if price is None else wall_hours * self.gpus * price

    @property
    def peak_flops_per_gpu(self) -> float:
        return GPU_PEAK_BF16_FLOPS[self.gpu.upper()]

    @property
    def training_flops(self) -> float | None:
        if self.params is None or self.tokens is None:
            return None
        return 6.0 * self.params * self.tokens

    @property
    def work_gpu_hours(self) -> float:
        """Failure-free GPU-hours of useful work."""
        if self.gpu_hours is not None:
            return float(self.gpu_hours)
        assert self.training_flops is not None and self.mfu is not None
        return self.training_flops / (self.peak_flops_per_gpu * self.mfu) / 3600.0

    @property
    def implied_mfu(self) -> float | None:
        """MFU implied by 6*P*D over the given GPU-hours (when both are known)."""
        if self.training_flops is None:
            return None
        return self.training_flops / (self.peak_flops_per_gpu * self.work_gpu_hours * 3600.0)

    @property
    def failure_free_hours(self) -> float:
        return self.work_gpu_hours / self.gpus
