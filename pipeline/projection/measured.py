"""Recovery times measured by the fleet in place of the assumed ones (``project --recovery measured``).

:func:`measured_recovery` is the one place that takes what is known: the mean repair time (MTTR)
from outages (:func:`pipeline.analysis.downtime.outages`), the replace time of a spare pool built on it
(:mod:`pipeline.projection.spares`) and the mean detection and restart times from training-job
logs (:mod:`pipeline.transform.restarts`). :func:`recovery_sources` says, per mode and time, what
was assumed and what is used, so every output can tell measured from assumed.
"""

from __future__ import annotations

from dataclasses import fields, replace

from pipeline.projection.spares import SPARE_PROBABILITY, pool_for
from pipeline.projection.spec import JobSpec, RecoveryProfile, _non_negative

TIMES = ("detect_hours", "replace_hours", "restart_hours")


def _measured_times(
    mode: str,
    repair_hours: float | None = None,
    detect_hours: float | None = None,
    restart_hours: float | None = None,
    spare_replace_hours: float | None = None,
) -> dict[str, float]:
    times = {"detect_hours": detect_hours, "restart_hours": restart_hours}
    times["replace_hours"] = repair_hours if mode == "manual" else spare_replace_hours
    return {k: v for k, v in times.items() if v is not None}


def measured_recovery(
    recovery: dict[str, RecoveryProfile],
    *,
    repair_hours: float | None = None,
    detect_hours: float | None = None,
    restart_hours: float | None = None,
    spare_replace_hours: float | None = None,
) -> dict[str, RecoveryProfile]:
    """The recovery profiles with what the fleet measured in place of the assumptions (None: not
    measured, the assumption stays).

    Which part of an outage blocks the job: without a spare ("manual") the job waits for the failed
    node to be repaired, so its ``replace_hours`` becomes the measured mean repair time (MTTR; the
    wall-time model takes the mean cost per failure). With hot spares ("automatic" and any other
    mode) the job waits for the swap when a spare is free, else for a repair: their
    ``replace_hours`` becomes ``spare_replace_hours``, the spare pool's
    (:meth:`pipeline.projection.spares.SparePool.replace_hours`, built on the MTTR by
    :func:`with_measured_recovery`; None: the assumed swap stays). From training-job logs
    (:func:`pipeline.transform.recovery_hours`, means): ``detect_hours`` (failure to the NCCL
    watchdog's detection) and ``restart_hours`` (detection to the workers' next rendezvous)
    replace every mode's: the job's own watchdog and launcher do both whatever the spare policy.
    Checkpoint costs stay assumed.
    """
    for name, value in (
        ("repair_hours", repair_hours),
        ("detect_hours", detect_hours),
        ("restart_hours", restart_hours),
        ("spare_replace_hours", spare_replace_hours),
    ):
        if value is not None:
            _non_negative(f"measured {name}", value)
    out = {}
    for mode, profile in recovery.items():
        values = {f.name: getattr(profile, f.name) for f in fields(profile)}
        values.update(_measured_times(mode, repair_hours, detect_hours, restart_hours, spare_replace_hours))
        out[mode] = RecoveryProfile(**values)
    return out


def recovery_sources(recovery: dict[str, RecoveryProfile], **measured: float | None) -> list[dict]:
    """Per mode and recovery time (detect, replace, restart): the assumed hours, the hours used with
    these measurements (:func:`measured_recovery`'s keywords) and whether the used value is
    measured."""
    used = measured_recovery(recovery, **measured)
    rows = []
    for mode, profile in recovery.items():
        times = _measured_times(mode, **measured)
        rows += [
            {
                "mode": mode,
                "time": name.removesuffix("_hours"),
                "assumed_hours": getattr(profile, name),
                "used_hours": getattr(used[mode], name),
                "measured": name in times,
            }
            for name in TIMES
        ]
    return rows


def with_measured_recovery(
    spec: JobSpec, measured: dict[str, float], spares: int | None = None
) -> tuple[JobSpec, list[dict]]:
    """``spec`` with ``measured`` (keywords of :func:`measured_recovery`) in place of its profiles'
    assumptions, and the :func:`recovery_sources` rows that say which times changed. With a
    measured ``repair_hours`` the modes with spares get the replace time of a pool of ``spares``
    hot spares (default: the 99% row, the fewest with which a failure finds a free spare with
    99% probability); the rows of those replace times carry ``spares``."""
    measured = dict(measured)
    if measured.get("repair_hours") is not None and "spare_replace_hours" not in measured:
        pool = pool_for(spec, measured["repair_hours"])
        spares = pool.spares_for(SPARE_PROBABILITY) if spares is None else spares
        measured["spare_replace_hours"] = pool.replace_hours(spares)
    sources = recovery_sources(spec.recovery, **measured)
    for row in sources:
        if row["time"] == "replace" and row["mode"] != "manual" and row["measured"]:
            row["spares"] = spares
    return replace(spec, recovery=measured_recovery(spec.recovery, **measured)), sources


def with_measured_job_times(spec: JobSpec, measured: dict[str, float] | None) -> JobSpec:
    """``spec`` as a spare pool plans it: only the detection and restart times of ``measured``
    (from training-job logs) replace the assumed ones; the replace time stays the assumed swap,
    since the pool builds its own replace time on the repair curve (``failcast spares``, the
    report's spare tables and planner)."""
    times = {k: v for k, v in (measured or {}).items() if k in ("detect_hours", "restart_hours")}
    return replace(spec, recovery=measured_recovery(spec.recovery, **times)) if times else spec
