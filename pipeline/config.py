"""Run configuration: a ``failcast.toml`` file, defaults for the bundled sample, CLI overrides.

Unknown keys and wrong types are errors that name the key and the file: a scheduled job must not
silently ignore a typo.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

SAMPLE_DIR = Path("data/sample")


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class RunConfig:
    inputs: tuple[str, ...] = (str(SAMPLE_DIR / "inventory.csv"), str(SAMPLE_DIR / "incidents.csv"))
    db: str = "data/failcast.duckdb"
    report_dir: str = "reports"
    timezone: str = "UTC"
    dedup_window_minutes: float = 10.0
    observed_until: str | None = None
    column_map: dict[str, str] = field(default_factory=dict)

    def with_overrides(self, **overrides) -> RunConfig:
        """CLI flags win over the file; ``None`` means "not given"."""
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


_TYPES = {
    "inputs": list,
    "db": str,
    "report_dir": str,
    "timezone": str,
    "dedup_window_minutes": (int, float),
    "observed_until": str,
    "column_map": dict,
}


def load_config(path: Path | str | None) -> RunConfig:
    """Read a TOML config; paths in it are relative to the file's folder."""
    if path is None:
        return RunConfig()
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    known = {f.name for f in fields(RunConfig)}
    for key, value in raw.items():
        if key not in known:
            raise ConfigError(f"{path}: unknown key {key!r}; known keys: {', '.join(sorted(known))}")
        if not isinstance(value, _TYPES[key]) or isinstance(value, bool):
            raise ConfigError(
                f"{path}: key {key!r} has the wrong type ({type(value).__name__}); see failcast.example.toml"
            )
    base = path.parent
    if "inputs" in raw:
        raw["inputs"] = tuple(str(base / p) for p in raw["inputs"])
    for key in ("db", "report_dir"):
        if key in raw:
            raw[key] = str(base / raw[key])
    return RunConfig(**raw)
