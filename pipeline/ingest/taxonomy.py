"""The one place where a stored category gets its failure class and its ``interrupting`` flag.

Readers store the category text as the source wrote it (``events.category``: a canonical file's
"Faulty GPU", a kernel log's class name, a scheduler's reason text) and, when the source itself
says whether the event stops a job (an Xid code's catalog entry), that flag in ``interrupting``;
otherwise NULL. After each file, inside its transaction, :func:`classify_new_events` gives every
event without a class (``failure_class`` NULL: the file's new events) its class and effective flag
(the canonical reader, given the map, stores its rows classified by the same rules: updating
millions of rows it has just written costs more than joining their few categories as it writes):

* class: the user's map (:class:`pipeline.categories.CategoryMap`), else the built-in synonyms
  (:data:`pipeline.categories.SYNONYMS`), else an ``Xid N`` / ``SXid N`` in the text (the Xid
  catalog's class; SXid: ``nvlink``), else ``other``: unknown, counted as interrupting, and named
  with its count in one note per file;
* interrupting: the user's entry for the category, else for its class; else the source's own flag
  (kept in ``source_interrupting``); else the Xid catalog's for an ``Xid N`` text; else the class's.

The map is part of what the warehouse was built with: :func:`apply_category_map` reclassifies every
stored event when it differs from the map of the last build (``incidents_built.category_map``);
re-running with the same map changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

import polars as pl

from pipeline.categories import SYNONYMS, CategoryMap, FailureCategory, class_named, normal_form
from pipeline.ingest import xid as xid_catalog
from pipeline.ingest.common import registered

# "Xid 79", "XID_48", "sxid 12028"; not inside a word ("Maxidle"), except an upper-case XID after a
# lower-case letter, as in the EKS node monitoring agent's reasons "NvidiaXID79Error"
_XID_IN_TEXT = re.compile(
    r"(?:(?<![a-z])|(?<=[a-z])(?-i:(?=S?XID)))(s?)xid[^a-z0-9]{0,3}(\d{1,5})(?!\d)", re.IGNORECASE
)
_BUILT_IN = {
    **{normal_form(c.value): c for c in FailureCategory},
    **{normal_form(name): c for name, c in SYNONYMS.items()},
}


class Classification(NamedTuple):
    failure_class: FailureCategory
    interrupting: bool  # when neither the user's map nor the source says otherwise
    user_interrupting: bool | None  # the user's map entry for the category or its class
    known: bool  # False: no map entry, synonym or Xid matched (class ``other``)


def classify(category: str, category_map: CategoryMap | None = None) -> Classification:
    """The class of one category text and whether it interrupts (see the module docstring)."""
    category_map = category_map or CategoryMap()
    key = normal_form(category)
    interrupting = None
    if key in category_map.classes:
        cls, known = category_map.classes[key], True
    elif key in _BUILT_IN:
        cls, known = _BUILT_IN[key], True
    elif match := _XID_IN_TEXT.search(category):
        info = None if match.group(1) else xid_catalog.XID_CATALOG.get(int(match.group(2)))
        if match.group(1):
            cls = xid_catalog.SXID_CATEGORY
        else:
            cls = info.category if info else FailureCategory.UNKNOWN_XID
            interrupting = xid_catalog.interrupting(info) if info else None
        known = True
    else:
        cls, known = FailureCategory.OTHER, False
    user = category_map.interrupting.get(key, category_map.interrupting.get(normal_form(cls.value)))
    return Classification(cls, cls.interrupting if interrupting is None else interrupting, user, known)


def xid_in_text(text: str) -> tuple[str, int] | None:
    """``("Xid", 79)`` or ``("SXid", 12)`` for the first Xid/SXid code in ``text`` (the rule
    :func:`classify` applies), else None: readers that keep the code apart from the category."""
    match = _XID_IN_TEXT.search(text)
    return ("SXid" if match.group(1) else "Xid", int(match.group(2))) if match else None


def classes_frame(categories: list[str], category_map: CategoryMap) -> pl.DataFrame:
    """One row per category: its class, default and user flags, and whether it is known."""
    rows = [(c, *classify(c, category_map)) for c in categories]
    return pl.DataFrame(
        [(c, cls.value, flag, user, known) for c, cls, flag, user, known in rows],
        schema={
            "category": pl.String,
            "failure_class": pl.String,
            "interrupting": pl.Boolean,
            "user_interrupting": pl.Boolean,
            "known": pl.Boolean,
        },
        orient="row",
    )


_CLASSIFY_NEW = """
UPDATE events e
SET failure_class = c.failure_class,
    source_interrupting = e.interrupting,
    interrupting = coalesce(c.user_interrupting, e.interrupting, c.interrupting)
