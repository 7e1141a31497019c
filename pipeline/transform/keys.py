"""Integer codes of the rows' names (a node's ``cluster_id`` and ``node_id``, or a cluster's):
what the transforms sort, compare and gather by instead of joining frames on strings (issue 27:
at 5 M service intervals a join of each interval to its node's number on the names held 0.34 GB;
the codes take one Enum cast per column, a few tens of MB)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import polars as pl


class KeyCodes(NamedTuple):
    """``codes``: each reference row's key, numbered 0 .. ``count`` - 1 in the order keys first
    appear (what ``group_by(keys, maintain_order=True).with_row_index()`` numbers); ``others``:
    the codes of the other frames' rows, -1 where their key is not in the reference."""

    codes: np.ndarray
    count: int
    others: tuple[np.ndarray, ...]


def key_codes(reference: pl.DataFrame, keys: Sequence[str], *others: pl.DataFrame) -> KeyCodes:
    """Number the key tuples (``keys``, string columns) of ``reference``'s rows, and find the rows
    of ``others`` by the same numbers (:class:`KeyCodes`). Each column is cast to an Enum of the
    reference's values (its physical codes: no join, no copy of the strings), the columns' codes
    are combined into one integer per row, and those are ranked by first appearance."""
    combined = np.zeros(reference.height, np.int64)
    found = [np.zeros(frame.height, np.int64) for frame in others]
    known = [np.ones(frame.height, bool) for frame in others]
    for key in keys:
        values = reference[key].drop_nulls().unique(maintain_order=True)
        enum, base = pl.Enum(values), values.len() + 1  # code values.len(): a null key
        combined = combined * base + _physical(reference[key], enum, values.len())
        for i, frame in enumerate(others):
            code = frame[key].cast(enum, strict=False)
            known[i] &= code.is_not_null().to_numpy()
            found[i] = found[i] * base + _physical(code, enum, values.len())
    if len(keys) == 1 and not reference[keys[0]].null_count():  # the Enum's codes are the ranks
        count, codes = base - 1, combined
    else:
        unique, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
        count, rank = unique.size, np.empty(unique.size, np.int64)
        rank[np.argsort(first)] = np.arange(count)
        codes = rank[inverse.reshape(-1)]
        for i, value in enumerate(found):
            at = np.minimum(np.searchsorted(unique, value), max(count - 1, 0))
            known[i] &= unique[at] == value if count else False
            found[i] = rank[at] if count else value
    return KeyCodes(codes, int(count), tuple(np.where(k, v, -1) for v, k in zip(found, known, strict=True)))


def _physical(column: pl.Series, enum: pl.Enum, null_code: int) -> np.ndarray:
    return column.cast(enum, strict=False).to_physical().fill_null(null_code).to_numpy().astype(np.int64)
