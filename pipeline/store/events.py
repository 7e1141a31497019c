"""Events: the one place where a later record closes a stored open event.

A source may export an event while it is open and again once it has ended: a ticket exported open,
then resolved (canonical files' ``resolved_at``); a Slurm node event with TimeEnd ``Unknown``, then
with its TimeEnd; a Kubernetes node condition in trouble, then a later snapshot showing it healthy;
a lake part holding any of those. The later record does not add an event: it gives the stored one
its end (``resolved_at_utc``) and marks it changed by this file (``changed_file_id``), so the
incremental rebuild revisits its node. The rules, the same for every reader:

* only an open event is closed: a stored end is never changed (re-ingesting an older export, or a
  later one that gives another end, changes nothing; a reader may count those in a note);
* of several closing records of one event in a file, the first line's end closes it;
* the reader says which records close which event (same content key, or a later healthy
  snapshot of the node's condition) by the rows it hands over: ``(event_key, resolved_utc, line)``.
"""

from __future__ import annotations

from typing import Any

_WINDOW = " AND events.timestamp_utc BETWEEN CAST($lo AS TIMESTAMP) AND CAST($hi AS TIMESTAMP)"


def close_open_events(
    con,
    closings: str,
    file_id: int,
    *,
    window: tuple[str, str] | None = None,
    staged: Any = None,
    params: dict | None = None,
) -> int:
    """Close the stored open events that the rows of ``closings`` end; returns how many it closed.

    ``closings``: the reader's SQL (a literal; its values bound as ``params``) of rows
    ``event_key``, ``resolved_utc`` (naive UTC), ``line``, one or more per event. ``window``: the
    (low, high) UTC times, as text, between which the closed events start: read by that range,
    DuckDB skips the row groups of events outside it (the canonical reader's batches). ``staged``:
    a batch (Arrow or Polars) that ``closings`` reads by the name ``staged`` (a DuckDB replacement
    scan, which sees this function's variables)."""
    bounds = {"lo": window[0], "hi": window[1]} if window else {}
    window_sql = _WINDOW if window else ""
    sql = f"""
UPDATE events SET resolved_at_utc = c.resolved_utc, changed_file_id = $file_id
FROM (SELECT event_key, arg_min(resolved_utc, line) AS resolved_utc FROM ({closings}) GROUP BY event_key) c
WHERE events.event_key = c.event_key AND events.resolved_at_utc IS NULL{window_sql}
"""  # noqa: S608 - a reader's literal SQL and a literal condition
    return con.execute(sql, {**(params or {}), **bounds, "file_id": file_id}).fetchone()[0]
