"""The text side of ``failcast.toml``: the line a key is set on (for errors that name file, line
and key; ``tomllib`` reports no positions) and the merged config printed back as TOML or JSON
(``failcast run --print-config``). Pure text, no checks: :mod:`pipeline.config` checks."""

from __future__ import annotations

import json
import re
from datetime import date, datetime
from typing import Any

_HEADER = re.compile(r"^\s*\[\[?([^\[\]]+)\]\]?\s*(#.*)?$")
_KEY_LINE = re.compile(r"""^\s*((?:[\w"'-]+\s*\.\s*)*)([\w"'-]+)\s*=""")


def _parts(dotted: str) -> tuple[str, ...]:
    return tuple(p.strip().strip("\"'") for p in dotted.split(".") if p.strip())


def line_of(text: str, table: tuple[str, ...], key: str) -> int | None:
    """1-based line where ``key`` is set under ``[table]`` (or a header names it); first match wins."""
    current: tuple[str, ...] = ()
    for number, line in enumerate(text.splitlines(), start=1):
        if header := _HEADER.match(line):
            current = _parts(header.group(1))
            if current[: len(table) + 1] == (*table, key):
                return number
            continue
        match = _KEY_LINE.match(line)
        if match and _parts(match.group(2)) == (key,) and (*current, *_parts(match.group(1))) == table:
            return number
    # Inside an inline table (``inputs = { csv = ... }``): point at the line of the enclosing key.
    return line_of(text, table[:-1], table[-1]) if table else None


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, int | float | datetime | date):
        return value.isoformat() if isinstance(value, date) else repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        pairs = (f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items() if v is not None)
        return "{ " + ", ".join(pairs) + " }"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def render_toml(document: dict[str, Any], prefix: tuple[str, ...] = ()) -> str:
    """A document of scalars, arrays and tables as TOML; ``None`` values are left out."""
    lines = [
        f"{_toml_key(k)} = {_toml_value(v)}" for k, v in document.items() if not isinstance(v, dict | None)
    ]
    for key, value in document.items():
        if isinstance(value, dict):
            name = ".".join(_toml_key(p) for p in (*prefix, key))
            lines += ["", f"[{name}]", render_toml(value, (*prefix, key)).strip("\n")]
    return "\n".join(lines).strip("\n") + "\n"


def render_json(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, default=lambda v: v.isoformat())
