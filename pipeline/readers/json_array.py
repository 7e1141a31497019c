"""Canonical incidents or inventory as one JSON document: an array of records, as REST APIs and
``jq -s`` write them, or an object holding one such array (ServiceNow's Table API answers
``{"result": [...]}``; a search API ``{"total": 2, "issues": [...]}``).

The document is read whole (:data:`MAX_JSON_BYTES`; JSON Lines stream instead), walked at the
top level only so each record keeps the physical line where it starts (rejects name it; when
records share lines, as in a document on one line, their number in the array instead), and
turned into a frame of strings: scalars as their text (``3``, ``true``), nested values as JSON
text (kept in ``attributes`` when not a canonical column). An element that is not an object is
one error naming its line: the file is not a table.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl

from pipeline.readers.lines import BOM, is_gzip, not_utf8
from pipeline.store.files import InputError

MAX_JSON_BYTES = 256 << 20
"""A larger JSON document is refused with how to convert it to JSON Lines (read whole, its
records as Python objects take several times its size)."""

_WHITESPACE = " \t\n\r"
_DECODER = json.JSONDecoder()


def is_json_document(head: str) -> bool:
    """Whether a file starting with ``head`` (BOM removed) is one JSON document of records rather
    than JSON Lines: it starts with ``[`` and a record (``[{``, not a log line's ``[2024-05-01``),
    or its first line is not a whole JSON value (a pretty-printed object), or that line is an
    object holding an array of objects."""
    text = head.lstrip(_WHITESPACE)
    if text.startswith("["):
        return text[1:].lstrip(_WHITESPACE)[:1] in ("{", "]")
    if not text.startswith("{"):
        return False
    first_line = text.split("\n", 1)[0]
    try:
        value = json.loads(first_line)
    except ValueError:
        return True
    return isinstance(value, dict) and _records_key(value) is not None


def read_json_records(path: Path, row_name: str) -> pl.DataFrame:
    """The document's records as string columns, with each record's line in ``row_name``: the
    line where it starts, or, when records share lines (a document on one line), its number in
    the array: a row's line must tell it apart (rejects, the first of duplicate records)."""
    text = _text(path)
    starts, records = _walk(text, path)
    lines, line, done = [], 1, 0
    for start in starts:  # increasing: count each stretch of the text once
        line += text.count("\n", done, start)
        lines.append(line)
        done = start
    if len(set(lines)) < len(lines):
        lines = list(range(1, len(lines) + 1))
    columns: dict[str, None] = {}
    for record in records:
        columns.update(dict.fromkeys(record))
    data = {name: [_as_text(r.get(name)) for r in records] for name in columns}
    return pl.DataFrame(
        {row_name: lines, **data},
        schema={row_name: pl.Int64, **dict.fromkeys(columns, pl.String)},
    )


def _text(path: Path) -> str:
    size_note = f"a JSON document over {MAX_JSON_BYTES >> 20} MB"
    with gzip.open(path, "rb") if is_gzip(path) else path.open("rb") as f:
        data = f.read(MAX_JSON_BYTES + 1)
    if len(data) > MAX_JSON_BYTES:
        raise InputError(
            f"{path}: {size_note} is read whole into memory; write it as JSON Lines, one record per "
            f"line, e.g. jq -c '.[]' {path.name} > records.jsonl (or '.result[]' for a wrapped array)"
        )
    try:
        return data.decode("utf-8").removeprefix(BOM)
    except UnicodeDecodeError as exc:
        raise not_utf8(path, "json", data.count(b"\n", 0, exc.start) + 1, data[exc.start]) from None


def _walk(text: str, path: Path) -> tuple[list[int], list[dict]]:
    """Start offsets and values of the records: the top-level array's elements, or those of the
    one array of objects a top-level object holds."""
    at = _skip(text, 0)
    try:
        if text.startswith("[", at):
            starts, records, end = _elements(text, at, path)
        else:
            document, end = _DECODER.raw_decode(text, at)
            key = _records_key(document) if isinstance(document, dict) else None
            if key is None:
                raise InputError(
                    f"{path}: cannot read as json: expected an array of records, or an object holding "
                    f'one (like {{"result": [...]}}); found {type(document).__name__}'
                )
            starts, records, _ = _elements(text, _array_start(text, at, key), path)
        if _skip(text, end) < len(text):
            raise json.JSONDecodeError("extra data after the document", text, _skip(text, end))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: cannot read as json: {exc.msg}") from None
    return starts, records


def _records_key(document: dict) -> str | None:
    """The one key whose value is a non-empty array of objects, or None if none or several."""
    keys = [
        k for k, v in document.items() if isinstance(v, list) and v and all(isinstance(x, dict) for x in v)
    ]
    return keys[0] if len(keys) == 1 else None


def _array_start(text: str, at: int, key: str) -> int:
    """Offset of the ``[`` of ``key``'s value in the object starting at ``at``."""
    at = _skip(text, at + 1)
    while True:
        name, at = _DECODER.raw_decode(text, at)
        at = _skip(text, _skip(text, at) + 1)  # past ':'
        if name == key:
            return at
        _, at = _DECODER.raw_decode(text, at)
        at = _skip(text, _skip(text, at) + 1)  # past ','


def _elements(text: str, at: int, path: Path) -> tuple[list[int], list[dict], int]:
    """Start offsets and values of the array's elements at ``at``, and the offset past its ``]``."""
    starts, records = [], []
    at = _skip(text, at + 1)
    while not text.startswith("]", at):
        value, end = _DECODER.raw_decode(text, at)
        if not isinstance(value, dict):
            line = text.count("\n", 0, at) + 1
            raise InputError(
                f"{path}:{line}: cannot read as json: element {len(records) + 1} is not an object"
            )
        starts.append(at)
        records.append(value)
        at = _skip(text, end)
        if text.startswith(",", at):
            at = _skip(text, at + 1)
        elif not text.startswith("]", at):
            raise json.JSONDecodeError("expected ',' or ']' after a record", text, at)
    return starts, records, at + 1


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _WHITESPACE:
        at += 1
    return at


def _as_text(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)
