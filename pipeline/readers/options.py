"""How input files are read: the options every reader may need beyond the file itself, and the
parsers of the two that come as text (``--gpu-bus-order``, ``--map``).

One frozen value passed from the CLI (``failcast ingest``), the scheduled run and ``failcast extract``
down to the readers, instead of ten keyword arguments repeated through every layer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pipeline.readers.canonical_source import (
    INCIDENT_COLUMNS,
    INCIDENT_OPTIONAL,
    INVENTORY_COLUMNS,
    INVENTORY_OPTIONAL,
)
from pipeline.readers.lines import MAX_DECOMPRESSED_BYTES
from pipeline.store.files import InputError, check_time_format

MAX_REJECTED_PERCENT = 50.0
"""Default limit: a file that loses most of its records is being read wrong (a date format, a
column map, a time zone, the wrong format), and its few accepted rows would bias every rate."""
MIN_REFUSED = 10
"""Fewer rejected records never refuse a file: a short file's odd line is shown, not fatal."""


@dataclass(frozen=True)
class ReaderOptions:
    """``fmt``: the input format (None: detected per file). ``column_map``: canonical column ->
    the file's column, or a tuple of them, each file using the one it has (``--map``).
    ``timezone``: the zone of naive times (an IANA name). ``year``: year of the first line of
    year-less syslog files (default: from the file's mtime). ``cluster`` / ``node``: for logs that
    do not name them; ``job``: the job of a training log (default: its file name). ``bus_order``:
    PCI bus number (hex) of each gpu_index, e.g. ``("18", "2a", ...)``, so XID lines get a
    gpu_index. A ``.gz`` that expands past ``max_decompressed_bytes`` is refused (a gzip bomb).
    ``block_bytes``: size of the blocks text logs are read in (default ``lines.BLOCK_BYTES``,
    8 MiB); memory per block scales with it. ``max_rejected_percent``: a file with more of its
    records rejected than this is refused whole (:func:`pipeline.ingest.refuse_mostly_rejected`).
    ``time_format``: strptime format of the times of canonical files that are not ISO 8601 or
    epoch numbers (``%d.%m.%Y %H:%M``), tried first; naive ones are read in ``timezone``."""

    fmt: str | None = None
    column_map: Mapping[str, str | tuple[str, ...]] = field(default_factory=dict)
    timezone: str = "UTC"
    year: int | None = None
    cluster: str | None = None
    node: str | None = None
    job: str | None = None
    bus_order: tuple[str, ...] = ()
    max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES
    block_bytes: int | None = None
    max_rejected_percent: float = MAX_REJECTED_PERCENT
    time_format: str | None = None

    def __post_init__(self) -> None:  # a list from a caller or a config file: hashable, as a tuple
        object.__setattr__(self, "bus_order", tuple(self.bus_order))
        if self.time_format is not None:
            check_time_format(self.time_format)

    @property
    def bus_index(self) -> dict[str, int]:
        """PCI bus number (two hex digits, lower case) -> gpu_index."""
        return {bus.lower().zfill(2): i for i, bus in enumerate(self.bus_order)}


def parse_bus_order(text: str) -> tuple[str, ...]:
    """``"18,2a,3a"`` -> ``("18", "2a", "3a")`` (PCI bus numbers of gpu_index 0, 1, 2 ...)."""
    buses = tuple(b.strip().lower().removeprefix("0x") for b in text.split(",") if b.strip())
    bad = [b for b in buses if not re.fullmatch(r"[0-9a-f]{1,2}", b)]
    if bad or len(set(buses)) != len(buses):
        raise InputError(
            f"--gpu-bus-order {text!r}: expected distinct hex PCI bus numbers in gpu_index order, "
            "e.g. 18,2a,3a,5d,9a,ab,ba,db"
        )
    return buses


def parse_column_map(pairs: Iterable[str]) -> dict[str, str | tuple[str, ...]]:
    """``["node_id=hostname", ...]`` -> ``{"node_id": "hostname"}`` with a clear error. A canonical
    column given twice has several sources (``node_id=host`` for the tickets, ``node_id=hostname``
    for the inventory): ``{"node_id": ("host", "hostname")}``, each file using the one it has."""
    known = {*INCIDENT_COLUMNS, *INCIDENT_OPTIONAL, *INVENTORY_COLUMNS, *INVENTORY_OPTIONAL}
    sources: dict[str, list[str]] = {}
    target: dict[str, str] = {}
    for pair in pairs:
        canon, sep, source = pair.partition("=")
        if not sep or not canon or not source:
            raise InputError(f"--map {pair!r}: expected CANONICAL=SOURCE, e.g. node_id=hostname")
        if canon not in known:
            raise InputError(
                f"--map {pair!r}: {canon!r} is not a canonical column ({', '.join(sorted(known))})"
            )
        if target.setdefault(source, canon) != canon:
            raise InputError(f"--map {pair!r}: column {source!r} is already read as {target[source]}")
        if source not in sources.setdefault(canon, []):
            sources[canon].append(source)
    return {canon: names[0] if len(names) == 1 else tuple(names) for canon, names in sources.items()}
