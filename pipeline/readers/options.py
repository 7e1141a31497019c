"""How input files are read: the options every reader may need beyond the file itself.

One frozen value passed from the CLI (``failcast ingest``), the scheduled run and ``failcast extract``
down to the readers, instead of ten keyword arguments repeated through every layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pipeline.readers.lines import MAX_DECOMPRESSED_BYTES
from pipeline.store.files import check_time_format

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
