"""Ingest: input files -> warehouse tables ``events``, ``incidents``, ``inventory``, ``jobs``, ``rejects``.

Three layers, data and imports flowing one way (store <- readers <- ingest):

* :mod:`pipeline.readers`: one module per input format and the registry they are known by
  (formats, sniffing, options; ``failcast ingest --help`` and docs/ingest.md's table come from it);
* :mod:`pipeline.store`: what every reader shares below it: ``ingested_files`` and rejects, staging
  tables, content keys and dedup, the one rule by which a later record closes a stored open event,
  jobs and inventory replaced by the newest export, the taxonomy, the merge of a log lake;
* here (:mod:`.files`): the orchestration: each file's format, the sha256 skip, one transaction per
  file, the refusal of a mostly rejected file, the taxonomy after each file, the incident rebuild
  (:mod:`pipeline.rebuild`) after all of them.

Rules that every reader follows:

* **Idempotent.** A file whose sha256 is already in ``ingested_files`` is skipped; a record whose
  content key is already stored counts as a duplicate, so a log that grew adds only its new lines.
  (A large kernel log whose size no stored file has is new content: it is hashed while it is parsed.)
* **Nothing lost.** Every line is counted: read = ingested + duplicate + rejected + ignored. A line
  that should carry a record but cannot be used goes to ``rejects`` with file, line, raw text and
  the reason; ``ignored`` lines carry nothing by design (ordinary kernel messages, sacct job steps).
* **All or nothing per file.** Each file is written in one transaction; Ctrl-C mid-file rolls it back.
* **UTC.** Times with an offset are converted; naive times are read in ``timezone`` (default UTC).
* **Streaming.** Text logs are read in blocks of lines (:mod:`pipeline.readers.lines`); only
  relevant lines are kept (kernel logs: in a Parquet file in the temp folder until the file is done).
* **Their own words.** Readers store the source's category text; :mod:`pipeline.store.taxonomy`
  gives each new event its failure class and ``interrupting`` flag after the file, one note naming
  unknown ones.
* **Bounded.** A ``.gz`` may expand to at most ``max_decompressed_bytes`` (a gzip bomb is an error).
"""

from pipeline.ingest.checks import InventoryCheck, inventory_check
from pipeline.ingest.files import (
    check_readable,
    expand_pattern,
    ingest_files,
    read_file,
    refresh_incidents,
    refuse_mostly_rejected,
    session_timezone,
)
from pipeline.readers import FORMATS, detect_format
from pipeline.readers.canonical_source import (
    INCIDENT_COLUMNS,
    INCIDENT_OPTIONAL,
    INVENTORY_COLUMNS,
    INVENTORY_OPTIONAL,
)
from pipeline.readers.lines import MAX_DECOMPRESSED_BYTES
from pipeline.readers.options import MAX_REJECTED_PERCENT, ReaderOptions, parse_bus_order, parse_column_map
from pipeline.store.files import FileSummary, InputError, check_time_format, sha256_of
from pipeline.store.taxonomy import parse_category_map

__all__ = [
    "FORMATS",
    "INCIDENT_COLUMNS",
    "INCIDENT_OPTIONAL",
    "INVENTORY_COLUMNS",
    "INVENTORY_OPTIONAL",
    "MAX_DECOMPRESSED_BYTES",
    "MAX_REJECTED_PERCENT",
    "FileSummary",
    "InputError",
    "InventoryCheck",
    "ReaderOptions",
    "check_readable",
    "check_time_format",
    "detect_format",
    "expand_pattern",
    "ingest_files",
    "inventory_check",
    "parse_bus_order",
    "parse_category_map",
    "parse_column_map",
    "read_file",
    "refresh_incidents",
    "refuse_mostly_rejected",
    "session_timezone",
    "sha256_of",
]
