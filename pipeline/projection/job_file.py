"""A job file (TOML, see data/jobs/llama3-70b.toml) read into a :class:`JobSpec`.

Every error is one :class:`SpecError` line naming the file, the table and the key, and saying what
the key must be; CLI flags override the document, and a job without ``[failures]`` is projected on
the fleet's own failure model (:func:`job_spec_for_fleet`).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

from .spec import DEFAULT_RECOVERY, FailureModel, JobSpec, RecoveryProfile, SpecError, _require

_SECTIONS: dict[str, dict[str, tuple[type, ...]]] = {
    "": {"name": (str,)},
    "work": {
        "gpu_hours": (int, float),
        "params": (int, float),
        "tokens": (int, float),
        "mfu": (int, float),
        "gpu": (str,),
    },
    "cluster": {
        "instances": (int,),
        "gpus_per_instance": (int,),
        "price_per_gpu_hour_usd": (int, float),
        "price_per_instance_hour_usd": (int, float),
        "node_ages": (str,),
    },
    "failures": {
        "preset": (str,),
        "rate_per_instance_hour": (int, float),
        "rate_ci_low_per_instance_hour": (int, float),
        "rate_ci_high_per_instance_hour": (int, float),
        "weibull_shape": (int, float),
        "weibull_scale_hours": (int, float),
    },
}
_PROFILE_KEYS = {f.name for f in fields(RecoveryProfile)}


def _check_table(table: dict[str, Any], allowed: dict[str, tuple[type, ...]], where: str) -> None:
    for key, value in table.items():
        _require(key in allowed, f"{where}: unknown key {key!r}; allowed: {', '.join(allowed)}")
        ok = isinstance(value, allowed[key]) and not isinstance(value, bool)
        names = " or ".join(t.__name__ for t in allowed[key])
        _require(ok, f"{where}: key {key!r} must be {names}, got {type(value).__name__}")


def failure_model_from_mapping(table: dict[str, Any], where: str = "failures") -> FailureModel:
    """Build a FailureModel from the [failures] table (preset, rate, or Weibull shape/scale)."""
    _check_table(table, _SECTIONS["failures"], where)
    given = [k for k in ("preset", "rate_per_instance_hour", "weibull_shape") if k in table]
    _require(
        len(given) == 1,
        f"{where}: give exactly one of preset, rate_per_instance_hour, weibull_shape+scale",
    )
    if "preset" in table:
        return FailureModel.preset(table["preset"])
    if "weibull_shape" in table:
        _require("weibull_scale_hours" in table, f"{where}: weibull_shape needs a scale in hours")
        return FailureModel.weibull(table["weibull_shape"], table["weibull_scale_hours"])
    return FailureModel.exponential(
        table["rate_per_instance_hour"],
        table.get("rate_ci_low_per_instance_hour"),
        table.get("rate_ci_high_per_instance_hour"),
    )


def read_job_document(path: str | Path) -> dict[str, Any]:
    """The parsed TOML of a job spec file; errors name the file."""
    path = Path(path)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpecError(f"{path}: cannot read job spec ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: invalid TOML ({exc})") from None


def load_job_spec(path: str | Path) -> JobSpec:
    """Read a TOML job spec (see data/jobs/llama3-70b.toml). Errors name the file and key."""
    try:
        return job_spec_from_mapping(read_job_document(path))
    except SpecError as exc:
        raise SpecError(f"{path}: {exc}") from None


def job_spec_for_fleet(
    job: str | Path | dict[str, Any] | None,
    *,
    fleet_failure: Callable[[int], FailureModel] | None = None,
    recovery: dict[str, dict[str, float]] | None = None,
    **overrides: Any,
) -> JobSpec:
    """A job (TOML path, parsed table, or None for flags only) projected on *this* fleet.

    A job whose failures are given neither by ``[failures]`` nor by an override gets
    ``fleet_failure(instances)``: the fleet's own measured model for a job of that size (see
    :func:`pipeline.analysis.failure_model_for`), so a scheduled report projects the next job on the
    failures the fleet actually had. Recovery profiles from the run config (``recovery``) apply
    under the job's own ``[recovery]`` keys; ``overrides`` (CLI flags) win over the document.
    """
    where = (
        ""
        if job is None
        else str(job)
        if not isinstance(job, dict)
        else f"job {job.get('name', '(inline)')!r}"
    )
    doc = {} if job is None else dict(job) if isinstance(job, dict) else read_job_document(job)
    own = doc.get("recovery", {})
    if recovery and isinstance(own, dict):  # else job_spec_from_mapping names the bad table
        modes: dict[str, Any] = {mode: dict(table) for mode, table in recovery.items()}
        for mode, table in own.items():
            modes[mode] = {**modes[mode], **table} if isinstance(table, dict) and mode in modes else table
        doc["recovery"] = modes
    cluster = doc.get("cluster", {})
    instances = overrides.get("instances") or (
        cluster.get("instances") if isinstance(cluster, dict) else None
    )
    if overrides.get("failure") is None and not doc.get("failures") and fleet_failure and instances:
        overrides["failure"] = fleet_failure(int(instances))
    try:
        return job_spec_from_mapping(doc, **overrides)
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}" if where else str(exc)) from None


def job_spec_from_mapping(doc: dict[str, Any], **overrides: Any) -> JobSpec:
    """Build a JobSpec from a parsed TOML document; ``overrides`` (CLI flags) win if not None."""
    top = {k: v for k, v in doc.items() if not isinstance(v, dict)}
    _check_table(top, _SECTIONS[""], "top level")
    unknown = set(doc) - set(_SECTIONS) - {"recovery", *top}
    _require(not unknown, f"unknown section(s) {sorted(unknown)}; allowed: work, cluster, ...")
    tables = {s: doc.get(s, {}) for s in ("work", "cluster", "failures")}
    for section, table in tables.items():
        _require(isinstance(table, dict), f"[{section}] must be a table")
        _check_table(table, _SECTIONS[section], f"[{section}]")
    work, cluster = tables["work"], tables["cluster"]
    recovery = dict(DEFAULT_RECOVERY)
    _require(isinstance(doc.get("recovery", {}), dict), "[recovery] must be a table of modes")
    for mode, table in doc.get("recovery", {}).items():
        where = f"[recovery.{mode}]"
        _require(isinstance(table, dict), f"{where} must be a table")
        allowed = {k: (int, float) for k in _PROFILE_KEYS}
        _check_table(table, allowed, where)
        base = DEFAULT_RECOVERY.get(mode)
        missing = _PROFILE_KEYS - set(table) if base is None else set()
        _require(not missing, f"{where}: new mode needs keys {sorted(missing)}")
        values = {k: table.get(k, getattr(base, k, None)) for k in _PROFILE_KEYS}
        try:
            recovery[mode] = RecoveryProfile(**values)
        except SpecError as exc:
            raise SpecError(f"{where}: {exc}") from None
    kwargs: dict[str, Any] = {
        "name": doc.get("name", "job"),
        "instances": cluster.get("instances"),
        "gpus_per_instance": cluster.get("gpus_per_instance", 8),
        "gpu": work.get("gpu", "H100"),
        "gpu_hours": work.get("gpu_hours"),
        "params": work.get("params"),
        "tokens": work.get("tokens"),
        "mfu": work.get("mfu"),
        "price_per_gpu_hour_usd": cluster.get("price_per_gpu_hour_usd"),
        "node_ages": cluster.get("node_ages", "stationary"),
        "recovery": recovery,
        "failure": failure_model_from_mapping(tables["failures"]) if tables["failures"] else None,
    }
    per_instance = cluster.get("price_per_instance_hour_usd")
    if per_instance is not None:
        _require(
            kwargs["price_per_gpu_hour_usd"] is None,
            "[cluster]: give price_per_gpu_hour_usd or price_per_instance_hour_usd, not both",
        )
        kwargs["price_per_gpu_hour_usd"] = per_instance / kwargs["gpus_per_instance"]
    kwargs.update({k: v for k, v in overrides.items() if v is not None})
    _require(
        kwargs["instances"] is not None,
        "instances is required ([cluster] instances in the job spec; failcast project --instances N)",
    )
    _require(kwargs["failure"] is not None, "a failure model is required ([failures] preset=...)")
    return JobSpec(**kwargs)
