"""Run configuration: a ``failcast.toml`` file, defaults for the bundled sample, CLI overrides.

A scheduled job must not silently ignore a typo, so unknown keys and wrong types are errors that
name the key, the file and the line (``tomllib`` reports no positions for keys, so the line is
found by scanning the text for the key under its ``[table]`` header). Paths in the file are
relative to the file's folder. See ``failcast.example.toml`` at the repository root for every key.

Input roots: input globs and job files must lie under ``[inputs] roots`` (folders; default: the
config file's folder), after ``..`` and symlinks in the path are resolved, so a shared or copied
config cannot quietly read ``../../etc/*``; ``[inputs] allow_outside_roots = true`` lifts this.
The check is on the configured path; what a ``**`` finds through a symlinked folder *inside* a
root is followed (the filesystem under a root is the operator's).

``jobs`` (job specs to project: paths to job TOML files, or inline tables) and ``recovery``
(named recovery profiles) are kept as plain validated data; ``pipeline.projection`` turns them
into its own classes, so this module does not depend on it.
"""

from __future__ import annotations

import os
import tomllib
import zoneinfo
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeline.categories import CategoryMap, FailureCategory, class_named, normal_form
from pipeline.config_text import line_of, render_json, render_toml
from pipeline.ingest import (
    FORMATS,
    MAX_DECOMPRESSED_BYTES,
    MAX_REJECTED_PERCENT,
    ReaderOptions,
    check_time_format,
    parse_bus_order,
)

SAMPLE_DIR = Path("data/sample")
SAMPLE_JOB = Path("data/jobs/fleet-llama3-70b.toml")
INPUT_KINDS = ("inventory", "auto", *FORMATS)
"""``[inputs]`` keys: ``inventory`` and ``auto`` globs are read with the format detected from the
file name; the others force that format."""
LOG_FORMATS = ("text", "json")
RECOVERY_SOURCES = ("assumed", "measured")
"""``recovery_source``: the projected job's recovery times as the profiles assume them, or with
what the warehouse measured in their place (``failcast project --recovery measured``)."""


__all__ = ["ConfigError", "RunConfig", "load_config", "render_json", "render_toml"]


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the file, line and key."""


@dataclass(frozen=True)
class RunConfig:
    inputs: dict[str, tuple[str, ...]] = field(
        default_factory=lambda: {
            "inventory": (str(SAMPLE_DIR / "inventory.csv"),),
            "csv": (str(SAMPLE_DIR / "incidents.csv"),),
        }
    )
    column_map: dict[str, str | tuple[str, ...]] = field(default_factory=dict)
    warehouse: str = "data/failcast.duckdb"
    report_dir: str = "reports"
    snapshot_dir: str | None = None  # None: snapshots/ beside the warehouse (pipeline.runs.snapshots)
    metrics_file: str | None = None  # None: no OpenMetrics file (failcast metrics)
    timezone: str = "UTC"
    dedup_window_minutes: float = 10.0
    observed_until: datetime | None = None
    observed_since: datetime | None = None
    lock_timeout_seconds: float = 60.0
    log_format: str = "text"
    keep_reports: int = 30
    keep_days: float | None = None
    keep_snapshots: int = 3
    jobs: tuple[str | dict[str, Any], ...] = ()
    recovery: dict[str, dict[str, float]] = field(default_factory=dict)
    recovery_source: str = "assumed"
    # [ingest]: reader options (pipeline.ingest.ReaderOptions) for kernel logs, and missing inventories
    year: int | None = None
    cluster: str | None = None
    node: str | None = None
    gpu_bus_order: tuple[str, ...] = ()
    estimate_exposure: int | None = None
    max_decompressed_mb: int = MAX_DECOMPRESSED_BYTES >> 20
    max_rejected_percent: float = MAX_REJECTED_PERCENT
    time_format: str | None = None
    input_roots: tuple[str, ...] = ()  # resolved [inputs] roots; empty: no config file, no check
    allow_outside_roots: bool = False
    category_map: CategoryMap = field(default_factory=CategoryMap)  # [categories]

    def with_overrides(self, **overrides: Any) -> RunConfig:
        """CLI flags win over the file; ``None`` means "not given". A ``category_map`` given is
        merged over the file's, entry by entry."""
        given = {k: v for k, v in overrides.items() if v is not None}
        if "category_map" in given:
            given["category_map"] = self.category_map.merged(given["category_map"])
        return replace(self, **given)

    def analysis_options(self):
        """How the run analyses the warehouse (:class:`pipeline.analysis.AnalysisOptions`: the
        window; the rest at its defaults, as ``failcast report``'s). Imported here: reading a
        config must not load the statistics."""
        from pipeline.analysis.options import AnalysisOptions

        return AnalysisOptions(since=self.observed_since, until=self.observed_until)

    def reader_options(self, fmt: str | None = None) -> ReaderOptions:
        """How the run reads its inputs of format ``fmt`` (None: detected per file)."""
        return ReaderOptions(
            fmt=fmt,
            column_map=self.column_map,
            timezone=self.timezone,
            year=self.year,
            cluster=self.cluster,
            node=self.node,
            bus_order=self.gpu_bus_order,
            max_decompressed_bytes=self.max_decompressed_mb << 20,
            max_rejected_percent=self.max_rejected_percent,
            time_format=self.time_format,
        )

    def to_document(self) -> dict[str, Any]:
        """The config as a TOML/JSON-shaped document (the inverse of :func:`load_config`)."""
        return {
            "warehouse": self.warehouse,
            "report_dir": self.report_dir,
            "snapshot_dir": self.snapshot_dir,
            "metrics_file": self.metrics_file,
            "timezone": self.timezone,
            "dedup_window_minutes": self.dedup_window_minutes,
            "observed_until": self.observed_until,
            "observed_since": self.observed_since,
            "lock_timeout_seconds": self.lock_timeout_seconds,
            "log_format": self.log_format,
            "inputs": {
                **{k: list(v) for k, v in self.inputs.items()},
                "column_map": {k: v if isinstance(v, str) else list(v) for k, v in self.column_map.items()},
                **({"roots": list(self.input_roots)} if self.input_roots else {}),
                **({"allow_outside_roots": True} if self.allow_outside_roots else {}),
            },
            "retention": {
                "keep_reports": self.keep_reports,
                "keep_days": self.keep_days,
                "keep_snapshots": self.keep_snapshots,
            },
            "jobs": list(self.jobs),
            "recovery": self.recovery,
            "recovery_source": self.recovery_source,
            "categories": self.category_map.to_document(),
            "ingest": {
                "year": self.year,
                "cluster": self.cluster,
                "node": self.node,
                "gpu_bus_order": ",".join(self.gpu_bus_order) or None,
                "estimate_exposure": self.estimate_exposure,
                "max_decompressed_mb": self.max_decompressed_mb,
                "max_rejected_percent": self.max_rejected_percent,
                "time_format": self.time_format,
            },
        }


