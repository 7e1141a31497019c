"""Project training time, goodput and cost of a job, with manual vs automatic recovery.

Formulas and sources (details in docs/projection.md):

- Work: training FLOPs ~ 6 * params * tokens (Kaplan et al. 2020); GPU-hours = FLOPs /
  (peak dense BF16 FLOP/s * MFU) / 3600. Failure-free wall time = GPU-hours / GPUs.
- Failures: a rate per instance-hour (or per-instance Weibull gaps); the job sees N instances, a
  superposition of renewal processes, modelled as Poisson with rate N*r (Drenick 1960), so the
  cluster MTBF is M = 1 / (N r).
- Wall time: Daly 2006, exact for exponential failures, with recovery R = detect + replace +
  restart, checkpoint interval tau and write cost delta:
  T = M e^{R/M} (e^{(tau+delta)/M} - 1) W / tau.
- Optimum checkpoint interval: Young 1974 / Daly 2006 first order tau* = sqrt(2 delta M), and the
  exact minimiser of T.
- ETTR: Kokolis et al. 2024, "Revisiting Reliability in Large-Scale ML Research Clusters" (RSC:
  6.5 failures per 1 000 node-days, job MTTF ~1.8 h at 16 384 GPUs, ~0.23 h at 131 072 GPUs);
  first-order ETTR = 1 / (1 + delta/tau + (1 + delta/tau) (R + (tau+delta)/2) / M).
- AWS HyperPod claim (256 instances, 0.05%/instance-hour): automatic recovery cuts training time
  ~32% and saves ~$25M on a 10M GPU-hour job; the default recovery profiles and price
  reproduce it (tests/test_projection.py, docs/projection.md).
- Fitted Weibull model (renewal.py): every instance slot a Weibull renewal process (fresh node
  after replacement, stationary or new node ages at start), failures drawn in bulk, O(failures).
- Measured recovery: without a spare a job waits for the node's repair (the fleet's MTTR); with
  hot spares for the swap when one is free, else for the earliest repair (spares.py); detection
  and restart times measured in training-job logs replace the assumed ones
  (:func:`measured_recovery`, :func:`recovery_sources`).
- Spare pool (spares.py): N + S nodes failing at the fleet's rate and repaired in parallel;
  p(S) = 1 - Engset's B(N + S, S, r m), mean wait m / (S + 1), the stall of the birth-death chain,
  Daly's wall time per S, the recommended S and its interval ends (:func:`spare_advice`); checked
  against a node-by-node simulation (spares_sim.py).
- Monte Carlo: renewal-reward sampling (negative-binomial failure counts, truncated-exponential
  lost work), vectorised over runs with numpy.random.default_rng(seed).
"""

from .explain import explain, weibull_difference
from .job_file import job_spec_for_fleet, job_spec_from_mapping, load_job_spec, read_job_document
from .measured import measured_recovery, recovery_sources, with_measured_job_times, with_measured_recovery
from .model import (
    expected_wall_hours,
    first_order_ettr,
    superposed_failure_times,
    young_daly_interval_hours,
)
from .results import (
    CANNOT_FINISH,
    ModeProjection,
    MonteCarloSummary,
    Projection,
    Savings,
    cannot_finish,
    days_histogram,
    monte_carlo,
    project,
    renewal_monte_carlo,
    sensitivity_table,
    sweep_cluster_size,
    sweep_failure_rate,
)
from .spares import (
    MIN_SAVING_PCT,
    SPARE_PROBABILITY,
    RepairCurve,
    SpareAdvice,
    SparePool,
    pool_for,
    pool_profile,
    spare_advice,
)
from .spec import (
    DEFAULT_RECOVERY,
    GPU_PEAK_BF16_FLOPS,
    NODE_AGES,
    PRESETS,
    RECOVERY_SOURCES,
    FailureModel,
    JobSpec,
    RecoveryProfile,
    SpecError,
)

__all__ = [
    "MIN_SAVING_PCT",
    "SPARE_PROBABILITY",
    "RepairCurve",
    "SpareAdvice",
    "SparePool",
    "pool_for",
    "pool_profile",
    "spare_advice",
    "CANNOT_FINISH",
    "NODE_AGES",
    "cannot_finish",
    "renewal_monte_carlo",
    "weibull_difference",
    "DEFAULT_RECOVERY",
    "GPU_PEAK_BF16_FLOPS",
    "PRESETS",
    "RECOVERY_SOURCES",
    "FailureModel",
    "JobSpec",
    "ModeProjection",
    "MonteCarloSummary",
    "Projection",
    "RecoveryProfile",
    "Savings",
    "SpecError",
    "days_histogram",
    "expected_wall_hours",
    "explain",
    "first_order_ettr",
    "job_spec_for_fleet",
    "job_spec_from_mapping",
    "load_job_spec",
    "measured_recovery",
    "with_measured_recovery",
    "with_measured_job_times",
    "monte_carlo",
    "project",
    "read_job_document",
    "recovery_sources",
    "sensitivity_table",
    "superposed_failure_times",
    "sweep_cluster_size",
    "sweep_failure_rate",
    "young_daly_interval_hours",
]