FROM category_classes c
WHERE e.failure_class IS NULL AND e.category = c.category
"""

_RECLASSIFY = """
UPDATE events e
SET failure_class = c.failure_class,
    interrupting = coalesce(c.user_interrupting, e.source_interrupting, c.interrupting)
FROM category_classes c
WHERE e.category = c.category
"""


def classify_new_events(con, category_map: CategoryMap) -> str | None:
    """Classify the events not classified yet (a file's new events; call inside its transaction).
    Returns the note about unknown categories (counts of new events), or None when all are known."""
    new = "SELECT category, count(*) FROM events WHERE failure_class IS NULL GROUP BY category"
    counts = con.sql(new).fetchall()
    if not counts:
        return None
    frame = classes_frame([c for c, _ in counts], category_map)
    with registered(con, "category_classes", frame):
        con.execute(_CLASSIFY_NEW)
    return unknown_note(counts, set(frame.filter(~pl.col("known"))["category"]))


def unknown_note(counts: Iterable[tuple[str, int]], unknown: set[str]) -> str | None:
    """The note naming the ``unknown`` categories with their counts of new events, or None. For a
    reader that classifies its rows as it stores them (the canonical one)."""
    listed = sorted(((c, n) for c, n in counts if c in unknown), key=lambda cn: (-cn[1], cn[0]))
    if not listed:
        return None
    names = ", ".join(f"{c!r} {n}" for c, n in listed)
    return (
        f"{len(listed)} categor{'y' if len(listed) == 1 else 'ies'} not in the taxonomy, counted as class "
        f"other (interrupting): {names}; map them with --category-map SOURCE=CLASS or [categories]"
    )


def apply_category_map(con, category_map: CategoryMap) -> bool:
    """Reclassify every stored event if the map differs from the one the warehouse was last built
    with (call inside a transaction, then rebuild incidents in full). Returns whether it did."""
    built = con.sql("SELECT category_map FROM incidents_built").fetchall()
    if not built or built[0][0] == category_map.fingerprint:
        return False
    categories = [c for (c,) in con.sql("SELECT DISTINCT category FROM events").fetchall()]
    with registered(con, "category_classes", classes_frame(categories, category_map)):
        con.execute(_RECLASSIFY)
    return True


def parse_category_map(pairs: Iterable[str]) -> CategoryMap:
    """``["Burn-in=hardware", "Maintenance=other:noninterrupting"]`` -> a map. The
    class may end in ``:interrupting`` or ``:noninterrupting``; SOURCE may name a class to set
    only that class's flag (``application=application:interrupting``)."""
    classes: dict[str, FailureCategory] = {}
    flags: dict[str, bool] = {}
    for pair in pairs:
        source, sep, target = pair.rpartition("=")
        name, _, flag = target.partition(":")
        if not sep or not source.strip() or not name.strip():
            raise ValueError(f"--category-map {pair!r}: expected SOURCE=CLASS, e.g. 'Faulty GPU=gpu_memory'")
        if flag not in ("", "interrupting", "noninterrupting"):
            raise ValueError(
                f"--category-map {pair!r}: after the class write :interrupting or :noninterrupting, "
                f"not {flag!r}"
            )
        try:
            classes[normal_form(source)] = class_named(name)
        except ValueError as exc:
            raise ValueError(f"--category-map {pair!r}: {exc}") from None
        if flag:
            flags[normal_form(source)] = flag == "interrupting"
    return CategoryMap(classes, flags)