_NUMBER = (int, float)
_STRINGS = "list of strings"
# Expected type per key; a nested dict is a [table] with its own keys.
_SPEC: dict[str, Any] = {
    "warehouse": str,
    "report_dir": str,
    "snapshot_dir": str,
    "metrics_file": str,
    "timezone": str,
    "dedup_window_minutes": _NUMBER,
    "observed_until": (str, datetime),
    "observed_since": (str, datetime),
    "lock_timeout_seconds": _NUMBER,
    "log_format": str,
    "inputs": {
        **dict.fromkeys(INPUT_KINDS, _STRINGS),
        "column_map": dict,
        "roots": _STRINGS,
        "allow_outside_roots": bool,
    },
    "retention": {"keep_reports": int, "keep_days": _NUMBER, "keep_snapshots": int},
    "jobs": list,
    "recovery": dict,
    "recovery_source": str,
    "categories": dict,
    "ingest": {
        "year": int,
        "cluster": str,
        "node": str,
        "gpu_bus_order": str,
        "estimate_exposure": int,
        "max_decompressed_mb": int,
        "max_rejected_percent": _NUMBER,
        "time_format": str,
    },
}
_TYPE_NAMES = {str: "a string", int: "an integer", _NUMBER: "a number", dict: "a table", list: "an array"}


class _Where:
    """Names a key as ``file:line: key 'table.key'`` for error messages."""

    def __init__(self, path: Path, text: str) -> None:
        self.path, self.text = path, text

    def error(self, table: tuple[str, ...], key: str, reason: str) -> ConfigError:
        line = line_of(self.text, table, key)
        place = f"{self.path}:{line}" if line else str(self.path)
        return ConfigError(f"{place}: key {'.'.join((*table, key))!r} {reason}")


def _check_type(value: Any, expected: Any) -> str | None:
    """None if ``value`` fits, else what was expected."""
    if expected == _STRINGS:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return None if ok else "must be a list of strings (globs)"
    if expected is bool:
        return None if isinstance(value, bool) else f"must be true or false, got {value!r}"
    if isinstance(value, bool) or not isinstance(value, expected):
        wanted = _TYPE_NAMES.get(expected, "a string or a TOML datetime")
        return f"must be {wanted}, got {type(value).__name__} {value!r}"
    return None


def _check_table(raw: dict[str, Any], spec: dict[str, Any], table: tuple[str, ...], where: _Where) -> None:
    for key, value in raw.items():
        if key not in spec:
            known = ", ".join(spec)
            raise where.error(table, key, f"is unknown; known keys here: {known} (see failcast.example.toml)")
        expected = spec[key]
        if isinstance(expected, dict):
            if not isinstance(value, dict):
                raise where.error(table, key, f"must be a table, got {type(value).__name__}")
            _check_table(value, expected, (*table, key), where)
        elif reason := _check_type(value, expected):
            raise where.error(table, key, reason)


def _check_values(raw: dict[str, Any], where: _Where) -> None:
    """Ranges and the free-form tables (column_map, jobs, recovery)."""
    for key in ("dedup_window_minutes", "lock_timeout_seconds"):
        if raw.get(key, 0) < 0:
            raise where.error((), key, "must not be negative")
    if raw.get("log_format", "text") not in LOG_FORMATS:
        raise where.error((), "log_format", f"must be one of {', '.join(LOG_FORMATS)}")
    if raw.get("recovery_source", "assumed") not in RECOVERY_SOURCES:
        raise where.error((), "recovery_source", f"must be one of {', '.join(RECOVERY_SOURCES)}")
    if "timezone" in raw:
        try:
            zoneinfo.ZoneInfo(raw["timezone"])
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise where.error(
                (), "timezone", "is not an IANA time zone name such as UTC or Europe/Paris"
            ) from None
    retention = raw.get("retention", {})
    if retention.get("keep_reports", 1) < 1:
        raise where.error(("retention",), "keep_reports", "must be at least 1 (the latest report)")
    if retention.get("keep_snapshots", 2) < 2:
        raise where.error(
            ("retention",), "keep_snapshots", "must be at least 2 (the latest and the one before it)"
        )
    if retention.get("keep_days", 1) <= 0:
        raise where.error(("retention",), "keep_days", "must be positive")
    options = raw.get("ingest", {})
    if not 1970 <= options.get("year", 1970) <= 2999:
        raise where.error(("ingest",), "year", "must be a year between 1970 and 2999")
    if options.get("max_decompressed_mb", 1) < 1:
        raise where.error(("ingest",), "max_decompressed_mb", "must be at least 1")
    if not 0 <= options.get("max_rejected_percent", 0) <= 100:
        raise where.error(("ingest",), "max_rejected_percent", "must be a percentage from 0 to 100")
    if options.get("estimate_exposure", 1) < 1:
        raise where.error(("ingest",), "estimate_exposure", "must be the GPUs per node, at least 1")
    if "gpu_bus_order" in options:
        try:
            parse_bus_order(options["gpu_bus_order"])
        except ValueError as exc:
            raise where.error(("ingest",), "gpu_bus_order", str(exc).partition(": ")[2]) from None
    if "time_format" in options:
        try:
            check_time_format(options["time_format"])
        except ValueError as exc:
            raise where.error(("ingest",), "time_format", str(exc)) from None
    for canonical, source in raw.get("inputs", {}).get("column_map", {}).items():
        names = [source] if isinstance(source, str) else source
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise where.error(
                ("inputs", "column_map"),
                canonical,
                "must be a source column name or a list of them (strings)",
            )
    for index, job in enumerate(raw.get("jobs", [])):
        if not isinstance(job, str | dict):
            raise where.error((), "jobs", f"item {index} must be a path to a job TOML file or a table")
    for name, profile in raw.get("recovery", {}).items():
        if not isinstance(profile, dict):
            raise where.error(("recovery",), name, "must be a table of durations in hours")
        for key, value in profile.items():
            if isinstance(value, bool) or not isinstance(value, _NUMBER) or value < 0:
                raise where.error(("recovery", name), key, f"must be a non-negative number, got {value!r}")


def _category_map(raw: dict[str, Any], where: _Where) -> CategoryMap:
    """``[categories]``: ``"Burn-in" = "hardware"`` or ``Maintenance = { class =
    "other", interrupting = false }`` (``class`` optional: a class name as the key sets only that
    class's flag). Keys are compared case- and punctuation-insensitively, so two keys that differ
    only so are an error."""
    classes: dict[str, FailureCategory] = {}
    flags: dict[str, bool] = {}
    seen: dict[str, str] = {}
    table = ("categories",)
    for key, value in raw.items():
        norm = normal_form(key)
        if not norm:
            raise where.error(table, key, "names no category (letters or digits needed)")
        if norm in seen:
            raise where.error(table, key, f"names the same category as {seen[norm]!r} (case and punctuation)")
        seen[norm] = key
        entry = value if isinstance(value, dict) else {"class": value}
        unknown = set(entry) - {"class", "interrupting"}
        if unknown or not entry:
            shape = 'must be a class name or { class = "...", interrupting = true|false }'
            raise where.error(table, key, shape)
        if "class" in entry:
            if not isinstance(entry["class"], str):
                raise where.error(table, key, f"class must be a string, got {entry['class']!r}")
            try:
                classes[norm] = class_named(entry["class"])
            except ValueError as exc:
                raise where.error(table, key, str(exc)) from None
        if "interrupting" in entry:
            flag = entry["interrupting"]
            if not isinstance(flag, bool):
                raise where.error(table, key, f"interrupting must be true or false, got {flag!r}")
            flags[norm] = flag
    return CategoryMap(classes, flags)


def _utc_naive(value: str | datetime, where: _Where, key: str) -> datetime:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise where.error((), key, f"{value!r} is not ISO 8601") from None
    return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value


def load_config(path: Path | str | None) -> RunConfig:
    """Read and check a TOML config; without a path, the defaults (the bundled sample)."""
    if path is None:
        return RunConfig(jobs=(str(SAMPLE_JOB),))
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    where = _Where(path, text)
    _check_table(raw, _SPEC, (), where)
    _check_values(raw, where)

    base = path.parent
    values: dict[str, Any] = {
        k: raw[k] for k in ("timezone", "lock_timeout_seconds", "log_format", "recovery_source") if k in raw
    }
    inputs = dict(raw.get("inputs", {}))
    roots = _Roots(base, inputs.pop("roots", None), inputs.pop("allow_outside_roots", False), where)
    values.update(input_roots=tuple(roots.roots), allow_outside_roots=roots.allow_outside)
    for key in ("warehouse", "report_dir", "snapshot_dir", "metrics_file"):
        if key in raw:
            values[key] = str(base / raw[key])
    if "dedup_window_minutes" in raw:
        values["dedup_window_minutes"] = float(raw["dedup_window_minutes"])
    for key in ("observed_until", "observed_since"):
        if key in raw:
            values[key] = _utc_naive(raw[key], where, key)
    since, until = values.get("observed_since"), values.get("observed_until")
    if since and until and since >= until:
        raise where.error((), "observed_since", "must be before observed_until (the window is empty)")
    if "inputs" in raw:
        values["column_map"] = {
            canon: source if isinstance(source, str) else tuple(source)
            for canon, source in inputs.pop("column_map", {}).items()
        }
        values["inputs"] = {
            kind: tuple(roots.check(("inputs",), kind, g) for g in globs) for kind, globs in inputs.items()
        }
    retention = raw.get("retention", {})
    if "keep_reports" in retention:
        values["keep_reports"] = retention["keep_reports"]
    if "keep_days" in retention:
        values["keep_days"] = float(retention["keep_days"])
    if "keep_snapshots" in retention:
        values["keep_snapshots"] = retention["keep_snapshots"]
    if "jobs" in raw:
        values["jobs"] = tuple(_job(job, roots, where) for job in raw["jobs"])
    if "recovery" in raw:
        values["recovery"] = {n: {k: float(v) for k, v in p.items()} for n, p in raw["recovery"].items()}
    if "categories" in raw:
        values["category_map"] = _category_map(raw["categories"], where)
    options = dict(raw.get("ingest", {}))
    if "gpu_bus_order" in options:
        options["gpu_bus_order"] = parse_bus_order(options["gpu_bus_order"])
    return RunConfig(**values, **options)


class _Roots:
    """The folders config paths must stay under (see the module docstring)."""

    def __init__(self, base: Path, roots: list[str] | None, allow_outside: bool, where: _Where) -> None:
        self.base, self.where, self.allow_outside = base, where, allow_outside
        self.roots = [os.path.realpath(base / r) for r in (roots if roots is not None else ["."])]

    def check(self, table: tuple[str, ...], key: str, path: str) -> str:
        """``path`` relative to the config's folder, refused if it resolves outside every root."""
        joined = str(self.base / path)
        # realpath resolves '..' and symlinks in the literal part; a wildcard component is kept as is
        resolved = os.path.realpath(joined)
        inside = any(os.path.commonpath([resolved, root]) == root for root in self.roots)
        if not inside and not self.allow_outside:
            raise self.where.error(
                table,
                key,
                f"names {path!r}, which resolves to {resolved}, outside the input roots "
                f"({', '.join(self.roots)}); move the files under a root, list their folder in "
                "[inputs] roots, or set [inputs] allow_outside_roots = true",
            )
        return joined


def _job(job: str | dict[str, Any], roots: _Roots, where: _Where) -> str | dict[str, Any]:
    if isinstance(job, dict):
        return job
    resolved = Path(roots.check((), "jobs", job))
    if not resolved.is_file():
        raise where.error((), "jobs", f"names {job!r}, but {resolved} is not a file")
    return str(resolved)
